"""Probe-seed reliability of head recipes, trained on one set of frozen features per run.

    python -m studies.probe.reliability [RUN_DIR ...] [--runs-dir runs/cpu/training] [--base v4|current]
        [--variants base,avg,cool2+avg,linear+avg,linear+cool2+avg] [--reference VARIANT] [--out results/probe/reliability.json]

The probe-seed reliability is the correlation over the top-N tokens between the scores of two head
sets that differ only in their seed (`probe.replicate_table`); the goal is 0.95.
For each run (default: the `cpu` profile's gpt-s1 and bert-base-s1) the towers run once over the
probe's training and held-out blocks (`probe.training.training_features`); every variant of the head
recipe then trains two head sets on those features, and one pass over the validation text scores
all of them. Printed per run and variant: head-training minutes, epochs, each tower head's
validation loss (set 1), the reliability in both score variants, and the agreement of its scores
(set 1) with those of the `--reference` variant (default: the last one). Two seeds of one recipe can
agree with each other and both be off the optimum in the same way (an optimiser that stalls where
the problem is badly conditioned); a longer, better-conditioned reference recipe shows that.

Variants (combined with "+"), each a change to a base recipe (`--base`): `v4`, the profile's
`ProbeConfig` with the tied head, a one-epoch cool-down and no averaging (probe version 4's default;
`linear+cool2+avg` on it is version 6's default), or `current`,
the profile's probe as it is.
  base            the base as it is
  tied            GELU and LayerNorm before the tied decoder (`head="tied"`; the `v4` base has it)
  cool1, cool2, cool3  the rate falls to 0 over one (two, three) epochs after the plateau (`cooldown_epochs`)
  avg             the heads end at the average of their weights over the cool-down (`cooldown_average`)
  lr1e-3, lr1e-2  peak rate 1e-3 (1e-2)
  batch4k         4,096 positions per step (the rate unchanged)
  cool0           no cool-down: stop at the first plateau
  linear          the linear read-out before the tied decoder (`head="linear"`: a concave likelihood)
  white, nowhite  the heads train on whitened features, folded back (`precondition="whiten"`), or on the features as they are
  tol5e-4         a plateau is an epoch that improves no head by more than 0.0005 nats (default 0.005)
  drops2          trained longer: the first two plateaus (tolerance 0.001) divide the rate by 5, the third starts the cool-down
  wd0, wd1e-2     no weight decay (the maximum-likelihood head), or AdamW's decay of 0.01
  unigram         each head's output bias starts at the log unigram frequency of the training split
                  (add-one), not at 0: the heads start near the unigram loss (not a `ProbeConfig` field:
                  the benchmark sets it on the fresh heads; a test of whether it saves epochs)
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, replace
from pathlib import Path

import torch

BASES = {"v4": {"head": "tied", "cooldown_epochs": 1, "cooldown_average": False},  # probe version 4's default
         "current": {}}                                                                                # the profile's probe
CHANGES = {"base": {}, "tied": {"head": "tied"}, "cool1": {"cooldown_epochs": 1}, "cool2": {"cooldown_epochs": 2}, "cool3": {"cooldown_epochs": 3},
           "avg": {"cooldown_average": True}, "lr1e-3": {"lr": 1e-3}, "lr1e-2": {"lr": 1e-2}, "batch4k": {"batch_size": 4096},
           "linear": {"head": "linear"}, "cool0": {"cooldown_epochs": 0},
           "white": {"precondition": "whiten"}, "nowhite": {"precondition": "none"}, "tol5e-4": {"tol": 5e-4},
           "drops2": {"lr_drops": 2, "tol": 1e-3}, "wd0": {"weight_decay": 0.0}, "wd1e-2": {"weight_decay": 0.01},
           "unigram": {}}  # the bias start: `unigram_bias`


@contextmanager
def unigram_bias(counts):
    """While active, `train_heads` starts every head's output bias at log((count + 1) / total) of `counts`."""
    import twotower_lib.probe.training as pt

    original = pt.new_heads

    def new_heads(model, cfg, seeds):
        heads = original(model, cfg, seeds)
        logp = torch.log(torch.tensor(counts, dtype=torch.float32) + 1)
        with torch.no_grad():
            for head in heads:
                head.decoder_weights()[1].copy_(logp - torch.logsumexp(logp, 0))
        return heads

    pt.new_heads = new_heads
    try:
        yield
    finally:
        pt.new_heads = original


def variant_config(base, name: str):
    changes = {}
    for part in name.split("+"):
        if part not in CHANGES:
            raise SystemExit(f"unknown variant part {part!r}; choose from {sorted(CHANGES)}")
        changes.update(CHANGES[part])
    return replace(base, replicate=True, **changes).validate()


def measure_run(run: Path, base, variants: list[str], top_n: int, reference: str) -> list[dict]:
    from twotower_lib.analysis.correlation import SCORE_COLUMNS
    from twotower_lib.analysis.uncertainty import same_run_agreement
    from twotower_lib.artifacts import read_json, sha256_file
    from twotower_lib.data import load_prepared
    from twotower_lib.models import load_model, weights_path
    from twotower_lib.preference import order_towers, preference_table
    from twotower_lib.probe.run import head_seed_of
    from twotower_lib.probe.training import score_validation, train_heads, training_features

    model, _ = load_model(run)
    for p in model.parameters():
        p.requires_grad_(False)
    data = load_prepared(read_json(run / "config.json")["data"]["path"])
    seed = head_seed_of(sha256_file(weights_path(run, None)), base.seed)
    t0 = time.perf_counter()
    feats = training_features(model, data, base, seed, show=False)
    print(f"{run.name}: features of {len(feats.labels)} positions in {(time.perf_counter() - t0) / 60:.1f} min", flush=True)
    sets, rows = [], []
    for name in variants:
        cfg = variant_config(base, name)
        t0 = time.perf_counter()
        with unigram_bias(data.counts) if "unigram" in name.split("+") else nullcontext():
            trained, record = train_heads(model, data, cfg, show=False, head_seed=seed, features=feats)
        rows.append({"run": run.name, "variant": name, "minutes": round((time.perf_counter() - t0) / 60, 2),
                     "epochs": record["epochs"], "heldout_curve": [c["heldout_loss"] for c in record["curve"]],
                     "config": asdict(cfg)})
        sets += trained
        print(f"  {name}: {rows[-1]['minutes']} min, {record['epochs']} epochs", flush=True)
    sums, _ = score_validation(model, sets, data, base, show=False)
    tokens = data.tokenizer.convert_ids_to_tokens(list(range(data.vocab_size)))
    firsts = []
    for i, row in enumerate(rows):
        main, rep = sums[2 * i], sums[2 * i + 1]
        primary, secondary = order_towers(main.p.mean(axis=0))
        tables = [preference_table(s, primary, secondary, data.vocab_size, data.counts, tokens) for s in (main, rep)]
        firsts.append(tables[0])
        row["val_loss"] = [round(float(-main.logp[:, j].mean()), 4) for j in range(main.logp.shape[1])]
        row["reliability"] = {c: round(float(same_run_agreement(*tables, data.counts, top_n, c)), 4)
                              for c in SCORE_COLUMNS}
    for row, table in zip(rows, firsts):
        row["reference"] = reference
        row["agreement"] = {other["variant"]: {c: round(float(same_run_agreement(table, t, data.counts, top_n, c)), 4)
                                               for c in SCORE_COLUMNS}
                            for other, t in zip(rows, firsts) if other is not row}
        row["agreement_with_reference"] = ({c: 1.0 for c in SCORE_COLUMNS} if row["variant"] == reference
                                           else row["agreement"][reference])
    return rows


def main() -> None:
    from twotower_lib.artifacts import atomic_write_json, portable_command, provenance
    from twotower_lib.book.profiles import get_profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--runs-dir", type=Path, default=Path("runs/cpu/training"))
    ap.add_argument("--variants", default="base,avg,cool2+avg,linear+avg,linear+cool2+avg")
    ap.add_argument("--base", choices=sorted(BASES), default="v4", help="the recipe the variants change")
    ap.add_argument("--reference", default=None, help="the variant whose scores every variant's are compared with (default: the last)")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--top-n", type=int, default=None, help="tokens the reliability is computed over (default: the profile's)")
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    profile = get_profile(args.profile)
    base = profile.probe_config(**BASES[args.base])
    runs = args.runs or [args.runs_dir / n for n in ("gpt-s1", "bert-base-s1")]
    variants = args.variants.split(",")
    reference = args.reference or variants[-1]
    if reference not in variants:
        raise SystemExit(f"--reference {reference!r} is not one of --variants {variants}")
    rows = []
    for run in runs:
        rows += measure_run(run, base, variants, args.top_n or profile.analysis.top_n, reference)
        if args.out:
            atomic_write_json(args.out, {"profile": args.profile, "top_n": args.top_n or profile.analysis.top_n, "rows": rows,
                                         "command": portable_command("studies/probe/reliability.py", sys.argv[1:]),
                                         "provenance": provenance()})
    print(f"{'run':14} {'variant':22} {'min':>5} {'ep':>3} {'val loss per tower':>20} {'rel Eq.4':>9} {'rel mean log':>12}"
          f" {'vs ref Eq.4':>11} {'vs ref mean log':>15}")
    for r in rows:
        rel, agree = list(r["reliability"].values()), list(r["agreement_with_reference"].values())
        print(f"{r['run']:14} {r['variant']:22} {r['minutes']:5.1f} {r['epochs']:3d} "
              f"{' / '.join(f'{v:.3f}' for v in r['val_loss']):>20} {rel[0]:9.3f} {rel[1]:12.3f} {agree[0]:11.3f} {agree[1]:15.3f}")


if __name__ == "__main__":
    main()
