"""The dtypes a probe runs with: the frozen towers' forward pass, the head-training matmuls and the scoring
logits. `precision="auto"` takes bf16 on GPUs and fp32 on CPUs; the manifest records what was chosen
(`resolved_precision`).

Why fp32 on every CPU, although bf16 matmuls are faster on CPUs with native bf16 units: the dtype moves the
scores (`studies.probe.precision`, results/probe/precision.json), so a rule that followed the CPU would give
the same seed another probe on another machine. `precision="bf16"` asks for the faster one."""

from __future__ import annotations

import torch

from twotower_lib.probe.config import ProbeConfig


def tower_dtype(cfg: ProbeConfig, device: torch.device) -> torch.dtype:
    """The frozen towers' forward pass: bf16 autocast on GPUs (fp16 where bf16 is missing) and where the heads
    train in bf16; fp32 otherwise. The features are cached in bf16 anyway."""
    if device.type == "cuda":
        if cfg.precision == "fp32":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if head_dtype(cfg, device) == torch.bfloat16 else torch.float32


def autocast(cfg: ProbeConfig, device: torch.device):
    """The autocast context of the towers' forward pass (`tower_dtype`)."""
    dtype = tower_dtype(cfg, device)
    return torch.autocast(device.type, dtype=dtype if dtype != torch.float32 else torch.bfloat16,
                          enabled=dtype != torch.float32)


def head_dtype(cfg: ProbeConfig, device: torch.device) -> torch.dtype:
    """The dtype of the head-training matmuls: bf16 where asked or (auto) on GPUs with bf16, else fp32; softmax
    and loss stay fp32."""
    if cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16
    return torch.float32


def score_dtype(cfg: ProbeConfig, device: torch.device) -> torch.dtype:
    """The dtype of the logits whose log-sum-exp scores held-out and validation positions (the true
    token's logit is exact fp32 either way, `heads.linear_logprob`): bf16 only where asked, fp32 otherwise.

    Why not bf16 where the heads train in bf16: a head trained on whitened features is folded back onto the
    raw ones (`whitening.FeatureWhitening.fold`), and on features with a large offset and directions of tiny
    variance (a deep post-LN tower's) its logits are differences of large numbers whose bf16 log-sum-exp is off
    by nats against the exact target logit (tests/test_probe.py). Scoring is a small part of a probe's time."""
    return torch.bfloat16 if cfg.score_precision == "bf16" else torch.float32


def resolved_precision(cfg: ProbeConfig, device: torch.device) -> dict[str, str]:
    """The dtypes a probe with `cfg` runs with on `device` (what `precision="auto"` resolved to): the
    towers' forward pass, the head-training matmuls and the scoring logits. Recorded in the manifest."""
    name = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    return {"towers": name[tower_dtype(cfg, device)], "heads": name[head_dtype(cfg, device)], "scoring": name[score_dtype(cfg, device)]}
