"""Does a re-run give the published numbers? Compares a finished profile run with its published record
(`results/profiles/<profile>.json`): each scorecard item's verdict, each correlation the scorecard plots (its
r, pair by pair), and the machines and kernels of the processes that published each.

    python -m twotower_lib publish --profile cpu --runs-dir RUNS --results SCRATCH   # the re-run's record
    python benchmarks/compare_published.py SCRATCH/cpu.json [--out FILE]

A seed fixes a run on a CPU only with its thread count and its kernels: torch's and numpy's kernels are pinned
to AVX2 on x86 (`twotower_lib.workers.pin_cpu_kernels`), so a re-run there should differ from the published
record by nothing, on an AVX2-only machine or one with AVX-512; with `TWOTOWER_CPU_KERNELS=native` on an
AVX-512 machine it differs by float rounding in training, and this prints how far that moves each number.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twotower_lib.artifacts import atomic_write_json, provenance, read_json  # noqa: E402
from twotower_lib.book.publish import RESULTS_DIR  # noqa: E402
from twotower_lib.book.scorecard import redecided  # noqa: E402


def compare(rerun: dict, published: dict) -> dict:
    """Verdicts item by item (the published record's over seeds decided by today's rules, as the re-run's were:
    `scorecard.redecided`), and the plotted correlations' r with their largest change."""
    verdicts = [{"item": a["item"], "published": a["verdict"], "rerun": b["verdict"]}
                for a, b in zip(redecided(published["scorecard"])["rows"], rerun["scorecard"]["rows"])]
    points = [{"item": a["item"], "pair": a["pair"], "published": a["ours"], "rerun": b["ours"],
               "change": b["ours"] - a["ours"]}
              for a, b in zip(published["scorecard"]["points"], rerun["scorecard"]["points"])]
    return {"verdicts_same": sum(v["published"] == v["rerun"] for v in verdicts), "items": len(verdicts),
            "largest_change_of_r": max((abs(p["change"]) for p in points), default=0.0),
            "identical_points": sum(p["change"] == 0 for p in points), "points": points, "verdicts": verdicts,
            "machines": {"published": published["provenance"].get("cpu"), "rerun": rerun["provenance"].get("cpu")},
            "kernels": {"published": published["provenance"].get("cpu_kernels", "not recorded"),
                        "rerun": rerun["provenance"].get("cpu_kernels", "not recorded")}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rerun", type=Path, help="the re-run's record, written by `publish --results DIR`")
    p.add_argument("--published", type=Path, default=None, help="default: results/profiles/<its profile>.json")
    p.add_argument("--out", type=Path, default=None, help="write the comparison as JSON, with provenance")
    args = p.parse_args(argv)
    if not args.rerun.is_file():
        sys.exit(f"error: {args.rerun} is not a file: pass the record `python -m twotower_lib publish --profile NAME "
                 "--runs-dir RUNS --results DIR` wrote, DIR/NAME.json")
    rerun = read_json(args.rerun)
    published = read_json(args.published or RESULTS_DIR / f"{rerun['profile']}.json")
    if rerun["profile"] != published["profile"] or len(rerun["scorecard"]["rows"]) != len(published["scorecard"]["rows"]):
        sys.exit(f"error: {args.rerun} (profile {rerun['profile']}) and the published record "
                 f"(profile {published['profile']}) do not hold the same scorecard items")
    out = compare(rerun, published)
    for v in out["verdicts"]:
        print(f"{'same' if v['published'] == v['rerun'] else 'DIFFERS':>8}  {v['published']:>13} -> {v['rerun']:<13} {v['item']}")
    for q in out["points"]:
        print(f"{q['change']:+9.4f}  r {q['published']:+.4f} -> {q['rerun']:+.4f}  {q['pair']}")
    print(f"{out['verdicts_same']} of {out['items']} verdicts the same; {out['identical_points']} of "
          f"{len(out['points'])} plotted r identical, the largest change {out['largest_change_of_r']:.4f}; "
          f"machines {out['machines']}; kernels {out['kernels']}")
    if args.out:
        atomic_write_json(args.out, {**out, "rerun_code_version": rerun["provenance"]["code_version"],
                                     "published_code_version": published["provenance"]["code_version"],
                                     "provenance": provenance()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
