"""Training throughput on one GPU at Table 1 sizes, through the trainer's own engines and DeepSpeed configs.

    python benchmarks/bench_gpu.py [--families elmo gpt bert-base bert-large] [--precisions bf16 fp16]
        [--engines deepspeed torch torch-compile torch-compile-layers torch-graphs] [--released] [--micro-batch 256] [--sequences-per-step 3840]
        [--model-option vocab_multiple=64] [--label-bucket 1024] [--cast-each-micro-batch] [--profile-dir DIR]
        [--single-tower] [--peak-tflops 989] [--out FILE.json]

For each two-tower model (the `paper-*` presets, and with --released the released code's shapes), engine
and precision it runs optimizer steps of the paper's 3,840 sequences (micro-batches accumulated; AdamW,
clipping, the precision's DeepSpeed config: bf16, or fp16 with dynamic loss scaling) on random tokens at
the paper's vocabulary and prints
  - tokens/s,
  - model FLOPs utilisation: model FLOPs per second / the device's dense peak for the precision
    (FLOPs: model_flops.step_flops, torch's FlopCounterMode plus the LSTM recurrences by hand),
  - peak GPU memory,
  - the optimizer step's share of a step (the last micro-batch's excess over the others' median),
  - the warm-up step's seconds (with a compiling engine, its compilation),
  - with --profile-dir, how busy the GPU was during one profiled micro-batch (its kernels' time / wall time),
  - with --single-tower, a two-tower step / two single-tower steps of the same tower width,
  - the projected wall time of the paper profile's token budget per case on 1 and on 6 such GPUs
    (6: perfect data-parallel scaling assumed, an upper bound on speed).
`--model-option` sets a ModelConfig field for every model, `--label-bucket` the trainer's padding of the
predicted positions, `--cast-each-micro-batch` the trainer's autocast region as it was: one lever measured alone.
Without a CUDA GPU it says so and exits with status 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

from model_flops import random_batch, step_flops  # benchmarks/model_flops.py
from twotower_lib.train.config import ENGINES

FAMILIES = {"elmo": "elmo", "gpt": "gpt", "bert-base": "bert", "bert-large": "bert"}
# Dense bf16/fp16 tensor-core peaks (no sparsity), TFLOP/s, by a substring of torch's device name.
PEAK_TFLOPS = {"H200": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0,
               "L4": 121.0, "V100": 125.0}


def device_peak(name: str, given: float | None) -> float | None:
    if given:
        return given * 1e12
    for key, tflops in PEAK_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def trainer_engine(cfg, precision: str, micro: int, engine_name: str, accum: int = 1, label_bucket: int = 1):
    """The model (seed 0, on the GPU) and the engine the trainer builds for it (`train.build_engine`) with an
    optimizer step every `accum` micro-batches, with whether its forward passes autocast to bf16. Every option
    the bench is given reaches the trainer's config (`train_config`), so it validates as `train` would."""
    from twotower_lib.train.deepspeed_setup import deepspeed_config
    from twotower_lib.models import build_model
    from twotower_lib.train.loop import build_engine

    torch.manual_seed(0)
    model = build_model(cfg).cuda()
    tcfg = train_config(cfg, precision, micro, engine_name, accum, label_bucket)
    engine, autocast = build_engine(tcfg, model, deepspeed_config(tcfg), world=1)
    return model, engine, autocast


def train_config(cfg, precision: str, micro: int, engine_name: str, accum: int = 1, label_bucket: int = 1):
    """The trainer's `TrainConfig` of one bench row: its engine, precision, batching and padded positions."""
    from twotower_lib.train.loop import TrainConfig

    return TrainConfig(model=cfg.model_type, preset="paper", max_steps=1, micro_batch=micro, grad_accum=accum,
                       precision=precision, engine=engine_name, label_bucket=label_bucket).validate()


def measure(cfg, precision: str, micro: int, steps: int, engine_name: str = "deepspeed", accum: int = 1,
            profile_to: Path | None = None, label_bucket: int = 1, cast_each_micro_batch: bool = False) -> dict:
    """Tokens/s and peak memory of optimizer steps of `micro` x `accum` sequences with the trainer's config for
    `precision`, through the trainer's own engine (`train.build_engine`: DeepSpeed's, or the torch engine), its
    autocast rule and its step (`train.step_region`, `train.micro_step`). One optimizer step warms up; `steps`
    are timed. Each micro-batch is timed with device events, so the optimizer step's share is the last
    micro-batch's excess over the others' median. With `profile_to`, one more micro-batch, not a step's first,
    runs under torch.profiler and its kernel table is written there. `cast_each_micro_batch`: an autocast
    region a micro-batch, as the trainer had before `step_region` (its weights cast every micro-batch)."""
    from twotower_lib.train.loop import micro_step, step_region

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model, engine, autocast = trainer_engine(cfg, precision, micro, engine_name, accum, label_bucket)
    flops = step_flops(model, cfg, micro, "cuda") * accum
    batches = [random_batch(cfg, micro, s, engine.device, label_bucket) for s in range(min(accum, 8))]
    per_region = 1 if cast_each_micro_batch else accum

    def run(n: int) -> tuple[float, list[float]]:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        torch.cuda.synchronize()
        t = time.perf_counter()
        events[0].record()
        for first in range(0, n, per_region):
            with step_region(engine, autocast):
                for i in range(first, first + per_region):
                    micro_step(engine, batches[i % len(batches)])
                    events[i + 1].record()
        torch.cuda.synchronize()
        return time.perf_counter() - t, [a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:])]

    warmup_s, _ = run(accum)  # warm-up: one optimizer step (kernel selection, the allocator, compilation, optimizer state)
    seconds, per_micro = run(steps * accum)
    step_s = seconds / steps
    inner = sorted(t for i, t in enumerate(per_micro) if (i + 1) % accum) if accum > 1 else []
    micro_s = inner[len(inner) // 2] if inner else None
    last = [t for i, t in enumerate(per_micro) if (i + 1) % accum == 0]
    out = {"step_s": step_s, "warmup_step_s": warmup_s, "accum": accum, "sequences_per_step": micro * accum,
           "tokens_per_s": micro * accum * cfg.seq_len / step_s, "flops_per_step": flops,
           "micro_step_s": micro_s, "optimizer_step_s": sum(last) / len(last) - micro_s if micro_s else None,
           "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
           "params_m": sum(p.numel() for p in model.parameters()) / 1e6}
    if profile_to is not None:
        try:
            with step_region(engine, autocast):
                if not cast_each_micro_batch:
                    micro_step(engine, batches[0])  # a step's first micro-batch casts the weights
                out["profile"] = profile_micro_step(lambda: micro_step(engine, batches[-1]), profile_to)
        except Exception as e:  # the timing stands without its profile
            out["profile"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    engine = model = batches = None  # free the GPU memory before the next configuration
    gc.collect()
    torch.cuda.empty_cache()
    return out


def profile_micro_step(one_micro_batch, path: Path) -> dict:
    """One micro-batch under torch.profiler: its kernels' table (by device time) written to `path`, and how
    busy the device was: the kernels' summed time over the wall time (low: the host cannot keep up)."""
    from torch.profiler import ProfilerActivity, profile, supported_activities

    torch.cuda.synchronize()
    # the activities this torch build can record: a CPU-only build (the bench's test) asked for CUDA's fails to
    # record an event on every operation, at about a hundred times the cost of the step
    activities = [a for a in (ProfilerActivity.CPU, ProfilerActivity.CUDA) if a in supported_activities()]
    with profile(activities=activities) as prof:
        t = time.perf_counter()
        one_micro_batch()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    device_s = sum(e.time_range.elapsed_us() for e in kernels) / 1e6
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(prof.key_averages().table(sort_by="device_time_total", row_limit=25) + "\n")
    return {"wall_s": wall, "kernels": len(kernels), "kernel_s": device_s, "device_busy": device_s / wall}


def loss_curves(cfg, precision: str, micro: int, steps: int, engines: tuple[str, ...] = ("torch",),
                label_bucket: int = 1) -> dict:
    """The first `steps` training losses of DeepSpeed's engine and of each of `engines` from the same initial
    weights and the same batches at a constant rate: the numerics of the torch engine (fp32 weights, bf16
    autocast; compiled or not) against DeepSpeed's (bf16 weights, fp32 master copies), at the model's real size."""
    from twotower_lib.train.loop import micro_step, step_region

    curves = {}
    for engine_name in ("deepspeed", *engines):
        _, engine, autocast = trainer_engine(cfg, precision, micro, engine_name, label_bucket=label_bucket)
        for group in engine.optimizer.param_groups:
            group["lr"] = 1e-4
        losses = []
        for s in range(steps):
            batch = random_batch(cfg, micro, 10_000 + s, engine.device, label_bucket)
            with step_region(engine, autocast):
                losses.append(micro_step(engine, batch).detach().float())
        curves[engine_name] = [float(x) for x in torch.stack(losses).cpu()]
        engine = None  # free the GPU memory before the other engine
        gc.collect()
        torch.cuda.empty_cache()
    diffs = {e: [abs(a - b) for a, b in zip(curves["deepspeed"], curves[e])] for e in engines}
    return {"steps": steps, "lr": 1e-4, "curves": curves, "max_abs_diff": {e: max(d) for e, d in diffs.items()},
            "mean_abs_diff_last_50": {e: sum(d[-50:]) / len(d[-50:]) for e, d in diffs.items()}}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--precisions", nargs="+", default=["bf16", "fp16"], choices=["bf16", "fp16", "fp32"])
    p.add_argument("--engines", nargs="+", default=["deepspeed"], choices=list(ENGINES),
                   help="the trainer's engines to measure (`--engine` of `train`; torch engines: bf16 and fp32 only)")
    p.add_argument("--released", action="store_true", help="also the released code's shapes (released-* presets)")
    p.add_argument("--micro-batch", type=int, default=256,
                   help="sequences per step (128 tokens each) for the transformer families: at 64 the steps were "
                        "bound by kernel launches (1-10%% utilisation on the H100)")
    p.add_argument("--elmo-micro-batch", type=int, default=128, help="ELMo's (its 4096-wide LSTMs need the memory)")
    p.add_argument("--sequences-per-step", type=int, default=3840,
                   help="sequences per optimizer step (the paper's 3,840): micro-batches accumulate to it")
    p.add_argument("--single-tower", action="store_true",
                   help="also time the single-tower model of the same width (the 2T/(2x1T) column)")
    p.add_argument("--model-option", action="append", default=[], metavar="FIELD=VALUE",
                   help="a ModelConfig field for every model, e.g. vocab_multiple=64 or fuse_towers=true (a lever alone)")
    p.add_argument("--profile-dir", type=Path, default=None,
                   help="after timing, profile one micro-batch per configuration and write its kernel table here")
    p.add_argument("--label-bucket", type=int, default=1,
                   help="the predicted positions padded to a multiple of this (`train --label-bucket`): BERT's shapes "
                        "repeat, so torch-compile compiles once")
    p.add_argument("--cast-each-micro-batch", action="store_true",
                   help="an autocast region a micro-batch, as the trainer had before one a step: the weights cast "
                        "every micro-batch, not once a step (that lever measured alone)")
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the device's dense bf16/fp16 peak, if its name is not in the table")
    p.add_argument("--compare-steps", type=int, default=0,
                   help="instead of timing: the first N losses of DeepSpeed and of each other --engines per family "
                        "(bf16), written to --out")
    p.add_argument("--out", type=Path, default=None, help="also write the rows and provenance as JSON")
    args = p.parse_args(argv)
    args.argv = _relative(argv)
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA GPU is visible to torch here; this benchmark measures GPU training throughput, "
              "so there is nothing to measure (on a CPU use benchmarks/bench_train.py)")
        return 0
    os.environ.setdefault("DS_ACCELERATOR", "cuda")
    warnings.filterwarnings("ignore")
    from twotower_lib.artifacts import provenance
    from twotower_lib.book.profiles import get_profile
    from twotower_lib.train.deepspeed_setup import init_distributed
    from twotower_lib.models import preset

    init_distributed()
    name = torch.cuda.get_device_name()
    peak = device_peak(name, args.peak_tflops)
    driver = _driver()
    paper_tokens = get_profile("paper").train.tokens
    shapes = [(f, f"paper-{f}") for f in args.families]
    options = model_options(args.model_option)
    if args.compare_steps:
        compared = {}
        for label, name_preset in shapes:
            cfg = preset(name_preset, FAMILIES[label], vocab_size=args.vocab_size, seq_len=128, **options)
            micro = args.elmo_micro_batch if FAMILIES[label] == "elmo" else args.micro_batch
            others = tuple(e for e in args.engines if e != "deepspeed") or ("torch",)
            compared[label] = c = loss_curves(cfg, "bf16", micro, args.compare_steps, others, args.label_bucket)
            for e in others:
                print(f"{label:12} {args.compare_steps} steps: max |loss_{e} - loss_deepspeed| = "
                      f"{c['max_abs_diff'][e]:.4f}, mean of the last 50 = {c['mean_abs_diff_last_50'][e]:.4f}", flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(provenance(device=name, argv=args.argv, compared=compared),
                                               indent=1) + "\n")
        return 0
    if args.released:
        shapes += [(f + "-released", f"released-{f}") for f in args.families]
    print(f"{name}; dense peak {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s; micro-batch {args.micro_batch} "
          f"(ELMo {args.elmo_micro_batch}) x 128 tokens, accumulated to {args.sequences_per_step} sequences a step; "
          f"vocabulary {args.vocab_size}; {args.steps} timed steps; model options {options or 'none'}\n")
    header = (f"{'model':20} {'prec':4} {'engine':13} {'params M':>8} {'tok/s':>9} {'MFU':>6} {'mem GiB':>7} "
              f"{'optim %':>7} {'busy %':>6} {'warm-up s':>9} {'2T/(2x1T)':>9} {'paper 1 GPU h':>13}")
    print(header)
    rows = []
    runs = [(e, p) for e in args.engines for p in args.precisions if not (e != "deepspeed" and p == "fp16")]
    for engine_name, precision in runs:
        for label, name_preset in shapes:
            model_type = FAMILIES[label.removesuffix("-released")]
            cfg = preset(name_preset, model_type, vocab_size=args.vocab_size, seq_len=128, **options)
            micro = args.elmo_micro_batch if model_type == "elmo" else args.micro_batch
            accum = max(1, args.sequences_per_step // micro)
            row = {"model": label, "preset": name_preset, "precision": precision, "engine": engine_name,
                   "micro_batch": micro, "model_options": options, "label_bucket": args.label_bucket,
                   "casts": "each micro-batch" if args.cast_each_micro_batch else "once a step"}
            profile_to = (args.profile_dir / f"{label}_{engine_name}_{precision}.txt") if args.profile_dir else None
            try:
                two = measure(cfg, precision, micro, args.steps, engine_name, accum, profile_to, args.label_bucket,
                              args.cast_each_micro_batch)
                one = (measure(dataclasses.replace(cfg, towers=1), precision, micro, args.steps, engine_name, accum,
                               label_bucket=args.label_bucket, cast_each_micro_batch=args.cast_each_micro_batch)
                       if args.single_tower else None)
            except Exception as e:  # report and go on: one family failing must not hide the others
                row["error"] = f"{type(e).__name__}: {e}"[:300]
                print(f"{label:20} {precision:4} {engine_name:13} failed: {row['error']}", flush=True)
                rows.append(row)
                _write(args, name, peak, driver, rows)
                continue
            mfu = two["flops_per_step"] / two["step_s"] / peak if peak else None
            hours = paper_tokens / two["tokens_per_s"] / 3600
            row.update(two, mfu=mfu, single_tower=one, two_vs_two_single=one and two["step_s"] / (2 * one["step_s"]),
                       paper_tokens=paper_tokens, paper_hours_1gpu=hours, paper_hours_6gpu=hours / 6)
            rows.append(row)
            optim = 100 * two["optimizer_step_s"] / two["step_s"] if two["optimizer_step_s"] else float("nan")
            busy = 100 * two.get("profile", {}).get("device_busy", float("nan"))
            print(f"{label:20} {precision:4} {engine_name:13} {two['params_m']:8.1f} {two['tokens_per_s']:9.0f} "
                  f"{100 * mfu if mfu else float('nan'):5.1f}% {two['peak_memory_gib']:7.1f} {optim:7.1f} {busy:6.1f} "
                  f"{two['warmup_step_s']:9.1f} "
                  f"{row['two_vs_two_single'] or float('nan'):9.2f} {hours:13.1f}", flush=True)
            _write(args, name, peak, driver, rows)  # after every row: a run stopped part-way keeps what it measured
    return 0


def model_options(pairs: list[str]) -> dict:
    """`FIELD=VALUE` pairs as ModelConfig overrides, each value parsed as the field's type."""
    from twotower_lib.models import ModelConfig

    types = {f.name: f.type for f in dataclasses.fields(ModelConfig)}
    out = {}
    for pair in pairs:
        field, _, value = pair.partition("=")
        if field not in types or not value:
            raise SystemExit(f"--model-option {pair!r}: expected FIELD=VALUE with FIELD one of {sorted(types)}")
        kind = types[field] if isinstance(types[field], str) else types[field].__name__
        out[field] = (value.lower() in ("1", "true", "yes") if kind == "bool" else int(value) if kind == "int"
                      else float(value) if kind == "float" else value)
    return out


def _write(args, device: str, peak, driver, rows: list[dict]) -> None:
    if args.out:
        from twotower_lib.artifacts import provenance

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(provenance(device=device, peak_flops=peak, cuda=torch.version.cuda,
                                                  driver=driver, argv=args.argv, rows=rows),
                                       indent=1) + "\n")


def _relative(argv: list[str]) -> list[str]:
    """The arguments as committed: a path outside the working directory by its name only (no machine's paths)."""
    cwd = Path.cwd()
    return [str(Path(a).relative_to(cwd)) if Path(a).is_absolute() and Path(a).is_relative_to(cwd)
            else Path(a).name if Path(a).is_absolute() else a for a in argv]


def _driver() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


if __name__ == "__main__":
    sys.exit(main())
