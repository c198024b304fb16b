"""What a probe is: its settings (`ProbeConfig`) and the version that is part of every probe's identity.

Kept apart from `probe`, which trains and scores with torch: a profile, a run record or a book
section that only reads or checks these settings does not import torch (each section's kernel
would pay for it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from twotower_lib.errors import UserError

HEAD_KINDS = ("mlp", "tied", "linear")  # see models.heads

# Part of every probe's identity: a probe written by another version is recomputed, not reused. It changes when
# what a probe computes changes, not with a default (every identity holds the whole config); the book names a
# probe by its version and its precondition (`probe_label`), and the changelog appendix lists the versions.
PROBE_VERSION = 7
FEATURES = ("joint_ln", "raw")
PRECONDITIONS = ("whiten", "none")
BERT_EVENTS = ("mask", "corrupt")
SCHEDULES = ("plateau", "linear")
# The instrument's goals (section 02): two head sets that differ only in their seed agree at least this well
# (probe-seed reliability), and a head on a single-tower model reads all but this much of what its decoder used.
RELIABILITY_GOAL = 0.95
SHORTFALL_GOAL = 0.05  # nats
HEAD_LR = {"linear": 3e-3, "tied": 3e-3, "mlp": 1e-3}  # peak rates: the tied heads train ~70k weights, the untied ~2M (V = 8192)


def probe_label(version: int, precondition: str | None = None) -> str:
    """A probe's name in the book: its version and whether its heads trained on whitened features (a record
    without the field predates the option, or its default: unwhitened)."""
    return f"{version} ({'whitened' if precondition == 'whiten' else 'unwhitened'})"


@dataclass(frozen=True)
class ProbeConfig:
    head: str = "linear"            # "linear" or "tied" (Eq. 2: the frozen input embedding is the decoder), "mlp" (the authors')
    features: str = "joint_ln"      # what the heads read: "joint_ln" (the authors') or "raw" tower states
    precondition: str = "whiten"    # "whiten": the heads train on whitened features, then are folded back (nearest the
                                    # optimum in every family, `results/probe/optimum/`); "none": on the features as they are
    bert_events: str = "mask"       # BERT: "mask" ([MASK] at every probed position, Eq. 1) or "corrupt" (80/10/10)
    train_blocks: int = 1024        # training blocks whose features train the heads
    train_positions: int | None = None  # or: predicted positions to train on (BERT predicts ~15% of a block)
    holdout_fraction: float = 0.1   # extra share of blocks held out to decide when the heads have converged
    schedule: str = "plateau"       # "plateau": held-out stopping; "linear": warm-up + linear decay over max_epochs
    max_epochs: int = 30            # cap (plateau) or exact number of epochs (linear)
    tol: float = 0.005              # nats: an epoch that improves no head's held-out loss by more is a plateau
    lr_drops: int = 0               # plateaus answered by lowering the rate (x lr_drop) before the cool-down
    lr_drop: float = 0.2
    cooldown_epochs: int = 2        # after the last plateau: the rate falls linearly to 0 over these epochs, then stop
    cooldown_average: bool = True   # the heads end at the uniform average of their weights over the cool-down
    batch_size: int = 1024          # positions per head-training step
    lr: float | None = None         # peak rate; None: HEAD_LR[head]
    warmup_fraction: float = 0.1    # of the first epoch (plateau) or of all steps (linear)
    weight_decay: float = 0.01
    eval_blocks: int | None = None  # validation blocks scored (None = all)
    bert_eval_passes: int = 7       # BERT: disjoint masking passes, so every validation token is scored once
    replicate: bool = False         # also train heads with a second seed (probe-seed reliability)
    forward_batch: int = 32         # blocks per tower forward pass
    feature_dtype: str = "bf16"     # the cached training features: "bf16" (half the memory) or "fp32", which a tower
                                    # whose features vary below bf16's resolution needs (see `FeatureWhitening`)
    precision: str = "auto"         # "auto": bf16 on GPUs, fp32 on CPUs (`probe.precision`), "fp32", "bf16"
    score_precision: str = "auto"   # log p of held-out and validation positions: "fp32" (what "auto" takes), or "bf16"
                                    # (the log-sum-exp from bf16-input logits, the target's logit exact; see probe.precision)
    seed: int = 0

    @classmethod
    def legacy(cls, **changes) -> "ProbeConfig":
        """The earlier probe: raw features, BERT scored with the 80/10/10 corruption, 3 epochs, no held-out stop."""
        return replace(cls(head="mlp", features="raw", bert_events="corrupt", schedule="linear", max_epochs=3,
                           holdout_fraction=0.0, lr=1e-3, precondition="none"), **changes)

    @classmethod
    def as_released(cls, **changes) -> "ProbeConfig":
        """The released code's probing phase (hezq06/twotower_lm, `phase2_t1` / `phase3_t2`): untied
        heads (Linear + GELU + LayerNorm + Linear to V) on each tower's slice of the frozen joint
        LayerNorm, BERT positions drawn with the training corruption (80/10/10), rate 1e-3 with a
        linear warm-up over the first third (1,000 of 3,000 steps) and linear decay, no held-out stop.
        Their 3,000 steps of 3,840 sequences are far beyond a CPU probe; 15 epochs are 3,000 steps of
        1,024 positions at the `cpu` profile's 200k. Not carried over: their towers stayed in train
        mode (dropout on while heads train: the CPU models have no dropout) and BERT drew fresh masks
        every epoch (here the masks of the cached features are drawn once)."""
        return replace(cls(head="mlp", features="joint_ln", bert_events="corrupt", schedule="linear", max_epochs=15,
                           holdout_fraction=0.0, lr=1e-3, warmup_fraction=1 / 3, precondition="none"), **changes)

    @property
    def peak_lr(self) -> float:
        return HEAD_LR[self.head] if self.lr is None else self.lr

    def validate(self) -> "ProbeConfig":
        def bad(field: str, why: str) -> UserError:
            return UserError(f"invalid probe config: `{field}` = {getattr(self, field)!r} {why}")

        for name, allowed in (("head", HEAD_KINDS), ("features", FEATURES), ("bert_events", BERT_EVENTS),
                              ("schedule", SCHEDULES), ("precondition", PRECONDITIONS)):
            if getattr(self, name) not in allowed:
                raise bad(name, f"is not one of {allowed}")
        for name in ("train_blocks", "max_epochs", "batch_size", "bert_eval_passes", "forward_batch"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise bad(name, "must be a positive integer")
        if self.train_positions is not None and (not isinstance(self.train_positions, int) or self.train_positions < 1):
            raise bad("train_positions", "must be a positive integer or None (use train_blocks)")
        if self.eval_blocks is not None and self.eval_blocks < 1:
            raise bad("eval_blocks", "must be a positive integer or None (all)")
        if not 0 <= self.holdout_fraction < 1:
            raise bad("holdout_fraction", "must be in [0, 1)")
        if self.schedule == "plateau" and self.holdout_fraction == 0:
            raise bad("holdout_fraction", "must be positive with schedule 'plateau' (the held-out loss decides when to stop)")
        if not (self.tol >= 0 and self.lr_drops >= 0 and 0 < self.lr_drop < 1):
            raise bad("tol", "(with lr_drops >= 0 and lr_drop in (0, 1)) must be non-negative")
        if not isinstance(self.cooldown_epochs, int) or self.cooldown_epochs < 0:
            raise bad("cooldown_epochs", "must be a non-negative integer")
        if self.cooldown_average and self.schedule == "plateau" and self.cooldown_epochs == 0:
            raise bad("cooldown_average", "needs a cool-down to average over (cooldown_epochs >= 1)")
        if not ((self.lr is None or self.lr > 0) and 0 <= self.warmup_fraction < 1 and self.weight_decay >= 0):
            raise bad("lr", "(with warmup_fraction in [0, 1) and weight_decay >= 0) must be positive")
        if self.feature_dtype not in ("bf16", "fp32"):
            raise bad("feature_dtype", "must be 'bf16' or 'fp32'")
        for name in ("precision", "score_precision"):
            if getattr(self, name) not in ("auto", "fp32", "bf16"):
                raise bad(name, "must be 'auto', 'fp32' or 'bf16'")
        return self


# Fields a probe's settings held in earlier code, with the value at which they changed nothing: a recorded
# identity that holds them at these values is the same probe as one without them (`settled`). The full-batch
# refinement of the linear head is a study now (`studies.probe.optimum`); with 0 iterations its ridge and
# penalty were not read.
RETIRED_FIELDS = {"refine_iters": 0}
RETIRED_WITH = {"refine_iters": ("ridge", "penalty")}
# Fields added since, with the value every probe made before them had: a recorded identity without one is the
# same probe as one that holds it at that value (the training features were always cached in bf16).
ADDED_FIELDS = {"feature_dtype": "bf16"}


def settled(probe: dict) -> dict:
    """A recorded probe config without the retired fields that were at their no-op value and with the added fields
    it predates at the value it had (unchanged otherwise, so a probe made with a retired option never matches one
    made without it)."""
    out = {**{name: value for name, value in ADDED_FIELDS.items() if probe}, **probe}
    for name, inert in RETIRED_FIELDS.items():
        if name in out and out[name] == inert:
            for key in (name, *RETIRED_WITH.get(name, ())):
                out.pop(key, None)
    return out


CURRENT_PROBE = probe_label(PROBE_VERSION, ProbeConfig.precondition)  # what a probe made today is called


def measured_with(version: int, precondition: str | None) -> str | None:
    """What a committed result says when another probe than the current one measured it (None if it is the current)."""
    label = probe_label(version, precondition)
    return None if label == CURRENT_PROBE else f"measured with probe version {label}; the current probe is version {CURRENT_PROBE}"
