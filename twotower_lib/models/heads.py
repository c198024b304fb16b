"""Probing heads (Fig. 2, Eq. 2 of the paper): a fresh output layer per tower.

After cooperative training, the embedding and the towers are frozen and each tower gets its own
head, trained to predict the token from that tower's features alone.

- `mlp` (default; the authors' design): Linear(H→H) + GELU → LayerNorm → Linear(H→V), untied.
- `tied`: Linear(H→E) + GELU → LayerNorm → the frozen trained input embedding as decoder (+ a
  trainable bias): Eq. 2 read literally, the probability is exp(x(t)ᵀ h) with x the word embedding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from twotower_lib.errors import UserError

HEAD_KINDS = ("mlp", "tied")


class ProbeHead(nn.Module):
    def __init__(self, hidden: int, vocab_size: int, kind: str = "mlp",
                 embedding: torch.Tensor | None = None, layer_norm_eps: float = 1e-12):
        super().__init__()
        if kind not in HEAD_KINDS:
            raise UserError(f"unknown probe head {kind!r}; choose one of {HEAD_KINDS}")
        self.kind = kind
        width = hidden if kind == "mlp" else int(embedding.shape[1])
        self.dense = nn.Linear(hidden, width)
        self.ln = nn.LayerNorm(width, eps=layer_norm_eps)
        if kind == "mlp":
            self.decoder = nn.Linear(hidden, vocab_size)
        else:
            if embedding is None or embedding.shape[0] != vocab_size:
                raise UserError("the tied probe head needs the model's (vocab_size, E) input embedding")
            self.register_buffer("embedding", embedding.detach().clone(), persistent=False)  # frozen
            self.bias = nn.Parameter(torch.zeros(vocab_size))
        for m in (self.dense, getattr(self, "decoder", None)):
            if m is not None:
                nn.init.normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, H) -> logits (N, V)
        x = self.ln(F.gelu(self.dense(h)))
        if self.kind == "mlp":
            return self.decoder(x)
        return F.linear(x, self.embedding) + self.bias
