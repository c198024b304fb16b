"""One probe head's training step and its scoring, against torch's generic path: prints ratios.

The probing heads spend nearly all their time on (N, V) logits. This measures, at the `cpu` profile's
shapes (two towers of H = 128 over a 256-wide embedding, V = 8192, 1024 positions per step):

- a training step (loss + backward): `F.cross_entropy(head(h), y)` (torch's generic path) against
  `ProbeHead.loss` (the linear head folded into one (V, H) map, the softmax a block of rows at a
  time with its gradients, `LinearCrossEntropy`), in fp32 and with bf16 matmuls;
- scoring (log p of the true token): fp32 logits of the whole batch against `ProbeHead.logprob`
  (a block of rows at a time; fp32, or the log-sum-exp from bf16-input logits), with their errors.

    python benchmarks/bench_probe_head.py [--threads 2] [--hidden 128] [--width 256] [--vocab 8192]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from twotower_lib.probe.heads import ProbeHead, token_logprob


def best_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128, help="tower width H")
    ap.add_argument("--width", type=int, default=256, help="embedding width (two towers: 2H)")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1024, help="positions per training step")
    ap.add_argument("--score-batch", type=int, default=4096, help="positions per scoring call")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(args.vocab, args.width, generator=g) * 0.05
    head = ProbeHead(args.hidden, args.vocab, "linear", emb)
    h = torch.randn(args.batch, args.hidden, generator=g)
    y = torch.randint(args.vocab, (args.batch,), generator=g)

    def generic():
        head.zero_grad()
        F.cross_entropy(F.linear(head.features(h), *head.decoder_weights()), y).backward()

    def ours(dtype):
        def step():
            head.zero_grad()
            head.loss(h, y, dtype).backward()
        return step

    print(f"threads {args.threads}; H {args.hidden}, embedding {args.width}, V {args.vocab}; "
          f"training step of {args.batch} positions (min of {args.repeats})")
    base = best_time(generic, args.repeats)
    print(f"  torch generic, fp32          {base * 1e3:7.1f} ms   1.00x")
    for name, dtype in (("fp32", torch.float32), ("bf16 matmuls", torch.bfloat16)):
        t = best_time(ours(dtype), args.repeats)
        print(f"  ProbeHead.loss, {name:<12} {t * 1e3:7.1f} ms   {base / t:.2f}x faster")

    hs = torch.randn(args.score_batch, args.hidden, generator=g)
    ys = torch.randint(args.vocab, (args.score_batch,), generator=g)
    with torch.no_grad():
        base = best_time(lambda: token_logprob(F.linear(head.features(hs), *head.decoder_weights()), ys), args.repeats)
        d = {k: v.double() for k, v in head.state_dict(keep_vars=True).items()} | {"embedding": emb.double()}
        exact = token_logprob(F.linear(F.linear(hs.double(), d["dense.weight"], d["dense.bias"]), d["embedding"], d["bias"]), ys)
        print(f"scoring {args.score_batch} positions")
        print(f"  fp32 logits of the batch     {base * 1e3:7.1f} ms   1.00x   max |error| "
              f"{(token_logprob(F.linear(head.features(hs), *head.decoder_weights()), ys) - exact).abs().max():.1e} nats")
        for name, dtype in (("fp32", torch.float32), ("bf16 lse", torch.bfloat16)):
            t = best_time(lambda: head.logprob(hs, ys, dtype), args.repeats)
            err = head.logprob(hs, ys, dtype) - exact
            print(f"  ProbeHead.logprob, {name:<9} {t * 1e3:7.1f} ms   {base / t:.2f}x faster   max |error| "
                  f"{err.abs().max():.1e} nats, mean error {err.mean():+.1e}")


if __name__ == "__main__":
    main()
