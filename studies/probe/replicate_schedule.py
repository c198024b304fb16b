"""A probe's replicate head set on the first set's schedule or on its own: what sharing did to the probe-seed
reliability and to the first set's scores.

    python -m studies.probe.replicate_schedule --probes LABEL=SHARED:OWN [--probes ...] [--top-n 1000]
        [--out results/probe/replicate_schedule.json]

Why: the probe-seed reliability is the agreement of two head sets that differ only in their seed. Trained on one
optimiser schedule, the rate of both dropped, and both stopped, when the held-out loss of any head stopped improving,
so the replicate was not an independent second probe, and measuring it moved the first set. Each set now trains on
its own schedule (`probe.training.train_heads`). SHARED and OWN are two `probing/` folders of one pipeline run,
probed with replicates before and after that change (same runs, same features, same head seeds); the data is the
run's `data/prepared` beside them. Per run: each probing's first-set epochs and reliability (both score variants,
over the top_n tokens), and how far the first set's scores moved (`same_run_agreement` of the two first sets).
"""

from __future__ import annotations

import argparse
from pathlib import Path

RESULT = Path(__file__).resolve().parents[2] / "results" / "probe" / "replicate_schedule.json"


def compare(shared: Path, own: Path, data, top_n: int) -> list[dict]:
    """One row per run probed with a replicate in both `shared` and `own`."""
    from twotower_lib.analysis.uncertainty import probe_seed_reliability, same_run_agreement
    from twotower_lib.preference import load_artifact

    rows = []
    for path in sorted(p for p in own.iterdir() if (p / "manifest.json").exists()):
        if not (shared / path.name / "manifest.json").exists():
            continue
        before, after = load_artifact(shared / path.name), load_artifact(path)
        if "replicate" not in before.manifest or "replicate" not in after.manifest:
            continue
        rel_before, rel_after = (probe_seed_reliability(a, data, top_n) for a in (before, after))
        rows.append({"run": path.name, "epochs shared": before.manifest["heads"]["epochs"],
                     "epochs own": after.manifest["heads"]["epochs"],
                     "replicate epochs own": after.manifest["heads"]["replicate"]["epochs"],
                     **{f"reliability shared ({c})": v for c, v in rel_before.items()},
                     **{f"reliability own ({c})": v for c, v in rel_after.items()},
                     "first set, shared vs own (score)": same_run_agreement(before.table, after.table, data.counts,
                                                                            top_n)})
    return rows


def main(argv: list[str] | None = None) -> int:
    from twotower_lib.artifacts import atomic_write_json, provenance
    from twotower_lib.data import load_prepared
    from twotower_lib.errors import UserError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", action="append", required=True, metavar="LABEL=SHARED:OWN",
                    help="two probing folders of one run, replicates on one schedule and on their own")
    ap.add_argument("--top-n", type=int, default=1000, help="the most frequent tokens the reliability reads")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    rows = []
    for item in args.probes:
        label, _, dirs = item.partition("=")
        shared, _, own = dirs.partition(":")
        if not (label and shared and own):
            raise UserError(f"--probes takes LABEL=SHARED:OWN, got {item!r}")
        own_dir = Path(own)
        data = load_prepared(own_dir.parent / "data" / "prepared")
        found = compare(Path(shared), own_dir, data, args.top_n)
        if not found:
            raise UserError(f"{label}: no run holds a replicate in both {shared} and {own}")
        rows += [{"corpus": label, **r} for r in found]
    labels = [item.partition("=")[0] for item in args.probes]      # the folders are this machine's: not recorded
    command = ("python -m studies.probe.replicate_schedule " + " ".join(f"--probes {x}=SHARED:OWN" for x in labels)
               + f" --top-n {args.top_n}")
    atomic_write_json(args.out, {"rows": rows, "top_n": args.top_n, "command": command, "provenance": provenance()})
    print(f"wrote {args.out}: {len(rows)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
