"""The direct register test, collected: a profile's same-configuration pairs trained on one source of
the corpus alone, beside the same pairs on the mixed corpus, from one pipeline run per corpus (each
through 03_correlations in its own runs directory), into `results/register/single_source.json`.
`python -m studies.register book` writes what the book shows of it (`studies.register.report`).

    python -m twotower_lib run 03_correlations --profile cpu -p data.corpus registry:books \\
        -p train.cases gpt:1,gpt:2,bert-large:1,bert-large:2 -p analysis.controls permutation \\
        -p analysis.reliability_models "" --runs-dir DIR
    python -m studies.register --profile cpu --run books=DIR --run wiki=DIR2 --run mixed=DIR3

(`analysis.reliability_models ""`: every run's own probe-seed reliability, which the default profile measures on one
GPT run only.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from twotower_lib.analysis.uncertainty import with_bias_corrected
from twotower_lib.artifacts import atomic_write_json, provenance, read_json
from studies.register.report import RESULT, write_book
from twotower_lib.errors import UserError
from twotower_lib.run_names import model_of


def _corpus(parameters: dict) -> str:
    """The corpus of a run record's parameters (`data.corpus`; records before the nested profile: `corpus`)."""
    return parameters.get("data.corpus", parameters.get("corpus"))


def collect(root: Path, label: str) -> list[dict]:
    """One row per same-configuration pair of the pipeline run in `root` (`<runs dir>/<profile>/`, run
    through 03_correlations): r in both score variants with the interval, the shuffled-label control,
    both ceilings, the probe's reliability, version, the dtype its towers ran in and the code that ran it, and
    how much text the corpus gave."""
    try:
        corr, probing, data = (read_json(root / sub / "section.json") for sub in ("correlations", "probing", "data"))
    except FileNotFoundError as e:
        raise UserError(f"{root} has no finished 03_correlations run ({e.filename} is missing); run  python -m "
                        f"twotower_lib run 03_correlations --profile {root.name} --runs-dir {root.parent}  first") from e
    s = corr["summary"]
    rows = []
    for same, logmean in zip(s["same_config"], s["same_config_logmean"]):
        a, b = same["a"], same["b"]
        ceiling = {c["variant"]: c for c in s["ceilings"] if (c["a"], c["b"]) == (a, b)}
        shuffled = [c["r"] for c in s["controls"] if c["control"] == "permutation" and c["model"] == model_of(a)]
        reliability = probing["summary"]["reliability"]
        manifest = read_json(root / "probing" / a / "manifest.json")
        orders = [read_json(root / "probing" / n / "manifest.json")["ordering"] for n in (a, b)]
        rows.append(with_bias_corrected({"corpus": label, "source": _corpus(data["parameters"]), "pair": f"{a} vs {b}",
                     "r": same["r"], "ci_low": same["ci_low"], "ci_high": same["ci_high"], "r mean log p": logmean["r"],
                     "shuffled labels": shuffled[0] if shuffled else None,
                     "text ceiling": ceiling["score"]["text ceiling"], "probe ceiling": ceiling["score"]["probe ceiling"],
                     # both runs' own (None where the profile measured it on a sample of runs only)
                     "probe reliability": min(reliability[n]["reliability (log of mean p, Eq. 4)"] for n in (a, b))
                     if a in reliability and b in reliability else None,
                     # Eq. 3's margin as a share of the primary's mean p, the smaller of the two runs': near 0 the
                     # order, and so the sign of r, is a coin flip
                     "order margin": min(o["margin"] / max(o["mean_p"]) for o in orders),
                     "probe version": manifest["identity"]["version"],
                     "probe precondition": manifest["identity"]["probe"].get("precondition", "none"),
                     "probe precision": manifest.get("resolved_precision", {}).get("towers"),
                     "probe code": manifest.get("provenance", {}).get("code_version"),
                     "training tokens": data["summary"]["train_tokens"], "validation tokens": data["summary"]["valid_tokens"]}))
    return rows


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else list(argv))[:1] == ["book"]:
        print(f"book parts -> {write_book()}")
        return 0
    ap = argparse.ArgumentParser(description="collect the same-configuration pairs of single-source pipeline runs")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--run", action="append", required=True, metavar="LABEL=DIR",
                    help="a corpus label and the runs directory of its pipeline run (repeat per corpus)")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    runs = [item.split("=", 1) for item in args.run]
    if any(len(r) != 2 for r in runs):
        raise UserError(f"--run takes LABEL=DIR, got {args.run}")
    pairs = [row for label, d in runs for row in collect(Path(d).expanduser() / args.profile, label)]
    commands = {label: _corpus(read_json(Path(d).expanduser() / args.profile / ".pipeline" / "00_data.json")["parameters"])
                for label, d in runs}
    atomic_write_json(args.out, {"profile": args.profile, "pairs": pairs, "corpora": commands,
                                 "command": "python -m studies.register --profile " + args.profile + " "
                                 + " ".join(f"--run {label}=DIR" for label, _ in runs), "provenance": provenance()})
    print(f"wrote {args.out}: {len(pairs)} pairs from {len(runs)} corpora")
    if args.out == RESULT:
        print(f"book parts -> {write_book()}")
    return 0

