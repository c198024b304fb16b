"""Probing (Section 3.2, Fig. 2): freeze the trained model, train one fresh head per tower to
convergence, score every validation token with each head, and write the preference artifact.

A number is only as good as what measured it, so the probe is built to be checked:

- **Features, once.** The embedding and towers are frozen, so the towers run once over the probe's
  training blocks and the features of the predicted positions are cached (bf16). `features` picks
  what the heads read: `joint_ln` (each tower's slice of the frozen joint LayerNorm over the
  concatenation: what the cooperative decoder read, and what the authors' heads read) or `raw`.
- **Trained to convergence, and shown to be.** A held-out share of the training blocks decides when
  to stop: when no head's held-out loss improves by more than `tol` nats, the learning rate falls
  linearly to zero over `cooldown_epochs`, the heads end at the average of their weights over that
  cool-down (`cooldown_average`), and training stops (or at `max_epochs`). The curve goes into the
  manifest. Why: AdamW stopped at a constant rate leaves a random draw around the optimum.
- **Whitened features** (`precondition="whiten"`, the default; `"none"` trains on the features as
  they are). Each head trains on its tower's features whitened with their mean and Cov^(-1/2)
  (`probe.whitening.FeatureWhitening`) and is folded back into a head on the raw features, so nothing
  downstream changes. A converged probe would give the same scores either way; a probe stopped on a
  plateau does not, and whitened coordinates land nearest the head defined by an objective (below).
- **A step after training, optionally** (`refine`): a callable that takes the trained heads further on
  the same features before they are scored (the probe study's full-batch L-BFGS to a defined optimum);
  its `identity` joins the probe's, and its record goes into the manifest.
- **The head of Eq. 2, read out linearly** (`head="linear"`, the default): a linear map of the
  tower's features whose output vectors are the frozen input embedding, plus a bias per token. Its
  likelihood is concave, so two head seeds train towards one optimum. `"tied"` puts GELU and
  LayerNorm before the embedding (the cooperative decoder's shape); `"mlp"` is the authors' untied
  decoder.
- **BERT at [MASK].** Eq. 1 defines BERT's state at a predicted position with [MASK] there, so by
  default (`bert_events="mask"`) every probed position has [MASK] at the input; `"corrupt"` keeps
  the training corruption (80/10/10), in which the unchanged tenth shows the answer.
- **Fast where it is exact.** The linear head's logits are computed from the H-wide tower state
  (`ProbeHead.folded`), and the softmax with its gradient runs a block of rows at a time in cache
  (`heads.LinearCrossEntropy`). Where the heads train in bf16, held-out and validation positions
  take the log-sum-exp from bf16-input logits while the true token's logit stays exact fp32. The
  manifest records the dtypes that ran (`resolved_precision`).
- **A second head seed** (`replicate=True`): a second set of heads, differing only in the seed,
  trains on the same features; its scores give the probe-seed reliability.

`ProbeConfig.legacy()` is the earlier recipe and `ProbeConfig.as_released()` the recipe of the
authors' released code, kept for comparison. What the probe studies measured, and why the defaults
are what they are: `results/probe/README.md`.

Objective per model type is the model's own (`make_batch`): next token for GPT, cloze for ELMo,
masked tokens for BERT. Special tokens ([SEP] between documents, ...) are never scored.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from twotower_lib.artifacts import provenance, read_json, sha256_file
from twotower_lib import config_cli
from twotower_lib.config_cli import add_config_arguments
from twotower_lib.errors import UserError
from twotower_lib.models import load_model, snapshot_tokens, weights_path
from twotower_lib.preference import (TowerSums, document_stats, load_artifact, load_positions, order_towers,
                                     preference_table, save_artifact)
from twotower_lib.probe.config import BERT_EVENTS, FEATURES, HEAD_KINDS, PRECONDITIONS, PROBE_VERSION, ProbeConfig, settled
from twotower_lib.probe.precision import resolved_precision
from twotower_lib.probe.training import HeadRefiner, score_validation, train_heads


def probe_dir(run_dir: Path, snapshot: str | int | None) -> Path:
    if snapshot is None:
        return run_dir / "probe"
    from twotower_lib.models import snapshot_name

    name = snapshot_name(snapshot) if isinstance(snapshot, int) else str(snapshot).removesuffix(".safetensors")
    return run_dir / "probes" / Path(name).name


def head_seed_of(weights_sha256: str, seed: int) -> int:
    """The probe's head seed for one model's weights.

    With one probe seed for every model, head j of run A and head j of run B would start from the
    same weights and see positions in the same order; whatever of that start survives training is
    shared between the two runs *by tower index*: it makes the scores of two untrained models
    correlate and inflates trained pairs whose primary towers have the same index. Deriving the seed from the weights keeps every probe deterministic and the
    heads of different models independent."""
    return (seed * 1_000_003 + int(weights_sha256[:15], 16)) % 2**62


def probe_run(run_dir: str | os.PathLike, cfg: ProbeConfig | None = None, *, snapshot: str | int | None = None,
              data_dir: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
              force: bool = False, show: bool = True, refine: HeadRefiner | None = None) -> Path:
    """Probe one trained run (or one of its snapshots) and write the preference artifact; return its path.

    Up to date (same run weights, data, probe config and `refine`) -> nothing is recomputed.
    """
    from safetensors.torch import save as save_safetensors

    cfg = (cfg or ProbeConfig()).validate()
    run_dir = Path(run_dir)
    model, mcfg, data, run_config = _load_run(run_dir, snapshot, data_dir)
    out = Path(out) if out else probe_dir(run_dir, snapshot)
    weights = weights_path(run_dir, snapshot)
    identity = probe_identity(cfg, sha256_file(weights), data.data_hash, refine)
    dtypes = resolved_precision(cfg, next(model.parameters()).device)
    if not force and _up_to_date(out, identity, dtypes):
        if show:
            print(f"probe up to date: {out}")
        return out

    head_seed = head_seed_of(identity["weights_sha256"], cfg.seed)
    t0 = time.time()
    for p in model.parameters():
        p.requires_grad_(False)
    head_sets, record = train_heads(model, data, cfg, show, head_seed=head_seed, refine=refine)
    t_train = time.time() - t0
    all_sums, coop_logp = score_validation(model, head_sets, data, cfg, show)
    sums, k = all_sums[0], all_sums[0].p.shape[1]
    same = ~np.isnan(coop_logp)     # every loss over the positions the cooperative model was scored at
    val_loss, impossible = validation_losses(sums, coop_logp, f"probe {run_dir}", dtypes["scoring"])
    run_manifest = read_json(run_dir / "manifest.json") if (run_dir / "manifest.json").exists() else {}
    manifest = {
        "identity": identity,
        "run": str(run_dir), "snapshot": None if snapshot is None else str(snapshot),
        "model_config": mcfg.to_dict(), "probe_config": asdict(cfg), "head_seed": head_seed,
        "seed": run_config.get("train", {}).get("seed"),
        # a snapshot: the tokens seen when it was written, not the run's final count
        "tokens_seen": run_manifest.get("tokens_seen") if snapshot is None else snapshot_tokens(weights),
        "data_path": str(data.path), "data_hash": data.data_hash,
        "tokenizer_sha256": data.manifest["tokenizer_sha256"],
        "val_loss": val_loss,
        "impossible_logp": impossible,
        "heads": record,
        "seconds": {"train_heads": round(t_train, 2), "total": round(time.time() - t0, 2)},
        "resolved_precision": dtypes,
        "provenance": provenance(),
    }
    if cfg.replicate:
        rep = all_sums[1]
        manifest["replicate"] = {"val_loss": {f"tower{j}_head": float(-rep.logp[same, j].mean()) for j in range(k)},
                                 "ordering": [int(j) for j in order_towers(rep.p.mean(axis=0))] if k == 2 else [0]}
    head_state = {f"set{s}.tower{j}.{name}": t.contiguous() for s, heads in enumerate(head_sets)
                  for j, h in enumerate(heads) for name, t in h.state_dict().items()}
    write_preference(out, sums, data, manifest, {"heads.safetensors": save_safetensors(head_state)}, show,
                     replicate=all_sums[1] if cfg.replicate else None)
    return out


def validation_losses(sums: TowerSums, coop_logp: np.ndarray, where: str, scoring: str) -> tuple[dict, dict]:
    """The cooperative model's and each tower head's validation loss over the same positions (those the
    cooperative model was scored at, so that they compare), and each head's share of impossible
    log-probabilities (above 0: its logits outran the scoring dtype, or it diverged), warned about."""
    same = ~np.isnan(coop_logp)
    heads = range(sums.p.shape[1])
    val_loss = {"cooperative": float(-coop_logp[same].mean()),
                **{f"tower{j}_head": float(-sums.logp[same, j].mean()) for j in heads}}
    impossible = {f"tower{j}_head": float((sums.logp[same, j] > 0).mean()) for j in heads}
    for name, share in impossible.items():
        if share > 0:
            warnings.warn(f"{where}: {100 * share:.2g}% of {name}'s validation log-probabilities are above 0 "
                          f"({scoring} scoring): its logits are too large for their precision and its scores are "
                          f"not probabilities (its validation loss: {val_loss[name]:.2f} nats)")
    return val_loss, impossible


def _load_run(run_dir: Path, snapshot: str | int | None, data_dir: str | os.PathLike | None):
    """The frozen model (on the GPU where there is one), its config, the prepared data it was trained on
    (checked by hash and vocabulary) and the run's config.json."""
    from twotower_lib.data import load_prepared

    model, mcfg = load_model(run_dir, snapshot)
    if torch.cuda.is_available():
        model = model.cuda()
    run_config = read_json(run_dir / "config.json")
    data_path = Path(data_dir) if data_dir else Path(run_config["data"]["path"])
    data = load_prepared(data_path)
    if data.data_hash != run_config["data"]["data_hash"]:
        raise UserError(f"the prepared data at {data_path} (hash {data.data_hash[:12]}) is not the data run "
                        f"{run_dir} was trained on (hash {run_config['data']['data_hash'][:12]}); pass the "
                        "right directory with --data")
    if mcfg.vocab_size != data.vocab_size:
        raise UserError(f"{run_dir} has vocabulary {mcfg.vocab_size} but {data_path} has {data.vocab_size}")
    return model, mcfg, data, run_config


# A replicate set trains on its own schedule (`train_heads`), so the first set of a probe is the same with or without
# it: a probe with a replicate whose identity lacks this trained both sets on one schedule, and is made again.
REPLICATE_HEADS = "own schedule"


def probe_identity(cfg: ProbeConfig, weights_sha256: str, data_hash: str, refine: HeadRefiner | None = None) -> dict:
    """What makes two probes the same probe: the version, the run's weights, the data, the whole config, the
    refinement, and for a probe with a replicate set how that set trains."""
    return {"version": PROBE_VERSION, "weights_sha256": weights_sha256, "data_hash": data_hash, "probe": asdict(cfg),
            **({"refine": refine.identity} if refine is not None else {}),
            **({"replicate_heads": REPLICATE_HEADS} if cfg.replicate else {})}


def _up_to_date(out: Path, identity: dict, precision: dict[str, str]) -> bool:
    """Whether `out` holds a finished probe with this identity, computed in the dtypes this one would use
    (`precision`; a manifest that does not record them counts as alike; an unreadable manifest: no)."""
    if not (out / "manifest.json").exists():
        return False
    try:
        manifest = read_json(out / "manifest.json")
    except UserError:
        return False
    found = manifest.get("identity") or {}
    return ({**found, "probe": settled(found.get("probe", {}))} == identity
            and manifest.get("resolved_precision", precision) == precision)


def _positions_npz(sums: TowerSums, replicate: TowerSums | None = None) -> bytes:
    import io

    buf = io.BytesIO()
    arrays = {"token_ids": sums.token_ids, "doc_ids": sums.doc_ids, "logp": sums.logp}
    if replicate is not None:
        arrays["logp_replicate"] = replicate.logp
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def write_preference(out: Path, sums: TowerSums, data, manifest: dict, extra: dict[str, bytes],
                     show: bool = True, replicate: TowerSums | None = None) -> Path:
    """Order the towers (Eq. 3), compute the scores (Eq. 4) and write the artifact.

    With one tower (a single-tower run) only the per-position results are written; two of those
    become a preference artifact with `pair_runs` (the independent-pairs control). The order is
    recorded by both rules (mean probability, Eq. 3; mean log-probability), with whether they agree.
    """
    k = sums.p.shape[1]
    mean_p, mean_logp = sums.p.mean(axis=0), sums.logp.mean(axis=0)
    extra = {**extra, "positions.npz": _positions_npz(sums, replicate)}
    tokens = data.tokens
    if k == 1:  # the table then compares the tower with itself (scores 0): only positions.npz matters
        sums = TowerSums(sums.token_ids, sums.doc_ids, np.repeat(sums.p, 2, 1), np.repeat(sums.logp, 2, 1))
        primary = secondary = 0
    elif k == 2:
        primary, secondary = order_towers(mean_p)
    else:
        raise UserError(f"preference scores are defined for two towers; this run has {k}")
    table = preference_table(sums, primary, secondary, data.vocab_size, data.counts, tokens)
    manifest = {**manifest, "towers": k,
                "ordering": {"primary_tower": int(primary), "secondary_tower": int(secondary),
                             "mean_p": [float(x) for x in mean_p],
                             "margin": float(mean_p[primary] - mean_p[secondary]),
                             "mean_logp": [float(x) for x in mean_logp],
                             "rules_agree": bool(k == 1 or order_towers(mean_logp)[0] == primary)},
                "scored_positions": int(len(sums.token_ids)), "scored_tokens": int((table["count"] > 0).sum())}
    save_artifact(out, table, document_stats(sums, primary, secondary), manifest, extra)
    if show:
        vl = manifest.get("val_loss", {})
        print(f"probe -> {out}: primary = tower {primary} (mean p {mean_p[primary]:.4f} vs {mean_p[secondary]:.4f}); "
              f"validation loss {', '.join(f'{k_} {v:.3f}' for k_, v in vl.items())}; "
              f"{manifest['scored_tokens']} tokens scored")
    return out


def pair_runs(probe_a: str | os.PathLike, probe_b: str | os.PathLike, out: str | os.PathLike,
              show: bool = True) -> Path:
    """Score two independently trained single-tower runs as if they were the two towers of one model.

    The control for 'is the pattern specific to cooperative training?': primary = the run with the
    higher average probability (Eq. 3), exactly as for two towers.
    """
    from twotower_lib.data import load_prepared

    a, b = load_artifact(probe_a), load_artifact(probe_b)
    for r in (a, b):
        if r.manifest.get("towers") != 1:
            raise UserError(f"{r.path} is not a single-tower probe (towers = {r.manifest.get('towers')})")
    if a.manifest["data_hash"] != b.manifest["data_hash"]:
        raise UserError(f"{a.path} and {b.path} were probed on different data; they cannot be paired")
    sa, sb = load_positions(a.path), load_positions(b.path)
    if not (np.array_equal(sa.token_ids, sb.token_ids) and np.array_equal(sa.doc_ids, sb.doc_ids)):
        raise UserError(f"{a.path} and {b.path} scored different validation positions (different model type, "
                        "probe seed or eval_blocks); probe both with the same settings")
    sums = TowerSums(sa.token_ids, sa.doc_ids, np.concatenate([sa.p, sb.p], 1), np.concatenate([sa.logp, sb.logp], 1))
    data = load_prepared(a.manifest["data_path"])
    manifest = {"pair_of": [str(a.path), str(b.path)], "data_path": a.manifest["data_path"],
                "data_hash": a.manifest["data_hash"], "tokenizer_sha256": a.manifest["tokenizer_sha256"],
                "model_config": a.manifest["model_config"], "seed": [a.manifest.get("seed"), b.manifest.get("seed")],
                "val_loss": {"run_a_head": a.manifest["val_loss"]["tower0_head"],
                             "run_b_head": b.manifest["val_loss"]["tower0_head"]},
                "provenance": provenance()}
    return write_preference(Path(out), sums, data, manifest, {}, show)


# ---------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`probe`'s options: what to probe, one option per `ProbeConfig` field (`config_cli`; given ones are laid over
    the recipe), the recipe, and where the probe goes."""
    p.add_argument("run_dir", type=Path, help="a training run directory (from `train --out`)")
    p.add_argument("--snapshot", default=None, help="probe a weight snapshot (name like tokens-000001000000) instead of the final weights")
    p.add_argument("--all-snapshots", action="store_true", help="probe every snapshot of the run, then the final weights")
    p.add_argument("--data", default=None, help="prepared-data directory (default: the one the run was trained on)")
    add_config_arguments(p, ProbeConfig, unset=True, options={
        "head": {"choices": HEAD_KINDS}, "features": {"choices": FEATURES}, "bert_events": {"choices": BERT_EVENTS},
        "precondition": {"choices": PRECONDITIONS}})
    recipe = p.add_mutually_exclusive_group()
    recipe.add_argument("--legacy", action="store_true", help="the earlier probe recipe (raw, 80/10/10, 3 epochs), for comparison")
    recipe.add_argument("--as-released", action="store_true", help="the authors' released probe recipe (untied heads, "
                                                                   "80/10/10, linear schedule; ProbeConfig.as_released)")
    p.add_argument("--out", type=Path, default=None, help="where the probe goes (default: probing/ of the run)")
    p.add_argument("--force", action="store_true", help="recompute even if up to date")


def config_from_args(args: argparse.Namespace) -> ProbeConfig:
    """The `probe` command's config: the default recipe, `--legacy` or `--as-released`, with the options given."""
    base = ProbeConfig.legacy() if args.legacy else ProbeConfig.as_released() if args.as_released else ProbeConfig()
    return config_cli.config_from_args(ProbeConfig, args, base=base).validate()


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if args.all_snapshots and args.out:
        raise UserError("--out names one probe's folder; with --all-snapshots each snapshot's probe goes into "
                        "probing/ of the run (leave --out out)")
    if args.all_snapshots:
        from twotower_lib.models import list_snapshots

        for _, path in list_snapshots(args.run_dir):
            probe_run(args.run_dir, cfg, snapshot=path.stem, data_dir=args.data, force=args.force)
        if (args.run_dir / "model.safetensors").exists():
            probe_run(args.run_dir, cfg, data_dir=args.data, force=args.force)
        return 0
    probe_run(args.run_dir, cfg, snapshot=args.snapshot, data_dir=args.data, out=args.out, force=args.force)
    return 0
