"""How far the probe's heads are from the optimum of their objective, and what they disagree about.

    python benchmarks/probe_optimum.py [RUN_DIR] [--recipes adam,adam-whiten,lbfgs] [--ridge 1e-3] [--max-iter 40]
        [--out results/probe/optimum/NAME.json]

On one frozen run (default: the `cpu` profile's gpt-s1) the towers run once over the probe's training
and held-out blocks; then each recipe trains one set of heads:
- `adam`, `adam-whiten`: the profile's head recipe (mini-batch AdamW, held-out stop) on the features as
  they are and on whitened features (`precondition="whiten"`);
- `lbfgs`: the full-batch preconditioned L-BFGS of `twotower_lib.probe_optimum`, from the unigram
  model, on the mean cross-entropy + (ridge/2)|B|² (B the read-out of the whitened features);
- `RECIPE+calibrated`: RECIPE's heads with their biases fitted to the counts (`calibrate_biases`);
  `RECIPE+refined`: RECIPE's heads taken on by the same L-BFGS as `lbfgs`;
- `half1:RECIPE`, `half2:RECIPE`: trained on one of two disjoint random halves of the positions.
Each head set's certificate (`probe_optimum.certificate`: the largest and median relative gap between a
token's predicted and observed count over its training positions, the preconditioned gradient) is
measured on the same objective; one pass over the validation text scores every set; printed and written:
minutes, held-out loss, certificate, and the agreement of every two recipes' scores (Pearson r over the
profile's top-N tokens, both score variants). Section 02 shows every file in results/probe/optimum/.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch


def halves(feats, part: str):
    """The training positions of one of two disjoint random halves (`half1`, `half2`; held-out positions shared):
    two heads of one recipe on the two halves differ only in their data, so their agreement is the part of
    the scores' noise that comes from the probe's finite training set."""
    from twotower_lib.probe_training import HeadFeatures

    if part not in ("half1", "half2"):
        raise SystemExit(f"unknown part {part!r}; use half1: or half2:")
    order = torch.randperm(len(feats.labels), generator=torch.Generator().manual_seed(0))
    idx = order[: len(order) // 2] if part == "half1" else order[len(order) // 2:]
    idx = idx.sort().values
    return HeadFeatures(feats.train[idx], feats.labels[idx], feats.held, feats.held_labels)


def refine_set(heads, feats, rcfg, from_unigram: bool = False) -> list[dict]:
    """Refine every head of a set in place (head j reads tower j); the records without the certificates."""
    from twotower_lib.probe_optimum import refine_head

    records = []
    for j, head in enumerate(heads):
        r = refine_head(head, feats.train[:, j], feats.labels, rcfg, from_unigram=from_unigram, desc=f"tower {j}")
        records.append({key: r[key] for key in ("iterations", "passes", "stopped", "seconds", "loss_curve")})
    return records


def main() -> None:
    from twotower_lib.analysis.correlation import SCORE_COLUMNS
    from twotower_lib.analysis.uncertainty import same_run_agreement
    from twotower_lib.artifacts import atomic_write_json, portable_command, provenance, read_json, sha256_file
    from twotower_lib.book.profiles import get_profile
    from twotower_lib.data import load_prepared
    from twotower_lib.models import load_model, weights_path
    from twotower_lib.preference import order_towers, preference_table
    from twotower_lib.probe import head_seed_of
    from twotower_lib.probe_optimum import RefineConfig, calibrate_biases, certificate
    from twotower_lib.probe_training import (_heldout_losses, new_heads, score_validation, train_heads,
                                             training_features)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", type=Path, default=Path("runs/cpu/training/gpt-s1"))
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--ridge", type=float, default=RefineConfig.ridge)
    ap.add_argument("--max-iter", type=int, default=40)
    ap.add_argument("--recipes", default="adam,adam-whiten,lbfgs",
                    help="adam, adam-whiten, lbfgs; '+calibrated' after one: its biases then fitted to the counts, '+refined': then refined as lbfgs is; "
                         "'half1:' or 'half2:' before one: trained on one of two disjoint random halves of the positions")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    profile = get_profile(args.profile)
    base = profile.probe_config()
    rcfg = RefineConfig(max_iter=args.max_iter, ridge=args.ridge).validate()
    model, _ = load_model(args.run)
    for p in model.parameters():
        p.requires_grad_(False)
    data = load_prepared(read_json(args.run / "config.json")["data"]["path"])
    seed = head_seed_of(sha256_file(weights_path(args.run, None)), base.seed)
    t0 = time.perf_counter()
    feats = training_features(model, data, base, seed, show=False)
    k, cpu = model.cfg.towers, torch.device("cpu")
    print(f"{args.run.name}: features of {len(feats.labels)} positions in {(time.perf_counter() - t0) / 60:.1f} min", flush=True)
    rows, sets = [], []
    trained_sets = {}
    for name in args.recipes.split(","):
        t0 = time.perf_counter()
        row: dict = {"recipe": name}
        recipe, _, then = name.partition("+")
        part, _, method = recipe.rpartition(":")
        train_feats = halves(feats, part) if part else feats
        if recipe in trained_sets:                  # another step after a recipe already trained
            heads = copy.deepcopy(trained_sets[recipe])
        elif method == "lbfgs":
            heads = new_heads(model, base, [seed])
            row["refine"] = refine_set(heads, train_feats, rcfg, from_unigram=True)
        else:
            trained, record = train_heads(model, data, replace(base, precondition="whiten" if method.endswith("whiten") else "none"),
                                          show=False, head_seed=seed, features=train_feats)
            heads, row["epochs"] = trained[0], record["epochs"]
        trained_sets.setdefault(recipe, copy.deepcopy(heads))
        if then == "calibrated":
            row["calibration"] = [calibrate_biases(heads[j], train_feats.train[:, j], train_feats.labels) for j in range(k)]
        elif then == "refined":                     # the same objective as lbfgs, from this recipe's heads
            row["refine"] = refine_set(heads, train_feats, rcfg)
        elif then:
            raise SystemExit(f"unknown step {then!r} in recipe {name!r}")
        row["minutes"] = round((time.perf_counter() - t0) / 60, 2)
        row["certificate"] = [certificate(heads[j], train_feats.train[:, j], train_feats.labels, rcfg) for j in range(k)]
        row["heldout_loss"] = [round(x, 5) for x in _heldout_losses(heads, feats.held, feats.held_labels, k, cpu)]
        rows.append(row)
        sets.append(heads.eval())
        print(json.dumps({key: v for key, v in row.items() if key != "refine"}), flush=True)
    sums, _ = score_validation(model, sets, data, base, show=False)
    tokens = data.tokenizer.convert_ids_to_tokens(list(range(data.vocab_size)))
    tables = []
    for s, row in zip(sums, rows):
        primary, secondary = order_towers(s.p.mean(axis=0))
        tables.append(preference_table(s, primary, secondary, data.vocab_size, data.counts, tokens))
        row["val_loss"] = [round(float(-s.logp[:, j].mean()), 5) for j in range(k)]
        row["primary_tower"] = int(primary)
    for i, row in enumerate(rows):
        row["agreement"] = {other["recipe"]: {c: round(float(same_run_agreement(tables[i], tables[j], data.counts,
                                                                                  profile.top_n, c)), 4)
                                              for c in SCORE_COLUMNS}
                            for j, other in enumerate(rows) if j != i}
    if args.out:
        atomic_write_json(args.out, {"run": args.run.name, "profile": args.profile, "top_n": profile.top_n,
                                     "refine": {"ridge": rcfg.ridge, "bias_ridge": rcfg.bias_ridge, "gtol": rcfg.gtol,
                                                "max_iter": rcfg.max_iter},
                                     "rows": rows, "command": portable_command("benchmarks/probe_optimum.py", sys.argv[1:]),
                                     "provenance": provenance()})
    for row in rows:
        cert = " | ".join(f"loss {c['loss']:.4f} bias gap max {c['bias_residual_max']:.3f} median {c['bias_residual_median']:.4f}"
                          for c in row["certificate"])
        print(f"{row['recipe']:12} {row['minutes']:5.1f} min  held-out {row['heldout_loss']}  {cert}")
        for other, a in row["agreement"].items():
            print(f"    vs {other:12} " + "  ".join(f"{c} r = {v:.3f}" for c, v in a.items()))


if __name__ == "__main__":
    main()
