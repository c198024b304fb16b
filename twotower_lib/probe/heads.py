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
from twotower_lib.probe.config import HEAD_KINDS


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

    @property
    def folds(self) -> bool:
        """Whether the logits are computed as one affine map of the tower features (`folded`): the linear
        head when the tower is narrower than the embedding (two towers: H = E/2), which halves the (N, V) work."""
        return self.kind == "linear" and self.dense.in_features < self.dense.out_features

    def folded(self, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:  # (V, H), (V,)
        """The linear head as one affine map: (h Aᵀ + c) Eᵀ + b = h (E A)ᵀ + (E c + b). Differentiable in A, c, b.

        `dtype` bf16: the (V, H) map E A is computed from bf16 inputs and returned in bf16 (the bias stays
        fp32). Training uses it where its matmuls are bf16 anyway (`loss`): the fold, a (V, E) x (E, H)
        product forward and backward at every step, is a large part of a head's step."""
        bias = torch.addmv(self.bias, self.embedding, self.dense.bias)
        if dtype == torch.float32:
            return self.embedding @ self.dense.weight, bias
        lowp = getattr(self, "_embedding_lowp", None)
        if lowp is None or lowp.dtype != dtype or lowp.device != self.embedding.device:
            lowp = self._embedding_lowp = self.embedding.to(dtype)      # the frozen embedding, converted once
        return lowp @ self.dense.weight.to(dtype), bias

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, H) -> logits (N, V)
        if self.folds:
            return F.linear(h, *self.folded())
        weight, bias = self.decoder_weights()
        return F.linear(self.features(h), weight, bias)

    def logprob(self, h: torch.Tensor, target: torch.Tensor, matmul_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """log p(target | h) per row, (N, H), (N,) -> (N,), in fp32 even under autocast: scores are small
        differences of log-probabilities, and a bf16 logit is off by up to ~0.03 nats. With `matmul_dtype`
        bf16 only the log-sum-exp over the vocabulary reads bf16 logits (`linear_logprob`)."""
        return self.scorer(matmul_dtype)(h, target)

    @torch.no_grad()
    def scorer(self, matmul_dtype: torch.dtype = torch.float32):
        """`logprob` as a function of (h, target) with the head's read-out computed once (the fold of the
        linear head is a (V, E) x (E, H) product): for scoring many batches with a trained, frozen head."""
        with torch.autocast(self.dense.weight.device.type, enabled=False):
            if self.folds:                                  # exact fp32 even under the towers' autocast
                weight, bias = self.folded()
                features = None
            else:
                (weight, bias), features = self.decoder_weights(), self.features
            weight, bias = weight.detach().float(), bias.detach().float()

        @torch.no_grad()
        def score(h: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            with torch.autocast(h.device.type, enabled=False):
                h = h.float()
                return linear_logprob(h if features is None else features(h), weight, bias, target, matmul_dtype)
        return score

    def loss(self, h: torch.Tensor, target: torch.Tensor, matmul_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Mean cross-entropy of the head's prediction from `h` (N, H) against `target` (N,): the
        same value and gradients as `F.cross_entropy(self(h), target)`, faster (see `LinearCrossEntropy`).
        `matmul_dtype=torch.bfloat16` runs the three (N, V) matmuls in bf16 (fp32 softmax and loss)."""
        if self.folds:
            return LinearCrossEntropy.apply(h, *self.folded(matmul_dtype), target, matmul_dtype)
        weight, bias = self.decoder_weights()
        return LinearCrossEntropy.apply(self.features(h), weight, bias, target, matmul_dtype)


def rows_per_chunk(vocab_size: int, device: torch.device) -> int:
    """Rows of (rows, V) fp32 logits handled at a time: 4 MB on a CPU, so the softmax's passes over them
    run in cache instead of memory (all rows at once on a GPU)."""
    return 1 << 30 if device.type == "cuda" else max(16, (1 << 20) // vocab_size)


class LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of softmax(x Wᵀ + b) against `target`, with its gradients computed in the
    forward pass, a block of rows at a time, so no (N, V) tensor is ever held.

    Why: a probe head spends nearly all its time on the (N, V) logits, and with one (N, V) buffer
    every softmax pass (max, subtract, exponentiate, sum, scale, the conversions to and from bf16)
    streamed N x V x 4 bytes through memory, as long as the matmuls themselves took. Here each block
    of rows (`rows_per_chunk`) goes from logits to d loss / d logits while it is in cache, and its
    contributions to dW, db (and dx) are added up; the backward pass only scales them by the incoming
    gradient (the loss is a scalar). Equal to `F.cross_entropy` up to float rounding
    (tests/test_probe.py); `benchmarks/bench_probe_head.py` times it against torch's generic path.
    Every target must be a real class (no ignore index). With `dtype` bf16 the matmuls take bf16
    inputs (fp32 accumulation) while the softmax and the loss stay fp32 (`probe.precision` says where).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, target: torch.Tensor,
                dtype: torch.dtype = torch.float32, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        need_x, need_w = ctx.needs_input_grad[:2]
        n = len(target)
        with torch.autocast(x.device.type, enabled=False):
            xd, wd, b = x.to(dtype), weight.to(dtype), bias.float()
            dw = torch.zeros(weight.shape, dtype=torch.float32, device=x.device) if need_w else None  # (V, H)
            db = torch.zeros(len(b), dtype=torch.float32, device=x.device)                          # (V,)
            dx = torch.empty(x.shape, dtype=torch.float32, device=x.device) if need_x else None     # (N, H)
            total = torch.zeros((), dtype=torch.float64, device=x.device)
            step = rows_per_chunk(len(b), x.device)
            for r in range(0, n, step):
                xc, t = xd[r:r + step], target[r:r + step]
                logits = (xc @ wd.t()).float().add_(b)                      # (c, V), fp32
                d = torch.softmax(logits, dim=1)                            # (c, V): one fused pass per row
                rows = torch.arange(len(t), device=x.device)
                total -= _log_target_prob(d, logits, rows, t).sum(dtype=torch.float64)
                d[rows, t] -= 1                                             # - one-hot: d loss_i / d logits
                db += d.sum(0)
                dd = d.to(dtype)
                if need_w and dtype == torch.float32:
                    dw.addmm_(dd.t(), xc)                                   # (V, H), accumulated in the product
                elif need_w:
                    dw += (dd.t() @ xc).float()
                if need_x:
                    dx[r:r + step] = dd @ wd                                # (c, H)
        ctx.save_for_backward(*(g if g is None else g / n for g in (dx, dw, db)))
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype)
        return (total / n).to(out_dtype)   # fp64 where a caller compares losses closer than fp32 resolves

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        dx, dw, db = ctx.saved_tensors
        tx, tw, tb = ctx.dtypes
        need = ctx.needs_input_grad
        return ((dx * grad).to(tx) if need[0] else None, (dw * grad).to(tw) if need[1] else None,
                (db * grad).to(tb) if need[2] else None, None, None, None)


def _log_target_prob(p: torch.Tensor, logits: torch.Tensor, rows: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """log p(t) per row from the softmax `p` (c, V); rows whose probability fell below fp32's range
    (a logit gap over ~100 nats) are taken exactly from their `logits`."""
    pt = p[rows, t]
    out = pt.log()
    low = pt == 0
    if low.any():
        out[low] = logits[low, t[low]] - torch.logsumexp(logits[low], dim=1)
    return out


def linear_logprob(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, target: torch.Tensor,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """log softmax(x Wᵀ + b)[target] per row, (N, H), (V, H), (V,), (N,) -> (N,), a block of rows at a
    time (`rows_per_chunk`). The target's logit is always exact fp32 (a dot product per row); with
    `dtype` bf16 the log-sum-exp reads bf16-input logits, whose rounding errors average out over the
    vocabulary (`benchmarks/bench_probe_head.py` prints the error)."""
    x, weight, bias = x.float(), weight.float(), bias.float()
    wd = weight.to(dtype)
    out = torch.empty(len(target), dtype=torch.float32, device=x.device)
    step = rows_per_chunk(len(bias), x.device)
    for r in range(0, len(target), step):
        xc, t = x[r:r + step], target[r:r + step]
        lse = torch.logsumexp((xc.to(dtype) @ wd.t()).float().add_(bias), dim=1)   # (c,)
        out[r:r + step] = (xc * weight[t]).sum(1) + bias[t] - lse
    return out


def token_logprob(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """log p(target) under softmax(logits), per row: (N, V), (N,) -> (N,); no (N, V) log-softmax copy."""
    return logits.gather(1, target[:, None]).squeeze(1) - torch.logsumexp(logits, dim=1)
