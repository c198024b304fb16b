"""ELMo-style tower: a forward and a backward multi-layer LSTM (torch's `nn.LSTM`).

Cloze objective: the state at position i must never see token i. The forward LSTM reads the
input shifted right by one (position i sees tokens < i), the backward LSTM reads it shifted left
by one and reversed (position i sees tokens > i). Each direction is projected to H/2 and the two
halves are concatenated, so a tower emits width H like the transformer towers do.

`elmo_backward_zeroed` builds the ELMo of the authors' released code (hezq06/twotower_lm at e8b468e,
`ttlm/model.py`, `flip_seq`). There the backward outputs are "flipped" with
`torch.einsum("bwl,ww->bwl", t, flip(eye(W)))`; a repeated index in one operand takes that matrix's
diagonal, and the diagonal of an anti-identity is zero for an even window W (128 there): every
backward output is multiplied by 0. Each tower is then a left-to-right LSTM language model with
a zero half. Here the backward half is zero as there (its LSTM keeps its parameters, as there, but
is not run: its output would be multiplied by 0 and its gradient is 0).

With `layout="released"` (the released module shapes) a tower's input is the forward input (first H/2)
beside the backward input (last H/2), each normalised by its own embedding LayerNorm, and the LSTMs
read H/2; otherwise both LSTMs read the same H-wide input.
"""

from __future__ import annotations

import torch
from torch import nn

from twotower_lib.models.config import ModelConfig


class ELMoTower(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.backward_zeroed = cfg.elmo_backward_zeroed
        self.split_input = cfg.layout == "released"
        lstm = dict(input_size=cfg.tower_input, hidden_size=cfg.intermediate, num_layers=cfg.n_layer,
                    batch_first=True, dropout=cfg.dropout if cfg.n_layer > 1 else 0.0)
        self.forward_lstm = nn.LSTM(**lstm)
        self.backward_lstm = nn.LSTM(**lstm)
        self.forward_proj = nn.Linear(cfg.intermediate, cfg.hidden // 2)
        self.backward_proj = nn.Linear(cfg.intermediate, cfg.hidden // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T, H)
        x_in, x_back = x.chunk(2, dim=-1) if self.split_input else (x, x)   # each (B, T, W)
        start = x_in.new_zeros(x_in[:, :1].shape)              # (B, 1, W): "nothing seen yet"
        x_fwd = torch.cat([start, x_in[:, :-1]], dim=1)        # position i holds token i-1
        if self.backward_zeroed:                               # as released: the backward half is 0
            h_fwd, _ = self.forward_lstm(x_fwd)
            out = self.forward_proj(h_fwd)                     # (B, T, H/2)
            return torch.cat([out, torch.zeros_like(out)], dim=-1)
        x_bwd = torch.cat([x_back[:, 1:], start], dim=1).flip(1)   # reversed; position i holds token i+1
        h_fwd, _ = self.forward_lstm(x_fwd)                    # (B, T, L)
        h_bwd, _ = self.backward_lstm(x_bwd)                   # (B, T, L), reversed order
        return torch.cat([self.forward_proj(h_fwd), self.backward_proj(h_bwd).flip(1)], dim=-1)
