"""The two-tower language model (Section 3.1, Eq. 1 of the paper).

    tokens -> shared embedding (k*H wide, + learned positions for GPT/BERT) -> LayerNorm
           -> per-tower linear map to width H -> k identical towers (B, T, k, H)
           -> concatenate -> LayerNorm -> Linear+GELU -> LayerNorm
           -> decoder tied to the embedding + output bias -> logits over the vocabulary

`layout="released"` builds the authors' code's variant of each family (models/config.py, LAYOUTS):
ELMo embeds at H, maps to H/2 per tower and normalises the forward and backward inputs apart; GPT
towers read the shared H-wide embedding directly; BERT towers are pre-LN.

Towers start identical in configuration and differ only by their random initialisation;
whatever division of labour appears between them is learned. `tower_states` exposes each
tower's output separately: the features the probing heads are trained on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap
from transformers.pytorch_utils import Conv1D

from twotower_lib.errors import UserError
from twotower_lib.models.bert import BertTower, DeepSpeedKernelTower
from twotower_lib.models.config import ModelConfig
from twotower_lib.models.elmo import ELMoTower, towers_on_streams
from twotower_lib.models.gpt import GPTTower

TOWER_CLASSES: dict[str, type[nn.Module]] = {"elmo": ELMoTower, "gpt": GPTTower, "bert": BertTower}


class TwoTowerLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        E, H, k = cfg.embed_dim, cfg.hidden, cfg.towers
        released = cfg.layout == "released"
        self.tok_emb = nn.Embedding(cfg.vocab_size, E)
        # ELMo's recurrence carries position; GPT and BERT read a learned position table (none with BERT's other
        # `position`s).
        table = cfg.model_type != "elmo" and cfg.position == "absolute"
        self.pos_emb = nn.Embedding(cfg.max_position, E) if table else None
        # The released GPT reads the raw embedding sum (GPT2Model's own wte + wpe): no LayerNorm, no projection.
        shared_input = released and cfg.model_type == "gpt"
        self.emb_ln = None if shared_input else nn.LayerNorm(E, eps=cfg.layer_norm_eps)
        # The released ELMo normalises its backward input with a LayerNorm of its own (layer_norm_embb).
        self.emb_ln_backward = nn.LayerNorm(E, eps=cfg.layer_norm_eps) if released and cfg.model_type == "elmo" else None
        self.drop = nn.Dropout(cfg.dropout)
        # The k per-tower maps E -> tower_input stored as one Linear: rows [j*W:(j+1)*W] belong to tower j.
        self.tower_in = None if shared_input else nn.Linear(E, k * cfg.tower_input)
        tower_class = DeepSpeedKernelTower if cfg.deepspeed_kernel else TOWER_CLASSES[cfg.model_type]
        self.towers = nn.ModuleList(tower_class(cfg) for _ in range(k))
        self.head_ln1 = nn.LayerNorm(k * H, eps=cfg.layer_norm_eps)
        self.head_dense = nn.Linear(k * H, E)
        self.head_ln2 = nn.LayerNorm(E, eps=cfg.layer_norm_eps)
        self.out_bias = nn.Parameter(torch.zeros(cfg.vocab_size))  # decoder weight is tok_emb.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """BERT/GPT-2 style: N(0, 0.02) weights, zero biases. LSTMs keep torch's default."""
        if isinstance(module, (nn.Linear, Conv1D, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    @property
    def _fused(self) -> bool:
        """Whether the k towers run in one vmapped call (`fuse_towers`; transformer towers, k > 1)."""
        return self.cfg.fuse_towers and self.cfg.towers > 1 and self.cfg.model_type != "elmo"

    def tower_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Each tower's output at every position: (B, T) -> (B, T, k, H)."""
        x = self._tower_inputs(input_ids)                                   # (B, T, k, W)
        if self._fused:
            return self._fused_towers(x)
        inputs = [x[:, :, j] for j in range(self.cfg.towers)]
        if self.cfg.lstm_streams and x.is_cuda and not torch.compiler.is_compiling():   # traced: one stream
            return torch.stack(towers_on_streams(list(self.towers), inputs), dim=2)
        return torch.stack([tower(xj) for tower, xj in zip(self.towers, inputs)], dim=2)

    def _tower_inputs(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The shared embedding mapped to each tower's input: (B, T) -> (B, T, k, W)."""
        B, T = input_ids.shape
        if T > self.cfg.max_position and self.pos_emb is not None:
            raise UserError(f"input has {T} positions but the model's position table has "
                            f"max_position = {self.cfg.max_position}; use blocks of at most that length")
        x = self.tok_emb(input_ids)                                          # (B, T, E)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(T, device=input_ids.device))
        k, W = self.cfg.towers, self.cfg.tower_input
        if self.tower_in is None:                                           # released GPT: one input for all
            x = self.drop(x).unsqueeze(2).expand(B, T, k, W)                # (B, T, k, H)
        elif self.emb_ln_backward is None:
            x = self.tower_in(self.drop(self.emb_ln(x))).view(B, T, k, W)   # (B, T, k, H)
        else:                                                               # released ELMo: forward | backward input
            x = torch.cat([self.tower_in(self.drop(ln(x))).view(B, T, k, W)
                           for ln in (self.emb_ln, self.emb_ln_backward)], dim=-1)   # (B, T, k, 2 * H/2)
        return x

    def _fused_towers(self, x: torch.Tensor) -> torch.Tensor:
        """All k towers in one vmapped call over stacked weights: same maths, fewer, larger kernels (on CUDA,
        attention's vmapped call leaves flash attention: results/gpu/levers/)."""
        # torch.stack, not torch.func.stack_module_state: the latter makes new leaf tensors, and the
        # towers' own parameters would then receive no gradient.
        per_tower = [dict(t.named_parameters()) for t in self.towers]
        params = {name: torch.stack([p[name] for p in per_tower]) for name in per_tower[0]}   # each (k, ...)
        per_tower_buffers = [dict(t.named_buffers()) for t in self.towers]
        buffers = {name: torch.stack([b[name] for b in per_tower_buffers]) for name in per_tower_buffers[0]}
        base = self.towers[0]

        def one_tower(p, b, xj):
            return functional_call(base, (p, b), (xj,))

        out = vmap(one_tower, in_dims=(0, 0, 2), randomness="different")(params, buffers, x)  # (k, B, T, H)
        return out.permute(1, 2, 0, 3)

    def decode(self, states: torch.Tensor) -> torch.Tensor:
        """The cooperative head: tower states (..., k, H) -> logits (..., V) over the concatenation."""
        return self._padded_logits(states)[..., :self.cfg.vocab_size]

    def _padded_logits(self, states: torch.Tensor) -> torch.Tensor:
        """Logits (..., V') with V' = V rounded up to `cfg.vocab_multiple`; the padded columns are -inf, so
        softmax and cross-entropy over V' equal those over V."""
        h = states.flatten(-2)                                              # concatenation (..., k*H)
        h = self.head_ln2(F.gelu(self.head_dense(self.head_ln1(h))))       # (..., E)
        weight, bias = self.tok_emb.weight, self.out_bias
        pad = -self.cfg.vocab_size % self.cfg.vocab_multiple
        if pad:
            weight = torch.cat([weight, weight.new_zeros(pad, weight.size(1))])
            bias = torch.cat([bias, bias.new_full((pad,), float("-inf"))])
        return F.linear(h, weight) + bias                                   # (..., V')

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Logits and, with `labels` (-100 = not predicted), the mean cross-entropy.

        Without `positions`: logits (B, T, V) for labels (B, T). With `positions` (N,), flat indices into
        the B*T positions (`models.labeled_positions`), only those are decoded: logits (N, V) for labels
        (N,). The tied decoder is the largest matmul in small models, and BERT predicts only ~15% of
        positions.
        """
        states = self.tower_states(input_ids)                               # (B, T, k, H)
        if positions is not None:
            states = states.flatten(0, 1).index_select(0, positions)        # (N, k, H)
        return self._loss_and_logits(states, labels)

    def _loss_and_logits(self, states: torch.Tensor, labels: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor]:
        logits = self._padded_logits(states)                                # (..., V')
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1),
                                   ignore_index=-100)
        return loss, logits[..., :self.cfg.vocab_size]

    def compile_regions(self, **options) -> None:
        """Compile the forward pass region by region, in place (torch's "regional compilation"): the embedding
        (`_tower_inputs`), each transformer layer (every layer of a family is the same code on the same shapes,
        so one compiled graph serves them all: two, as the first layer reads a strided slice), the k towers
        together when fused, and the decoder with the loss (`_loss_and_logits`). Compiling the whole forward
        pass as one graph (`torch.compile(model)`) traces every layer of every tower anew, which takes minutes
        at Table 1 sizes; the regions lose only the fusions across a layer's boundary. ELMo's LSTMs and
        DeepSpeed's kernel layers stay eager. The parameters stay the model's own: the same state_dict.
        `options`: `torch.compile`'s keywords (e.g. backend)."""
        self._tower_inputs = torch.compile(self._tower_inputs, **options)
        self._loss_and_logits = torch.compile(self._loss_and_logits, **options)
        if self._fused:
            self._fused_towers = torch.compile(self._fused_towers, **options)
        elif self.cfg.model_type != "elmo" and not self.cfg.deepspeed_kernel:
            for tower in self.towers:
                for layer in getattr(tower, "layers", None) or tower.blocks:
                    layer.compile(**options)
