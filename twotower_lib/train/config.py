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

ENGINES = ("deepspeed", "torch", "torch-compile", "torch-compile-layers", "torch-graphs")  # see twotower_lib.train.torch_engine
COMPILE_SCOPE = {"torch-compile": "model", "torch-compile-layers": "layers", "torch-graphs": "layers"}  # what each compiles
MASK_STYLES = ("corrupt", "mask")  # BERT's chosen positions: 80% [MASK], 10% random, 10% kept (BERT's), or all [MASK]
PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # fp16: GPUs only (DeepSpeed loss scaling), as in the paper
FIRST_SNAPSHOT_TOKENS = 1 << 16  # default snapshots double from here: early training is where things change


@dataclass
class TrainConfig:
    """One training run. `train`'s options are generated from these fields (`config_cli`): each field's comment
    is its option's help."""

    model: str                          # tower family
    preset: str                         # model size (models.config: tiny, cpu, ..., paper-*)
    seed: int = 1                       # the run's seed: initial weights, block order, masks
    towers: int = 2                     # k towers; 1 is the single-tower baseline
    budget_s: float | None = None       # wall-clock budget, e.g. 10m, 2h, 1d
    max_steps: int | None = None        # stop after this many optimizer steps
    micro_batch: int | None = None      # sequences per process and accumulation step (default: the DeepSpeed config's)
    grad_accum: int | None = None       # accumulation steps per optimizer step (default: the DeepSpeed config's)
    warmup_fraction: float = 0.06       # share of the run the learning rate warms up over (24hBERT's choice)
    lr: float | None = None             # peak learning rate (default: the DeepSpeed config's)
    final_lr_fraction: float = 0.0      # the linear decay ends at this fraction of the peak (0; 1 = constant after warm-up)
    precision: str = "auto"             # CPU: fp32 (auto), or bf16 autocast where the CPU has native bf16 (faster with
                                        # AMX). GPU: bf16 (auto), fp16 with loss scaling (the paper's), or fp32
    log_every_steps: int = 10           # a line of log.jsonl every this many steps
    eval_every_steps: int = 100         # the validation loss every this many steps (a multiple of the log interval)
    eval_blocks: int = 64               # validation blocks per evaluation (fixed, with fixed masks)
    checkpoint_every_s: float = 600.0   # wall-clock interval between checkpoints, e.g. 10m
    checkpoint_every_steps: int | None = None  # a checkpoint every this many steps too
    snapshot_every_tokens: int | None = None  # weight snapshot interval (default: at 2^16, 2^17, ... tokens)
    deepspeed_config: str | None = None  # DeepSpeed JSON (default: configs/deepspeed_cpu.json; on a GPU the one for
                                        # --precision)
    data: str | None = None             # prepared-data directory (default: what `data prepare` writes with its
                                        # defaults)
    as_released: bool = False           # build the model as the authors' released code does where it differs from
                                        # the paper (`RELEASED_OPTIONS`; ELMo: backward outputs zeroed)
    world_size: int | None = None       # the number of processes --max-steps was computed for: train refuses to run
                                        # on another, instead of missing the token budget
    engine: str = "deepspeed"           # deepspeed (the default) or torch: plain AdamW with fp32 weights and
                                        # gradients, bf16 autocast on GPUs, from the same JSON config, PyTorch's
                                        # DistributedDataParallel over several processes; torch-compile: the
                                        # forward pass compiled as one graph (with --label-bucket, once);
                                        # torch-compile-layers: layer by layer, sooner compiled; torch-graphs: those
                                        # layers replayed as CUDA graphs (GPUs; BERT with --label-bucket). The gpu
                                        # and paper profiles name the fastest measured for each family
                                        # (`book.profiles.FASTEST_ENGINES`)
    vocab_multiple: int = 1             # pad the decoder's output columns to a multiple of this, masked (the same
                                        # loss): 64 aligns the bf16 matrix products on GPUs
    mask_rate: float = 0.15             # BERT: the share of positions chosen for prediction each step (BERT's 15%;
                                        # Cramming 25%, MosaicBERT 30%, Wettig et al. 40%)
    mask_style: str = "corrupt"         # BERT: what a chosen position reads: corrupt (80% [MASK], 10% a random token,
                                        # 10% kept, BERT's) or mask ([MASK] at every one, as the probe scores)
    norm_scheme: str = "post"           # BERT's layers: post (Hugging Face's BertLayer, the original BERT's) or pre (the
                                        # paper's DeepSpeed kernel's pre-LN layer, with a final LayerNorm per tower)
    position: str = "absolute"          # BERT (pre-LN): absolute (a learned position table, the paper's), relative (a
                                        # learned bias per head and distance, begun as ALiBi's) or none (bag of words)
    grad_clip: float | None = None      # the gradients' global norm clipped to this (default: the DeepSpeed config's)
    label_bucket: int = 1               # decode a micro-batch's predicted positions padded to a multiple of this
                                        # (ignored labels, the same loss), so that BERT's steps repeat their shapes:
                                        # with torch-compile, e.g. 1024

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
        for name, allowed in (("precision", PRECISIONS), ("engine", ENGINES), ("mask_style", MASK_STYLES)):
            if getattr(self, name) not in allowed:
                raise UserError(f"--{name.replace('_', '-')} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
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
        if not (isinstance(self.mask_rate, (int, float)) and 0.0 < self.mask_rate < 1.0):
            raise UserError(f"--mask-rate must be a share of positions in (0, 1), e.g. 0.15 or 0.4, got {self.mask_rate!r}")
        if self.norm_scheme != "post" and self.model != "bert":
            raise UserError(f"--norm-scheme is where BERT's layers normalise; --model {self.model} has its own layers")
        if self.grad_clip is not None and not (isinstance(self.grad_clip, (int, float)) and self.grad_clip > 0):
            raise UserError(f"--grad-clip must be a positive gradient norm, e.g. 0.5, got {self.grad_clip!r}")
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
