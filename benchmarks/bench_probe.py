"""Probe speed: training the heads from cached tower features vs recomputing the towers every epoch.

    python benchmarks/bench_probe.py [--model gpt] [--preset cpu] [--epochs 3] [--train-blocks 512]

Uses a freshly initialised model of the preset (frozen towers cost the same trained or not) on the
prepared default corpus (`data prepare` first), and prints both times and their ratio.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    from twotower_lib.data import DataConfig, load_prepared, prepared_dir
    from twotower_lib.models import build_model, preset
    from twotower_lib.probe import ProbeConfig, train_heads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--train-blocks", type=int, default=512)
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    data = load_prepared(args.data or prepared_dir(DataConfig()))
    torch.manual_seed(0)
    model = build_model(preset(args.preset, args.model, vocab_size=data.vocab_size, seq_len=data.seq_len)).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    # The two parts: one pass of the frozen towers, and one epoch of head training from the cache.
    cfg1 = ProbeConfig(train_blocks=args.train_blocks, epochs=1)
    t0 = time.perf_counter()
    train_heads(model, data, cfg1, show=False)
    one_epoch_cached = time.perf_counter() - t0
    from twotower_lib.probe import extract_features

    t0 = time.perf_counter()
    extract_features(model, data.train[: args.train_blocks], data.special_ids, data.vocab_size,
                     torch.Generator().manual_seed(0), cfg1, show=False)
    tower_pass = time.perf_counter() - t0
    head_epoch = max(one_epoch_cached - tower_pass, 1e-9)
    E = args.epochs
    times = {}
    for cache in (True, False):
        cfg = ProbeConfig(train_blocks=args.train_blocks, epochs=args.epochs, cache_features=cache)
        t0 = time.perf_counter()
        train_heads(model, data, cfg, show=False)
        times[cache] = time.perf_counter() - t0
    print(f"{args.model}/{args.preset}, {args.train_blocks} blocks x {args.epochs} epochs, vocabulary {data.vocab_size}, "
          f"threads {torch.get_num_threads()}")
    print(f"  cached features : {times[True]:8.2f} s")
    print(f"  recompute towers: {times[False]:8.2f} s")
    print(f"  speed-up        : {times[False] / times[True]:8.2f} x")
    print(f"  parts: tower pass {tower_pass:.2f} s, head epoch {head_epoch:.2f} s -> the cache can save at most "
          f"E(F+H)/(F+EH) = {E * (tower_pass + head_epoch) / (tower_pass + E * head_epoch):.2f} x at {E} epochs "
          f"({(tower_pass + head_epoch) / head_epoch:.2f} x as epochs grow)")


if __name__ == "__main__":
    main()
