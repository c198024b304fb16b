"""Runs one after the other on every core vs side by side on fewer threads each (twotower_lib.workers).

    python benchmarks/bench_workers.py [--model gpt] [--preset cpu] [--jobs 2] [--steps 20]

Each job is a piece of the two kinds of work the pipeline runs many of: `--steps` training steps
of a freshly initialised two-tower model of the preset (AdamW, random tokens), and `--steps`
probe-head steps (the probe's two linear heads over the vocabulary, batch 1024). The script times `--jobs` jobs
run one after the other on all cores (threads_per_run = 0) and the same jobs side by side on
one thread each (threads_per_run = 1), and prints the ratio: how much sooner the side-by-side
jobs finish. The first side-by-side call includes starting the workers; the second kind's reuses them, as
a section's later calls do (`workers.run_jobs` keeps them). Numbers on a shared machine are noisy: run it on
an idle machine.
"""

from __future__ import annotations

import argparse
import time


def train_steps(model: str, preset: str, steps: int, vocab_size: int) -> float:
    import torch

    from twotower_lib.models import build_model, labeled_positions, make_batch
    from twotower_lib.models import preset as model_preset

    torch.manual_seed(0)
    cfg = model_preset(preset, model, vocab_size=vocab_size)
    net = build_model(cfg)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    special = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    t = time.perf_counter()
    for _ in range(steps):
        ids = torch.randint(len(special), vocab_size, (32, cfg.seq_len), generator=g)
        inputs, labels = make_batch(cfg.model_type, ids, g, special, vocab_size)
        loss, _ = net(inputs, *labeled_positions(labels))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t


def head_steps(steps: int, vocab_size: int, hidden: int = 128) -> float:
    """`steps` steps of the probe's default heads: two linear heads whose decoder is a frozen (V, 2H) embedding."""
    import torch

    from twotower_lib.probe.heads import ProbeHead

    torch.manual_seed(0)
    embedding = torch.randn(vocab_size, 2 * hidden) * 0.05
    heads = torch.nn.ModuleList(ProbeHead(hidden, vocab_size, "linear", embedding) for _ in range(2))
    opt = torch.optim.AdamW(heads.parameters(), lr=1e-3)
    f, y = torch.randn(1024, 2, hidden), torch.randint(0, vocab_size, (1024,))
    t = time.perf_counter()
    for _ in range(steps):
        loss = sum(heads[j].loss(f[:, j], y) for j in range(2))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t


def main() -> None:
    from twotower_lib.workers import available_cpus, run_jobs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--vocab-size", type=int, default=8192)
    args = ap.parse_args()
    kinds = {
        f"training ({args.model}/{args.preset})": (train_steps, {"model": args.model, "preset": args.preset,
                                                                 "steps": args.steps, "vocab_size": args.vocab_size}),
        "probe heads": (head_steps, {"steps": args.steps, "vocab_size": args.vocab_size}),
    }
    print(f"{available_cpus()} cores; {args.jobs} jobs of {args.steps} steps each")
    for name, (fn, kw) in kinds.items():
        walls = {}
        for threads in (0, 1):
            t = time.perf_counter()
            inside = run_jobs(fn, [kw] * args.jobs, threads_per_run=threads, desc=name)
            walls[threads] = time.perf_counter() - t
            print(f"  threads_per_run {threads}: seconds inside each job {[round(x, 1) for x in inside]}")
        print(f"{name:28} one after the other, all cores: {walls[0]:7.1f} s | side by side, 1 thread each: "
              f"{walls[1]:7.1f} s | {walls[0] / walls[1]:.2f}x sooner")


if __name__ == "__main__":
    main()
