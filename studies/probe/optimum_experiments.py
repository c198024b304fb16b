"""How far the probe's heads are from the optimum of their objective, and what they disagree about.

    python -m studies.probe.optimum_experiments [RUN_DIR] [--recipes adam,adam-whiten,lbfgs] [--ridge 1e-3] [--max-iter 40]
        [--out results/probe/optimum/NAME.json]

On one frozen run (default: the `cpu` profile's gpt-s1) the towers run once over the probe's training
and held-out blocks; then each recipe trains one set of heads:
- `adam`, `adam-whiten`: the profile's head recipe (mini-batch AdamW, held-out stop) on the features as
  they are and on whitened features (`precondition="whiten"`);
- `lbfgs`: the full-batch preconditioned L-BFGS of `studies.probe.optimum`, from the unigram
  model, on the mean cross-entropy + (ridge/2)|B|² (B the read-out of the whitened features);
- `RECIPE+calibrated`: RECIPE's heads with their biases fitted to the counts (`calibrate_biases`);
  `RECIPE+refined`: RECIPE's heads taken on by the same L-BFGS as `lbfgs` (`+refinedN`: N iterations,
  `+refinedN@R`: with ridge R instead of --ridge, `+refinedN@R/P` and penalty P, `+refinedN@R/P/Q` and a bias
  ridge Q towards the smoothed unigram log-frequencies; the certificate then measures the last step's objective);
  steps chain (`adam+refined5+refined5`: five more from the five-iteration heads, L-BFGS's memory restarted),
  and a chain whose start was computed by an earlier recipe continues from it;
- `half1:RECIPE`, `half2:RECIPE`: trained on one of two disjoint random halves of the positions.
Each head set's certificate (`optimum.certificate`: the largest and median relative gap between a
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
    from twotower_lib.probe.training import HeadFeatures

    if part not in ("half1", "half2"):
        raise SystemExit(f"unknown part {part!r}; use half1: or half2:")
    order = torch.randperm(len(feats.labels), generator=torch.Generator().manual_seed(0))
    idx = order[: len(order) // 2] if part == "half1" else order[len(order) // 2:]
    idx = idx.sort().values
    return HeadFeatures(feats.train[idx], feats.labels[idx], feats.held, feats.held_labels)


def heldout_by_target(heads, feats, counts, top_n: int) -> dict[str, list[float]]:
    """Each head's held-out loss over the positions whose target is one of the `top_n` most frequent
    tokens (where the scores are read) and over the rest: where a head that fits its training positions
    better loses on held-out text."""
    import numpy as np

    top = torch.from_numpy(np.argsort(-np.asarray(counts), kind="stable")[:top_n].copy())
    frequent = torch.isin(feats.held_labels, top)
    out: dict[str, list[float]] = {"top_n": [], "rest": []}
    with torch.no_grad():
        for j, head in enumerate(heads):
            nll = torch.cat([-torch.log_softmax(head(feats.held[r:r + 4096, j].float()).float(), dim=1)
                             .gather(1, feats.held_labels[r:r + 4096, None])[:, 0]
                             for r in range(0, len(feats.held_labels), 4096)])
            out["top_n"].append(round(float(nll[frequent].mean()), 5))
            out["rest"].append(round(float(nll[~frequent].mean()), 5))
    out["share_top_n"] = round(float(frequent.float().mean()), 4)
    return out


def refine_set(heads, feats, rcfg, from_unigram: bool = False) -> list[dict]:
    """Refine every head of a set in place (head j reads tower j); the records without the certificates."""
    from studies.probe.optimum import refine_head

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
    from twotower_lib.probe.run import head_seed_of
    from studies.probe.optimum import RefineConfig, calibrate_biases, certificate
    from twotower_lib.probe.training import (_heldout_losses, new_heads, score_validation, train_heads,
                                             training_features)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", type=Path, default=Path("runs/cpu/training/gpt-s1"))
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--ridge", type=float, default=RefineConfig.ridge)
    ap.add_argument("--max-iter", type=int, default=40)
    ap.add_argument("--precision", default="fp32", help="the refinement passes' matmuls: fp32 or bf16")
    ap.add_argument("--penalty", default=RefineConfig.penalty, help="the ridge's penalty: readout (|B|²) or logit (tr(Bᵀ G B))")
    ap.add_argument("--recipes", default="adam,adam-whiten,lbfgs",
                    help="adam, adam-whiten, lbfgs; '+calibrated' after one: its biases then fitted to the counts, '+refined': then refined as lbfgs is; "
                         "'half1:' or 'half2:' before one: trained on one of two disjoint random halves of the positions")
    ap.add_argument("--train-positions", type=int, default=None,
                    help="predicted positions the heads train on (default: the profile's); the held-out share scales with it")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    profile = get_profile(args.profile)
    base = profile.probe_config()
    if args.train_positions:
        base = replace(base, train_positions=args.train_positions).validate()
    rcfg = RefineConfig(max_iter=args.max_iter, ridge=args.ridge, precision=args.precision, penalty=args.penalty).validate()
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
        steps = name.split("+")
        part, _, method = steps[0].rpartition(":")
        train_feats = halves(feats, part) if part else feats
        done = next((cut for cut in range(len(steps), 0, -1) if "+".join(steps[:cut]) in trained_sets), 0)
        if done:                                    # continue from the longest chain already computed
            heads = copy.deepcopy(trained_sets["+".join(steps[:done])])
        elif method == "lbfgs":
            heads = new_heads(model, base, [seed])
            row["refine"] = [refine_set(heads, train_feats, rcfg, from_unigram=True)]
        else:
            trained, record = train_heads(model, data, replace(base, precondition="whiten" if method.endswith("whiten") else "none"),
                                          show=False, head_seed=seed, features=train_feats)
            heads, row["epochs"] = trained[0], record["epochs"]
        if not done:
            trained_sets[steps[0]] = copy.deepcopy(heads)
        cert_cfg = rcfg
        for i in range(max(done, 1), len(steps)):
            step = steps[i]
            if step == "calibrated":
                row["calibration"] = [calibrate_biases(heads[j], train_feats.train[:, j], train_feats.labels) for j in range(k)]
            elif step.startswith("refined") and (step[7:].partition("@")[0] or "0").isdigit():
                # the same objective as lbfgs, from the heads so far; refinedN: N iterations (L-BFGS restarts its
                # memory); refinedN@R: with ridge R; refinedN@R/P: and penalty P; refinedN@R/P/Q: and a bias
                # ridge Q towards the smoothed unigram log-frequencies
                it, _, ridge = step[7:].partition("@")
                ridge, _, penalty = ridge.partition("/")
                penalty, _, bias_ridge = penalty.partition("/")
                scfg = replace(rcfg, max_iter=int(it or rcfg.max_iter), ridge=float(ridge or rcfg.ridge),
                               penalty=penalty or rcfg.penalty,
                               **({"bias_ridge": float(bias_ridge), "bias_prior": "unigram"} if bias_ridge else {})).validate()
                row.setdefault("refine", []).append(refine_set(heads, train_feats, scfg))
                cert_cfg = scfg
            else:
                raise SystemExit(f"unknown step {step!r} in recipe {name!r}")
            trained_sets["+".join(steps[:i + 1])] = copy.deepcopy(heads)
        row["minutes"] = round((time.perf_counter() - t0) / 60, 2)
        row["certificate"] = [certificate(heads[j], train_feats.train[:, j], train_feats.labels, cert_cfg) for j in range(k)]
        row["heldout_loss"] = [round(x, 5) for x in _heldout_losses(heads, feats.held, feats.held_labels, k, cpu)]
        row["heldout_loss_by_target"] = heldout_by_target(heads, feats, data.counts, profile.analysis.top_n)
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
                                                                                  profile.analysis.top_n, c)), 4)
                                              for c in SCORE_COLUMNS}
                            for j, other in enumerate(rows) if j != i}
    if args.out:
        atomic_write_json(args.out, {"run": args.run.name, "profile": args.profile, "top_n": profile.analysis.top_n,
                                     "train_positions": int(len(feats.labels)), "heldout_positions": int(len(feats.held_labels)),
                                     "refine": {"ridge": rcfg.ridge, "bias_ridge": rcfg.bias_ridge, "gtol": rcfg.gtol,
                                                "max_iter": rcfg.max_iter, "precision": rcfg.precision,
                                                "penalty": rcfg.penalty},
                                     "rows": rows, "command": portable_command("studies/probe/optimum_experiments.py", sys.argv[1:]),
                                     "provenance": provenance()})
    for row in rows:
        cert = " | ".join(f"loss {c['loss']:.4f} bias gap max {c['bias_residual_max']:.3f} median {c['bias_residual_median']:.4f}"
                          for c in row["certificate"])
        print(f"{row['recipe']:12} {row['minutes']:5.1f} min  held-out {row['heldout_loss']}  {cert}")
        for other, a in row["agreement"].items():
            print(f"    vs {other:12} " + "  ".join(f"{c} r = {v:.3f}" for c, v in a.items()))


if __name__ == "__main__":
    main()
