"""Training speed of the CPU presets, against this machine's matmul peak measured in the same run.

    python benchmarks/bench_train.py [--presets tiny cpu] [--models elmo gpt bert] [--steps 4]

For each preset and tower family it trains a few DeepSpeed steps on random tokens and prints
  - tokens/s in fp32 and with bf16 autocast,
  - achieved FLOP/s as a fraction of the measured fp32 and bf16 matmul peak
    (FLOPs per step: model_flops.step_flops, torch's FlopCounterMode plus the LSTM recurrences by hand),
  - transformer towers run one after the other vs fused into one vmapped call,
  - a two-tower step against two single-tower steps of the same tower width.
Numbers on a shared machine are noisy: each timing is the best of several repeats.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
import warnings

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402

from model_flops import random_batch, step_flops  # noqa: E402  (benchmarks/model_flops.py)
from twotower_lib.models import MODEL_TYPES, ModelConfig, build_model, preset  # noqa: E402
from twotower_lib.train.deepspeed_setup import init_distributed  # noqa: E402
from twotower_lib.train.loop import micro_step, step_region  # noqa: E402



MATMUL_N = 2048


def make_matmul(dtype: torch.dtype, n: int = MATMUL_N):
    """One n x n matmul in `dtype`: the CPU's practical peak for dense GEMM (2 n^3 FLOPs)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    return lambda: torch.mm(a, b)


def flops_per_step(cfg: ModelConfig, micro: int) -> float:
    return step_flops(build_model(cfg), cfg, micro)


def make_step(cfg: ModelConfig, micro: int, bf16: bool, steps: int):
    """A function running `steps` optimizer steps through a DeepSpeed engine (AdamW, clipping) and the trainer's
    step (`train.step_region`, `train.micro_step`), as in training."""
    import deepspeed

    torch.manual_seed(0)
    model = build_model(cfg)
    ds = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.98], "weight_decay": 0.01,
                                                    "torch_adam": True}},
          "steps_per_print": 10**9}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
    batches = [random_batch(cfg, micro, s) for s in range(steps)]

    def run() -> None:
        for batch in batches:
            with step_region(engine, bf16):
                micro_step(engine, batch)

    run()  # warm-up: allocator, oneDNN kernel selection
    return run


def best_times(runs: dict, repeats: int) -> dict[str, float]:
    """Best seconds per call of each run, interleaving runs so load changes on a shared machine
    hit all of them alike (the matmul peaks are measured in the same rounds)."""
    best = {k: float("inf") for k in runs}
    for _ in range(repeats):
        for k, run in runs.items():
            t = time.perf_counter()
            run()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["tiny", "cpu"])
    p.add_argument("--models", nargs="+", default=list(MODEL_TYPES), choices=MODEL_TYPES)
    p.add_argument("--vocab-size", type=int, default=8192, help="the default prepared-data vocabulary")
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=4)
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    init_distributed()

    print(f"threads {torch.get_num_threads()}; vocabulary {args.vocab_size}; micro-batch {args.micro_batch}; "
          f"best of {args.repeats} interleaved rounds of {args.steps} steps\n")
    print(f"{'preset':6} {'model':5} {'variant':14} {'tok/s':>7} {'GFLOP/s':>8} {'%fp32pk':>7} {'%bf16pk':>7}")
    for name in args.presets:
        for model_type in args.models:
            cfg = preset(name, model_type, vocab_size=args.vocab_size)
            tokens = args.micro_batch * cfg.seq_len * args.steps
            single = dataclasses.replace(cfg, towers=1)
            variants = {"fp32": (cfg, False), "bf16": (cfg, True),
                        "fp32 1-tower": (single, False), "bf16 1-tower": (single, True)}
            if model_type != "elmo":
                fused = dataclasses.replace(cfg, fuse_towers=True)
                variants.update({"fp32 fused": (fused, False), "bf16 fused": (fused, True)})
            runs = {k: make_step(c, args.micro_batch, bf16, args.steps) for k, (c, bf16) in variants.items()}
            runs.update({"peak fp32": make_matmul(torch.float32), "peak bf16": make_matmul(torch.bfloat16)})
            flops = {k: args.steps * flops_per_step(c, args.micro_batch) for k, (c, _) in variants.items()}
            times = best_times(runs, args.repeats)
            peak32 = 2 * MATMUL_N**3 / times.pop("peak fp32")
            peak16 = 2 * MATMUL_N**3 / times.pop("peak bf16")
            for k, t in times.items():
                rate = flops[k] / t
                print(f"{name:6} {model_type:5} {k:14} {tokens / t:7.0f} {rate / 1e9:8.2f} "
                      f"{100 * rate / peak32:6.1f}% {100 * rate / peak16:6.1f}%")
            two = {k: t for k, t in times.items() if "1-tower" not in k}
            best = min(two, key=two.get)
            prec = best.split()[0]
            print(f"{name:6} {model_type:5} matmul peak fp32 {peak32 / 1e9:.1f}, bf16 {peak16 / 1e9:.1f} GFLOP/s; "
                  f"fastest: {best}; two-tower step / two single-tower steps ({prec}) = "
                  f"{times[prec] / (2 * times[prec + ' 1-tower']):.2f}\n")


if __name__ == "__main__":
    main()
