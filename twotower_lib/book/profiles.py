"""Named profiles: one name bundles every setting a full run of the book needs.

A profile holds the stage configurations themselves, nested: `data` (a `DataConfig`: corpus,
vocabulary, block length), `train` (a `TrainPlan`: which of the paper's cases, their budgets and
batching), `probe` (a `ProbeConfig`) and `analysis` (an `AnalysisConfig`: top-N tokens, bootstrap
samples, controls, POS and ICA settings), plus the size preset of each model. `python -m twotower_lib
run --profile NAME` runs every section with it; `-p section.field value` overrides one field for one
run (`-p probe.train_positions 400000`, `-p analysis.top_n 500`).

All outputs of a profile live under `runs/<profile>/` (`$TWOTOWER_RUNS` moves `runs/`):

    runs/<profile>/
      data/           prepared corpus (00_data)        training/   checkpoints (01_training)
      probing/        preference-score tables (02)     correlations/ pos/ ica/ frequency/ (03-06)
      notebooks/      executed notebooks (papermill)   scorecard.json
      .pipeline/      what ran with which inputs (staleness records)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from twotower_lib.paper import TABLE1_VOCAB
from twotower_lib.book.profile_keys import OVERRIDABLE, canonical_key, coerce
from twotower_lib.book.stage_plans import AnalysisConfig, ModelChoice, TrainPlan
from twotower_lib.data.config import DataConfig
from twotower_lib.errors import UserError
from twotower_lib.probe.config import ProbeConfig
from twotower_lib.run_names import parse_spec

DEFAULT_PROFILE = "cpu"
PROFILE_ENV = "TWOTOWER_PROFILE"  # the profile of a notebook opened by hand (`profile = None`); Binder sets tiny


@dataclass(frozen=True)
class Profile:
    """Every setting of a full run: the stage configs, nested. Their fields can be overridden with
    `-p section.field value`."""

    name: str
    description: str
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainPlan = field(default_factory=TrainPlan)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    models: dict[str, ModelChoice] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        try:
            self.train.validate()
            self.probe.validate()
            self.analysis.validate()
            self._check_models()
        except UserError as e:
            raise UserError(f"profile {self.name!r}: {e}") from None

    def _check_models(self) -> None:
        """Every model a setting names is one of the profile's models."""
        if not self.models:
            return
        named = [("train.cases", parse_spec(r)[0]) for r in self.train.cases]
        named += [(f"train.{k}", item.partition("=")[0]) for k in ("model_tokens", "model_lr", "model_final_lr",
                                                                   "model_micro_batch")
                  for item in getattr(self.train, k)]
        named += [("analysis.control_models", m) for m in self.analysis.control_models]
        named += [("analysis.reliability_models", m) for m in self.analysis.reliability_models]
        named += [("analysis.ica_reference", parse_spec(self.analysis.ica_reference)[0])]
        for where, model in named:
            if model not in self.models:
                raise UserError(f"`{where}` names model {model!r}; this profile defines {sorted(self.models)}")

    # ------------------------------------------------------------------ views

    def case_list(self) -> list[tuple[str, int]]:
        """`train.cases` as (model name, seed) pairs."""
        return [parse_spec(r) for r in self.train.cases]

    def tokens_for(self, model: str) -> int:
        """The training budget of `model`: its `train.model_tokens` entry, else `train.tokens`."""
        tokens = _entry(self.train.model_tokens, model)
        return self.train.tokens if tokens is None else int(tokens.replace("_", ""))

    def micro_batch_for(self, model: str) -> int:
        """The micro-batch of `model`: its `train.model_micro_batch` entry, else `train.micro_batch`."""
        micro = _entry(self.train.model_micro_batch, model)
        return self.train.micro_batch if micro is None else int(micro)

    def lr_for(self, model: str) -> float | None:
        """The peak learning rate of `model`: its `train.model_lr` entry, else None (the DeepSpeed config's)."""
        lr = _entry(self.train.model_lr, model)
        return None if lr is None else float(lr)

    def engine_for(self, model: str) -> str:
        """The trainer's engine of `model`: its `train.model_engine` entry, else `train.engine`."""
        return _entry(self.train.model_engine, model) or self.train.engine

    def final_lr_for(self, model: str) -> float:
        """Where `model`'s linear decay ends, as a fraction of its peak: its `train.model_final_lr` entry, else 0."""
        fraction = _entry(self.train.model_final_lr, model)
        return 0.0 if fraction is None else float(fraction)

    def reliability_cases(self) -> list[tuple[str, int]]:
        """The cases probed with a second head set (probe-seed reliability): the first case of each model of
        `analysis.reliability_models`, or every case when it is empty. The reliability reads alike on every
        run, so a sample of runs measures it for the rest."""
        models = self.analysis.reliability_models
        if not models:
            return self.case_list()
        first = {}
        for model, seed in self.case_list():
            first.setdefault(model, (model, seed))
        return [first[m] for m in models if m in first]

    def same_config_pairs(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """Pairs of cases that differ only in the seed (the paper's Bert-large run 1 and run 2)."""
        from itertools import combinations

        by_model: dict[str, list[tuple[str, int]]] = {}
        for model, seed in self.case_list():
            by_model.setdefault(model, []).append((model, seed))
        return [pair for runs in by_model.values() for pair in combinations(runs, 2)]

    def controlled_pairs(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """The same-configuration pairs that get the untrained and independent controls: those of
        `analysis.control_models` (every pair when it is empty). Each control costs probes (untrained: two;
        independent: four training runs and four probes), so the `cpu` profile limits them to one model."""
        models = self.analysis.control_models
        return [p for p in self.same_config_pairs() if not models or p[0][0] in models]

    def untrained_runs(self) -> list[tuple[str, int]]:
        """The untrained-towers control: both runs of every controlled pair, probed at 0 tokens."""
        if "untrained" not in self.analysis.controls:
            return []
        return list(dict.fromkeys(run for pair in self.controlled_pairs() for run in pair))

    def independent_runs(self) -> list[tuple[str, int]]:
        """The independent-pairs control: for the model of every controlled pair, four single-tower
        (k = 1) runs, seeds 1-4, each with that model's budget. Runs 1+2 and 3+4 are each scored as
        if they were the two towers of one model; then the two "pairs" are correlated, so each
        same-configuration pair is judged against its own model's control."""
        if "independent" not in self.analysis.controls:
            return []
        models = dict.fromkeys(a[0] for a, _ in self.controlled_pairs())
        return [(model, seed) for model in models for seed in (1, 2, 3, 4)]

    def quality_runs(self) -> list[tuple[str, int]]:
        """The quality-gap control: per model of a controlled pair, its first independent single-tower
        run, scored against its own snapshot at half its training tokens (a worse model of the same run)."""
        if "quality" not in self.analysis.controls:
            return []
        return [run for run in self.independent_runs() if run[1] == 1]

    def model_config(self, model: str, **overrides: Any):
        """The `ModelConfig` of model `model` (e.g. "bert-large") at this profile's sizes."""
        from twotower_lib.models.config import preset

        choice = self._choice(model)
        return preset(choice.preset, choice.model_type, seq_len=self.data.seq_len, **overrides)

    def _choice(self, model: str) -> ModelChoice:
        if model not in self.models:
            raise UserError(f"profile {self.name!r} has no model {model!r}; it defines {sorted(self.models)}")
        return self.models[model]

    def train_config(self, model: str, seed: int, data_dir: str | Path, towers: int = 2):
        """The `TrainConfig` of one case: the token budget becomes a step count at this micro-batch,
        accumulation and number of processes, so the budget holds whatever the world size."""
        from twotower_lib.train.config import TrainConfig

        choice, plan, micro = self._choice(model), self.train, self.micro_batch_for(model)
        batching = dict(grad_accum=plan.grad_accum, world_size=plan.world_size)
        steps = TrainConfig.steps_for(self.tokens_for(model), micro, self.data.seq_len, **batching)
        recipe = dict(norm_scheme=plan.norm_scheme, position=plan.position, mask_rate=plan.mask_rate,
                      mask_style=plan.mask_style) \
            if choice.model_type == "bert" else {}
        return TrainConfig.for_tokens(choice.model_type, choice.preset, seed, self.tokens_for(model), micro,
                                      self.data.seq_len, eval_every_steps=10 * max(1, steps // 100),  # a multiple of the log interval
                                      **batching,
                                      towers=towers, lr=self.lr_for(model), final_lr_fraction=self.final_lr_for(model),
                                      precision=plan.precision, data=str(data_dir), as_released=choice.as_released,
                                      engine=self.engine_for(model), label_bucket=plan.label_bucket,
                                      vocab_multiple=plan.vocab_multiple, **recipe)

    def probe_config(self, replicate: bool = False, **changes: Any) -> ProbeConfig:
        """The `ProbeConfig` of every probe: `probe`, with a second head seed where `replicate`, and
        `changes` (e.g. `bert_events="corrupt"` for a comparison)."""
        return replace(self.probe, replicate=replicate, **changes).validate()

    def data_config(self) -> DataConfig:
        """The `DataConfig` the 00_data section prepares."""
        return self.data

    # ------------------------------------------------------------------ overrides

    def value(self, key: str) -> Any:
        """The value of `key` ("section.field")."""
        section, _, name = key.partition(".")
        return getattr(getattr(self, section), name)

    def values(self) -> dict[str, Any]:
        """Every overridable field as "section.field": value (JSON-friendly)."""
        return {key: list(v) if isinstance(v, tuple) else v for key in OVERRIDABLE for v in [self.value(key)]}

    def with_overrides(self, overrides: dict[str, Any], where: str = "-p") -> "Profile":
        """A copy with `overrides` ("section.field": value; values may be strings from the command line or
        papermill) applied. An old flat name (`top_n`) is accepted with a note naming the new one."""
        changes: dict[str, dict[str, Any]] = {}
        for key, raw in overrides.items():
            key = canonical_key(key, where)
            section, _, name = key.partition(".")
            changes.setdefault(section, {})[name] = coerce(key, raw, where)
        nested = {section: replace(getattr(self, section), **c) for section, c in changes.items()}
        try:
            return replace(self, **nested)
        except (TypeError, ValueError) as e:
            raise UserError(f"invalid parameter ({where}): {e}") from None


def _entry(items: tuple[str, ...], model: str) -> str | None:
    """The value of `model` in "model=value" items (None if absent); a released twin ("gpt-released")
    without an entry of its own takes its model's, so the two are trained and compared alike."""
    for item in items:
        name, _, value = item.partition("=")
        if name == model:
            return value
    return _entry(items, model.removesuffix(RELEASED_SUFFIX)) if model.endswith(RELEASED_SUFFIX) else None



RELEASED_SUFFIX = "-released"


def _with_released(models: dict[str, ModelChoice], shapes: dict[str, str] | None = None) -> dict[str, ModelChoice]:
    """Each model beside its twin "<model>-released", built as the authors' released code builds it
    (`models.config.RELEASED_OPTIONS`: the released ELMo with its backward outputs zeroed, GPT towers on a shared
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

# The fastest engine measured for each family on one H200 at the paper's batch (results/gpu/levers/, the Paper
# scale page): the whole model compiled for GPT and Bert-large, layer by layer for Bert-base and ELMo, with BERT's
# positions padded so that it compiles once and the decoder padded for bf16 GEMMs. bf16 only (the torch engines
# have no fp16 loss scaling).
FASTEST_ENGINES = ("gpt=torch-compile", "bert-large=torch-compile", "bert-base=torch-compile-layers",
                   "elmo=torch-compile-layers")
# The paper's corpus (Section 4.1), streamed from the Hugging Face hub: BookCorpus, then English Wikipedia.
PAPER_CORPUS = "hf:bookcorpus+hf:wikimedia/wikipedia:20231101.en"
_FASTEST = dict(model_engine=FASTEST_ENGINES, label_bucket=1024, vocab_multiple=64)
# The BERT recipe that learns context at CPU budgets (results/bert_recipe/cpu.csv): pre-LN layers, 40% of the
# positions [MASK]ed, and attention's word order from a learned bias per head and distance rather than a learned
# position table (with the table, the towers learn no more than with no positions at all). The paper's is pre-LN,
# 15% with BERT's 80/10/10 corruption, absolute positions: the book's page on the paper and its code lists these.
LEARNING_BERT = dict(norm_scheme="pre", position="relative", mask_rate=0.4, mask_style="mask")


def _cpu_probe(**changes: Any) -> ProbeConfig:
    """The CPU profiles' probe: the default heads, trained on 200k predicted positions per epoch."""
    return ProbeConfig(train_positions=200_000, **changes)


PROFILES: dict[str, Profile] = {p.name: p for p in (
    # The first 120 Brown documents, a tenth of them for validation; POS with spaCy (the stanza attempt of
    # "auto" imports torch only to find no model). benchmarks/bench_profile.py times it end to end.
    Profile("tiny", "tests and a first run: every section end to end in about a minute on 2 cores with AVX-512, "
                    "about two with AVX2 alone (results/timing); the heads stop after 3 epochs, unconverged; no "
                    "result is meaningful at this size",
            data=DataConfig(corpus="registry:brown", max_docs=120, vocab_size=300, seq_len=32, doc_words=300),
            train=TrainPlan(cases=("gpt:1", "gpt:2", "bert-large:1"), tokens=10_000, precision="fp32", micro_batch=8,
                            threads_per_run=1),
            probe=ProbeConfig(train_positions=5_000, max_epochs=3),
            analysis=AnalysisConfig(top_n=50, bootstrap=50, pos_docs=10, pos_backend="spacy", ica_tokens=20_000, ica_dim=16),
            models=_TINY_MODELS),
    # The choices of the CPU profiles (a second GPT seed, GPT's 1M tokens, the paper's schedule, fp32, the
    # cpu-long budgets) and the measurements behind them: book/decisions.md, computed by studies/decisions.
    # Its untrained, independent and quality controls are the seed study's (results/seeds/cpu: the same sizes,
    # budgets and probe, six pairs of each control per family); `-p analysis.controls ...` runs them here.
    Profile("cpu", "the default: the paper's five cases and a second GPT seed on a 2-core CPU in about an hour "
                   "(the controls and the spread over seeds come from the committed seed study; the probe-seed "
                   "reliability is measured on one GPT run)",
            train=TrainPlan(cases=("elmo:1", "gpt:1", "gpt:2", "bert-base:1", "bert-large:1", "bert-large:2"),
                            precision="fp32", threads_per_run=1, tokens=2_000_000,
                            model_tokens=("elmo=500000", "elmo-released=500000", "gpt=1000000"),
                            model_micro_batch=("bert-large=8", "bert-base=8"), **LEARNING_BERT),
            probe=_cpu_probe(), analysis=AnalysisConfig(controls=("permutation",), control_models=("gpt",),
                                                        reliability_models=("gpt",), bert_events_comparison=False),
            models=_CPU_MODELS),
    # Longer budgets on the same CPU (a few hours), with the independent control for both pairs.
    Profile("cpu-long", "overnight on the same CPU: GPT 2M tokens, Bert-large 12M and a Bert-base pair at 16M "
                        "on the default profile's learning recipe, ELMo 4M, every control",
            train=TrainPlan(cases=("elmo:1", "gpt:1", "gpt:2", "bert-base:1", "bert-base:2", "bert-large:1", "bert-large:2"),
                            precision="fp32", threads_per_run=1, tokens=12_000_000,
                            model_tokens=("elmo=4000000", "elmo-released=4000000", "gpt=2000000", "bert-base=16000000"),
                            model_micro_batch=("bert-large=8", "bert-base=8"), **LEARNING_BERT),
            probe=_cpu_probe(), models=_CPU_MODELS),
    # One GPU, a corpus that exists: the paper's cases at Table 1 sizes and vocabulary on the default registry
    # corpus, four epochs each (repeated text helps up to a few epochs, then memorises); times from
    # benchmarks/bench_gpu.py (results/gpu/). Peak rates: those of results/gpu/paper_cases.json, below the
    # paper's 1e-3 for the transformer stacks (measured with post-LN BERT layers; BERT now trains on the learning
    # recipe). 256 sequences per step: at 64 the steps were bound by kernel launches.
    Profile("gpu", "one GPU, about an hour: the paper's cases at Table 1 sizes and vocabulary, four epochs of "
                   "the default corpus",
            data=DataConfig(vocab_size=TABLE1_VOCAB),
            train=TrainPlan(cases=("elmo:1", "gpt:1", "gpt:2", "bert-base:1", "bert-large:1", "bert-large:2"),
                            precision="bf16", micro_batch=256, tokens=14_000_000,
                            model_lr=("elmo=0.001", "gpt=0.0006", "bert-base=0.0003", "bert-large=0.0002"), **_FASTEST,
                            **LEARNING_BERT),
            probe=ProbeConfig(train_positions=1_000_000),
            analysis=AnalysisConfig(control_models=("gpt",), top_n=1000, pos_docs=1000, ica_tokens=5_000_000),
            models=_PAPER_MODELS),
    # The paper's batch: 128 sequences x 5 accumulation steps x 6 GPUs = 3,840 sequences per step, in bf16 through
    # the fastest engine measured for each family (DistributedDataParallel over the launcher's processes); the
    # paper's own fp16 through DeepSpeed's engine (V100s): -p train.precision fp16 -p train.model_engine=
    Profile("paper", "Table 1 sizes, BookCorpus + Wikipedia, DeepSpeed launcher (about a day on 6 V100s per case)",
            data=DataConfig(corpus=PAPER_CORPUS, vocab_size=TABLE1_VOCAB, seq_len=128),
            train=TrainPlan(precision="bf16", micro_batch=128, grad_accum=5, launcher="deepspeed", num_gpus=6,
                            tokens=20_000_000_000, **_FASTEST),
            # four times the gpu profile's positions: the feature cache of Table 1's widest towers stays within
            # tens of GiB of host memory (the probe refuses a cache larger than the host holds)
            probe=ProbeConfig(train_positions=4_000_000),
            analysis=AnalysisConfig(top_n=5000, pos_docs=2000, ica_tokens=10_000_000), models=_PAPER_MODELS),
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
