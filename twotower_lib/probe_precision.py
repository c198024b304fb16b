"""The dtypes a probe runs with: the frozen towers' forward pass, the head-training matmuls and the scoring
logits. `precision="auto"` takes bf16 on GPUs and on CPUs where a bf16 matmul is measured to be faster; the
manifest records what was chosen (`resolved_precision`)."""

from __future__ import annotations

import time

import torch

from twotower_lib.probe_config import ProbeConfig


def tower_dtype(cfg: ProbeConfig, device: torch.device) -> torch.dtype:
    """The frozen towers' forward pass: bf16 autocast on GPUs (fp16 where bf16 is missing) and on CPUs
    where bf16 matmuls are faster (`bf16_matmul_pays_off`); fp32 otherwise. The features are cached in
    bf16 anyway."""
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


_BF16_PAYS_OFF: bool | None = None


def bf16_matmul_pays_off() -> bool:
    """Whether a head-sized bf16 matmul (fp32 accumulation) beats fp32 on this CPU, measured once.

    Why measured: on CPUs with native bf16 units (AVX-512 BF16, AMX) it is faster than fp32; on others
    bf16 is emulated and slower. The probe's manifest records what was chosen (`resolved_precision`).
    """
    global _BF16_PAYS_OFF
    if _BF16_PAYS_OFF is None:
        x, w = torch.randn(1024, 128), torch.randn(4096, 128)
        timing = {}
        for dtype in (torch.float32, torch.bfloat16):
            a, b = x.to(dtype), w.to(dtype)
            a @ b.t()
            t0 = time.perf_counter()
            for _ in range(5):
                a @ b.t()
            timing[dtype] = time.perf_counter() - t0
        _BF16_PAYS_OFF = timing[torch.bfloat16] < 0.8 * timing[torch.float32]
    return _BF16_PAYS_OFF


def head_dtype(cfg: ProbeConfig, device: torch.device) -> torch.dtype:
    """The dtype of the head-training matmuls: bf16 where asked or (auto) where it is faster (this CPU,
    measured; GPUs with bf16); softmax and loss stay fp32. Held-out losses and scores are fp32 (`ProbeHead.logprob`)."""
    if cfg.precision == "bf16" or (cfg.precision == "auto" and (torch.cuda.is_bf16_supported() if device.type == "cuda"
                                                               else bf16_matmul_pays_off())):
        return torch.bfloat16
    return torch.float32


def score_dtype(cfg: ProbeConfig, device: torch.device) -> torch.dtype:
    """The dtype of the logits whose log-sum-exp scores held-out and validation positions (the true
    token's logit is exact fp32 either way, `heads.linear_logprob`): bf16 where asked, or (auto) where
    the heads train in bf16."""
    if cfg.score_precision == "bf16" or (cfg.score_precision == "auto" and head_dtype(cfg, device) == torch.bfloat16):
        return torch.bfloat16
    return torch.float32


def resolved_precision(cfg: ProbeConfig, device: torch.device) -> dict[str, str]:
    """The dtypes a probe with `cfg` runs with on `device` (what `precision="auto"` resolved to): the
    towers' forward pass, the head-training matmuls and the scoring logits. Recorded in the manifest."""
    name = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    return {"towers": name[tower_dtype(cfg, device)], "heads": name[head_dtype(cfg, device)], "scoring": name[score_dtype(cfg, device)]}
