"""The trainer's engine without DeepSpeed: plain PyTorch AdamW (fused on GPUs), fp32 weights and gradients,
bf16 autocast on GPUs; on several processes, PyTorch's own DistributedDataParallel.

Why: on one GPU at ZeRO stage 0, DeepSpeed's bf16 wrapper costs more than it gives. It keeps bf16
weights beside fp32 master copies, checks each parameter tensor for overflow with a host sync,
flattens and all-reduces the gradients even for a world of one, and accumulates gradients in bf16.
This engine keeps the surface `train` uses (`engine(inputs, labels, positions)`, `backward`, `step`, `module`,
`optimizer`, `device`, `train()`) and takes every setting from the same DeepSpeed JSON config (the
optimizer's parameters, `gradient_clipping`, `gradient_accumulation_steps`), so a run has one
configuration either way.

Launched with several processes (DeepSpeed's launcher or `torchrun`: the same environment variables, the process
group `train` opens), the model is wrapped in `DistributedDataParallel`: each optimizer step all-reduces the
gradients once, averaged over the processes, at the last micro-batch of the accumulation (the others run without
synchronising), so N processes accumulating k micro-batches step as one process accumulating N x k. The compiled
engines compile the model inside the wrapper (its regions, or the wrapped module as one graph: torch.compile splits
it at DDP's gradient buckets). CUDA graphs stay single-process.

With `--engine torch-compile` the forward pass runs through `torch.compile` as one graph; with
`--engine torch-compile-layers` region by region (`TwoTowerLM.compile_regions`: the embedding, each layer, the
decoder with the loss), which compiles minutes sooner at Table 1 sizes. Either way the parameters are the model's
own, so weights and checkpoints are the same files. It compiles once when a micro-batch's shapes repeat: BERT
predicts a random number of positions, which `train --label-bucket` pads to a multiple (ignored labels).
ELMo's LSTMs are not traced (the graph breaks around them).

With `--engine torch-graphs` (GPUs only) those regions are compiled with torch.compile's "reduce-overhead": each is
recorded once as a CUDA graph and then replayed, one launch for all of its kernels, for the models whose steps
wait on the host (Bert-base). A graph's outputs live in memory that its next replay overwrites, and the backward
graph's outputs are the parameters' gradients: when a parameter has no `.grad`, autograd takes the graph's output
tensor itself as `.grad`, and the next micro-batch overwrites the gradient being accumulated (PyTorch's CUDA graph
trees then stop with "accessing tensor output of CUDAGraphs that has been overwritten" or, in reports on
pytorch/pytorch#169545, silently accumulate the wrong gradient).
So this engine keeps every gradient in a buffer of its own, allocated once and zeroed after each optimizer step
instead of freed: autograd adds each micro-batch's gradient into it in place. The same values (0 + g = g); one
difference from set-to-None: a parameter that gets no gradient in a step is still decayed by AdamW, as
DeepSpeed's flat gradient buffers do. Each micro-batch starts a new graph generation
(`torch.compiler.cudagraph_mark_step_begin`) and its loss is copied out of the graph's memory.

Semantics as DeepSpeed's at stage 0: the loss is divided by the accumulation steps in `backward`;
`step` counts micro-batches and, at each accumulation boundary, clips the gradients' global norm,
steps the optimizer and sets the gradients to None (to zero with CUDA graphs).
"""

from __future__ import annotations

from typing import Any

import torch

from twotower_lib.errors import UserError


class TorchEngine:
    """A process's model and AdamW (DistributedDataParallel where `world` > 1), stepped as DeepSpeed steps them (see the
    module docstring)."""

    def __init__(self, model: torch.nn.Module, param_groups: list[dict], ds: dict[str, Any], device: torch.device,
                 compile: str | None = None, cuda_graphs: bool = False, world: int = 1):
        opt = ds.get("optimizer", {})
        if opt.get("type", "AdamW").lower() != "adamw":
            raise UserError(f"the torch engine trains with AdamW; the DeepSpeed config asks for {opt.get('type')!r}")
        p = opt.get("params", {})
        if world > 1 and cuda_graphs:
            raise UserError("--engine torch-graphs replays CUDA graphs in one process; with several processes use "
                            "--engine torch-compile or torch-compile-layers")
        self.device = device
        self.module = model.to(device)
        options = {"mode": "reduce-overhead"} if cuda_graphs else {}
        if compile == "layers":
            self.module.compile_regions(**options)
        self.ddp = None
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.ddp = DistributedDataParallel(self.module, device_ids=[device.index] if device.type == "cuda" else None)
        wrapped = self.ddp or self.module
        self.forward = torch.compile(wrapped, **options) if compile == "model" else wrapped
        self.cuda_graphs = cuda_graphs
        if cuda_graphs:  # gradients in buffers of their own, added to in place (the module docstring says why)
            for param in self.module.parameters():
                if param.requires_grad:
                    param.grad = torch.zeros_like(param)
        self.optimizer = torch.optim.AdamW(param_groups, lr=p.get("lr", 1e-3), betas=tuple(p.get("betas", (0.9, 0.999))),
                                           eps=p.get("eps", 1e-8), weight_decay=p.get("weight_decay", 0.01),
                                           fused=True if device.type == "cuda" else None)
        self.clip = float(ds.get("gradient_clipping", 0.0) or 0.0)
        self.accum = int(ds.get("gradient_accumulation_steps", 1))
        self.micro_steps = 0

    def __call__(self, *args, **kwargs):
        """The loss and logits of one micro-batch. With CUDA graphs the logits are the graph's memory, valid
        until the next call; the loss is a copy."""
        if self.ddp is not None:  # all-reduce only in the backward pass of an accumulation's last micro-batch
            self.ddp.require_backward_grad_sync = (self.micro_steps + 1) % self.accum == 0
        if not self.cuda_graphs:
            return self.forward(*args, **kwargs)
        torch.compiler.cudagraph_mark_step_begin()
        loss, logits = self.forward(*args, **kwargs)
        return (None if loss is None else loss.clone()), logits

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
        self.optimizer.zero_grad(set_to_none=not self.cuda_graphs)
