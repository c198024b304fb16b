"""The authors' released modules, transcribed constructor by constructor, to count their parameters.

hezq06/twotower_lm at e8b468e, ttlm/model.py (`phase1_mlm`, the pre-training phase). Their classes
import CUDA-only DeepSpeed kernels and download GPT-2's config from a hub, so they cannot be built
here; each function below builds the same modules, in the same order and shapes, on the meta device.
Nothing here is shared with twotower_lib: it is the independent side of the parameter-count tests.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

OUTPUT_SIZE = 30528  # config.get("output_size", 30528) in every class


def _ln(n: int) -> nn.ParameterList:  # BertLayerNorm: weight and bias
    return nn.ParameterList([nn.Parameter(torch.ones(n)), nn.Parameter(torch.zeros(n))])


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # parameters() yields a shared tensor once


def elmo(model_size: int = 256, hidden_size: int = 4096, layers: int = 2, V: int = OUTPUT_SIZE) -> int:
    """TwoTowerELMo.__init__ ("large_2tower": hidden_size 4096)."""
    m, L = model_size, hidden_size
    with torch.device("meta"):
        mod = nn.ModuleDict(dict(
            pt_emb=nn.Embedding(V, 2 * m), emb1=nn.Linear(2 * m, m), emb2=nn.Linear(2 * m, m),
            layer_norm_embf=_ln(2 * m), layer_norm_embb=_ln(2 * m),
            lstm_forward1=nn.LSTM(m, L, num_layers=layers, batch_first=True),
            lstm_backward1=nn.LSTM(m, L, num_layers=layers, batch_first=True),
            h2o_f1=nn.Linear(L, m), h2o_b1=nn.Linear(L, m),
            lstm_forward2=nn.LSTM(m, L, num_layers=layers, batch_first=True),
            lstm_backward2=nn.LSTM(m, L, num_layers=layers, batch_first=True),
            h2o_f2=nn.Linear(L, m), h2o_b2=nn.Linear(L, m),
            layer_norm_final=_ln(4 * m), dense_act=nn.Linear(4 * m, 2 * m), layer_norm_trans=_ln(2 * m)))
        return _count(mod) + V                                                # + out_bias


def gpt(hidden_size: int = 384, layers: int = 12, heads: int = 12, window: int = 128,
        V: int = OUTPUT_SIZE) -> tuple[int, int]:
    """TwoTowerGPT.__init__ ("base_2tower"): (all parameters, those used in the forward pass).

    Two GPT2LMHeadModels; model2's wte and wpe are replaced by model1's, so model2's lm_head keeps
    the V x H matrix that was its own wte: a parameter of the module that no forward pass reads."""
    config = GPT2Config(vocab_size=V, n_positions=window, n_embd=hidden_size, n_layer=layers, n_head=heads)
    with torch.device("meta"):
        model1, model2 = GPT2LMHeadModel(config), GPT2LMHeadModel(config)
        model2.transformer.wte = model1.transformer.wte
        model2.transformer.wpe = model1.transformer.wpe
        mod = nn.ModuleDict(dict(model1=model1, model2=model2, layer_norm_final=_ln(2 * hidden_size),
                                 dense_act=nn.Linear(2 * hidden_size, hidden_size),
                                 layer_norm_trans=_ln(hidden_size)))
        total = _count(mod) + V                                               # + out_bias
    return total, total - V * hidden_size


def _deepspeed_layer(H: int, inter: int) -> int:
    """DeepSpeedTransformerLayer's parameters (deepspeed/ops/transformer/transformer.py):
    attn_qkvw/b, attn_ow/b, attn_nw/b, inter_w/b, output_w/b, norm_w/b."""
    return (3 * H * H + 3 * H) + (H * H + H) + 2 * H + (inter * H + inter) + (H * inter + H) + 2 * H


def bert(hidden_size: int, inter: int, layers: int, max_seq_length: int = 512, V: int = OUTPUT_SIZE) -> int:
    """TwoTowerDsBert.__init__ (two towers): "base_2tower" 384 / 1536 / 12, "large_2tower" 512 / 2048 / 24."""
    E = 2 * hidden_size
    with torch.device("meta"):
        mod = nn.ModuleDict(dict(
            pt_emb=nn.Embedding(V, E), emb1=nn.Linear(E, hidden_size), emb2=nn.Linear(E, hidden_size),
            position_embeddings=nn.Embedding(max_seq_length, E), layer_norm_emb=_ln(E),
            layer_norm_final=_ln(E), dense_act=nn.Linear(E, E), layer_norm_trans=_ln(E)))
        return _count(mod) + V + 2 * layers * _deepspeed_layer(hidden_size, inter)   # + out_bias + trf_layers1/2
