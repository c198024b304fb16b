"""The paper's text against the authors' released code, measured: every pair of a pipeline run whose
cases name both sides ("elmo:1,elmo-released:1,...") in both score variants with its bootstrap
interval, and both tower-order rules of every run, written to results/released/<profile>.json with
its provenance. The book page "The paper, its code, and this companion" reads that file
(`studies.released.report`, whose `book` command writes the page's parts).

    python -m studies.released book                   # the page's parts from the committed measurement

    python -m twotower_lib run 02_probing --profile cpu --runs-dir DIR -p train.cases elmo:1,elmo:2,elmo-released:1,...
    python -m studies.released --profile cpu --runs-dir DIR -p train.cases ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from twotower_lib.artifacts import atomic_write_json, provenance, read_json
from twotower_lib.book.probe_outputs import tower_order
from studies.released.report import RESULTS, VARIANT_NAMES, effects, load_recipes, write_book
from twotower_lib.errors import UserError
from twotower_lib.run_names import case_name


def measure(root: Path, profile, n_boot: int | None = None) -> dict:
    """Every pair of the profile's cases (both score variants, bootstrap CI over validation documents)
    and both tower-order rules of every case, from the probes in `root/probing/` (a pipeline run of
    `profile` through 02_probing)."""
    from twotower_lib.analysis.correlation import SCORE_COLUMNS
    from twotower_lib.analysis.table2 import CorrelationConfig, pairwise_correlations
    from twotower_lib.analysis.uncertainty import same_run_agreement
    from twotower_lib.data import load_prepared
    from twotower_lib.preference import load_artifact
    from twotower_lib.preference import replicate_table

    names = [case_name(m, s) for m, s in profile.case_list()]
    missing = [n for n in names if not (root / "probing" / n / "preference.parquet").exists()]
    if missing:
        raise UserError(f"no probe of {missing} in {root / 'probing'}; run  python -m twotower_lib run 02_probing "
                        f"--profile {profile.name} --runs-dir {root.parent} -p train.cases {','.join(profile.train.cases)}  first")
    arts = {n: load_artifact(root / "probing" / n) for n in names}
    data = load_prepared(root / "data" / "prepared")
    pairs = []
    for col in SCORE_COLUMNS:
        cfg = CorrelationConfig(n=profile.analysis.top_n, n_boot=profile.analysis.bootstrap if n_boot is None else n_boot,
                                progress=False, score_col=col)
        found = pairwise_correlations({n: a.table for n, a in arts.items()}, data.counts, cfg,
                                      doc_stats={n: a.doc_stats for n, a in arts.items()})
        pairs += [{**row, "variant": col} for row in found.round(4).to_dict("records")]
    order = tower_order(arts).round(4).reset_index().to_dict("records")   # both order rules per case
    for row in order:  # beside them, the model's quality and the probe's own ceiling
        a = arts[row["case"]]
        rep = replicate_table(a.path, data)
        row |= {"rules agree": bool(row["rules agree"]), "validation loss": round(a.manifest["val_loss"]["cooperative"], 4),
                **{f"probe reliability ({VARIANT_NAMES[c]})": round(same_run_agreement(
                    a.table, rep, data.counts, profile.analysis.top_n, c), 4) for c in SCORE_COLUMNS}}
    identity = next(iter(arts.values())).manifest["identity"]
    return {"profile": profile.name, "cases": list(profile.train.cases), "top_n": profile.analysis.top_n, "pairs": pairs,
            "ordering": order, "data_hash": data.data_hash,
            "probe_version": identity["version"], "probe_precondition": identity["probe"].get("precondition", "none"),
            "models": {n: read_json(root / "training" / n / "config.json")["model"] for n in names},
            "provenance": provenance()}


def main(argv: list[str] | None = None) -> int:
    from twotower_lib.book.profiles import get_profile

    argv = list(argv) if argv is not None else None
    if (argv if argv is not None else sys.argv[1:])[:1] == ["book"]:
        print(f"book parts -> {write_book()}")
        return 0

    ap = argparse.ArgumentParser(description="measure the paper-vs-released-code differences from a pipeline run's probes")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--runs-dir", type=Path, required=True, help="where <profile>/ of that pipeline run lives")
    ap.add_argument("-p", "--parameter", nargs="+", action="append", default=[], metavar="KEY[=VALUE]",
                    help="the overrides that pipeline run used (e.g. -p train.cases elmo:1,elmo-released:1)")
    ap.add_argument("--out", type=Path, default=None, help="default: results/released/<profile>.json")
    args = ap.parse_args(argv)
    from twotower_lib.book.pipeline import parse_overrides

    profile = get_profile(args.profile).with_overrides(parse_overrides(args.parameter))
    found = measure(args.runs_dir / profile.name, profile)
    found["command"] = ("python -m studies.released --profile " + profile.name + " --runs-dir DIR "
                        + " ".join(f"-p {k} {v}" for k, v in parse_overrides(args.parameter).items()))
    out = args.out or RESULTS / f"{profile.name}.json"
    atomic_write_json(out, found)
    print(f"wrote {out}")
    for key, text in effects(found, load_recipes()).items():
        print(f"{key}: {text}")
    if out == RESULTS / "cpu.json":
        print(f"book parts -> {write_book()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
