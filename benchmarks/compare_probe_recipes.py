"""Probes of the same frozen runs: the earlier recipe, and the converged probe reading raw tower states
or each tower's slice of the joint LayerNorm, with the authors' untied head or a head whose decoder is
the frozen input embedding (Eq. 2 read literally).

    python benchmarks/compare_probe_recipes.py [--profile cpu] [--runs gpt-s1,gpt-s2]

For each run and recipe: minutes, head epochs, the best head's validation loss minus the
cooperative model's, and the probe-seed reliability over the profile's top_n tokens in both score
variants; for each recipe, the correlation between the runs (a same-configuration pair) and, per
run, how well the recipe agrees with the profile's own probe. Probes already written by the
profile (02_probing) or by an earlier call are reused (the probe's identity decides); the others go
to runs/<profile>/probing/comparisons/. Writes results/probe/recipes.json (with provenance), which
section 02 shows.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from itertools import combinations
from pathlib import Path

RESULT = Path(__file__).resolve().parent.parent / "results" / "probe" / "recipes.json"


def main() -> None:
    from twotower_lib.analysis.correlation import SCORE_COLUMNS, same_run_agreement
    from twotower_lib.artifacts import atomic_write_json, provenance
    from twotower_lib.data import load_prepared
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe import PROBE_VERSION, ProbeConfig, probe_run, replicate_table
    from twotower_lib.profiles import get_profile, profile_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--runs", default="gpt-s1,gpt-s2")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    root = profile_dir(profile.name)
    data = load_prepared(root / "data" / "prepared")
    runs = args.runs.split(",")
    recipes = {"earlier": (ProbeConfig.legacy(train_positions=profile.probe_tokens, replicate=True), "legacy-{run}"),
               "converged, raw": (profile.probe_config(replicate=True, features="raw"), "{run}-raw"),
               "converged, joint_ln": (profile.probe_config(replicate=True, features="joint_ln"), "{run}-joint_ln"),
               "converged, tied head": (profile.probe_config(replicate=True, head="tied"), "{run}-tied")}
    tables, rows, pairs = {}, [], []
    for recipe, (cfg, name) in recipes.items():
        for run in runs:
            own = root / "probing" / run
            out = own if cfg == profile.probe_config(replicate=True) else root / "probing" / "comparisons" / name.format(run=run)
            art = load_artifact(probe_run(root / "training" / run, cfg, data_dir=data.path, out=out, show=False))
            m = art.manifest
            heads = [v for k, v in m["val_loss"].items() if k.endswith("_head")]
            rep = replicate_table(art.path, data)
            tables[recipe, run] = art.table
            rows.append({"run": run, "recipe": recipe, "minutes": round(m["seconds"]["total"] / 60, 2),
                         "epochs": m["heads"]["epochs"], "head_minus_cooperative": round(min(heads) - m["val_loss"]["cooperative"], 4),
                         **{f"reliability_{c}": round(same_run_agreement(art.table, rep, data.counts, profile.top_n, c), 4)
                            for c in SCORE_COLUMNS}})
            print(rows[-1], flush=True)
        for a, b in combinations(runs, 2):
            pairs.append({"recipe": recipe, "a": a, "b": b,
                          **{f"r_{c}": round(same_run_agreement(tables[recipe, a], tables[recipe, b], data.counts,
                                                                profile.top_n, c), 4) for c in SCORE_COLUMNS}})
    across = [{"run": run, "a": ra, "b": rb,
               **{f"r_{c}": round(same_run_agreement(tables[ra, run], tables[rb, run], data.counts, profile.top_n, c), 4)
                  for c in SCORE_COLUMNS}}
              for run in runs for ra, rb in combinations(recipes, 2)]
    atomic_write_json(RESULT, {"profile": profile.name, "top_n": profile.top_n, "probe_version": PROBE_VERSION,
                               "recipes": {k: asdict(cfg) for k, (cfg, _) in recipes.items()},
                               "runs": rows, "pairs": pairs, "across_recipes": across,
                               "data_hash": data.data_hash, "provenance": provenance(),
                               "command": f"python benchmarks/compare_probe_recipes.py --profile {profile.name} "
                                          f"--runs {args.runs}"})
    print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
