"""What the training benchmarks share: random token batches through the family's own objective, and the
FLOPs of one forward + backward pass (torch's FlopCounterMode, plus the LSTM recurrences it does not see
inside the fused RNN kernels). Used by bench_train.py (CPU) and bench_gpu.py (CUDA)."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from twotower_lib.models import ModelConfig, make_batch
from twotower_lib.train.batches import to_device

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def random_batch(cfg: ModelConfig, micro: int, seed: int, device: str | torch.device = "cpu", label_bucket: int = 1
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's arguments (inputs, labels, positions) for `micro` random blocks of the family's objective, on
    `device` as the trainer moves them there (`train_batches.to_device`)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIAL), cfg.vocab_size, (micro, cfg.seq_len), generator=g)
    inputs, labels = make_batch(cfg.model_type, ids, g, SPECIAL, cfg.vocab_size)
    return to_device(inputs, labels, torch.device(device), label_bucket)


def lstm_flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs of ELMo's LSTM recurrences per token: 2*4*L*(in+L) per layer and direction, x3 for the
    backward pass, two directions, k towers."""
    if cfg.model_type != "elmo":
        return 0.0
    L, W = cfg.intermediate, cfg.tower_input
    forward = 2 * 4 * L * (W + L) + (cfg.n_layer - 1) * 2 * 4 * L * (2 * L)
    return 3 * forward * 2 * cfg.towers


def step_flops(model, cfg: ModelConfig, micro: int, device: str | torch.device = "cpu") -> float:
    """FLOPs of one forward + backward pass of `model` on one micro-batch (its gradients are cleared after)."""
    batch = random_batch(cfg, micro, 0, device)
    with FlopCounterMode(display=False) as counter:
        loss, _ = model(*batch)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() + lstm_flops_per_token(cfg) * micro * cfg.seq_len
