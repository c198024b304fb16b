"""A profile end to end, from an empty runs directory: prints each section's seconds and the total against the
profile's goal (a ratio below 1 meets it): `tiny`, what a newcomer runs first and what the slow tests run,
in a minute; `cpu`, the default, in an hour on 2 cores. `--readme-pair` times instead the README's first two
commands as written (its `train ... --budget 20s` line, then its `probe` line) in an empty folder, against 90 s.

    python benchmarks/bench_profile.py [--profile tiny] [--runs DIR] [--jobs 2] [-p KEY VALUE ...] [--out FILE]
    python benchmarks/bench_profile.py --readme-pair [--out FILE]

Run it on an idle machine: every section is a kernel start plus its work, and shared cores stretch both
(the default profile's sections train and probe for most of an hour: nothing else should run beside it).
The prepared corpus is cached ($TWOTOWER_DATA); the first call may fetch it. `--out` writes the seconds
with the provenance (code version, CPU, threads) as JSON. A virtual machine's speed can drift within
minutes, so the machine's fp32 matrix-product rate is measured just before and just after the run and
printed beside the total: a timing taken while the rate sagged says so.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_stage_floor import best_time  # noqa: E402  (benchmarks/probe_stage_floor.py)

GOALS_S = {"tiny": 60.0, "cpu": 3600.0}  # the profiles' promises (their descriptions)
README_PAIR_GOAL_S = 90.0
ROOT = Path(__file__).resolve().parent.parent


def readme_pair(out: Path | None) -> int:
    """The README's `train` then `probe` lines, run as written (comments dropped) in an empty folder, each timed."""
    from twotower_lib.artifacts import atomic_write_json, provenance

    block = re.search(r"Command line[^\n]*\n+```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    lines = [line.split("#", 1)[0].split() for line in block.splitlines()]
    pair = [next(a for a in lines if a[3:4] == [command]) for command in ("train", "probe")]
    cwd = Path(tempfile.mkdtemp(prefix="bench-readme-"))
    seconds = {}
    for args in pair:
        t0 = time.time()
        subprocess.run([sys.executable, *args[1:]], cwd=cwd, check=True, capture_output=True)
        seconds[" ".join(args)] = round(time.time() - t0, 1)
        print(f"{seconds[' '.join(args)]:>7.1f} s  {' '.join(args)}")
    total = sum(seconds.values())
    print(f"{total:>7.1f} s  together; goal {README_PAIR_GOAL_S:.0f} s, ratio {total / README_PAIR_GOAL_S:.2f}")
    if out:
        atomic_write_json(out, {"commands": seconds, "total_seconds": round(total, 1),
                                "goal_seconds": README_PAIR_GOAL_S, "ratio": round(total / README_PAIR_GOAL_S, 3),
                                "provenance": provenance()})
    shutil.rmtree(cwd, ignore_errors=True)
    return 0


def reference_gflops(repeats: int = 200, n: int = 1024) -> float:
    """The machine's fp32 matrix-product rate now: the fastest of `repeats` n x n products."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / best_time(lambda: a @ b, repeats) / 1e9


def main(argv: list[str] | None = None) -> int:
    from twotower_lib.artifacts import atomic_write_json, provenance, read_json
    from twotower_lib.book.pipeline import DEFAULT_JOBS, make_pipeline

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny", choices=sorted(GOALS_S))
    ap.add_argument("--runs", type=Path, default=None, help="an empty runs directory (default: a temporary one)")
    ap.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="sections side by side (the CLI's default)")
    ap.add_argument("-p", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"), help="override a field")
    ap.add_argument("--out", type=Path, default=None, help="write the timings as JSON")
    ap.add_argument("--readme-pair", action="store_true", help="time the README's train and probe lines instead")
    args = ap.parse_args(argv)
    if args.readme_pair:
        return readme_pair(args.out)
    runs = args.runs or Path(tempfile.mkdtemp(prefix=f"bench-{args.profile}-"))
    if args.runs is not None and args.runs.exists() and any(args.runs.iterdir()):
        raise SystemExit(f"--runs {args.runs}: not empty; the timing is of a run from nothing")
    pipe = make_pipeline(args.profile, dict(args.p), runs)
    rate_before = reference_gflops()
    t0 = time.time()
    pipe.run(log=lambda line: None, jobs=args.jobs)
    total, goal = time.time() - t0, GOALS_S[args.profile]
    rate_after = reference_gflops()
    seconds = {s.name: read_json(pipe.record_path(s))["seconds"] for s in pipe.sections}
    print(f"{'section':<18}{'seconds':>9}")
    for name, s in seconds.items():
        print(f"{name:<18}{s:>9.1f}")
    print(f"{'total':<18}{total:>9.1f}   goal {goal:.0f} s, ratio {total / goal:.2f} ({args.jobs} section(s) side by side)")
    print(f"machine's fp32 product rate: {rate_before:.0f} GFLOP/s before, {rate_after:.0f} after")
    if args.out:
        atomic_write_json(args.out, {"profile": args.profile, "overrides": args.p, "jobs": args.jobs,
                                     "section_seconds": seconds, "total_seconds": round(total, 1), "goal_seconds": goal,
                                     "ratio": round(total / goal, 3),
                                     "reference_gflops": {"before": round(rate_before, 1), "after": round(rate_after, 1)},
                                     "provenance": provenance()})
    if args.runs is None:
        shutil.rmtree(runs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
