"""Probing heads (Fig. 2, Eq. 2 of the paper): a fresh output layer per tower.

After cooperative training, the embedding and the towers are frozen and each tower gets its own
head, trained to predict the token from that tower's features alone.

- `mlp` (the authors' design): Linear(H→H) + GELU → LayerNorm → Linear(H→V), untied.
- `tied`: Linear(H→E) + GELU → LayerNorm → the frozen trained input embedding as decoder (+ a
  trainable bias): Eq. 2 read literally, the probability is exp(x(t)ᵀ h) with x the word embedding.
- `linear` (the default): Linear(H→E) → the frozen input embedding (+ bias): Eq. 2 with a linear
  read-out. Its log-likelihood is concave in the weights, so every seed trains towards one optimum.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from twotower_lib.errors import UserError

HEAD_KINDS = ("mlp", "tied", "linear")


class ProbeHead(nn.Module):
    def __init__(self, hidden: int, vocab_size: int, kind: str = "mlp",
                 embedding: torch.Tensor | None = None, layer_norm_eps: float = 1e-12):
        super().__init__()
        if kind not in HEAD_KINDS:
            raise UserError(f"unknown probe head {kind!r}; choose one of {HEAD_KINDS}")
        self.kind = kind
        width = hidden if kind == "mlp" else int(embedding.shape[1])
        self.dense = nn.Linear(hidden, width)
        self.ln = None if kind == "linear" else nn.LayerNorm(width, eps=layer_norm_eps)
        if kind == "mlp":
            self.decoder = nn.Linear(hidden, vocab_size)
        else:
            if embedding is None or embedding.shape[0] != vocab_size:
                raise UserError(f"the {kind} probe head needs the model's (vocab_size, E) input embedding")
            self.register_buffer("embedding", embedding.detach().clone(), persistent=False)  # frozen
            self.bias = nn.Parameter(torch.zeros(vocab_size))
        for m in (self.dense, getattr(self, "decoder", None)):
            if m is not None:
                nn.init.normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def features(self, h: torch.Tensor) -> torch.Tensor:  # (N, H) -> (N, width): what the decoder reads
        return self.dense(h) if self.ln is None else self.ln(F.gelu(self.dense(h)))

    def decoder_weights(self) -> tuple[torch.Tensor, torch.Tensor]:  # (V, width), (V,)
        if self.kind == "mlp":
            return self.decoder.weight, self.decoder.bias
        return self.embedding, self.bias

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, H) -> logits (N, V)
        weight, bias = self.decoder_weights()
        return F.linear(self.features(h), weight, bias)

    def logprob(self, h: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """log p(target | h) per row, (N, H), (N,) -> (N,), in fp32 even under autocast: scores are small
        differences of log-probabilities, and a bf16 logit is off by up to ~0.03 nats."""
        with torch.autocast(h.device.type, enabled=False):
            return token_logprob(self(h.float()), target)

    def loss(self, h: torch.Tensor, target: torch.Tensor, matmul_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Mean cross-entropy of the head's prediction from `h` (N, H) against `target` (N,): the
        same value and gradients as `F.cross_entropy(self(h), target)`, faster (see `LinearCrossEntropy`).
        `matmul_dtype=torch.bfloat16` runs the three (N, V) matmuls in bf16 (fp32 softmax and loss)."""
        weight, bias = self.decoder_weights()
        return LinearCrossEntropy.apply(self.features(h), weight, bias, target, matmul_dtype)


class LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of softmax(x Wᵀ + b) against `target`, with the gradient written in place.

    Why: a probe head spends most of its time on the (N, V) logits. The generic path allocates the
    log-softmax, a zero-filled gradient and the softmax gradient as three more (N, V) tensors and
    exponentiates every logit twice. Here the forward exponentiates the logits once, in place
    (shifted by their row maximum), and the backward scales that buffer into softmax − one-hot.
    Equal to `F.cross_entropy` up to float rounding (tests/test_probe.py); on the reference CPU
    (V = 8192, N = 1024, bf16 matmuls) one step of the loss and its input gradient took 61 ms
    against 73 ms for the two-exponential version and 103 ms before the allocator setting of
    `workers.keep_freed_memory`. Every target must be a real class (no ignore index). Computed in
    fp32 under autocast too; with `dtype` bf16 the matmuls take bf16 inputs (fp32 accumulation)
    while the softmax and the loss stay fp32: on CPUs with native bf16 that is about 2x faster
    (`probe_training.bf16_matmul_pays_off`).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, target: torch.Tensor,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            xd, wd = x.to(dtype), weight.to(dtype)
            logits = torch.addmm(bias.to(dtype), xd, wd.t()).float()      # (N, V), fp32
            target_logit = logits.gather(1, target[:, None]).squeeze(1)     # (N,)
            top = logits.amax(dim=1, keepdim=True)                          # (N, 1)
            e = logits.sub_(top).exp_()                                     # (N, V): exp(logit - max), in place
            total = e.sum(dim=1)                                            # (N,)
            lse = total.log() + top.squeeze(1)                              # log-sum-exp, (N,)
        ctx.save_for_backward(xd, wd, e, total, target)
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype)
        return (lse - target_logit).mean()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, e, total, target = ctx.saved_tensors
        scale = grad / len(target)
        d = e.mul_(scale / total[:, None])                                  # softmax * scale, in place
        d[torch.arange(len(target)), target] -= scale                       # - one-hot: d loss / d logits, (N, V)
        need = ctx.needs_input_grad
        dm = d.to(x.dtype)                                                  # in the matmuls' dtype
        tx, tw, tb = ctx.dtypes
        return ((dm @ weight).to(tx) if need[0] else None, (dm.t() @ x).to(tw) if need[1] else None,
                d.sum(0).to(tb) if need[2] else None, None, None)


def token_logprob(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """log p(target) under softmax(logits), per row: (N, V), (N,) -> (N,); no (N, V) log-softmax copy."""
    return logits.gather(1, target[:, None]).squeeze(1) - torch.logsumexp(logits, dim=1)
