"""The configuration of one training run: which model, how long, at what batch and learning rate, and the
schedules it implies (the learning rate over the budget, when weight snapshots are written).

Its own module so that what configures a run (the profiles, the DeepSpeed setup) does not import the
training loop; `twotower_lib.train` runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from twotower_lib.errors import UserError
from twotower_lib.models.config import MODEL_TYPES

ENGINES = ("deepspeed", "torch", "torch-compile", "torch-compile-layers", "torch-graphs")  # see twotower_lib.torch_engine
COMPILE_SCOPE = {"torch-compile": "model", "torch-compile-layers": "layers", "torch-graphs": "layers"}  # what each compiles
PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # fp16: GPUs only (DeepSpeed loss scaling), as in the paper
FIRST_SNAPSHOT_TOKENS = 1 << 16  # default snapshots double from here: early training is where things change


@dataclass
class TrainConfig:
    model: str
    preset: str
    seed: int = 1
    towers: int = 2
    budget_s: float | None = None       # wall-clock budget in seconds
    max_steps: int | None = None        # optimizer steps
    micro_batch: int | None = None      # None: from the DeepSpeed config
    grad_accum: int | None = None       # None: from the DeepSpeed config
    warmup_fraction: float = 0.06       # of the budget (24hBERT's choice)
    lr: float | None = None             # peak learning rate; None: the DeepSpeed config's
    final_lr_fraction: float = 0.0      # the decay ends at this fraction of the peak (1.0: constant after warm-up)
    precision: str = "auto"             # auto | fp32 | bf16 | fp16: CPU autocast, or which GPU DeepSpeed config
    log_every_steps: int = 10
    eval_every_steps: int = 100
    eval_blocks: int = 64               # validation blocks per evaluation (fixed, with fixed masks)
    checkpoint_every_s: float = 600.0
    checkpoint_every_steps: int | None = None
    snapshot_every_tokens: int | None = None  # None: at 2^16, 2^17, ... tokens
    deepspeed_config: str | None = None  # None: configs/deepspeed_{cpu,gpu}.json
    data: str | None = None
    as_released: bool = False           # the model as the authors' code builds it where it differs from the paper
                                        # (`RELEASED_OPTIONS`); False: as the paper's text describes it
    world_size: int | None = None       # the processes `max_steps` was computed for (`for_tokens`); training on
                                        # another number stops with an error instead of missing the token budget
    engine: str = "deepspeed"           # "deepspeed", or "torch": without DeepSpeed's wrapper (`torch_engine`;
                                        # DistributedDataParallel over several processes), the same JSON config's
                                        # optimizer and clipping;
                                        # "torch-compile": the same with the forward pass torch.compile'd;
                                        # "torch-compile-layers": compiled region by region (minutes less);
                                        # "torch-graphs": those regions replayed as CUDA graphs (GPUs only).
                                        # DeepSpeed stays the command's default (the CPU profiles train with it);
                                        # the gpu and paper profiles name the fastest engine measured for each
                                        # family (`book.profiles.FASTEST_ENGINES`, results/gpu/levers/)
    vocab_multiple: int = 1             # the decoder's columns padded to a multiple of this (ModelConfig.vocab_multiple)
    label_bucket: int = 1               # a micro-batch's predicted positions padded to a multiple of this
                                        # (models.labeled_positions): the same loss, shapes that repeat

    @staticmethod
    def steps_for(tokens: int, micro_batch: int, seq_len: int, grad_accum: int = 1, world_size: int = 1) -> int:
        """Optimizer steps that see `tokens` tokens: tokens / (micro_batch x grad_accum x world_size x seq_len),
        rounded up. Each step sees micro_batch sequences per accumulation step on every process."""
        return max(1, -(-tokens // (micro_batch * grad_accum * world_size * seq_len)))

    @classmethod
    def for_tokens(cls, model: str, preset: str, seed: int, tokens: int, micro_batch: int, seq_len: int,
                   eval_every_steps: int | None = None, grad_accum: int = 1, world_size: int = 1,
                   **settings) -> "TrainConfig":
        """The one recipe from a token budget to a run (the profiles and the emergence study): `steps_for`
        steps at this micro-batch, accumulation and number of processes (the run checks that it gets that
        many); evaluated about ten times unless `eval_every_steps`."""
        steps = cls.steps_for(tokens, micro_batch, seq_len, grad_accum, world_size)
        return cls(model=model, preset=preset, seed=seed, max_steps=steps, micro_batch=micro_batch,
                   grad_accum=grad_accum, world_size=world_size,
                   eval_every_steps=eval_every_steps or max(10, steps // 10), **settings).validate()

    def validate(self) -> "TrainConfig":
        if self.model not in MODEL_TYPES:
            raise UserError(f"--model {self.model!r} is not one of {MODEL_TYPES}")
        if self.budget_s is None and self.max_steps is None:
            raise UserError("give a wall-clock --budget (e.g. 10m, 2h) and/or --max-steps; a run needs an end")
        if self.budget_s is not None and self.budget_s <= 0:
            raise UserError(f"--budget must be positive, got {self.budget_s} s")
        for name in ("max_steps", "micro_batch", "grad_accum", "checkpoint_every_steps", "snapshot_every_tokens",
                     "world_size"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise UserError(f"`{name}` must be a positive integer, got {v!r}")
        if self.precision not in PRECISIONS:
            raise UserError(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.engine not in ENGINES:
            raise UserError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        for name in ("vocab_multiple", "label_bucket"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise UserError(f"--{name.replace('_', '-')} must be a positive integer (1: no padding), got {v!r}")
        if self.engine == "torch-graphs" and self.model == "bert" and self.label_bucket == 1:
            raise UserError(f"--engine {self.engine} replays CUDA graphs, which need shapes that repeat; BERT predicts "
                            "a different number of positions in each micro-batch: add --label-bucket (e.g. 1024)")
        if self.engine != "deepspeed" and self.precision == "fp16":
            raise UserError("--engine torch trains in bf16 or fp32; fp16 with loss scaling (the paper's) needs "
                            "--engine deepspeed")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise UserError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and 0 < self.lr < 1):
            raise UserError(f"--lr must be a peak learning rate in (0, 1), e.g. 0.001, got {self.lr!r}")
        if not 0.0 <= self.final_lr_fraction <= 1.0:
            raise UserError(f"--final-lr-fraction must be in [0, 1] (0: decay to 0, 1: constant), "
                            f"got {self.final_lr_fraction}")
        return self


def lr_at(progress: float, peak: float, warmup: float, final: float = 0.0) -> float:
    """Linear warm-up over the first `warmup` fraction of the budget, then linear decay to `final` x peak."""
    progress = min(max(progress, 0.0), 1.0)
    if progress < warmup:
        return peak * progress / warmup
    return peak * (final + (1.0 - final) * (1.0 - progress) / (1.0 - warmup))


def next_snapshot(tokens: int, every: int | None) -> int:
    """Smallest snapshot threshold strictly above `tokens`."""
    if every:
        return (tokens // every + 1) * every
    t = FIRST_SNAPSHOT_TOKENS
    while t <= tokens:
        t *= 2
    return t


def parse_duration(text: str) -> float:
    """'90s', '10m', '2h', '1h30m', '1d' or plain seconds -> seconds."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise UserError(f"cannot read the duration {text!r}; write it like 90s, 10m, 2h, 1h30m or 1d")
    return sum(float(n) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[u] for n, u in parts)
