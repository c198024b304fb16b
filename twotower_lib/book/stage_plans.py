"""The book's plans for the stages that have no config class of their own: which runs training makes
(`TrainPlan`) and what the analysis sections compare (`AnalysisConfig`), with the size preset of each model
(`ModelChoice`). A profile (`profiles.Profile`) nests these beside the core's `DataConfig` and `ProbeConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twotower_lib.data.config import DataConfig
from twotower_lib.errors import UserError
from twotower_lib.probe.config import ProbeConfig
from twotower_lib.run_names import parse_spec
from twotower_lib.train.config import PRECISIONS

LAUNCHERS = ("python", "deepspeed")
CONTROLS = ("untrained", "independent", "permutation", "quality")
POS_BACKENDS = ("auto", "stanza", "spacy")  # auto: stanza where its English model is installed, else spaCy


@dataclass(frozen=True)
class ModelChoice:
    """One model of the study: a tower family plus a size preset of `twotower_lib.models.config`."""

    model_type: str                      # "elmo" | "gpt" | "bert"
    preset: str                          # a name in models.config.PRESETS
    as_released: bool = False            # built as the authors' released code builds it (`models.config.RELEASED_OPTIONS`)


def _positive(owner: str, obj: Any, names: tuple[str, ...], minimum: int = 1) -> None:
    for name in names:
        v = getattr(obj, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise UserError(f"`{owner}.{name}` = {v!r} must be {'a positive' if minimum else 'a non-negative'} integer")


@dataclass(frozen=True)
class TrainPlan:
    """Which runs 01_training trains and how. `cases` lists "model:seed"; the paper's five cases are
    elmo:1 gpt:1 bert-base:1 bert-large:1 bert-large:2 (Table 2's rows). Each case becomes a
    `TrainConfig` (`Profile.train_config`)."""

    cases: tuple[str, ...] = ("elmo:1", "gpt:1", "bert-base:1", "bert-large:1", "bert-large:2")
    tokens: int = 10_000_000             # tokens seen per model (the budget)
    model_tokens: tuple[str, ...] = ()   # per-model budgets "model=tokens" replacing `tokens` (e.g. elmo=2000000)
    model_lr: tuple[str, ...] = ()       # per-model peak learning rates "model=lr" (e.g. gpt=0.003); the others
                                         # use the DeepSpeed config's
    model_final_lr: tuple[str, ...] = ()  # per-model end of the linear decay "model=fraction" of the peak
                                          # (e.g. bert-large=1: no decay); the others decay to 0
    precision: str = "bf16"
    engine: str = "deepspeed"            # the trainer's engine (train_config.ENGINES) of every model ...
    model_engine: tuple[str, ...] = ()   # ... or per model, "model=engine" (e.g. gpt=torch-compile)
    label_bucket: int = 1                # BERT's predicted positions padded to a multiple (compiled engines: 1024)
    vocab_multiple: int = 1              # the decoder's columns padded to a multiple (bf16 GPUs: 64)
    micro_batch: int = 32                # sequences per process per accumulation step
    model_micro_batch: tuple[str, ...] = ()  # per-model micro-batches "model=sequences" (e.g. bert-large=8: the same
                                         # tokens in more, smaller steps)
    norm_scheme: str = "post"            # BERT's layers: post (Hugging Face's BertLayer) or pre (the paper's DeepSpeed
                                         # kernel's pre-LN layer)
    position: str = "absolute"           # BERT: where attention learns word order (models.config.POSITIONS)
    mask_rate: float = 0.15              # BERT: the share of positions predicted each training step
    mask_style: str = "corrupt"          # BERT: corrupt (80% [MASK], 10% random, 10% kept) or mask (all [MASK])
    grad_accum: int = 1                  # accumulation steps: an optimizer step sees micro_batch x grad_accum x GPUs sequences
    launcher: str = "python"             # "deepspeed": multi-GPU via the DeepSpeed launcher
    num_gpus: int = 0
    threads_per_run: int = 0             # CPU threads per training run or probe, as many side by side as the
                                         # cores allow (twotower_lib.workers); 0 = one at a time on every core

    def validate(self) -> "TrainPlan":
        _positive("train", self, ("tokens", "micro_batch", "grad_accum"))
        _positive("train", self, ("num_gpus", "threads_per_run"), minimum=0)
        if self.launcher == "deepspeed" and self.num_gpus < 1:
            raise UserError("`train.num_gpus` must be >= 1 with launcher 'deepspeed'")
        if not self.cases:
            raise UserError("`train.cases` is empty; list at least one model:seed, e.g. gpt:1")
        for r in self.cases:
            if not parse_spec(r):
                raise UserError(f"`train.cases` has {r!r}, which is not of the form model:seed (e.g. bert-large:2)")
        if len(set(self.cases)) != len(self.cases):
            raise UserError("`train.cases` lists the same model:seed twice")
        from twotower_lib.models.config import NORM_SCHEMES, POSITIONS
        from twotower_lib.train.config import ENGINES, MASK_STYLES

        _positive("train", self, ("label_bucket", "vocab_multiple"))
        for name, allowed in (("precision", PRECISIONS), ("launcher", LAUNCHERS), ("engine", ENGINES),
                              ("norm_scheme", NORM_SCHEMES), ("position", POSITIONS), ("mask_style", MASK_STYLES)):
            if getattr(self, name) not in allowed:
                raise UserError(f"`train.{name}` = {getattr(self, name)!r} must be one of {allowed}")
        if not (isinstance(self.mask_rate, (int, float)) and 0 < self.mask_rate < 1):
            raise UserError(f"`train.mask_rate` = {self.mask_rate!r} must be a share of positions in (0, 1), e.g. 0.4")
        per_model = (("model_tokens", _positive_tokens, "write model=tokens with a positive integer, e.g. elmo=2000000"),
                     ("model_micro_batch", _positive_tokens, "write model=sequences with a positive integer, "
                                                             "e.g. bert-large=8"),
                     ("model_engine", lambda v: v in ENGINES, f"write model=engine with an engine among {ENGINES}"),
                     ("model_lr", _learning_rate, "write model=lr with a learning rate in (0, 1), e.g. gpt=0.003"),
                     ("model_final_lr", _fraction, "write model=fraction with a fraction of the peak in [0, 1], "
                                                   "e.g. bert-large=1 (no decay)"))
        for name, valid, how in per_model:
            for item in getattr(self, name):
                if not valid(item.partition("=")[2]):
                    raise UserError(f"`train.{name}` has {item!r}; {how}")
        return self

    @property
    def world_size(self) -> int:
        """Training processes per run: the GPUs of the DeepSpeed launcher, else one."""
        return self.num_gpus if self.launcher == "deepspeed" else 1


@dataclass(frozen=True)
class AnalysisConfig:
    """What the analysis sections (03-06) compare, and the controls the book measures."""

    top_n: int = 1000                    # N: the most frequent tokens compared (paper: 5000)
    bootstrap: int = 1000                # bootstrap resamples for confidence intervals
    controls: tuple[str, ...] = CONTROLS
    control_models: tuple[str, ...] = ()  # models whose same-config pair gets the untrained and independent
                                          # controls (permutation: every pair); () = every pair's model
    reliability_models: tuple[str, ...] = ()  # the first case of each of these models also trains a second head
                                          # set, for the probe-seed reliability; () = every case
    bert_events_comparison: bool = True   # probe one BERT case again with the training corruption (02_probing)
    pos_docs: int = 200                  # training documents POS-tagged to give each token its tag (04_pos)
    pos_backend: str = "auto"            # one of POS_BACKENDS
    ica_reference: str = "bert-large:1"  # the case ("model:seed") whose input embedding gives the word vectors
    ica_tokens: int = 1_000_000          # token occurrences in the corpus sample of the ICA (05_ica)
    ica_dim: int = 0                     # d of Eq. 5; 0: the paper's share of the embedding width (128 of 1024)
    ica_starts: int = 8                  # ICA starts (W_0 = I, then random rotations): the likelihood has several optima

    def validate(self) -> "AnalysisConfig":
        _positive("analysis", self, ("top_n", "pos_docs", "ica_tokens", "ica_starts"))
        _positive("analysis", self, ("bootstrap", "ica_dim"), minimum=0)
        unknown = sorted(set(self.controls) - set(CONTROLS))
        if unknown:
            raise UserError(f"`analysis.controls` has unknown control(s) {unknown}; choose among {CONTROLS}")
        if "quality" in self.controls and "independent" not in self.controls:
            raise UserError("`analysis.controls` names 'quality' without 'independent': the quality-gap control scores "
                            "an independent single-tower run against its own earlier snapshot")
        if self.pos_backend not in POS_BACKENDS:
            raise UserError(f"`analysis.pos_backend` = {self.pos_backend!r} must be one of {POS_BACKENDS}")
        if not parse_spec(self.ica_reference):
            raise UserError(f"`analysis.ica_reference` = {self.ica_reference!r} is not of the form model:seed "
                            "(e.g. bert-large:1)")
        return self


# The profile's sections, in the order `values()` lists them: the attribute and its config class.
SECTIONS = {"data": DataConfig, "train": TrainPlan, "probe": ProbeConfig, "analysis": AnalysisConfig}



def _positive_tokens(value: str) -> bool:
    return value.replace("_", "").isdigit() and int(value.replace("_", "")) >= 1


def _learning_rate(value: str) -> bool:
    try:
        return 0 < float(value) < 1
    except ValueError:
        return False


def _fraction(value: str) -> bool:
    try:
        return 0 <= float(value) <= 1
    except ValueError:
        return False
