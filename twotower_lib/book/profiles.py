"""Named profiles: one name bundles every setting a full run of the book needs.

A profile fixes the data (corpus, vocabulary, block length), the models (which of the paper's
cases, at which size, with which seeds), the budgets (training and probing tokens) and the
analysis settings (top-N tokens, bootstrap samples). `python -m twotower_lib run --profile NAME`
runs every section with it; `-p key value` overrides one field for one run.

All outputs of a profile live under `runs/<profile>/` (`$TWOTOWER_RUNS` moves `runs/`):

    runs/<profile>/
      data/           prepared corpus (00_data)        training/   checkpoints (01_training)
      probing/        preference-score tables (02)     correlations/ pos/ ica/ frequency/ (03-06)
      notebooks/      executed notebooks (papermill)   scorecard.json
      .pipeline/      what ran with which inputs (staleness records)
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from twotower_lib.errors import UserError
from twotower_lib.run_names import parse_spec

DEFAULT_PROFILE = "cpu"
PROFILE_ENV = "TWOTOWER_PROFILE"  # the profile of a notebook opened by hand (`profile = None`); Binder sets tiny
PRECISIONS = ("fp32", "bf16", "fp16")
LAUNCHERS = ("python", "deepspeed")
CONTROLS = ("untrained", "independent", "permutation", "quality")
POS_BACKENDS = ("auto", "stanza", "spacy")  # auto: stanza where its English model is installed, else spaCy


@dataclass(frozen=True)
class ModelChoice:
    """One model of the study: a tower family plus a size preset of `twotower_lib.models.config`."""

    model_type: str                      # "elmo" | "gpt" | "bert"
    preset: str                          # a name in models.config.PRESETS
    as_released: bool = False            # built as the authors' released code builds it (`train.RELEASED_OPTIONS`)


@dataclass(frozen=True)
class Profile:
    """Every setting of a full run. Fields after `description` can be overridden with `-p`."""

    name: str
    description: str
    # -- data (00_data)
    corpus: str = "registry"             # see twotower_lib.data.DataConfig
    vocab_size: int = 8192
    seq_len: int = 128
    data_seed: int = 0
    doc_words: int = 2000                # long texts are cut into documents of about this many words
    max_docs: int = 0                    # the corpus's first this many documents only (0: all)
    valid_fraction: float = 0.1          # share of documents held out for validation
    # -- models and training (01_training). `cases` lists "model:seed"; the paper's five cases are
    #    elmo:1 gpt:1 bert-base:1 bert-large:1 bert-large:2 (Table 2's rows).
    cases: tuple[str, ...] = ("elmo:1", "gpt:1", "bert-base:1", "bert-large:1", "bert-large:2")
    train_tokens: int = 10_000_000       # tokens seen per model (the budget)
    model_tokens: tuple[str, ...] = ()   # per-model budgets "model=tokens" replacing train_tokens (e.g. elmo=2000000)
    model_lr: tuple[str, ...] = ()       # per-model peak learning rates "model=lr" (e.g. gpt=0.003); the others
                                         # use the DeepSpeed config's
    model_final_lr: tuple[str, ...] = ()  # per-model end of the linear decay "model=fraction" of the peak
                                          # (e.g. bert-large=1: no decay); the others decay to 0
    precision: str = "bf16"
    micro_batch: int = 32                # sequences per process per accumulation step
    grad_accum: int = 1                  # accumulation steps: an optimizer step sees micro_batch x grad_accum x GPUs sequences
    launcher: str = "python"             # "deepspeed": multi-GPU via the DeepSpeed launcher
    num_gpus: int = 0
    threads_per_run: int = 0             # CPU threads per training run or probe, as many side by side as the
                                         # cores allow (twotower_lib.workers); 0 = one at a time on every core
    # -- probing (02_probing)
    probe_tokens: int = 2_000_000        # predicted positions the probing heads train on (per epoch)
    probe_max_epochs: int = 30           # cap on the heads' epochs (they stop earlier once converged)
    probe_head: str = "linear"           # "linear"/"tied" (Eq. 2: decoder = the frozen input embedding) or "mlp" (the authors' code)
    probe_features: str = "joint_ln"     # what the heads read: "joint_ln" (the authors') or "raw" tower states
    probe_precondition: str = "whiten"   # "whiten": the heads train on whitened features (then folded back), or "none"
    probe_refine_iters: int = 0          # linear heads: L-BFGS iterations after AdamW toward their objective's optimum (0: none)
    probe_ridge: float = 0.03            # that objective's ridge (ProbeConfig.penalty: the logit variance)
    bert_events: str = "mask"            # BERT positions probed: "mask" (Eq. 1) or "corrupt" (80/10/10, the old scoring)
    # -- analyses (03-06)
    top_n: int = 1000                    # N: the most frequent tokens compared (paper: 5000)
    bootstrap: int = 1000                # bootstrap resamples for confidence intervals
    controls: tuple[str, ...] = CONTROLS
    control_models: tuple[str, ...] = ()  # models whose same-config pair gets the untrained and independent
                                          # controls (permutation: every pair); () = every pair's model
    pos_docs: int = 200                  # training documents POS-tagged to give each token its tag (04_pos)
    pos_backend: str = "auto"            # one of POS_BACKENDS
    ica_reference: str = "bert-large:1"  # the case ("model:seed") whose input embedding gives the word vectors
    ica_tokens: int = 1_000_000          # token occurrences in the corpus sample of the ICA (05_ica)
    ica_dim: int = 0                     # d of Eq. 5; 0: the paper's share of the embedding width (128 of 1024)
    ica_starts: int = 8                  # ICA starts (W_0 = I, then random rotations): the likelihood has several optima
    # -- structure (not overridable with -p: change the profile instead)
    models: dict[str, ModelChoice] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ validation

    def validate(self) -> None:
        """Raise UserError naming the first bad field, its value and what is allowed."""
        def bad(name: str, why: str) -> UserError:
            return UserError(f"profile {self.name!r}: `{name}` = {getattr(self, name)!r} {why}")

        if not isinstance(self.valid_fraction, float) or not 0.0 < self.valid_fraction < 1.0:
            raise bad("valid_fraction", "must be a number strictly between 0 and 1")
        for name in ("vocab_size", "seq_len", "doc_words", "train_tokens", "micro_batch", "grad_accum", "probe_tokens", "probe_max_epochs", "top_n",
                     "pos_docs", "ica_tokens", "ica_starts"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise bad(name, "must be a positive integer")
        for name in ("data_seed", "max_docs", "num_gpus", "bootstrap", "threads_per_run", "ica_dim", "probe_refine_iters"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise bad(name, "must be a non-negative integer")
        if self.seq_len < 2:
            raise bad("seq_len", "must be at least 2")
        if self.precision not in PRECISIONS:
            raise bad("precision", f"must be one of {PRECISIONS}")
        if self.launcher not in LAUNCHERS:
            raise bad("launcher", f"must be one of {LAUNCHERS}")
        if self.launcher == "deepspeed" and self.num_gpus < 1:
            raise bad("num_gpus", "must be >= 1 with launcher 'deepspeed'")
        unknown = sorted(set(self.controls) - set(CONTROLS))
        if unknown:
            raise bad("controls", f"has unknown control(s) {unknown}; choose among {CONTROLS}")
        if "quality" in self.controls and "independent" not in self.controls:
            raise bad("controls", "names 'quality' without 'independent': the quality-gap control scores an "
                                  "independent single-tower run against its own earlier snapshot")
        from twotower_lib.probe_config import BERT_EVENTS, FEATURES, HEAD_KINDS, PRECONDITIONS

        if self.probe_head not in HEAD_KINDS:
            raise bad("probe_head", f"must be one of {HEAD_KINDS}")
        if self.probe_features not in FEATURES:
            raise bad("probe_features", f"must be one of {FEATURES}")
        if self.bert_events not in BERT_EVENTS:
            raise bad("bert_events", f"must be one of {BERT_EVENTS}")
        if not (isinstance(self.probe_ridge, float) and self.probe_ridge >= 0):
            raise bad("probe_ridge", "must be a non-negative number")
        if self.probe_precondition not in PRECONDITIONS:
            raise bad("probe_precondition", f"must be one of {PRECONDITIONS}")
        if self.pos_backend not in POS_BACKENDS:
            raise bad("pos_backend", f"must be one of {POS_BACKENDS}")
        spec = parse_spec(self.ica_reference)
        if not spec:
            raise bad("ica_reference", "is not of the form model:seed (e.g. bert-large:1)")
        if self.models and spec[0] not in self.models:
            raise bad("ica_reference", f"names model {spec[0]!r}; this profile defines {sorted(self.models)}")
        if not self.cases:
            raise bad("cases", "is empty; list at least one model:seed, e.g. gpt:1")
        for r in self.cases:
            spec = parse_spec(r)
            if not spec:
                raise bad("cases", f"has {r!r}, which is not of the form model:seed (e.g. bert-large:2)")
            if self.models and spec[0] not in self.models:
                raise bad("cases", f"names model {spec[0]!r}; this profile defines {sorted(self.models)}")
        if len(set(self.cases)) != len(self.cases):
            raise bad("cases", "lists the same model:seed twice")
        # per-model "model=value" entries: the value must parse, the model must exist
        per_model = (("model_tokens", _positive_tokens, "write model=tokens with a positive integer, e.g. elmo=2000000"),
                     ("model_lr", _learning_rate, "write model=lr with a learning rate in (0, 1), e.g. gpt=0.003"),
                     ("model_final_lr", _fraction, "write model=fraction with a fraction of the peak in [0, 1], "
                                                   "e.g. bert-large=1 (no decay)"))
        for name, valid, how in per_model:
            for item in getattr(self, name):
                model, _, value = item.partition("=")
                if not valid(value):
                    raise bad(name, f"has {item!r}; {how}")
                if self.models and model not in self.models:
                    raise bad(name, f"names model {model!r}; this profile defines {sorted(self.models)}")
        for model in self.control_models:  # a model without a pair among the cases simply gets no control runs
            if self.models and model not in self.models:
                raise bad("control_models", f"names model {model!r}; this profile defines {sorted(self.models)}")

    # ------------------------------------------------------------------ views

    def case_list(self) -> list[tuple[str, int]]:
        """`cases` as (model name, seed) pairs."""
        return [parse_spec(r) for r in self.cases]

    def tokens_for(self, model: str) -> int:
        """The training budget of `model`: its `model_tokens` entry, else `train_tokens`."""
        tokens = _entry(self.model_tokens, model)
        return self.train_tokens if tokens is None else int(tokens.replace("_", ""))

    def lr_for(self, model: str) -> float | None:
        """The peak learning rate of `model`: its `model_lr` entry, else None (the DeepSpeed config's)."""
        lr = _entry(self.model_lr, model)
        return None if lr is None else float(lr)

    def final_lr_for(self, model: str) -> float:
        """Where `model`'s linear decay ends, as a fraction of its peak: its `model_final_lr` entry, else 0."""
        fraction = _entry(self.model_final_lr, model)
        return 0.0 if fraction is None else float(fraction)

    def same_config_pairs(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """Pairs of cases that differ only in the seed (the paper's Bert-large run 1 and run 2)."""
        from itertools import combinations

        by_model: dict[str, list[tuple[str, int]]] = {}
        for model, seed in self.case_list():
            by_model.setdefault(model, []).append((model, seed))
        return [pair for runs in by_model.values() for pair in combinations(runs, 2)]

    def controlled_pairs(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """The same-configuration pairs that get the untrained and independent controls: those of
        `control_models` (every pair when it is empty). Each control costs probes (untrained: two;
        independent: four training runs and four probes), so the `cpu` profile limits them to one model."""
        return [p for p in self.same_config_pairs() if not self.control_models or p[0][0] in self.control_models]

    def untrained_runs(self) -> list[tuple[str, int]]:
        """The untrained-towers control: both runs of every controlled pair, probed at 0 tokens."""
        if "untrained" not in self.controls:
            return []
        return list(dict.fromkeys(run for pair in self.controlled_pairs() for run in pair))

    def independent_runs(self) -> list[tuple[str, int]]:
        """The independent-pairs control: for the model of every controlled pair, four single-tower
        (k = 1) runs, seeds 1-4, each with that model's budget. Runs 1+2 and 3+4 are each scored as
        if they were the two towers of one model; then the two "pairs" are correlated, so each
        same-configuration pair is judged against its own model's control."""
        if "independent" not in self.controls:
            return []
        models = dict.fromkeys(a[0] for a, _ in self.controlled_pairs())
        return [(model, seed) for model in models for seed in (1, 2, 3, 4)]

    def quality_runs(self) -> list[tuple[str, int]]:
        """The quality-gap control: per model of a controlled pair, its first independent single-tower
        run, scored against its own snapshot at half its training tokens (a worse model of the same run)."""
        if "quality" not in self.controls:
            return []
        return [run for run in self.independent_runs() if run[1] == 1]

    def model_config(self, model: str, **overrides: Any):
        """The `ModelConfig` of model `model` (e.g. "bert-large") at this profile's sizes."""
        from twotower_lib.models.config import preset

        choice = self._choice(model)
        return preset(choice.preset, choice.model_type, seq_len=self.seq_len, **overrides)

    def _choice(self, model: str) -> ModelChoice:
        if model not in self.models:
            raise UserError(f"profile {self.name!r} has no model {model!r}; it defines {sorted(self.models)}")
        return self.models[model]

    @property
    def world_size(self) -> int:
        """Training processes per run: the GPUs of the DeepSpeed launcher, else one."""
        return self.num_gpus if self.launcher == "deepspeed" else 1

    def train_config(self, model: str, seed: int, data_dir: str | Path, towers: int = 2):
        """The `TrainConfig` of one case: the token budget becomes a step count at this micro-batch,
        accumulation and number of processes, so the budget holds whatever the world size."""
        from twotower_lib.train import TrainConfig

        choice = self._choice(model)
        batching = dict(grad_accum=self.grad_accum, world_size=self.world_size)
        steps = TrainConfig.steps_for(self.tokens_for(model), self.micro_batch, self.seq_len, **batching)
        return TrainConfig.for_tokens(choice.model_type, choice.preset, seed, self.tokens_for(model), self.micro_batch,
                                      self.seq_len, eval_every_steps=10 * max(1, steps // 100),  # a multiple of the log interval
                                      **batching,
                                      towers=towers, lr=self.lr_for(model), final_lr_fraction=self.final_lr_for(model),
                                      precision=self.precision, data=str(data_dir), as_released=choice.as_released)

    def probe_config(self, replicate: bool = False, **changes: Any):
        """The `ProbeConfig`: the heads of every family train on `probe_tokens` predicted positions per
        epoch until their held-out loss stops improving; `replicate` adds heads with a second seed."""
        from twotower_lib.probe_config import ProbeConfig

        settings = {"train_positions": self.probe_tokens, "max_epochs": self.probe_max_epochs, "head": self.probe_head, "features": self.probe_features,
                    "precondition": self.probe_precondition, "bert_events": self.bert_events, "replicate": replicate,
                    "refine_iters": self.probe_refine_iters if self.probe_head == "linear" else 0, "ridge": self.probe_ridge}
        return ProbeConfig(**{**settings, **changes}).validate()

    def data_config(self):
        """The `DataConfig` the 00_data section prepares."""
        from twotower_lib.data.config import DataConfig

        return DataConfig(corpus=self.corpus, vocab_size=self.vocab_size, seq_len=self.seq_len,
                          seed=self.data_seed, valid_fraction=self.valid_fraction, doc_words=self.doc_words,
                          max_docs=self.max_docs or None)

    def values(self) -> dict[str, Any]:
        """The overridable fields and their values (JSON-friendly)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()
                if k in OVERRIDABLE}

    def with_overrides(self, overrides: dict[str, Any], where: str = "-p") -> "Profile":
        """A copy with `overrides` applied; values may be strings (from the command line or papermill)."""
        changes = {}
        for key, raw in overrides.items():
            if key not in OVERRIDABLE:
                raise UserError(f"unknown parameter {key!r} ({where}); the parameters are: {', '.join(OVERRIDABLE)}")
            changes[key] = coerce(key, raw, where)
        return replace(self, **changes)


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


def _entry(items: tuple[str, ...], model: str) -> str | None:
    """The value of `model` in "model=value" items (None if absent); a released twin ("gpt-released")
    without an entry of its own takes its model's, so the two are trained and compared alike."""
    for item in items:
        name, _, value = item.partition("=")
        if name == model:
            return value
    return _entry(items, model.removesuffix(RELEASED_SUFFIX)) if model.endswith(RELEASED_SUFFIX) else None


# Overridable fields in declaration order, with their annotated types ("int", "str", "tuple[str, ...]").
OVERRIDABLE: dict[str, str] = {
    f.name: f.type for f in fields(Profile) if f.name not in ("name", "description", "models")
}


def coerce(key: str, raw: Any, where: str = "-p") -> Any:
    """Convert `raw` (a string from the command line, or a value papermill injected) to `key`'s type."""
    kind = OVERRIDABLE[key]
    try:
        if kind == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            return int(raw) if not isinstance(raw, str) else int(raw.replace("_", ""))
        if kind == "float":
            if isinstance(raw, bool):
                raise ValueError
            return float(raw)
        if kind == "str":
            if not isinstance(raw, str) or not raw:
                raise ValueError
            return raw
        # tuple[...] fields: a comma-separated string or a list
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        return tuple(str(i).strip() for i in items if str(i).strip())
    except (TypeError, ValueError):
        expected = {"int": "an integer", "float": "a number", "str": "a non-empty string"}.get(kind, "a comma-separated list")
        raise UserError(f"invalid value {raw!r} for parameter {key!r} ({where}): expected {expected}") from None


# ---------------------------------------------------------------------- the profiles

RELEASED_SUFFIX = "-released"


def _with_released(models: dict[str, ModelChoice], shapes: dict[str, str] | None = None) -> dict[str, ModelChoice]:
    """Each model beside its twin "<model>-released", built as the authors' released code builds it
    (`train.RELEASED_OPTIONS`: the released ELMo with its backward outputs zeroed, GPT towers on a shared
    H-wide embedding, pre-LN BERT), at the preset `shapes` names (default: the model's own), so that
    `cases` can name "elmo-released:1" beside "elmo:1"."""
    return models | {m + RELEASED_SUFFIX: ModelChoice(c.model_type, (shapes or {}).get(m, c.preset), as_released=True)
                     for m, c in models.items()}


_TINY_MODELS = _with_released({m: ModelChoice(t, "tiny") for m, t in
                               (("elmo", "elmo"), ("gpt", "gpt"), ("bert-base", "bert"), ("bert-large", "bert"))})
# CPU sizes: Bert-base is smaller than Bert-large, as in Table 1 (with one size for both, the
# same seed would train two identical models and their correlation would be a trivial 1.0).
# The released twins keep these sizes: the comparison is of the layouts, at equal tower width.
_CPU_MODELS = _with_released({m: ModelChoice(t, p) for m, t, p in
                              (("elmo", "elmo", "cpu"), ("gpt", "gpt", "cpu"), ("bert-base", "bert", "cpu-small"),
                               ("bert-large", "bert", "cpu"))})
# At paper scale the released twins take the released code's own sizes (models.config.RELEASED_PRESETS).
_PAPER_MODELS = _with_released({
    "elmo": ModelChoice("elmo", "paper-elmo"),
    "gpt": ModelChoice("gpt", "paper-gpt"),
    "bert-base": ModelChoice("bert", "paper-bert-base"),
    "bert-large": ModelChoice("bert", "paper-bert-large"),
}, shapes={m: f"released-{m}" for m in ("elmo", "gpt", "bert-base", "bert-large")})

PROFILES: dict[str, Profile] = {p.name: p for p in (
    # The first 120 Brown documents (~240k words; all 500 took 10 s to prepare for a model trained on 10k
    # tokens), a tenth of them for validation (~60k tokens: with 20% of all of Brown every probe scored
    # ~570k). End to end on 2 idle cores (benchmarks/bench_tiny.py): most of it eight kernel starts, the
    # analysis sections two at a time (`run --jobs`); POS with spaCy (the stanza attempt of "auto" imports
    # torch only to find no model).
    Profile("tiny", "tests and a first run: every section end to end in about a minute on 2 cores (the heads "
                    "stop after 3 epochs, unconverged); no result is meaningful at this size",
            corpus="registry:brown", max_docs=120, vocab_size=300, seq_len=32, doc_words=300, valid_fraction=0.1,
            cases=("gpt:1", "gpt:2", "bert-large:1"),
            train_tokens=10_000, precision="fp32", micro_batch=8, threads_per_run=1, probe_tokens=5_000, probe_max_epochs=3, top_n=50,
            bootstrap=50, pos_docs=10, pos_backend="spacy", ica_tokens=20_000, ica_dim=16, models=_TINY_MODELS),
    # The choices of the CPU profiles (a second GPT seed, GPT's 1M tokens, the paper's schedule, fp32, the
    # cpu-long budgets) and the measurements behind them: book/decisions.md, computed from results/.
    Profile("cpu", "the default: the paper's five cases, a second GPT seed and the controls on a 2-core CPU "
                   "(about an hour end to end; probing, with every probe's second head seed, is most of it)",
            cases=("elmo:1", "gpt:1", "gpt:2", "bert-base:1", "bert-large:1", "bert-large:2"),
            control_models=("gpt",), precision="fp32", threads_per_run=1, train_tokens=2_000_000,
            model_tokens=("elmo=500000", "elmo-released=500000", "gpt=1000000"), probe_tokens=200_000, models=_CPU_MODELS),
    # Longer budgets on the same CPU (a few hours), with the independent control for both pairs.
    Profile("cpu-long", "overnight on the same CPU: GPT 2M tokens, Bert-large 12M and a Bert-base pair at 16M "
                        "(where seed pairs reached r >= 0.6 with the earliest probe), ELMo 4M, every control",
            cases=("elmo:1", "gpt:1", "gpt:2", "bert-base:1", "bert-base:2", "bert-large:1", "bert-large:2"),
            precision="fp32", threads_per_run=1, train_tokens=12_000_000,
            model_tokens=("elmo=4000000", "elmo-released=4000000", "gpt=2000000", "bert-base=16000000"),
            probe_tokens=200_000, models=_CPU_MODELS),
    # One GPU, a corpus that exists: the paper's five cases at Table 1 sizes and vocabulary on the default
    # registry corpus (3.5M training tokens at 30,522 word pieces), four epochs each (repeated text helps up
    # to a few epochs, then memorises). From benchmarks/bench_gpu.py on an H100 (results/gpu/): 14M tokens
    # take ELMo about 4 minutes, Bert-large 3, GPT 2, Bert-base 1; with the second GPT seed, the controls'
    # models and the probes about an hour. Peak rates: those of results/gpu/paper_cases.json, below the
    # paper's 1e-3 for the transformer stacks (a choice, not a measurement: the paper's BERT was the pre-LN
    # DeepSpeed kernel, these are post-LN layers). 256 sequences per step: at 64 the steps were bound by
    # kernel launches. ELMo at 256 was not benchmarked (128 took 26 GiB).
    Profile("gpu", "one GPU, about an hour: the paper's cases at Table 1 sizes and vocabulary, four epochs of "
                   "the default corpus",
            cases=("elmo:1", "gpt:1", "gpt:2", "bert-base:1", "bert-large:1", "bert-large:2"), control_models=("gpt",),
            vocab_size=30522, precision="bf16", micro_batch=256, train_tokens=14_000_000,
            model_lr=("elmo=0.001", "gpt=0.0006", "bert-base=0.0003", "bert-large=0.0002"),
            probe_tokens=1_000_000, top_n=1000, pos_docs=1000, ica_tokens=5_000_000, models=_PAPER_MODELS),
    # The paper's batch: 128 sequences x 5 accumulation steps x 6 GPUs = 3,840 sequences per step.
    Profile("paper", "Table 1 sizes, BookCorpus + Wikipedia, DeepSpeed launcher (about a day on 6 V100s per case)",
            corpus="hf:bookcorpus", vocab_size=30522, seq_len=128, precision="fp16", micro_batch=128, grad_accum=5,
            launcher="deepspeed", num_gpus=6, train_tokens=20_000_000_000, probe_tokens=200_000_000,
            top_n=5000, pos_docs=2000, ica_tokens=10_000_000, models=_PAPER_MODELS),
)}


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise UserError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]


def runs_root() -> Path:
    """`$TWOTOWER_RUNS`; else the project's `runs/` when this package is a source checkout (a notebook's
    kernel starts in `notebooks/`, and must find the same runs as the command line), else `./runs`."""
    if os.environ.get("TWOTOWER_RUNS"):
        return Path(os.environ["TWOTOWER_RUNS"]).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").exists() and (checkout / "notebooks").is_dir():
        return checkout / "runs"
    return Path("runs").resolve()


def profile_dir(profile: str, runs_dir: str | Path | None = None) -> Path:
    """`runs/<profile>/`: every output of one profile (`runs_dir` replaces `runs/` if given)."""
    return (Path(runs_dir).expanduser().resolve() if runs_dir else runs_root()) / profile
