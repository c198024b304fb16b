"""Training throughput through `train` itself, the users' path: per family, `python -m twotower_lib train` as a user
types it, at Table 1's size with the engine and levers the `paper` profile names for that family, bf16, the paper's
3,840 sequences a step. The first step warms up (with a compiling engine it holds the compilation); `--steps` more
are timed, each by its own seconds in the run's log (`step_s`: the optimizer step alone, without evaluations,
snapshots or checkpoints). A step's model FLOPs are counted as `bench_gpu.py` counts them, so the utilisation is
that bench's measure, taken on the users' command line.

    python benchmarks/bench_train_path.py --data runs/throughput/data [--families gpt bert-large bert-base elmo]
        [--steps 3] [--engine gpt=torch-compile] [--family-timeout 240] [--out results/gpu/users-path/train.json]

`--data` is a prepared corpus at the paper's vocabulary; the GPU machine reaches no registry, so it is prepared
beforehand and carried:  python -m twotower_lib data prepare --corpus registry:brown --vocab-size 30522
--out runs/throughput/data. `--engine FAMILY=ENGINE` replaces the profile's engine for one family (a lever
measured alone on the same path). A family that fails or outlasts `--family-timeout` becomes a row with its error
and the others go on; the JSON is written after every family. Without a CUDA GPU it says so and exits with status
0, unless `--cpu` (the test's path: `--preset`, `--precision fp32`, small batches).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench_gpu import FAMILIES, _driver, _relative, _write, device_peak  # benchmarks/bench_gpu.py
from model_flops import step_flops

ROOT = Path(__file__).resolve().parents[1]


def train_command(family: str, data: Path, out: Path, args: argparse.Namespace) -> tuple[list[str], dict]:
    """The `train` command line of one family's row and what the row records of its settings: the paper
    profile's engine (or `--engine`'s), its padded positions and decoder columns, the micro-batch, and the
    accumulation that makes `--sequences-per-step`."""
    from twotower_lib.book.profiles import get_profile
    from twotower_lib.config_cli import config_to_argv
    from twotower_lib.train.config import TrainConfig
    from twotower_lib.train.loop import OPTIONS

    paper = get_profile("paper")
    engines = dict(item.split("=", 1) for item in args.engine)
    micro = args.elmo_micro_batch if FAMILIES[family] == "elmo" else args.micro_batch
    accum = max(1, args.sequences_per_step // micro)
    tcfg = TrainConfig(model=FAMILIES[family], preset=args.preset or paper.models[family].preset, seed=1,
                       max_steps=1 + args.steps, micro_batch=micro, grad_accum=accum, precision=args.precision,
                       engine=engines.get(family, paper.engine_for(family)), label_bucket=paper.train.label_bucket,
                       vocab_multiple=paper.train.vocab_multiple, log_every_steps=1, eval_every_steps=10**6,
                       checkpoint_every_s=1e7, snapshot_every_tokens=10**15, data=str(data)).validate()
    argv = [sys.executable, "-m", "twotower_lib", "train", *config_to_argv(tcfg, OPTIONS), "--out", str(out)]
    settings = {"engine": tcfg.engine, "preset": tcfg.preset, "precision": tcfg.precision, "micro_batch": micro,
                "accum": accum, "sequences_per_step": micro * accum, "label_bucket": tcfg.label_bucket,
                "model_options": {"vocab_multiple": tcfg.vocab_multiple}, "casts": "once a step"}
    return argv, settings


def timed_steps(log: Path, steps: int) -> tuple[float, list[float], float | None]:
    """From a run's log.jsonl (a record a step): the warm-up step's seconds, the `steps` timed steps' seconds
    after it, and the peak GPU memory logged (None on a CPU)."""
    records = [r for r in map(json.loads, log.read_text().splitlines()) if "step_s" in r]
    if len(records) < 1 + steps:
        raise RuntimeError(f"{log} holds {len(records)} steps; the row needs 1 + {steps}")
    memory = [r["peak_memory_gib"] for r in records if "peak_memory_gib" in r]
    return records[0]["step_s"], [r["step_s"] for r in records[1:1 + steps]], max(memory) if memory else None


def flops_per_step(run: Path, micro: int, accum: int, device: str) -> tuple[float, float]:
    """One optimizer step's model FLOPs for the run's own model config (its `config.json`), counted on
    `device` as `bench_gpu.py` counts them, and the model's parameters in millions."""
    from twotower_lib.models import ModelConfig, build_model

    cfg = ModelConfig.from_dict(json.loads((run / "config.json").read_text())["model"])
    model = build_model(cfg).to(device)
    flops = step_flops(model, cfg, micro, device) * accum
    params = sum(p.numel() for p in model.parameters()) / 1e6
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return flops, params


def measure(family: str, args: argparse.Namespace, device: str, peak: float | None, paper_tokens: int) -> dict:
    """One family's row: its `train` command run to its end, its steps read from the log."""
    out = args.runs / family
    if out.exists():
        shutil.rmtree(out)
    argv, row = train_command(family, args.data, out, args)
    row = {"model": family, "path": "train", "command": _relative(argv[1:]), **row}
    started = time.monotonic()
    # its own process group, so that a run past its time is stopped with its compile workers
    run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env=os.environ | {"PYTHONUNBUFFERED": "1"})
    try:
        _, stderr = run.communicate(timeout=args.family_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        shutil.rmtree(out, ignore_errors=True)
        return row | {"error": f"timed out after {args.family_timeout:g} s"}
    row["wall_s"] = round(time.monotonic() - started, 1)
    if run.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        return row | {"error": (stderr.strip().splitlines() or ["no output"])[-1][:300]}
    warmup, each, memory = timed_steps(out / "log.jsonl", args.steps)
    flops, params = flops_per_step(out, row["micro_batch"], row["accum"], device)
    seq_len = json.loads((out / "config.json").read_text())["model"]["seq_len"]
    if not args.keep_runs:  # a run at Table 1 size leaves gigabytes of checkpoints and weights
        shutil.rmtree(out)
    step_s = sum(each) / len(each)
    tokens_per_s = row["sequences_per_step"] * seq_len / step_s
    hours = paper_tokens / tokens_per_s / 3600
    return row | {"timed_steps": len(each), "step_s_each": each, "step_s": step_s, "warmup_step_s": warmup,
                  "tokens_per_s": tokens_per_s, "flops_per_step": flops, "mfu": flops / step_s / peak if peak else None,
                  "params_m": params, "peak_memory_gib": memory, "optimizer_step_s": None,
                  "paper_tokens": paper_tokens, "paper_hours_1gpu": hours, "paper_hours_6gpu": hours / 6}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="a prepared corpus (the paper's vocabulary: 30522)")
    p.add_argument("--families", nargs="+", default=["gpt", "bert-large", "bert-base", "elmo"], choices=list(FAMILIES))
    p.add_argument("--steps", type=int, default=3, help="timed steps after the warm-up step")
    p.add_argument("--engine", action="append", default=[], metavar="FAMILY=ENGINE",
                   help="replace the paper profile's engine for one family")
    p.add_argument("--micro-batch", type=int, default=256)
    p.add_argument("--elmo-micro-batch", type=int, default=128)
    p.add_argument("--sequences-per-step", type=int, default=3840)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--preset", default=None, help="one preset for every family (the test's tiny); default paper-*")
    p.add_argument("--family-timeout", type=float, default=240.0, help="seconds a family's `train` may take")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--runs", type=Path, default=Path("/tmp/bench_train_path"), help="where the runs go")
    p.add_argument("--keep-runs", action="store_true", help="keep each run's folder (default: removed once read)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (tests)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not (args.cpu or torch.cuda.is_available()):
        print("bench_train_path: no CUDA GPU is visible to torch here; this benchmark measures GPU training "
              "throughput through `train` (--cpu runs the same path on the CPU)")
        return 0
    from twotower_lib.book.profiles import get_profile

    device = "cpu" if args.cpu else "cuda"
    name = "cpu" if args.cpu else torch.cuda.get_device_name()
    peak = device_peak(name, args.peak_tflops)
    driver, args.argv = None if args.cpu else _driver(), _relative(argv)
    paper_tokens = get_profile("paper").train.tokens
    print(f"{name}; dense peak {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s; through `train`; "
          f"{args.sequences_per_step} sequences a step; 1 warm-up step and {args.steps} timed\n")
    print(f"{'model':12} {'engine':22} {'tok/s':>9} {'MFU':>6} {'step s':>7} {'each':>20} {'warm-up s':>9} "
          f"{'mem GiB':>7}")
    rows = []
    for family in args.families:
        row = measure(family, args, device, peak, paper_tokens)
        rows.append(row)
        if "error" in row:
            print(f"{family:12} {row['engine']:22} failed: {row['error']}", flush=True)
        else:
            mfu = f"{100 * row['mfu']:5.1f}%" if row["mfu"] is not None else "  —  "
            each = " ".join(f"{s:.2f}" for s in row["step_s_each"])
            print(f"{family:12} {row['engine']:22} {row['tokens_per_s']:9.0f} {mfu:>6} {row['step_s']:7.2f} "
                  f"{each:>20} {row['warmup_step_s']:9.1f} {row['peak_memory_gib'] or float('nan'):7.1f}", flush=True)
        _write(args, name, peak, driver, rows)  # after every family, as the GPU bench writes its rows
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
