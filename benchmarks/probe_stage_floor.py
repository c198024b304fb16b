"""How fast a profile's probing stage could be: its head training at the floor of its matrix products and exponentials.

    python benchmarks/probe_stage_floor.py PROBING_DIR [--goal-minutes 15] [--repeats 21] [--out FILE] [--note TEXT]

PROBING_DIR is a profile's `probing/` folder after a run (e.g. `runs/cpu/probing`). Every probe under it
with trained heads records its seconds (all of it, and the head training), its epochs, its training
positions and its head sets. On this machine, for each shape of head among them (tower width H,
embedding width E, vocabulary V), this times one head's training step as the probe takes it
(`ProbeHead.loss`, forward and backward, 1,024 positions, its matmuls in the dtype the probe's `precision: auto`
resolves to on this machine: bf16 where bf16 matmuls are faster, fp32 elsewhere) and the same step's matrix
products alone: the logits x Wᵀ (N, V), the gradient Dᵀ x (V, H), and the fold W = E A with its
backward (V, E) x (E, H), in that dtype with the step's shapes, whole-batch (the fastest way to run them
here); and one exponential of every fp32 logit, a block of rows at a time in cache (the least any
softmax does). That is the work no faster kernel removes: a probe's head training (those products
and exponentials for every step of every head in every epoch, the held-out losses left out) at the
measured rate is the least its head training could take with the probe's recipe (epochs x positions
x heads) unchanged: the rest of the softmax, the conversions, the feature reads and the bookkeeping
free. Both floors are printed: the products alone, and with the exponentials (the floor used).

Printed, per probe and in total: the measured minutes, the head-training minutes, those at the floor,
and the head-training FLOPs with the rate they ran at; then the stage at the floor (measured time
outside head training + head training at the floor) against the goal, and how many times fewer
head-epoch positions the goal would need even at the floor.
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from pathlib import Path

import torch

BATCH = 1024  # the probe's positions per head-training step (ProbeConfig.batch_size)


def best_time(fn, repeats: int) -> float:
    """The fastest of `repeats` calls after a warm-up: the floor is meant to be the most favourable case (on
    a shared machine the medians of two runs differed by up to 1.5x)."""
    fn()
    return min(timeit.repeat(fn, number=1, repeat=repeats))


def embedding_width(run_dir: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(run_dir / "model.safetensors"), "pt") as f:
        return int(f.get_slice("tok_emb.weight").get_shape()[1])


def step_and_floor(H: int, E: int, V: int, repeats: int, dtype: torch.dtype) -> tuple[float, float, float]:
    """Seconds of one head's training step, of its matrix products alone (`dtype`), and of one exponential
    per logit (fp32, by blocks of rows as the probe's softmax runs)."""
    from twotower_lib.probe.heads import ProbeHead, rows_per_chunk

    g = torch.Generator().manual_seed(0)
    head = ProbeHead(H, V, "linear", torch.randn(V, E, generator=g) * 0.05)
    h, y = torch.randn(BATCH, H, generator=g), torch.randint(V, (BATCH,), generator=g)

    def step():
        head.zero_grad()
        head.loss(h, y, dtype).backward()

    emb, a = head.embedding.to(dtype), head.dense.weight.detach().to(dtype)          # (V, E), (E, H)
    x, d = h.to(dtype), torch.randn(BATCH, V, generator=g).to(dtype)                 # (N, H), (N, V)
    dw = torch.randn(V, H, generator=g).to(dtype)                                   # (V, H)
    folds = head.folds

    def products():
        w = emb @ a if folds else emb                                            # (V, H): the fold
        x @ w.t()                                                                # (N, V): logits
        d.t() @ x                                                                # (V, H): gradient
        if folds:
            emb.t() @ dw                                                         # (E, H): the fold's backward

    rows = rows_per_chunk(V, torch.device("cpu"))
    logits, out = torch.randn(BATCH, V, generator=g), torch.empty(rows, V)

    def exponentials():
        for r in range(0, BATCH, rows):
            torch.exp(logits[r:r + rows], out=out[:len(logits[r:r + rows])])

    return best_time(step, repeats), best_time(products, repeats), best_time(exponentials, repeats)


def step_flops(H: int, E: int, V: int, n: int = BATCH) -> float:
    """FLOPs of one head's training step in matrix products: logits and gradient (N, H) x (H, V) twice, and the
    fold E A forward and backward (V, E) x (E, H) twice where the head folds (H < E)."""
    return 4 * n * H * V + (4 * V * E * H if H < E else 0)


def probes(probing_dir: Path) -> list[dict]:
    rows = []
    for manifest in sorted(probing_dir.glob("**/manifest.json")):
        m = json.loads(manifest.read_text())
        heads = m.get("heads")
        if not heads or "seconds" not in m:
            continue                                        # a pair of probes, or a record without timings
        mc = m["model_config"]
        sets = len(heads.get("head_seeds", [0]))
        rows.append({"probe": manifest.parent.relative_to(probing_dir).as_posix(),
                     "seconds": m["seconds"]["total"],
                     # the heads' fit alone where the probe records it (the towers' pass over the blocks apart)
                     "head_seconds": heads.get("seconds", {}).get("fit", m["seconds"]["train_heads"]),
                     "epochs": heads["epochs"], "positions": heads["train_positions"],
                     "heads": mc["towers"] * sets, "H": mc["hidden"], "V": mc["vocab_size"],
                     "E": embedding_width(Path(m["run"]))})
    if not rows:
        raise SystemExit(f"{probing_dir}: no probe with trained heads and timings under it; give a profile's "
                         "probing folder after a run (e.g. runs/cpu/probing)")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probing_dir", type=Path)
    ap.add_argument("--goal-minutes", type=float, default=15.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--note", default="", help="what PROBING_DIR is (the file records the folder by its last name)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import twotower_lib  # noqa: F401  (its allocator setting, as in the pipeline)
    from twotower_lib.artifacts import atomic_write_json, portable_command, provenance

    from twotower_lib.probe.config import ProbeConfig
    from twotower_lib.probe.precision import head_dtype

    rows = probes(args.probing_dir)
    dtype = head_dtype(ProbeConfig(), torch.device("cpu"))          # what the probe's `auto` resolves to here
    shapes = {}
    for shape in sorted({(r["H"], r["E"], r["V"]) for r in rows}):
        step, products, exps = step_and_floor(*shape, args.repeats, dtype)
        shapes[shape] = {"H": shape[0], "E": shape[1], "V": shape[2], "step_ms": round(step * 1e3, 2),
                         "products_ms": round(products * 1e3, 2), "exp_ms": round(exps * 1e3, 2),
                         "products_gflops": round(step_flops(*shape) / products / 1e9, 1),
                         "floor_ms": round((products + exps) * 1e3, 2)}
        print(f"H {shape[0]}, E {shape[1]}, V {shape[2]}: a head's step {step * 1e3:.1f} ms; its matrix products "
              f"{products * 1e3:.1f} ms ({step_flops(*shape) / products / 1e9:.0f} GFLOP/s), one exp per logit "
              f"{exps * 1e3:.1f} ms: floor {(products + exps) / step:.0%} of the step")
    print(f"\n{'probe':<28} {'min':>6} {'heads min':>9} {'at floor':>8} {'TFLOP':>6} {'GFLOP/s':>7}")
    for r in rows:
        shape = shapes[(r["H"], r["E"], r["V"])]
        steps = -(-r["positions"] // BATCH) * r["epochs"] * r["heads"]
        full = r["positions"] / (-(-r["positions"] // BATCH) * BATCH)          # the last step of an epoch is short
        flops = steps * step_flops(r["H"], r["E"], r["V"]) * full
        r.update(head_seconds_at_products=round(steps * full * shape["products_ms"] / 1e3, 3),
                 head_seconds_at_floor=round(steps * full * shape["floor_ms"] / 1e3, 3), head_gflop=round(flops / 1e9, 3),
                 head_gflops=round(flops / r["head_seconds"] / 1e9, 1) if r["head_seconds"] else None)
        print(f"{r['probe']:<28} {r['seconds'] / 60:6.2f} {r['head_seconds'] / 60:9.2f} "
              f"{r['head_seconds_at_floor'] / 60:8.2f} {r['head_gflop'] / 1e3:6.1f} {r['head_gflops'] or 0:7.0f}")
    total, heads = sum(r["seconds"] for r in rows), sum(r["head_seconds"] for r in rows)
    at_floor = sum(r["head_seconds_at_floor"] for r in rows)
    at_products = sum(r["head_seconds_at_products"] for r in rows)
    stage_floor = total - heads + at_floor
    goal = args.goal_minutes * 60
    outside = total - heads
    needed = at_floor / (goal - outside) if goal > outside else float("inf")
    summary = {"probe_minutes": round(total / 60, 2), "head_minutes": round(heads / 60, 2),
               "head_minutes_at_products": round(at_products / 60, 2), "head_minutes_at_floor": round(at_floor / 60, 2),
               "outside_heads_minutes": round(outside / 60, 2),
               "stage_minutes_at_floor": round(stage_floor / 60, 2), "goal_minutes": args.goal_minutes,
               "fewer_head_epoch_positions_needed_at_floor": round(needed, 2) if needed != float("inf") else None,
               "head_tflop": round(sum(r["head_gflop"] for r in rows) / 1e3, 1),
               "head_rate_of_products": round(at_products / heads, 3) if heads else None}
    print(f"\nprobing, {total / 60:.1f} probe-minutes: head training {heads / 60:.1f}, the rest {outside / 60:.1f}")
    print(f"head training at the floor: {at_floor / 60:.1f} min ({heads / max(at_floor, 1e-9):.2f}x faster; "
          f"its matrix products alone {at_products / 60:.1f} min)")
    print(f"head training ran at {at_products / max(heads, 1e-9):.0%} of the rate its matrix products reach alone (goal: 70%)")
    print(f"the stage at that floor: {stage_floor / 60:.1f} min against the goal of {args.goal_minutes:g}")
    print("at the floor, " + ("the stage meets the goal" if needed <= 1 else
                              f"head training needs {needed:.2f}x fewer head-epoch positions to meet the goal"
                              if needed != float("inf") else "the time outside head training is already over the goal"))
    if args.out:
        atomic_write_json(args.out, {
            "command": portable_command("benchmarks/probe_stage_floor.py", sys.argv[1:] if argv is None else argv),
            "note": args.note, "threads": args.threads, "batch": BATCH,
            "matmul_dtype": str(dtype).removeprefix("torch."), "shapes": list(shapes.values()), "probes": rows,
            "summary": summary, "provenance": provenance()})
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
