"""Probing (Section 3.2, Fig. 2): freeze the trained model, train one fresh head per tower,
score every validation token with each head, and write the preference artifact.

Why a cache: the embedding and towers are frozen, so their features never change while the heads
train. We run the towers once over the probe's training blocks, keep the features of the predicted
positions (in bf16), and train the heads from that cache for as many epochs as asked; the towers
never run again. `cache_features=False` recomputes them every epoch (the naive way; the benchmark
in `benchmarks/bench_probe.py` compares the two).

Objective per model type is the model's own (`make_batch`): next token for GPT, cloze for ELMo,
masked tokens for BERT. Special tokens ([SEP] between documents, ...) are never scored.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from twotower_lib.artifacts import provenance, read_json, sha256_file
from twotower_lib.errors import UserError
from twotower_lib.models import load_model, make_batch, snapshot_tokens, weights_path
from twotower_lib.models.heads import HEAD_KINDS, ProbeHead, token_logprob
from twotower_lib.preference import (TowerSums, document_stats, load_artifact, order_towers,
                                     preference_table, save_artifact)

IGNORE = -100
# Part of every probe's identity: a probe written by an older version is recomputed, not reused.
# 2: per-model head seeds (see probe_run).
PROBE_VERSION = 2


@dataclass(frozen=True)
class ProbeConfig:
    head: str = "mlp"               # "mlp" (the authors' head) or "tied" (decoder = frozen input embedding)
    train_blocks: int = 1024        # training blocks whose features train the heads
    train_positions: int | None = None  # or: predicted positions per epoch (BERT predicts ~15% of a block)
    epochs: int = 3
    batch_size: int = 1024          # positions per head-training step
    lr: float = 1e-3
    warmup_fraction: float = 0.1    # the authors warmed up probing for 1k steps
    weight_decay: float = 0.01
    eval_blocks: int | None = None  # validation blocks scored (None = all)
    bert_eval_passes: int = 7       # BERT: disjoint masking passes, so every validation token is scored once
    cache_features: bool = True
    forward_batch: int = 32         # blocks per tower forward pass
    precision: str = "auto"         # "auto" = bf16 autocast on GPUs and AMX CPUs (faster there), else fp32
    seed: int = 0

    def validate(self) -> "ProbeConfig":
        def bad(field: str, why: str) -> UserError:
            return UserError(f"invalid probe config: `{field}` = {getattr(self, field)!r} {why}")

        if self.head not in HEAD_KINDS:
            raise bad("head", f"is not one of {HEAD_KINDS}")
        for name in ("train_blocks", "epochs", "batch_size", "bert_eval_passes", "forward_batch"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise bad(name, "must be a positive integer")
        if self.train_positions is not None and (not isinstance(self.train_positions, int) or self.train_positions < 1):
            raise bad("train_positions", "must be a positive integer or None (use train_blocks)")
        if self.eval_blocks is not None and self.eval_blocks < 1:
            raise bad("eval_blocks", "must be a positive integer or None (all)")
        if not (self.lr > 0 and 0 <= self.warmup_fraction < 1 and self.weight_decay >= 0):
            raise bad("lr", "(with warmup_fraction in [0, 1) and weight_decay >= 0) must be positive")
        if self.precision not in ("auto", "fp32"):
            raise bad("precision", "must be 'auto' or 'fp32'")
        return self


def _device(model) -> torch.device:
    return next(iter(model.parameters()), torch.empty(0)).device


def _autocast(cfg: ProbeConfig, device: torch.device):
    """bf16 autocast on GPUs (fp16 where bf16 is missing) and on CPUs where it is faster (AMX); fp32 otherwise."""
    if device.type == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dtype, enabled=cfg.precision == "auto")
    from twotower_lib.train import cpu_bf16_pays_off

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.precision == "auto" and cpu_bf16_pays_off())


def _labels_without_specials(labels: torch.Tensor, special_ids: dict[str, int]) -> torch.Tensor:
    specials = torch.tensor(sorted(special_ids.values()), dtype=labels.dtype)
    return labels.masked_fill(torch.isin(labels, specials), IGNORE)


def _target_docs(model_type: str, docs: torch.Tensor) -> torch.Tensor:
    """Document of the token each position predicts (GPT predicts the next position's token)."""
    if model_type != "gpt":
        return docs
    out = docs.clone()
    out[:, :-1] = docs[:, 1:]
    return out


@torch.no_grad()
def extract_features(model, blocks: np.ndarray, special_ids: dict[str, int], vocab_size: int,
                     generator: torch.Generator, cfg: ProbeConfig, desc: str = "tower features",
                     show: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the frozen towers over `blocks` once: features of predicted positions (N, k, H) in bf16, labels (N,)."""
    feats, labels = [], []
    model_type, device = model.cfg.model_type, _device(model)
    for start in tqdm(range(0, len(blocks), cfg.forward_batch), desc=desc, unit="batch", disable=not show,
                      leave=False):
        ids = torch.from_numpy(np.asarray(blocks[start:start + cfg.forward_batch], dtype=np.int64))
        inputs, y = make_batch(model_type, ids, generator, special_ids, vocab_size)
        y = _labels_without_specials(y, special_ids)
        with _autocast(cfg, device):
            states = model.tower_states(inputs.to(device)).cpu()            # (B, T, k, H)
        keep = y != IGNORE
        feats.append(states[keep].to(torch.bfloat16))                       # (n, k, H), kept in host memory
        labels.append(y[keep])
    return torch.cat(feats), torch.cat(labels)


def _lr_lambda(total_steps: int, warmup_fraction: float):
    warmup = max(1, int(total_steps * warmup_fraction))

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))
    return f


def train_block_count(cfg: ProbeConfig, model_type: str, seq_len: int) -> int:
    """Training blocks the heads read: `train_blocks`, or enough blocks for `train_positions`
    predicted positions (BERT predicts only its masked ~15%, so it needs ~7x the blocks: equal
    positions give every family's heads the same number of examples and optimiser steps)."""
    if cfg.train_positions is None:
        return cfg.train_blocks
    per_block = seq_len * (0.15 if model_type == "bert" else 1.0)
    return max(1, math.ceil(cfg.train_positions / per_block))


def train_heads(model, data, cfg: ProbeConfig, show: bool = True,
                head_seed: int | None = None) -> tuple[nn.ModuleList, list[dict]]:
    """Train one head per tower on the frozen features of the training blocks `train_block_count` asks for.

    `head_seed` (default `cfg.seed`) seeds the heads' initialisation, the masks of BERT's training
    blocks and the order of the positions. `probe_run` derives it from the weights, so two models
    never share head initialisations (see there why that matters).
    """
    cfg.validate()
    head_seed = cfg.seed if head_seed is None else head_seed
    torch.manual_seed(head_seed)
    k, H, V = model.cfg.towers, model.cfg.hidden, model.cfg.vocab_size
    emb = model.tok_emb.weight.detach() if cfg.head == "tied" else None
    device = _device(model)
    heads = nn.ModuleList(ProbeHead(H, V, cfg.head, emb, model.cfg.layer_norm_eps) for _ in range(k)).to(device)
    n_blocks = min(train_block_count(cfg, model.cfg.model_type, data.seq_len), len(data.train))
    rng = np.random.default_rng(cfg.seed)
    block_idx = np.sort(rng.choice(len(data.train), size=n_blocks, replace=False))
    blocks = data.train[block_idx]
    gen = torch.Generator().manual_seed(head_seed)

    feats = labels = None
    if cfg.cache_features:
        feats, labels = extract_features(model, blocks, data.special_ids, V, gen, cfg, "caching tower features", show)
        n_positions = len(labels)
    else:  # estimate positions per epoch from one block's objective to size the schedule
        n_positions = int(n_blocks * data.seq_len * (0.15 if model.cfg.model_type == "bert" else 1.0))
    steps_per_epoch = max(1, math.ceil(n_positions / cfg.batch_size))
    total = steps_per_epoch * cfg.epochs
    opt = torch.optim.AdamW(heads.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(total, cfg.warmup_fraction))
    log: list[dict] = []
    bar = tqdm(total=total, desc=f"training {k} probe head(s)", unit="step", disable=not show)
    step = 0
    for epoch in range(cfg.epochs):
        if not cfg.cache_features:  # naive: run the frozen towers again every epoch
            feats, labels = extract_features(model, blocks, data.special_ids, V, gen, cfg, "recomputing features", show)
        perm = torch.randperm(len(labels), generator=gen)
        for b in range(0, len(perm), cfg.batch_size):
            idx = perm[b:b + cfg.batch_size]
            f, y = feats[idx].to(device).float(), labels[idx].to(device)   # (n, k, H), (n,)
            with _autocast(cfg, device):
                losses = [heads[j].loss(f[:, j], y) for j in range(k)]
            opt.zero_grad(set_to_none=True)
            sum(losses).backward()  # heads share no parameters: this trains each on its own loss
            opt.step()
            sched.step()
            step += 1
            rec = {"step": step, "epoch": epoch, **{f"loss_tower{j}": round(l.item(), 5) for j, l in enumerate(losses)}}
            log.append(rec)
            bar.set_postfix({k_: v for k_, v in rec.items() if k_.startswith("loss")})
            bar.update(1)
    bar.close()
    return heads.eval(), log


@torch.no_grad()
def score_validation(model, heads: nn.ModuleList, data, cfg: ProbeConfig,
                     show: bool = True) -> tuple[TowerSums, np.ndarray]:
    """Each tower's probability of the true token at every scored validation position.

    Returns the per-position sums and the cooperative model's log-probability at the same positions.
    BERT masks the validation set in `bert_eval_passes` disjoint passes, so each token is predicted once.
    """
    model_type, V, device = model.cfg.model_type, model.cfg.vocab_size, _device(model)
    n = len(data.valid) if cfg.eval_blocks is None else min(cfg.eval_blocks, len(data.valid))
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    toks, docs, ps, lps, coop = [], [], [], [], []
    for start in tqdm(range(0, n, cfg.forward_batch), desc="scoring validation", unit="batch", disable=not show):
        ids = torch.from_numpy(np.asarray(data.valid[start:min(n, start + cfg.forward_batch)], dtype=np.int64))
        doc = _target_docs(model_type, torch.from_numpy(np.asarray(data.valid_doc_ids[start:start + len(ids)], dtype=np.int64)))
        if model_type == "bert":
            pass_of = torch.randint(cfg.bert_eval_passes, ids.shape, generator=gen)
            batches = [make_batch(model_type, ids, gen, data.special_ids, V, chosen=pass_of == p)
                       for p in range(cfg.bert_eval_passes)]
        else:
            batches = [make_batch(model_type, ids, gen, data.special_ids, V)]
        for inputs, y in batches:
            y = _labels_without_specials(y, data.special_ids)
            inputs, y = inputs.to(device), y.to(device)
            keep = y != IGNORE
            with _autocast(cfg, device):
                states = model.tower_states(inputs)[keep].float()           # (n, k, H): one tower pass
                coop_logits = model.decode(states)                          # (n, V), the cooperative model
            target = y[keep]
            lp = torch.stack([token_logprob(heads[j](states[:, j]).float(), target)
                              for j in range(len(heads))], dim=1)           # (n, k)
            coop.append(token_logprob(coop_logits.float(), target).cpu().numpy())
            toks.append(target.cpu().numpy())
            docs.append(doc[keep.cpu()].numpy())
            lps.append(lp.double().cpu().numpy())
    logp = np.concatenate(lps)
    return TowerSums(np.concatenate(toks), np.concatenate(docs), np.exp(logp), logp), np.concatenate(coop)


def probe_dir(run_dir: Path, snapshot: str | int | None) -> Path:
    if snapshot is None:
        return run_dir / "probe"
    from twotower_lib.models import snapshot_name

    name = snapshot_name(snapshot) if isinstance(snapshot, int) else str(snapshot).removesuffix(".safetensors")
    return run_dir / "probes" / Path(name).name


def probe_run(run_dir: str | os.PathLike, cfg: ProbeConfig | None = None, *, snapshot: str | int | None = None,
              data_dir: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
              force: bool = False, show: bool = True) -> Path:
    """Probe one trained run (or one of its snapshots) and write the preference artifact; return its path.

    Up to date (same run weights, data and probe config) -> nothing is recomputed.
    """
    from safetensors.torch import save as save_safetensors

    from twotower_lib.data import load_prepared

    cfg = (cfg or ProbeConfig()).validate()
    run_dir = Path(run_dir)
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
    out = Path(out) if out else probe_dir(run_dir, snapshot)
    weights = weights_path(run_dir, snapshot)
    identity = {"version": PROBE_VERSION, "weights_sha256": sha256_file(weights),
                "data_hash": data.data_hash,
                "probe": asdict(cfg)}
    if not force and (out / "manifest.json").exists():
        try:
            if read_json(out / "manifest.json").get("identity") == identity:
                if show:
                    print(f"probe up to date: {out}")
                return out
        except UserError:
            pass

    # Per-model head seed. With one probe seed for every model, head j of run A and head j of run
    # B would start from the same weights and see positions in the same order; whatever of that
    # start survives training is shared between the two runs *by tower index*, and it made the
    # scores of two untrained models correlate at r = -0.34 (primary towers 1 and 0) and inflated
    # trained pairs whose primary towers had the same index. Deriving the seed from the weights
    # keeps every probe deterministic and the heads of different models independent.
    head_seed = (cfg.seed * 1_000_003 + int(identity["weights_sha256"][:15], 16)) % 2**62
    t0 = time.time()
    for p in model.parameters():
        p.requires_grad_(False)
    heads, log = train_heads(model, data, cfg, show, head_seed=head_seed)
    t_train = time.time() - t0
    sums, coop_logp = score_validation(model, heads, data, cfg, show)
    val_loss = {"cooperative": float(-coop_logp.mean()),
                **{f"tower{j}_head": float(-sums.logp[:, j].mean()) for j in range(sums.p.shape[1])}}
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
        "seconds": {"train_heads": round(t_train, 2), "total": round(time.time() - t0, 2)},
        "head_log_tail": log[-5:],
        "provenance": provenance(),
    }
    head_state = {f"tower{j}.{name}": t.contiguous() for j, h in enumerate(heads) for name, t in h.state_dict().items()}
    write_preference(out, sums, data, manifest, {"heads.safetensors": save_safetensors(head_state)}, show)
    return out


def _positions_npz(sums: TowerSums) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez_compressed(buf, token_ids=sums.token_ids, doc_ids=sums.doc_ids, logp=sums.logp)
    return buf.getvalue()


def load_positions(probe_path: str | os.PathLike) -> TowerSums:
    """Per-position log-probabilities saved by a probe (validated by the artifact's sha256s)."""
    path = Path(probe_path)
    manifest = read_json(path / "manifest.json")
    if sha256_file(path / "positions.npz") != manifest["files"]["positions.npz"]:
        raise UserError(f"{path / 'positions.npz'} does not match its manifest; re-run the probe")
    z = np.load(path / "positions.npz", allow_pickle=False)
    return TowerSums(z["token_ids"], z["doc_ids"], np.exp(z["logp"]), z["logp"])


def write_preference(out: Path, sums: TowerSums, data, manifest: dict, extra: dict[str, bytes],
                     show: bool = True) -> Path:
    """Order the towers (Eq. 3), compute the scores (Eq. 4) and write the artifact.

    With one tower (a single-tower run) only the per-position results are written; two of those
    become a preference artifact with `pair_runs` (the independent-pairs control).
    """
    k = sums.p.shape[1]
    mean_p = sums.p.mean(axis=0)
    extra = {**extra, "positions.npz": _positions_npz(sums)}
    tokens = data.tokenizer.convert_ids_to_tokens(list(range(data.vocab_size)))
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
                             "margin": float(mean_p[primary] - mean_p[secondary])},
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
    d = ProbeConfig()
    p.add_argument("run_dir", type=Path, help="a training run directory (from `train --out`)")
    p.add_argument("--snapshot", default=None, help="probe a weight snapshot (name like tokens-000001000000) instead of the final weights")
    p.add_argument("--all-snapshots", action="store_true", help="probe every snapshot of the run, then the final weights")
    p.add_argument("--data", default=None, help="prepared-data directory (default: the one the run was trained on)")
    p.add_argument("--head", choices=HEAD_KINDS, default=d.head)
    p.add_argument("--train-blocks", type=int, default=d.train_blocks)
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--eval-blocks", type=int, default=None)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--no-cache", action="store_true", help="recompute tower features every epoch (slow; for comparison)")
    p.add_argument("--force", action="store_true", help="recompute even if up to date")


def main(args: argparse.Namespace) -> int:
    cfg = ProbeConfig(head=args.head, train_blocks=args.train_blocks, epochs=args.epochs,
                      eval_blocks=args.eval_blocks, seed=args.seed, cache_features=not args.no_cache)
    if args.all_snapshots:
        from twotower_lib.models import list_snapshots

        for _, path in list_snapshots(args.run_dir):
            probe_run(args.run_dir, cfg, snapshot=path.stem, data_dir=args.data, force=args.force)
        if (args.run_dir / "model.safetensors").exists():
            probe_run(args.run_dir, cfg, data_dir=args.data, force=args.force)
        return 0
    probe_run(args.run_dir, cfg, snapshot=args.snapshot, data_dir=args.data, force=args.force)
    return 0
