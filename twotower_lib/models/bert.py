"""BERT-style tower: Hugging Face BERT encoder layers built from a config (no pretrained weights).

Bidirectional attention over the (partly masked) input; the masking itself is done by
`make_batch`. The paper used DeepSpeed's CUDA transformer kernel (pre-LN): set
`deepspeed_kernel=True` in the model config on a CUDA machine to use it (`DeepSpeedKernelTower`).
Elsewhere we use the Hugging Face layers (post-LN, as in the original BERT).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertLayer

from twotower_lib.errors import UserError
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


class DeepSpeedKernelTower(nn.Module):
    """BERT tower from DeepSpeed's fused CUDA transformer layers (the paper's Bing-BERT kernel, pre-LN).

    CUDA only: the kernel is JIT-built on first use. Not exercised by the test suite, which runs
    on CPU; there it refuses with a clear error instead.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if not torch.cuda.is_available():
            raise UserError("model config `deepspeed_kernel` = True needs a CUDA GPU (DeepSpeed's fused "
                            "transformer kernel); set it to False to use the Hugging Face BERT layers")
        from deepspeed.ops.transformer import DeepSpeedTransformerConfig, DeepSpeedTransformerLayer

        ds = DeepSpeedTransformerConfig(hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                                        heads=cfg.n_head, attn_dropout_ratio=cfg.dropout,
                                        hidden_dropout_ratio=cfg.dropout, num_hidden_layers=cfg.n_layer,
                                        initializer_range=0.02, layer_norm_eps=cfg.layer_norm_eps,
                                        pre_layer_norm=True, fp16=False)
        self.layers = nn.ModuleList(DeepSpeedTransformerLayer(ds) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)  # pre-LN stacks end with a LayerNorm

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T, H)
        B, T, _ = x.shape
        mask = x.new_zeros(B, 1, 1, T)  # additive attention mask: every position visible
        for layer in self.layers:
            out = layer(x, mask)
            x = out[0] if isinstance(out, tuple) else out
        return self.ln_f(x)
