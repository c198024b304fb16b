"""A profile killed at any moment, then run again, ends with the artifacts of a run never killed; and those artifacts
hash as the committed record says (behaviour unchanged by a change of code).

    python benchmarks/kill_resume.py [--profile tiny] [--kill-at 5,15,25,35,45,60] [--check FILE] [--out FILE]

What a new user does: `python -m twotower_lib run --profile tiny` in its own process group, the whole group sent
SIGKILL `t` seconds in (no `finally`, no cleanup: a power cut), the same command run again to the end. Each kill starts
from an empty runs directory; the data are the cached prepared corpus, as for any second run. The uninterrupted run's
artifacts (weights, snapshots, the probes' tables and heads, every scorecard) are hashed, and every killed-then-resumed
run must hash the same. `--out` writes the trial (each kill's moment and outcome) and the hashes with the provenance;
`--check` compares the uninterrupted run with such a file written before a change of code, on the same machine (the
hashes depend on the CPU's float arithmetic and the thread counts). Slow (one full run per kill time plus one): not
part of CI; exit 1 on any difference.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what a run computes, as opposed to what it records of itself (times, paths, executed notebooks)
ARTIFACTS = ("training/*/model.safetensors", "training/*/snapshots/*.safetensors", "probing/**/*.parquet",
             "probing/**/heads.safetensors", "*/scorecard.json", "scorecard.json")


def artifact_hashes(profile_dir: Path) -> dict[str, str]:
    """sha256 of every artifact under `runs/<profile>/`, by path relative to it."""
    files = sorted({p for pattern in ARTIFACTS for p in profile_dir.glob(pattern) if p.is_file()})
    return {str(p.relative_to(profile_dir)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def run_profile(profile: str, runs: Path, kill_after: float | None = None) -> tuple[int | None, float]:
    """`python -m twotower_lib run --profile NAME` into `runs`; with `kill_after`, its process group is sent
    SIGKILL that many seconds in (None if it finished first). Returns (exit code or None, seconds)."""
    env = dict(os.environ, TWOTOWER_RUNS=str(runs), HF_HUB_OFFLINE="1")
    log = open(runs / f"log-{time.monotonic_ns()}.txt", "w")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "twotower_lib", "run", "--profile", profile], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    log.close()
    return code, time.monotonic() - t0


def moment(profile_dir: Path) -> str:
    """Which sections had finished when the run was killed (their pipeline records), for the report."""
    done = sorted(p.stem for p in (profile_dir / ".pipeline").glob("[0-9]*.json")) if profile_dir.exists() else []
    return "with " + (", ".join(done) if done else "no section") + " finished"


def compare(want: dict[str, str], got: dict[str, str]) -> list[str]:
    """The artifacts that differ, are missing or are extra."""
    return ([f"differs: {k}" for k in want if k in got and got[k] != want[k]]
            + [f"missing: {k}" for k in want if k not in got] + [f"extra: {k}" for k in got if k not in want])


def main(argv: list[str] | None = None) -> int:
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--kill-at", default="5,15,25,35,45,60", help="seconds into a run, comma-separated (empty: none)")
    ap.add_argument("--check", type=Path, help="an earlier --out file whose artifact hashes this run must equal")
    ap.add_argument("--out", type=Path, help="write the trial and the uninterrupted run's hashes here")
    args = ap.parse_args(argv)
    failures, kills = [], []
    with tempfile.TemporaryDirectory(prefix="kill-resume-") as tmp:
        clean = Path(tmp) / "clean"
        clean.mkdir()
        code, seconds = run_profile(args.profile, clean)
        if code != 0:
            raise SystemExit(f"the uninterrupted run failed (exit {code}); its log is in {clean}")
        want = artifact_hashes(clean / args.profile)
        print(f"uninterrupted: {seconds:.0f} s, {len(want)} artifacts")
        for t in [float(x) for x in args.kill_at.split(",") if x]:
            runs = Path(tmp) / f"killed-{t:g}"
            runs.mkdir()
            code, _ = run_profile(args.profile, runs, kill_after=t)
            when = "finished before the kill" if code is not None else f"killed at {t:g} s, {moment(runs / args.profile)}"
            code, _ = run_profile(args.profile, runs)
            diff = ["the run after the kill failed"] if code != 0 else compare(want, artifact_hashes(runs / args.profile))
            print(f"{when}: run again, {'the same artifacts' if not diff else '; '.join(diff[:5])}")
            kills.append({"after_s": t, "moment": when, "differences": diff})
            failures += diff
        checked = None
        if args.check:
            before = json.loads(args.check.read_text())
            diff = compare(before["artifacts"], want)
            checked = {"against": before["provenance"]["code_version"], "differences": diff}
            print(f"against {args.check} ({checked['against'][:12]}): "
                  f"{'the same artifacts' if not diff else '; '.join(diff[:10])}")
            failures += diff
        if args.out:
            from twotower_lib.artifacts import atomic_write_json, provenance

            atomic_write_json(args.out, {"profile": args.profile, "uninterrupted_s": round(seconds, 1), "kills": kills,
                                         "checked": checked, "artifacts": want, "provenance": provenance()})
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
