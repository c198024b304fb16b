"""Training the probing heads and scoring with them: the computation inside one probe (`probe.probe_run`).

The frozen towers run once over the probe's training blocks (`extract_features`); one head per tower
(two with `replicate`) trains on those cached features until its held-out loss stops improving
(`train_heads`); then every validation position is scored by every head and, on a sample of
batches, by the cooperative model (`score_validation`). Why each choice: `twotower_lib.probe`.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from twotower_lib.errors import UserError
from twotower_lib.models import make_batch
from twotower_lib.probe.heads import ProbeHead, token_logprob
from twotower_lib.preference import TowerSums
from twotower_lib.probe import precision
from twotower_lib.probe.schedule import HeadSchedule
from twotower_lib.probe.whitening import FeatureWhitening  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from twotower_lib.probe.config import ProbeConfig

IGNORE = -100
REPLICATE_SEED = 7_919  # offset of the replicate heads' seed from the main heads'
COOP_EVERY = 4          # the cooperative model's validation loss is measured on every 4th batch of blocks


def _device(model) -> torch.device:
    return next(iter(model.parameters()), torch.empty(0)).device


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


def probe_batch(model_type: str, ids: torch.Tensor, generator: torch.Generator, special_ids: dict[str, int],
                vocab_size: int, cfg: ProbeConfig, chosen: torch.Tensor | None = None):
    """(inputs, labels) of the events the probe trains on and scores: the model's objective, with
    BERT's chosen positions all [MASK] unless `bert_events="corrupt"`; special tokens never labels."""
    inputs, y = make_batch(model_type, ids, generator, special_ids, vocab_size, chosen=chosen,
                           mask_only=cfg.bert_events == "mask")
    return inputs, _labels_without_specials(y, special_ids)


def head_features(model, states: torch.Tensor, kind: str) -> torch.Tensor:
    """What the heads read from the tower states (..., k, H): the states themselves (`raw`), or each
    tower's slice of the frozen joint LayerNorm over their concatenation (`joint_ln`)."""
    if kind == "raw":
        return states
    return model.head_ln1(states.flatten(-2)).view_as(states)


@torch.no_grad()
def extract_features(model, blocks: np.ndarray, special_ids: dict[str, int], vocab_size: int,
                     generator: torch.Generator, cfg: ProbeConfig, desc: str = "tower features",
                     show: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the frozen towers over `blocks` once: features of predicted positions (N, k, H) in `cfg.feature_dtype`,
    labels (N,)."""
    feats, labels = [], []
    model_type, device = model.cfg.model_type, _device(model)
    for start in tqdm(range(0, len(blocks), cfg.forward_batch), desc=desc, unit="batch", disable=not show,
                      leave=False):
        ids = torch.from_numpy(np.asarray(blocks[start:start + cfg.forward_batch], dtype=np.int64))
        inputs, y = probe_batch(model_type, ids, generator, special_ids, vocab_size, cfg)
        with precision.autocast(cfg, device):
            states = head_features(model, model.tower_states(inputs.to(device)), cfg.features).cpu()  # (B, T, k, H)
        keep = y != IGNORE
        cache = torch.float32 if cfg.feature_dtype == "fp32" else torch.bfloat16
        feats.append(states[keep].to(cache))                                # (n, k, H), kept in host memory
        labels.append(y[keep])
        if start == 0:
            _check_memory(feats[0], len(blocks) / len(ids), cfg)
    return torch.cat(feats), torch.cat(labels)


def _check_memory(first: torch.Tensor, batches: float, cfg: ProbeConfig) -> None:
    """Stop before caching more features than the host can hold: the first batch's bytes times the batches to
    come, twice (the cache and its whitened copy), against the memory the OS says is available."""
    from twotower_lib.workers import available_memory

    need, available = 2 * first.element_size() * first.numel() * batches, available_memory()
    if available is not None and need > available:
        raise UserError(f"the probe would cache about {need / 2**30:.1f} GiB of tower features ({cfg.feature_dtype}, "
                        f"with their whitened copy) where {available / 2**30:.1f} GiB of memory is available: lower "
                        "--train-positions (-p probe.train_positions) or --train-blocks")


def train_block_count(cfg: ProbeConfig, model_type: str, seq_len: int) -> int:
    """Training blocks the heads read: `train_blocks`, or enough blocks for `train_positions`
    predicted positions (BERT predicts only its masked ~15%, so it needs ~7x the blocks: equal
    positions give every family's heads the same number of examples and optimiser steps)."""
    if cfg.train_positions is None:
        return cfg.train_blocks
    per_block = seq_len * (0.15 if model_type == "bert" else 1.0)
    return max(1, math.ceil(cfg.train_positions / per_block))


@torch.no_grad()
def _heldout_losses(heads: nn.ModuleList, feats: torch.Tensor, labels: torch.Tensor, k: int,
                    device: torch.device, dtype: torch.dtype = torch.float32, chunk: int = 8192) -> list[float]:
    """Mean cross-entropy of every head (head i reads tower i % k) on held-out features."""
    total = torch.zeros(len(heads), dtype=torch.float64)
    scorers = [head.scorer(dtype) for head in heads]
    for b in range(0, len(labels), chunk):
        f, y = feats[b:b + chunk].to(device).float(), labels[b:b + chunk].to(device)
        for i, score in enumerate(scorers):
            total[i] -= score(f[:, i % k], y).double().sum().cpu()
    return (total / max(1, len(labels))).tolist()


@dataclass
class HeadFeatures:
    """The frozen towers' features of the probe's training positions (N, k, H) and held-out positions,
    with their labels: computed once (`training_features`), read by every head."""
    train: torch.Tensor
    labels: torch.Tensor
    held: torch.Tensor | None
    held_labels: torch.Tensor | None


class HeadRefiner(Protocol):
    """A step after head training: moves every trained head (head i reads tower i mod k) in place on the
    training features and returns one record per head. `identity` (JSON) joins the probe's identity, so a
    probe refined differently is recomputed."""

    identity: dict

    def __call__(self, heads: nn.ModuleList, features: HeadFeatures, k: int, dtype: torch.dtype,
                 show: bool) -> list[dict]: ...


def training_features(model, data, cfg: ProbeConfig, head_seed: int, show: bool = True) -> HeadFeatures:
    """Features of the probe's training blocks and held-out blocks (`cfg.seed` picks the blocks,
    `head_seed` BERT's masks)."""
    V = model.cfg.vocab_size
    n_train = min(train_block_count(cfg, model.cfg.model_type, data.seq_len), len(data.train))
    n_held = math.ceil(n_train * cfg.holdout_fraction)
    if n_train + n_held > len(data.train):
        n_train = max(1, len(data.train) - n_held)
    rng = np.random.default_rng(cfg.seed)
    chosen = rng.choice(len(data.train), size=min(len(data.train), n_train + n_held), replace=False)
    gen = torch.Generator().manual_seed(head_seed)
    feats, labels = extract_features(model, data.train[np.sort(chosen[:n_train])], data.special_ids, V, gen, cfg,
                                     "caching tower features", show)
    held = held_labels = None
    if n_held:
        held, held_labels = extract_features(model, data.train[np.sort(chosen[n_train:])], data.special_ids,
                                             V, gen, cfg, "held-out features", show)
    if len(labels) == 0:
        raise UserError("the probe's training blocks hold no position to predict; use more training blocks")
    return HeadFeatures(feats, labels, held, held_labels)


def new_heads(model, cfg: ProbeConfig, seeds: list[int]) -> nn.ModuleList:
    """One fresh head per tower for every seed (set s: heads[s*k : (s+1)*k], head i reads tower i % k)."""
    k, H, V = model.cfg.towers, model.cfg.hidden, model.cfg.vocab_size
    emb = None if cfg.head == "mlp" else model.tok_emb.weight.detach()
    heads = nn.ModuleList()
    for s in seeds:
        torch.manual_seed(s)
        heads.extend(ProbeHead(H, V, cfg.head, emb, model.cfg.layer_norm_eps) for _ in range(k))
    return heads


def train_heads(model, data, cfg: ProbeConfig, show: bool = True, head_seed: int | None = None,
                features: HeadFeatures | None = None, refine: HeadRefiner | None = None) -> tuple[list[nn.ModuleList], dict]:
    """Train one head per tower (and, with `cfg.replicate`, a second set with another seed) on the
    frozen features of the training blocks; return the head sets and the training record.

    `head_seed` (default `cfg.seed`) seeds the heads' initialisation, the masks of BERT's training
    blocks and the order of the positions; the replicate set uses `head_seed + REPLICATE_SEED` for
    its initialisation and order and shares the features. `probe_run` derives the seed from the
    weights, so two models never share head initialisations (see there why that matters).
    `features`: computed by `training_features` with the same `cfg` and `head_seed`, to train several
    head recipes on one set of features (`studies/probe/reliability.py`). `refine`: a step that
    takes the trained heads further on the training features before they are scored (`HeadRefiner`).

    Each head set trains with its own optimiser and schedule, so the first set is the same with or without
    the replicate. The record: `curve` (per epoch: step, rate, mean training loss and held-out loss per head of
    the first set), `epochs`, `stopped` ("converged" or "max_epochs"), the same for the replicate set under
    `replicate`, the number of training and held-out positions, and `seconds` (the towers' pass over the
    blocks; the heads' fit).
    """
    cfg.validate()
    head_seed = cfg.seed if head_seed is None else head_seed
    k = model.cfg.towers
    device = _device(model)
    seeds = [head_seed] + ([head_seed + REPLICATE_SEED] if cfg.replicate else [])
    heads = new_heads(model, cfg, seeds)
    t0 = time.perf_counter()
    cached = features or training_features(model, data, cfg, head_seed, show)
    t_features = time.perf_counter() - t0
    feats, labels, held_feats, held_labels = cached.train, cached.labels, cached.held, cached.held_labels
    n_held = 0 if held_labels is None else len(held_labels)
    whitening = FeatureWhitening.fit(feats) if cfg.precondition == "whiten" else None
    if whitening is not None:                  # the heads train on whitened features, then are folded back
        feats = whitening.apply(feats)
        held_feats = None if held_feats is None else whitening.apply(held_feats)
    heads = heads.to(device)
    dtype, score_dtype = precision.head_dtype(cfg, device), precision.score_dtype(cfg, device)
    # each head set with its own optimiser and schedule: the replicate set's held-out losses never decide when the
    # first set's rate drops or stops, so a probe's scores are the same with or without its replicate
    fits = [_fit(heads[s * k:(s + 1) * k], feats, labels, held_feats, held_labels, [seed], cfg, k, device, show)
            for s, seed in enumerate(seeds)]
    (curve, stopped), replicate = fits[0], fits[1:]
    seconds = {"features": round(t_features, 2), "fit": round(time.perf_counter() - t0 - t_features, 2)}
    if whitening is not None:
        for i, head in enumerate(heads):
            whitening.fold(head, i % k)
    fixed = cfg.schedule != "plateau"
    record = {"curve": curve, "epochs": len(curve), "stopped": "fixed epochs" if fixed else stopped,
              "train_positions": int(len(labels)), "heldout_positions": int(len(held_labels)) if n_held else 0,
              "head_seeds": seeds, "matmul_dtype": str(dtype).removeprefix("torch."),
              "score_dtype": str(score_dtype).removeprefix("torch."), "precondition": cfg.precondition,
              "seconds": seconds,  # the towers' pass over the probe's blocks; whitening and head training
              **({"feature_condition": [round(c, 1) for c in whitening.condition],
                  "constant_directions": whitening.dropped} if whitening is not None else {})}
    if replicate:
        [(c, why)] = replicate
        record["replicate"] = {"curve": c, "epochs": len(c), "stopped": "fixed epochs" if fixed else why}
    if refine is not None:
        record["refine"] = refine(heads, cached, k, dtype, show)
        record["refined_heldout_loss"] = ([round(x, 5) for x in _heldout_losses(heads, cached.held, held_labels, k, device, score_dtype)]
                                          if n_held else None)
    sets = [nn.ModuleList(heads[s * k:(s + 1) * k]).eval() for s in range(len(seeds))]
    return sets, record


def _fit(heads: nn.ModuleList, feats: torch.Tensor, labels: torch.Tensor, held_feats: torch.Tensor | None,
         held_labels: torch.Tensor | None, seeds: list[int], cfg: ProbeConfig, k: int, device: torch.device,
         show: bool) -> tuple[list[dict], str]:
    """Train `heads` epoch by epoch (`_epoch`) until `HeadSchedule` says they converged; keep each head's
    best held-out state (plateau schedule). Returns the curve and why training stopped."""
    n_held = 0 if held_labels is None else len(held_labels)
    params = [p for p in heads.parameters()]
    schedule = HeadSchedule(cfg, max(1, math.ceil(len(labels) / cfg.batch_size)), params)
    opt = torch.optim.AdamW(heads.parameters(), lr=cfg.peak_lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
    dtype, score_dtype = precision.head_dtype(cfg, device), precision.score_dtype(cfg, device)
    orders = [torch.Generator().manual_seed(s) for s in seeds]
    best = [math.inf] * len(heads)
    best_state = [None] * len(heads)
    curve: list[dict] = []
    stopped = "max_epochs"
    if show and len(labels) * len(heads) >= 100_000:   # before it starts: what it is, and how to make it cheaper
        tqdm.write(f"head training: {len(labels):,} positions x {len(heads)} heads per epoch, until the held-out loss "
                   f"stops improving (at most {cfg.max_epochs} epochs); the first epoch's time comes with an estimate "
                   "of the rest. Cheaper: --train-positions N or --max-epochs M.")
    bar = tqdm(total=cfg.max_epochs, desc=f"training {len(heads)} probe head(s)", unit="epoch", disable=not show)
    for epoch in range(cfg.max_epochs):
        t_epoch = time.perf_counter()
        train_loss = _epoch(heads, opt, schedule, feats, labels, orders, cfg, k, device, dtype)
        if epoch == 0 and show and (time.perf_counter() - t_epoch) * cfg.max_epochs > 60:   # say it where it matters
            tqdm.write(_cost_note(time.perf_counter() - t_epoch, len(labels), len(heads), cfg))
        held = _heldout_losses(heads, held_feats, held_labels, k, device, score_dtype) if n_held else train_loss
        gain = max(b_ - h for b_, h in zip(best, held))                         # the best improvement of any head
        for i in (i for i, h in enumerate(held) if h < best[i]):
            best[i], best_state[i] = held[i], copy.deepcopy(heads[i].state_dict())
        curve.append({"epoch": epoch + 1, "step": schedule.step, "lr": schedule.lr(schedule.step - 1),
                      "train_loss": [round(x, 5) for x in train_loss], "heldout_loss": [round(x, 5) for x in held]})
        bar.set_postfix(heldout=" ".join(f"{x:.3f}" for x in held), gain=f"{gain:.4f}")
        bar.update(1)
        if cfg.schedule == "plateau" and schedule.after_epoch(gain):
            stopped = "converged"
            break
    bar.close()
    if cfg.schedule == "plateau":
        for head, state in zip(heads, best_state):
            head.load_state_dict(state)
    return curve, stopped


def _cost_note(epoch_seconds: float, positions: int, heads: int, cfg: ProbeConfig) -> str:
    """What the rest of head training can cost, from its first epoch, and how to make it cheaper."""
    most = epoch_seconds * cfg.max_epochs / 60
    return (f"head training: the first epoch ({positions:,} positions x {heads} heads) took {epoch_seconds:.0f} s; the heads "
            f"stop once their held-out loss stops improving, after at most {cfg.max_epochs} epochs (up to {most:.0f} min). "
            f"Cheaper: fewer positions (--train-positions {max(1000, positions // 4):,}) or fewer epochs (--max-epochs "
            f"{max(2, cfg.max_epochs // 4)}), at the cost of an unconverged probe.")


def _epoch(heads: nn.ModuleList, opt, schedule: HeadSchedule, feats: torch.Tensor, labels: torch.Tensor,
           orders: list[torch.Generator], cfg: ProbeConfig, k: int, device, dtype: torch.dtype) -> list[float]:
    """One pass over the training positions, each head set in its own order; every head's mean training loss."""
    perms = [torch.randperm(len(labels), generator=g) for g in orders]     # each head set its own order
    train_sum = torch.zeros(len(heads), dtype=torch.float64)
    for b in range(0, len(labels), cfg.batch_size):
        for group in opt.param_groups:
            group["lr"] = schedule.lr(schedule.step)
        losses = []
        for s, perm in enumerate(perms):
            idx = perm[b:b + cfg.batch_size]
            f, y = feats[idx].to(device).float(), labels[idx].to(device)   # (n, k, H), (n,)
            with precision.autocast(cfg, device):
                losses += [heads[s * k + j].loss(f[:, j], y, dtype) for j in range(k)]
        opt.zero_grad(set_to_none=True)
        sum(losses).backward()  # heads share no parameters: this trains each on its own loss
        opt.step()
        schedule.after_step()
        train_sum += torch.tensor([l.item() for l in losses], dtype=torch.float64) * len(idx)
    schedule.end_of_epoch()
    return (train_sum / len(labels)).tolist()


@torch.no_grad()
def score_validation(model, head_sets: list[nn.ModuleList], data, cfg: ProbeConfig,
                     show: bool = True) -> tuple[list[TowerSums], np.ndarray]:
    """Each head set's probability of the true token at every scored validation position.

    Returns one `TowerSums` per head set and the cooperative model's log-probability at the same
    positions, computed on every `COOP_EVERY`-th batch of blocks (NaN elsewhere): its loss is a mean,
    and the (n, V) decoder is as costly as a head. BERT masks the validation set in `bert_eval_passes` disjoint passes, so each token
    is predicted once, with [MASK] at its position (unless `bert_events="corrupt"`).
    """
    model_type, V, device = model.cfg.model_type, model.cfg.vocab_size, _device(model)
    score_dtype = precision.score_dtype(cfg, device)
    n = len(data.valid) if cfg.eval_blocks is None else min(cfg.eval_blocks, len(data.valid))
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    toks, docs, coop = [], [], []
    lps: list[list[np.ndarray]] = [[] for _ in head_sets]
    scorers = [[head.scorer(score_dtype) for head in heads] for heads in head_sets]
    for batch_no, start in enumerate(tqdm(range(0, n, cfg.forward_batch), desc="scoring validation", unit="batch",
                                          disable=not show)):
        ids = torch.from_numpy(np.asarray(data.valid[start:min(n, start + cfg.forward_batch)], dtype=np.int64))
        doc = _target_docs(model_type, torch.from_numpy(np.asarray(data.valid_doc_ids[start:start + len(ids)], dtype=np.int64)))
        if model_type == "bert":
            pass_of = torch.randint(cfg.bert_eval_passes, ids.shape, generator=gen)
            batches = [probe_batch(model_type, ids, gen, data.special_ids, V, cfg, chosen=pass_of == p)
                       for p in range(cfg.bert_eval_passes)]
        else:
            batches = [probe_batch(model_type, ids, gen, data.special_ids, V, cfg)]
        for inputs, y in batches:
            inputs, y = inputs.to(device), y.to(device)
            keep = y != IGNORE
            with precision.autocast(cfg, device):
                states = model.tower_states(inputs)[keep].float()           # (n, k, H): one tower pass
                feats = head_features(model, states, cfg.features)
            target = y[keep]
            for score, out in zip(scorers, lps):
                out.append(torch.stack([score[j](feats[:, j], target) for j in range(len(score))],
                                       dim=1).double().cpu().numpy())                             # (n, k)
            if batch_no % COOP_EVERY == 0:  # the cooperative model's loss needs a mean, not every position
                with precision.autocast(cfg, device):
                    coop_logits = model.decode(states)                      # (n, V), the cooperative model
                coop.append(token_logprob(coop_logits.float(), target).cpu().numpy())
            else:
                coop.append(np.full(len(target), np.nan, dtype=np.float32))
            toks.append(target.cpu().numpy())
            docs.append(doc[keep.cpu()].numpy())
    tok, doc_ids = np.concatenate(toks), np.concatenate(docs)
    sums = [TowerSums(tok, doc_ids, np.exp(lp), lp) for lp in map(np.concatenate, lps)]
    return sums, np.concatenate(coop)
