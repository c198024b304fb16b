"""BERT-style tower: Hugging Face BERT encoder layers built from a config (no pretrained weights).

Bidirectional attention over the (partly masked) input; the masking itself is done by
`make_batch`. The paper used DeepSpeed's CUDA transformer kernel (pre-LN); on CPU we use the
Hugging Face layers (post-LN, as in the original BERT).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertLayer

from twotower_lib.models.config import ModelConfig


def hf_config(cfg: ModelConfig) -> BertConfig:
    return BertConfig(vocab_size=1, hidden_size=cfg.hidden, num_hidden_layers=cfg.n_layer,
                      num_attention_heads=cfg.n_head, intermediate_size=cfg.intermediate,
                      hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
                      max_position_embeddings=cfg.max_position, layer_norm_eps=cfg.layer_norm_eps,
                      attn_implementation="sdpa")


class BertTower(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        config = hf_config(cfg)
        self.layers = nn.ModuleList(BertLayer(config, layer_idx=i) for i in range(cfg.n_layer))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T, H)
        for layer in self.layers:
            x = layer(x)
        return x
