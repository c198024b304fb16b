"""What each training step reads: the global block order, the micro-batch of a (step, slot) with its masks,
and the fixed validation set. Everything random is derived from (seed, purpose, step, slot) (`seed_of`), so
a resumed run continues exactly, and a 2-process run reads what a 1-process run with twice the
accumulation reads."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from twotower_lib.models import TwoTowerLM, labeled_positions, make_batch
from twotower_lib.train.config import TrainConfig


def seed_of(*keys: Any) -> int:
    """A 63-bit seed from any keys (run seed, purpose, step, slot): every random draw of a step has its own."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, keys)).encode()).digest()[:8], "little") >> 1


class BlockOrder:
    """Global sample order: a fresh permutation of the training blocks each epoch, from the seed."""

    def __init__(self, n_blocks: int, seed: int):
        self.n, self.seed = n_blocks, seed
        self._cache: dict[int, np.ndarray] = {}

    def take(self, start: int, count: int) -> np.ndarray:
        idx = np.arange(start, start + count)
        out = np.empty(count, dtype=np.int64)
        for epoch in np.unique(idx // self.n):
            if epoch not in self._cache:
                self._cache = {epoch: np.random.default_rng(seed_of(self.seed, "order", epoch)).permutation(self.n)}
            sel = idx // self.n == epoch
            out[sel] = self._cache[epoch][idx[sel] % self.n]
        return out


def micro_batch(data, order: BlockOrder, tcfg: TrainConfig, step: int, micro: int, rank: int,
                world: int, micro_size: int, accum: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and labels for micro-batch `micro` of optimizer step `step` on `rank`.

    Slot j = micro * world + rank of the global batch, so 1 process x 2 accumulation steps and
    2 processes x 1 step read the same blocks with the same masks.
    """
    slot = micro * world + rank
    start = (step * accum * world + slot) * micro_size
    ids = torch.from_numpy(np.asarray(data.train[np.sort(order.take(start, micro_size))], dtype=np.int64))
    g = torch.Generator().manual_seed(seed_of(tcfg.seed, "mask", step, slot))
    return make_batch(tcfg.model, ids, g, data.special_ids, data.vocab_size, mask_prob=tcfg.mask_rate,
                      mask_only=tcfg.mask_style == "mask")


def to_device(inputs: torch.Tensor, labels: torch.Tensor, device: torch.device, multiple: int = 1
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A host micro-batch as the model's arguments on `device`: (inputs, labels, positions), the labels and
    positions those of the predicted positions (`labeled_positions`, padded to `multiple`). To a GPU the
    copies go from pinned memory without waiting, so the host builds the next batch while the device works."""
    labels, positions = labeled_positions(labels, multiple)
    if device.type == "cuda":
        return tuple(t.pin_memory().to(device, non_blocking=True) for t in (inputs, labels, positions))
    return inputs.to(device), labels.to(device), positions.to(device)


@torch.no_grad()
def evaluate(model: TwoTowerLM, data, tcfg: TrainConfig, batch_size: int, autocast: bool) -> float:
    """Mean validation cross-entropy per predicted token over a fixed set of blocks and masks: for BERT the events
    the probe scores, 15% of the positions each [MASK], whatever the training's rate and style (with BERT's 80/10/10
    corruption a tenth of the targets would be in the input, and the loss would read lower than the model predicts)."""
    was_training = model.training
    model.eval()
    n = min(tcfg.eval_blocks, len(data.valid))
    total, count = 0.0, 0
    g = torch.Generator().manual_seed(seed_of(tcfg.seed, "valid"))
    device = next(model.parameters()).device
    for start in range(0, n, batch_size):
        ids = torch.from_numpy(np.asarray(data.valid[start:min(n, start + batch_size)], dtype=np.int64))
        inputs, labels = make_batch(tcfg.model, ids, g, data.special_ids, data.vocab_size, mask_only=True)
        k = int((labels != -100).sum())
        if k == 0:
            continue
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss, _ = model(*to_device(inputs, labels, device))
        total, count = total + float(loss) * k, count + k
    model.train(was_training)
    return total / max(count, 1)
