"""Probe quality and speed: the earlier recipe against the current one, measured in the same run.

    python benchmarks/bench_probe.py [RUN_DIR ...] [--runs-dir runs/cpu/training] [--threads 2]

For each trained run (default: the `cpu` profile's gpt-k1-s1, gpt-s1 and bert-large-s1) it probes
with `ProbeConfig.legacy()` (`old`: raw features, BERT with the 80/10/10 corruption, 3 epochs on a
linear schedule), with the profile's recipe on the features as they are (`unwhite`: the default until
26 Nov 2026) and with the profile's current recipe (`new`: joint-LayerNorm features, whitened,
[MASK] at BERT's probed positions, held-out stopping), and prints per recipe: minutes, head epochs,
the best head's validation loss minus the cooperative model's (the *probe shortfall* for a
single-tower run, whose tower carries everything its decoder used), and the ratios of new to each.
Probes go to a scratch folder. Its output, committed as `results/probe/bench_probe.log` (with the
command and commit on top), is shown in section 02.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


def measure(run: Path, cfg, out: Path) -> dict:
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe.run import probe_run

    t0 = time.perf_counter()
    m = load_artifact(probe_run(run, cfg, out=out, force=True, show=False)).manifest
    heads = [v for k, v in m["val_loss"].items() if k.endswith("_head")]
    return {"minutes": (time.perf_counter() - t0) / 60, "epochs": m["heads"]["epochs"],
            "gap": min(heads) - m["val_loss"]["cooperative"], "towers": m["towers"]}


def main() -> None:
    from twotower_lib.book.profiles import get_profile
    from twotower_lib.probe.run import ProbeConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--runs-dir", type=Path, default=Path("runs/cpu/training"))
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    runs = args.runs or [args.runs_dir / n for n in ("gpt-k1-s1", "gpt-s1", "bert-large-s1")]
    profile = get_profile("cpu")
    recipes = {"old": ProbeConfig.legacy(train_positions=profile.probe.train_positions),
               "unwhite": profile.probe_config(precondition="none"), "new": profile.probe_config()}
    print(f"threads {args.threads}; " + "\n".join(f"{name} = {cfg}" for name, cfg in recipes.items()))
    print(f"{'run':16} {'recipe':7} {'minutes':>8} {'epochs':>7} {'head - coop (nats)':>19}")
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            got = {name: measure(run, cfg, Path(tmp) / f"{run.name}-{name}") for name, cfg in recipes.items()}
            for name, g in got.items():
                label = "shortfall" if g["towers"] == 1 else "gap"
                print(f"{run.name:16} {name:7} {g['minutes']:8.2f} {g['epochs']:7d} {g['gap']:12.3f} ({label})")
            for base in ("old", "unwhite"):
                print(f"{run.name:16} new/{base:7} time {got['new']['minutes'] / got[base]['minutes']:.2f}x, "
                      f"{got['new']['gap'] - got[base]['gap']:+.3f} nats")


if __name__ == "__main__":
    main()
