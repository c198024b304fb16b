"""How long `torch.compile` takes before the first training step: the forward pass as one graph
(`--engine torch-compile`) against region by region (`--engine torch-compile-layers`), at Table 1 sizes.

    python benchmarks/bench_compile.py [--families gpt bert-base bert-large] [--micro-batch 4] [--out FILE]

Each (family, engine) runs in a fresh process with Inductor's caches off (a cold start, as on a new machine):
the trainer's engine (`train.build_engine`, fp32) takes one micro-step (`train.micro_step`: forward, backward,
the compilation inside it) and then two more. It prints the first step's seconds, the later steps' median, the
graphs compiled and the ratio of the two engines' first steps, and checks that both compiled engines give the
same first loss. On a CPU Inductor writes C++ kernels, on a GPU Triton ones: run it where you will train.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from bench_gpu import FAMILIES  # noqa: E402  (benchmarks/bench_gpu.py: bench name -> model type)

ENGINES = ("torch-compile", "torch-compile-layers")


def one(family: str, engine_name: str, micro: int) -> dict:
    """The first and later micro-steps of one compiled engine, in this process."""
    import torch
    from torch._dynamo.utils import counters

    from model_flops import random_batch  # benchmarks/model_flops.py
    from twotower_lib.train.deepspeed_setup import deepspeed_config
    from twotower_lib.models import build_model, preset
    from twotower_lib.train.loop import TrainConfig, build_engine, micro_step, step_region

    cfg = preset(f"paper-{family}", FAMILIES[family], vocab_size=30522, seq_len=128)
    torch.manual_seed(0)
    model = build_model(cfg)
    tcfg = TrainConfig(model=cfg.model_type, preset="paper", max_steps=1, micro_batch=micro, precision="fp32",
                       engine=engine_name).validate()
    engine, autocast = build_engine(tcfg, model, deepspeed_config(tcfg), world=1)
    batch = random_batch(cfg, micro, 0, engine.device, label_bucket=1024 if cfg.model_type == "bert" else 1)
    seconds, losses = [], []
    for _ in range(3):
        t = time.perf_counter()
        with step_region(engine, autocast):
            losses.append(float(micro_step(engine, batch)))
        seconds.append(time.perf_counter() - t)
    return {"family": family, "engine": engine_name, "first_step_s": seconds[0],
            "later_step_s": statistics.median(seconds[1:]), "first_loss": losses[0],
            "graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", default=["gpt", "bert-base", "bert-large"], choices=FAMILIES)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--out", type=Path, default=None, help="JSON file for the rows and their provenance")
    p.add_argument("--one", nargs=2, metavar=("FAMILY", "ENGINE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(*args.one, args.micro_batch)))
        return 0
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    rows = []
    print(f"{'model':12} {'engine':21} {'first step s':>12} {'later s':>8} {'graphs':>6} {'breaks':>6}")
    for family in args.families:
        for engine_name in ENGINES:
            done = subprocess.run([sys.executable, __file__, "--one", family, engine_name, "--micro-batch",
                                   str(args.micro_batch)], env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{family} {engine_name} failed:\n{done.stderr[-2000:]}")
            rows.append(r := json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"{family:12} {engine_name:21} {r['first_step_s']:12.1f} {r['later_step_s']:8.2f} "
                  f"{r['graphs']:6d} {r['graph_breaks']:6d}", flush=True)
        whole, layers = rows[-2], rows[-1]
        whole["first_step_over_layers"] = whole["first_step_s"] / layers["first_step_s"]
        print(f"{family:12} the first step compiled whole takes {whole['first_step_over_layers']:.1f}x as long as "
              f"layer by layer; first losses {whole['first_loss']:.6f} and {layers['first_loss']:.6f}")
        if abs(whole["first_loss"] - layers["first_loss"]) > 1e-4:
            raise SystemExit(f"{family}: the two compiled engines' first losses differ")
    if args.out:
        from twotower_lib.artifacts import provenance

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(provenance(argv=sys.argv[1:], micro_batch=args.micro_batch, rows=rows),
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
