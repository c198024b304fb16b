"""The tiny profile end to end, from an empty runs directory: what a newcomer runs first and what
the slow tests run. Prints each section's seconds and the total against the 60 s goal (a ratio
below 1 meets it).

    python benchmarks/bench_tiny.py [--runs DIR] [-p KEY VALUE ...]

Run it on an idle machine: every section is a kernel start plus its work, and shared cores
stretch both. The prepared corpus is cached ($TWOTOWER_DATA); the first call may fetch it.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

GOAL_S = 60.0


def main() -> None:
    from twotower_lib.artifacts import read_json
    from twotower_lib.book.pipeline import DEFAULT_JOBS, make_pipeline

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=None, help="an empty runs directory (default: a temporary one)")
    ap.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="sections side by side (the CLI's default)")
    ap.add_argument("-p", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"), help="override a tiny field")
    args = ap.parse_args()
    runs = args.runs or Path(tempfile.mkdtemp(prefix="bench-tiny-"))
    pipe = make_pipeline("tiny", dict(args.p), runs)
    t0 = time.time()
    pipe.run(log=lambda line: None, jobs=args.jobs)
    total = time.time() - t0
    print(f"{'section':<18}{'seconds':>9}")
    for s in pipe.sections:
        print(f"{s.name:<18}{read_json(pipe.record_path(s))['seconds']:>9.1f}")
    print(f"{'total':<18}{total:>9.1f}   goal {GOAL_S:.0f} s, ratio {total / GOAL_S:.2f} ({args.jobs} section(s) side by side)")
    if args.runs is None:
        shutil.rmtree(runs, ignore_errors=True)


if __name__ == "__main__":
    main()
