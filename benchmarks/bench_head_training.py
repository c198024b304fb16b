"""Head training against its matrix products alone, timed side by side: prints the ratio (goal: 70%).

    python benchmarks/bench_head_training.py [--threads 2] [--hidden 128] [--width 256] [--vocab 8192]
        [--towers 2] [--positions 51200] [--rounds 5] [--precision auto] [--out FILE]

One epoch of the probe's own head training (`probe_training._epoch`: one linear head per tower, AdamW, the
probe's batch of 1,024 positions read in a random order from bf16 cached features) over `--positions` synthetic
positions, and the same number of head steps' matrix products alone: the fold W = E A forward and backward and
the (N, V) logits and gradient, whole-batch, in the dtype the probe resolves to on this machine. The two are
timed in alternating rounds, so that a machine whose speed drifts (shared cores) moves both; the fastest round
of each counts. The ratio (products alone / epoch) is the rate head training reaches against the rate of its
matrix products; the rest of a step is the softmax, its gradient, the optimizer and the bookkeeping.
`probe_stage_floor.py` asks the same of a profile's recorded probes (whose time includes held-out losses and a
machine's state on another day); the defaults here are the `cpu` profile's shapes.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_stage_floor import step_flops  # noqa: E402  (benchmarks/probe_stage_floor.py)

GOAL = 0.70


def setup(args: argparse.Namespace):
    """The probe's heads, optimizer and schedule on synthetic features; the products of one head step."""
    from torch import nn

    from twotower_lib.probe import precision
    from twotower_lib.probe import training as pt
    from twotower_lib.probe.schedule import HeadSchedule
    from twotower_lib.probe.heads import ProbeHead
    from twotower_lib.probe.config import ProbeConfig

    H, E, V, k, n = args.hidden, args.width, args.vocab, args.towers, args.positions
    cfg = ProbeConfig(precision=args.precision)
    dtype = precision.head_dtype(cfg, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(V, E, generator=g) * 0.05
    heads = nn.ModuleList(ProbeHead(H, V, "linear", emb) for _ in range(k))
    feats, labels = torch.randn(n, k, H, generator=g).to(torch.bfloat16), torch.randint(V, (n,), generator=g)
    schedule = HeadSchedule(cfg, math.ceil(n / cfg.batch_size), list(heads.parameters()))
    opt = torch.optim.AdamW(heads.parameters(), lr=cfg.peak_lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
    order = [torch.Generator().manual_seed(1)]

    def epoch():
        pt._epoch(heads, opt, schedule, feats, labels, order, cfg, k, torch.device("cpu"), dtype)

    b = cfg.batch_size
    e, a = emb.to(dtype), heads[0].dense.weight.detach().to(dtype)                  # (V, E), (E, H)
    x, d = torch.randn(b, H, generator=g).to(dtype), torch.randn(b, V, generator=g).to(dtype)
    dw = torch.randn(V, H, generator=g).to(dtype)
    steps = math.ceil(n / b) * k

    def products():
        for _ in range(steps):
            w = e @ a if H < E else e                                                # the fold (V, H)
            x @ w.t()                                                                # logits (b, V)
            d.t() @ x                                                                # gradient (V, H)
            if H < E:
                e.t() @ dw                                                           # the fold's backward

    return epoch, products, steps * step_flops(H, E, V, b), dtype


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128, help="tower width H")
    ap.add_argument("--width", type=int, default=256, help="embedding width E")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--towers", type=int, default=2)
    ap.add_argument("--positions", type=int, default=51_200, help="training positions of the timed epoch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    ap.add_argument("--out", help="write the measurement as JSON with its provenance")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import twotower_lib  # noqa: F401  (its allocator setting, as in the pipeline)
    from twotower_lib.artifacts import atomic_write_json, portable_command, provenance

    epoch, products, flops, dtype = setup(args)
    epoch(), products()                                                              # warm-up
    times: dict[str, list[float]] = {"epoch": [], "products": []}
    for _ in range(args.rounds):
        for name, fn in (("epoch", epoch), ("products", products)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    t_epoch, t_products = min(times["epoch"]), min(times["products"])
    ratio = t_products / t_epoch
    print(f"{args.towers} heads, H {args.hidden}, E {args.width}, V {args.vocab}, {args.positions:,} positions, "
          f"{str(dtype).removeprefix('torch.')} matmuls, {args.threads} thread(s); fastest of {args.rounds} rounds")
    print(f"head training: {t_epoch:.2f} s an epoch ({flops / t_epoch / 1e9:.0f} GFLOP/s); its matrix products alone: "
          f"{t_products:.2f} s ({flops / t_products / 1e9:.0f} GFLOP/s)")
    print(f"head training runs at {ratio:.0%} of the rate its matrix products reach alone (goal: {GOAL:.0%})")
    if args.out:
        atomic_write_json(args.out, {
            "command": portable_command("benchmarks/bench_head_training.py", sys.argv[1:] if argv is None else argv),
            "settings": {k: v for k, v in vars(args).items() if k != "out"} | {"matmul_dtype": str(dtype).removeprefix("torch.")},
            "seconds": times, "epoch_gflops": round(flops / t_epoch / 1e9, 1),
            "products_gflops": round(flops / t_products / 1e9, 1), "ratio": round(ratio, 3), "goal": GOAL,
            "provenance": provenance()})
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
