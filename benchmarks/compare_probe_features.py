"""Which features should the probing heads read? Raw tower states against each tower's slice of the
frozen joint LayerNorm (the authors'), measured on one ELMo, one GPT and one BERT run of a profile.

    python benchmarks/compare_probe_features.py [--profile cpu] [--runs elmo-s1,gpt-s1,bert-large-s1]

Per run and feature kind: minutes, head epochs, the best head's validation loss minus the
cooperative model's, and the probe-seed reliability over the profile's top_n tokens in both score
variants. The profile's own probes (02_probing) are reused where their features match; the others
are probed into runs/<profile>/probing/comparisons/. Writes results/probe/features.json (with
provenance), which section 02 shows.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from pathlib import Path

RESULT = Path(__file__).resolve().parent.parent / "results" / "probe" / "features.json"


def main() -> None:
    from twotower_lib.analysis.correlation import SCORE_COLUMNS, same_run_agreement
    from twotower_lib.artifacts import atomic_write_json, provenance
    from twotower_lib.data import load_prepared
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe import PROBE_VERSION, FEATURES, probe_run, replicate_table
    from twotower_lib.profiles import get_profile, profile_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--runs", default="elmo-s1,gpt-s1,bert-large-s1")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    root = profile_dir(profile.name)
    data = load_prepared(root / "data" / "prepared")
    rows = []
    for run in args.runs.split(","):
        for features in FEATURES:
            cfg = profile.probe_config(replicate=True, features=features)
            own = root / "probing" / run
            out = own if features == profile.probe_features else root / "probing" / "comparisons" / f"{run}-{features}"
            t0 = time.perf_counter()
            art = load_artifact(probe_run(root / "training" / run, cfg, data_dir=data.path, out=out, show=False))
            m = art.manifest
            heads = [v for k, v in m["val_loss"].items() if k.endswith("_head")]
            rep = replicate_table(art.path, data)
            rows.append({"run": run, "features": features, "minutes": round(m["seconds"]["total"] / 60, 2),
                         "epochs": m["heads"]["epochs"], "stopped": m["heads"]["stopped"],
                         "head_minus_cooperative": round(min(heads) - m["val_loss"]["cooperative"], 4),
                         **{f"reliability_{c}": round(same_run_agreement(art.table, rep, data.counts, profile.top_n, c), 4)
                            for c in SCORE_COLUMNS},
                         "wall_seconds_here": round(time.perf_counter() - t0, 1)})
            print(rows[-1], flush=True)
    atomic_write_json(RESULT, {"profile": profile.name, "top_n": profile.top_n, "probe_version": PROBE_VERSION,
                               "probe_config": asdict(profile.probe_config(replicate=True)), "rows": rows,
                               "data_hash": data.data_hash, "provenance": provenance(),
                               "command": f"python benchmarks/compare_probe_features.py --profile {profile.name} "
                                          f"--runs {args.runs}"})
    print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
