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

Under bf16 autocast on CUDA the LSTMs run in bf16 (`run_lstm`; autocast alone would run them in fp16).
With `lstm_streams` on CUDA, the k towers' LSTMs run side by side on streams of their own
(`towers_on_streams`); the same arithmetic.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import nn
from torch.func import functional_call

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
        return self.combine(*(run_lstm(lstm, inputs) for lstm, inputs in self.lstm_calls(x)))

    def lstm_calls(self, x: torch.Tensor) -> list[tuple[nn.LSTM, torch.Tensor]]:
        """The LSTMs this tower runs on `x` (B, T, H), each with its input: the forward LSTM on the input
        shifted right, and (unless zeroed) the backward LSTM on it shifted left and reversed."""
        x_in, x_back = x.chunk(2, dim=-1) if self.split_input else (x, x)   # each (B, T, W)
        start = x_in.new_zeros(x_in[:, :1].shape)              # (B, 1, W): "nothing seen yet"
        x_fwd = torch.cat([start, x_in[:, :-1]], dim=1)        # position i holds token i-1
        if self.backward_zeroed:                               # as released: the backward half is 0, not run
            return [(self.forward_lstm, x_fwd)]
        x_bwd = torch.cat([x_back[:, 1:], start], dim=1).flip(1)   # reversed; position i holds token i+1
        return [(self.forward_lstm, x_fwd), (self.backward_lstm, x_bwd)]

    def combine(self, h_fwd: torch.Tensor, h_bwd: torch.Tensor | None = None) -> torch.Tensor:
        """The tower's output from its LSTMs' states (B, T, L): each direction projected to H/2, the backward
        one put back in order (or zero, as released), side by side."""
        out = self.forward_proj(h_fwd)                         # (B, T, H/2)
        if h_bwd is None:
            return torch.cat([out, torch.zeros_like(out)], dim=-1)
        return torch.cat([out, self.backward_proj(h_bwd).flip(1)], dim=-1)


def run_lstm(lstm: nn.LSTM, x: torch.Tensor) -> torch.Tensor:
    """The LSTM's states (B, T, L) for input `x`, in the precision the caller's autocast asks for.

    PyTorch's autocast runs cuDNN's LSTMs in fp16 whatever its dtype (its `_cudnn_rnn` wrapper casts to half):
    under bf16 autocast on CUDA the LSTMs, most of ELMo's arithmetic, would run in fp16 with no loss scaling,
    where fp16's smaller exponent range flushes small gradients to zero. There they run in bf16 instead, their weights
    cast for the call (`in_dtype`), as DeepSpeed's bf16 engine runs them."""
    if x.is_cuda and torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16:
        with torch.autocast("cuda", enabled=False):
            return in_dtype(lstm, x, torch.bfloat16)
    return lstm(x)[0]


def in_dtype(lstm: nn.LSTM, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The LSTM's states with its input and weights cast to `dtype` for this call (gradients reach the module's
    own parameters through the casts). The cast weights are separate tensors, so cuDNN copies them into one
    buffer for the call (autocast's cast does the same) and would warn that they are not one buffer."""
    weights = {name: p.to(dtype) for name, p in lstm.named_parameters()}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
        return functional_call(lstm, weights, (x.to(dtype),))[0]


@functools.cache
def _side_stream(device_index: int, lane: int) -> torch.cuda.Stream:
    """The device's CUDA stream for the `lane`-th LSTM of `towers_on_streams`, made once and kept."""
    return torch.cuda.Stream(device=device_index)


def towers_on_streams(towers: list[ELMoTower], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tower's output (as `tower(x)`), with every LSTM of every tower on a CUDA stream of its own, all
    launched before any is awaited (`lstm_streams`): an LSTM's time steps run one after another, each a short
    kernel that leaves the GPU partly idle, and the LSTMs are independent, so their kernels can overlap.
    Autograd runs each backward on its forward's stream. Tensors that cross streams are recorded on the stream
    that reads them, so that the allocator does not reuse their memory early. One limit: PyTorch keeps one
    cuDNN dropout state per device, and once an LSTM has used it (training with dropout between layers) each
    LSTM's forward pass waits for the one before (an event on that state); the backward passes still overlap."""
    calls = [tower.lstm_calls(x) for tower, x in zip(towers, inputs)]
    flat = [call for tower_calls in calls for call in tower_calls]
    current = torch.cuda.current_stream()
    streams = [_side_stream(current.device.index, lane) for lane in range(len(flat))]
    states = []
    for (lstm, x), stream in zip(flat, streams):
        stream.wait_stream(current)                            # its input is ready
        x.record_stream(stream)
        with torch.cuda.stream(stream):
            states.append(run_lstm(lstm, x))
    for h, stream in zip(states, streams):
        current.wait_stream(stream)
        h.record_stream(current)
    per_tower = iter(states)
    return [tower.combine(*(next(per_tower) for _ in tower_calls)) for tower, tower_calls in zip(towers, calls)]
