"""BERT-style tower: Hugging Face BERT encoder layers built from a config (no pretrained weights).

Bidirectional attention over the (partly masked) input; the masking itself is done by
`make_batch`. The paper used DeepSpeed's CUDA transformer kernel (pre-LN): set
`deepspeed_kernel=True` in the model config on a CUDA machine to use it (`DeepSpeedKernelTower`).
Elsewhere `norm_scheme="post"` uses the Hugging Face layers (post-LN, as in the original BERT) and
`norm_scheme="pre"` that kernel's pre-LN layer in plain torch (`PreLNBertLayer`) with a final LayerNorm, as
the kernel tower has. `layout="released"` gives the released code's towers: the pre-LN layer with no final
LayerNorm. With `position="relative"` the pre-LN layer's attention adds a learned bias per head and distance.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertLayer

from twotower_lib.errors import UserError
from twotower_lib.models.config import RELATIVE_DISTANCE, ModelConfig


def hf_config(cfg: ModelConfig) -> BertConfig:
    return BertConfig(vocab_size=1, hidden_size=cfg.hidden, num_hidden_layers=cfg.n_layer,
                      num_attention_heads=cfg.n_head, intermediate_size=cfg.intermediate,
                      hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
                      max_position_embeddings=cfg.max_position, layer_norm_eps=cfg.layer_norm_eps,
                      attn_implementation="sdpa")


class PreLNBertLayer(nn.Module):
    """DeepSpeed's pre-LN transformer layer in plain torch, with the kernel's parameters (qkv, output,
    two LayerNorms, two feed-forward maps): x + attention(LN(x)), then x + FFN(LN(x)). With `position="relative"`
    the attention logits add `rel_bias[head, clip(j - i)]`, started at ALiBi's -slope x |j - i| (slopes 2^(-8h/n))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        H, eps = cfg.hidden, cfg.layer_norm_eps
        self.n_head, self.attn_dropout = cfg.n_head, cfg.dropout
        self.attn_ln = nn.LayerNorm(H, eps=eps)              # attn_nw, attn_nb
        self.qkv = nn.Linear(H, 3 * H)                       # attn_qkvw, attn_qkvb
        self.attn_out = nn.Linear(H, H)                      # attn_ow, attn_ob
        self.ffn_ln = nn.LayerNorm(H, eps=eps)               # norm_w, norm_b
        self.ffn_in = nn.Linear(H, cfg.intermediate)         # inter_w, inter_b
        self.ffn_out = nn.Linear(cfg.intermediate, H)        # output_w, output_b
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.position == "relative":
            slopes = 2.0 ** (-8.0 * torch.arange(1, cfg.n_head + 1) / cfg.n_head)
            distance = torch.arange(-RELATIVE_DISTANCE, RELATIVE_DISTANCE + 1).abs()
            self.rel_bias = nn.Parameter(-slopes[:, None] * distance)             # (nh, 2 * RELATIVE_DISTANCE + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T, H)
        B, T, H = x.shape
        q, k, v = self.qkv(self.attn_ln(x)).view(B, T, 3, self.n_head, H // self.n_head).permute(2, 0, 3, 1, 4)
        bias = None
        if hasattr(self, "rel_bias"):
            i = torch.arange(T, device=x.device)
            offset = (i[None] - i[:, None]).clamp(-RELATIVE_DISTANCE, RELATIVE_DISTANCE) + RELATIVE_DISTANCE
            bias = self.rel_bias[:, offset].to(q.dtype)                               # (nh, T, T)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias,                  # (B, nh, T, hd)
                                           dropout_p=self.attn_dropout if self.training else 0.0)
        x = x + self.drop(self.attn_out(a.transpose(1, 2).reshape(B, T, H)))
        return x + self.drop(self.ffn_out(F.gelu(self.ffn_in(self.ffn_ln(x)))))


class BertTower(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_f = nn.Identity()
        if cfg.layout == "released" or cfg.norm_scheme == "pre":
            self.layers = nn.ModuleList(PreLNBertLayer(cfg) for _ in range(cfg.n_layer))
            if cfg.layout != "released":     # a pre-LN stack ends in a LayerNorm; the released code's towers do not
                self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)
            return
        config = hf_config(cfg)
        self.layers = nn.ModuleList(BertLayer(config, layer_idx=i) for i in range(cfg.n_layer))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T, H)
        for layer in self.layers:
            x = layer(x)
        return self.ln_f(x)


KERNEL_MAX_BATCH = 512  # the fused kernel sizes its workspace for this many sequences per micro-batch


class DeepSpeedKernelTower(nn.Module):
    """BERT tower from DeepSpeed's fused CUDA transformer layers (the paper's Bing-BERT kernel, pre-LN).

    CUDA only: the kernel is JIT-built on first use; on a CPU it refuses with a clear error. On the
    reference H100 (CUDA 13.0, torch 2.11, DeepSpeed 0.19.8) the kernel built but crashed with a
    segmentation fault when creating its first layer (results/gpu/gpu_tests_run2.log): there the
    Hugging Face layers (the default) are the GPU path. `tests/test_gpu.py` checks the kernel against
    `PreLNBertLayer` wherever it runs.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if not torch.cuda.is_available():
            raise UserError("model config `deepspeed_kernel` = True needs a CUDA GPU (DeepSpeed's fused "
                            "transformer kernel); set it to False to use the Hugging Face BERT layers")
        from deepspeed.ops.transformer import DeepSpeedTransformerConfig, DeepSpeedTransformerLayer

        from twotower_lib.cuda_arch import cuda_arch_list_for_deepspeed

        cuda_arch_list_for_deepspeed()
        ds = DeepSpeedTransformerConfig(batch_size=KERNEL_MAX_BATCH, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                                        heads=cfg.n_head, attn_dropout_ratio=cfg.dropout,
                                        hidden_dropout_ratio=cfg.dropout, num_hidden_layers=cfg.n_layer,
                                        initializer_range=0.02, layer_norm_eps=cfg.layer_norm_eps,
                                        pre_layer_norm=True, fp16=False)
        self.layers = nn.ModuleList(DeepSpeedTransformerLayer(ds) for _ in range(cfg.n_layer))
        # pre-LN stacks usually end with a LayerNorm; the released code's towers do not
        self.ln_f = nn.Identity() if cfg.layout == "released" else nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T, H)
        B, T, _ = x.shape
        mask = x.new_zeros(B, 1, 1, T)  # additive attention mask: every position visible
        for layer in self.layers:
            out = layer(x, mask)
            x = out[0] if isinstance(out, tuple) else out
        return self.ln_f(x)
