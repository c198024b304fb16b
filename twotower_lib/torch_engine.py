"""The trainer's engine without DeepSpeed, for one process: plain PyTorch AdamW (fused on GPUs), fp32
weights and gradients, bf16 autocast on GPUs.

Why: on one GPU at ZeRO stage 0, DeepSpeed's bf16 wrapper costs more than it gives. It keeps bf16
weights beside fp32 master copies, checks each parameter tensor for overflow with a host sync,
flattens and all-reduces the gradients even for a world of one, and accumulates gradients in bf16.
This engine keeps the surface `train` uses (`engine(inputs, labels, positions)`, `backward`, `step`, `module`,
`optimizer`, `device`, `train()`) and takes every setting from the same DeepSpeed JSON config (the
optimizer's parameters, `gradient_clipping`, `gradient_accumulation_steps`), so a run has one
configuration either way. Several processes or nodes stay with DeepSpeed and its launcher.

With `--engine torch-compile` the forward pass runs through `torch.compile` as one graph; with
`--engine torch-compile-layers` region by region (`TwoTowerLM.compile_regions`: the embedding, each layer, the
decoder with the loss), which compiles minutes sooner at Table 1 sizes. Either way the parameters are the model's
own, so weights and checkpoints are the same files. It compiles once when a micro-batch's shapes repeat: BERT
predicts a random number of positions, which `train --label-bucket` pads to a multiple (ignored labels).
ELMo's LSTMs are not traced (the graph breaks around them). CUDA graphs (torch.compile's "reduce-overhead") are
not offered: with gradient accumulation PyTorch's CUDA graph trees overwrite or take over the accumulated
gradients (pytorch/pytorch#169545).

Semantics as DeepSpeed's at stage 0: the loss is divided by the accumulation steps in `backward`;
`step` counts micro-batches and, at each accumulation boundary, clips the gradients' global norm,
steps the optimizer and sets the gradients to None.
"""

from __future__ import annotations

from typing import Any

import torch

from twotower_lib.errors import UserError


class TorchEngine:
    """One process's model and AdamW, stepped as DeepSpeed steps them (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, param_groups: list[dict], ds: dict[str, Any], device: torch.device,
                 compile: str | None = None):
        opt = ds.get("optimizer", {})
        if opt.get("type", "AdamW").lower() != "adamw":
            raise UserError(f"the torch engine trains with AdamW; the DeepSpeed config asks for {opt.get('type')!r}")
        p = opt.get("params", {})
        self.device = device
        self.module = model.to(device)
        self.forward = torch.compile(self.module) if compile == "model" else self.module
        if compile == "layers":
            self.module.compile_regions()
        self.optimizer = torch.optim.AdamW(param_groups, lr=p.get("lr", 1e-3), betas=tuple(p.get("betas", (0.9, 0.999))),
                                           eps=p.get("eps", 1e-8), weight_decay=p.get("weight_decay", 0.01),
                                           fused=True if device.type == "cuda" else None)
        self.clip = float(ds.get("gradient_clipping", 0.0) or 0.0)
        self.accum = int(ds.get("gradient_accumulation_steps", 1))
        self.micro_steps = 0

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def train(self, mode: bool = True) -> "TorchEngine":
        self.module.train(mode)
        return self

    def backward(self, loss: torch.Tensor) -> None:
        (loss / self.accum if self.accum > 1 else loss).backward()

    def step(self) -> None:
        """Count a micro-batch; at the accumulation boundary clip, step and clear the gradients."""
        self.micro_steps += 1
        if self.micro_steps % self.accum:
            return
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip)  # no host sync: a device scale
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
