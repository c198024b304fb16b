"""GPT-style tower: Hugging Face GPT-2 blocks built from a config (no pretrained weights).

The tower is GPT2Model without its token/position embeddings: those are shared by all towers
and live in the two-tower assembly, which hands each tower a (B, T, H) input. Causality comes
from SDPA's causal mode (no attention mask is passed; blocks never contain padding).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

from twotower_lib.models.config import ModelConfig


def hf_config(cfg: ModelConfig) -> GPT2Config:
    return GPT2Config(vocab_size=1, n_positions=cfg.max_position, n_embd=cfg.hidden, n_layer=cfg.n_layer,
                      n_head=cfg.n_head, n_inner=cfg.intermediate, resid_pdrop=cfg.dropout,
                      embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout, layer_norm_epsilon=cfg.layer_norm_eps,
                      # exact GELU (one fused kernel) instead of GPT-2's tanh approximation, which
                      # runs as a chain of elementwise ops and took ~15% of a CPU step
                      activation_function="gelu",
                      attn_implementation="sdpa", bos_token_id=None, eos_token_id=None)


class GPTTower(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        config = hf_config(cfg)
        self.blocks = nn.ModuleList(GPT2Block(config, layer_idx=i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)  # GPT-2 is pre-LN: close with a LayerNorm

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T, H)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)
