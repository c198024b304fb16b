"""The book's sections and what a running section notebook knows.

`SECTIONS` lists the sections in book order: each is a jupytext notebook `notebooks/<name>.py` with
the profile fields it reads and the sections whose outputs it needs. Inside a notebook,
`open_section(name, globals())` validates the parameters cell (an unknown name or a bad value
fails at the top), resolves the profile and returns the `SectionContext`: where the section's
outputs go and where its inputs are (a missing input names the command that produces it).
"""

from __future__ import annotations

import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twotower_lib.artifacts import atomic_write_json, read_json
from twotower_lib.book.profile_keys import OLD_NAMES, OVERRIDABLE, canonical_key, notebook_name
from twotower_lib.book.profiles import DEFAULT_PROFILE, PROFILE_ENV, Profile, get_profile, profile_dir, runs_root
from twotower_lib.book import tables
from twotower_lib.errors import UserError


PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout: twotower_lib/book/sections.py


NOTEBOOKS_DIR = PROJECT_ROOT / "notebooks"


# Every field of the profile's probe: the probing section reads them all (the probe's own config).
PROBE_KEYS = tuple(k for k in OVERRIDABLE if k.startswith("probe."))

# Parameters every section notebook has besides the profile fields it reads.
COMMON_PARAMETERS = ("profile", "runs_dir")


@dataclass(frozen=True)
class Section:
    """One chapter of the book: a notebook, the profile fields it reads, the sections it reads from."""

    name: str                          # notebook stem; the number gives the order
    title: str
    output: str                        # its output directory under runs/<profile>/
    parameters: tuple[str, ...]        # profile keys it reads ("section.field", overridable with -p)
    upstream: tuple[str, ...] = ()     # every section whose output it reads (re-runs when one changes)
    committed: tuple[str, ...] = ()    # committed result folders it reads, relative to the project (re-runs when they change)


SECTIONS: tuple[Section, ...] = (
    Section("00_data", "Data", "data", ("data.corpus", "data.vocab_size", "data.seq_len", "data.seed", "data.doc_words", "data.max_docs", "data.valid_fraction")),
    Section("01_training", "Cooperative training", "training",
            ("train.cases", "train.tokens", "train.model_tokens", "train.model_lr", "train.model_final_lr", "train.precision", "train.engine", "train.model_engine", "train.label_bucket", "train.vocab_multiple", "train.micro_batch", "train.model_micro_batch", "train.norm_scheme", "train.position", "train.mask_rate", "train.mask_style", "train.grad_accum", "train.launcher", "train.num_gpus",
             "analysis.controls", "analysis.control_models", "train.threads_per_run"),
            ("00_data",)),
    Section("02_probing", "Probing and preference scores", "probing",
            ("train.cases", *PROBE_KEYS, "analysis.controls", "analysis.control_models", "analysis.top_n",
             "analysis.reliability_models", "analysis.bert_events_comparison"),
            ("00_data", "01_training"), committed=("results/probe", "results/seeds")),
    Section("03_correlations", "Correlation of preference scores", "correlations",
            ("train.cases", "analysis.top_n", "analysis.bootstrap", "analysis.controls", "analysis.control_models"), ("00_data", "01_training", "02_probing"),
            committed=("results/register", "results/bert-controls", "results/seeds", "results/ladder")),
    Section("04_pos", "Part-of-speech preference", "pos", ("train.cases", "analysis.top_n", "analysis.pos_docs", "analysis.pos_backend"),
            ("00_data", "02_probing")),
    Section("05_ica", "ICA word groups", "ica", ("train.cases", "analysis.ica_reference", "analysis.ica_tokens", "analysis.ica_dim", "analysis.ica_starts", "analysis.top_n"),
            ("00_data", "01_training", "02_probing"), committed=("results/word_groups",)),
    Section("06_frequency", "Preference and word frequency", "frequency", ("train.cases", "analysis.top_n", "analysis.bootstrap"), ("00_data", "02_probing")),
    Section("07_emergence", "When the preference emerges", "emergence", (), ("03_correlations",),
            committed=("results/emergence", "results/profiles")),
    Section("08_probe_validation", "Appendix: the probe's validation studies", "probe_validation", (),
            committed=("results/probe", "results/seeds")),
)


def find_section(name: str, sections: tuple[Section, ...] = SECTIONS) -> Section:
    for s in sections:
        if s.name == name or s.name.split("_", 1)[1] == name:
            return s
    raise UserError(f"unknown section {name!r}; the sections are: {', '.join(s.name for s in sections)}")


def run_command(section: str, profile: str, overrides: dict[str, Any] | None = None,
                runs_dir: str | Path | None = None) -> str:
    """The shell command that runs `section` (and whatever it needs) at `profile`, into `runs_dir`
    (named only where it is not the default, so the command fixes what it is printed for)."""
    ps = "".join(f" -p {k} {as_text(v)}" for k, v in (overrides or {}).items())
    where = f" --runs-dir {runs_dir}" if runs_dir and Path(runs_dir).resolve() != runs_root() else ""
    return f"python -m twotower_lib run {section} --profile {profile}{ps}{where}"


def as_text(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)


@dataclass
class SectionContext:
    """What a running notebook knows: its section, the resolved profile, where outputs go."""

    section: Section
    profile: Profile
    root: Path                                   # runs/<profile>/
    overrides: dict[str, Any] = field(default_factory=dict)
    sections: tuple[Section, ...] = SECTIONS

    @property
    def out(self) -> Path:
        """This section's output directory (created on first use)."""
        d = self.root / self.section.output
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def parameters(self) -> dict[str, Any]:
        """The resolved values of the profile fields this section reads."""
        values = self.profile.values()
        return {k: values[k] for k in self.section.parameters}

    def rerun_markdown(self) -> str:
        """How to re-run this chapter with a new parameter, as one line a reader can copy: the command with
        its first numeric parameter (else its first) at its current value, and the names of the others."""
        params = self.parameters
        if not params:
            return f"**Re-run:** `{run_command(self.section.name, self.profile.name)}`."
        first, value = next(((k, v) for k, v in params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)),
                            next(iter(params.items())))
        return (f"**Re-run with new parameters:** `{run_command(self.section.name, self.profile.name, {first: value})}` "
                f"(parameters: {', '.join(f'`{k}`' for k in params)}; papermill writes `_` for the dot).")

    def parameter_table(self):
        """The resolved parameters as a one-column table, headed by the profile (each section shows it)."""
        import pandas as pd

        return pd.DataFrame({"value": {k: str(v) for k, v in self.parameters.items()}}).rename_axis(
            f"profile {self.profile.name}")

    def input_dir(self, upstream: str) -> Path:
        """The output directory of an upstream section; UserError naming the command if it is missing."""
        if upstream not in self.section.upstream:
            raise UserError(f"section {self.section.name} does not declare {upstream} as an input "
                            f"(its inputs: {list(self.section.upstream) or 'none'})")
        up = find_section(upstream, self.sections)
        d = self.root / up.output
        if not (d / "section.json").exists():
            ups = {k: v for k, v in self.overrides.items() if k in up.parameters}
            raise UserError(f"section {self.section.name} needs the output of section {up.name} ({up.title}) "
                            f"at {d}, which has not been produced at profile {self.profile.name!r}. "
                            f"Produce it with:  {run_command(up.name, self.profile.name, ups, self.root.parent)}")
        return d

    def finish(self, **summary: Any) -> Path:
        """Mark the section's output complete; downstream sections look for this file."""
        return atomic_write_json(self.out / "section.json", {
            "section": self.section.name, "profile": self.profile.name,
            "parameters": self.parameters, "summary": summary})


def _notebook_variables(namespace: dict[str, Any]) -> dict[str, Any]:
    """The plain-data variables a notebook defined so far (its parameters), without IPython's own."""
    hidden: set[str] = set()
    ip = namespace.get("get_ipython")
    if callable(ip) and ip() is not None:
        hidden = set(ip().user_ns_hidden)
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and k not in hidden and not isinstance(v, types.ModuleType) and not callable(v)}


def open_section(name: str, namespace: dict[str, Any], sections: tuple[Section, ...] = SECTIONS) -> SectionContext:
    """Validate a notebook's parameters and return its context. Call right after the parameters cell."""
    section = find_section(name, sections)
    params = _notebook_variables(namespace)
    keys = {notebook_name(k): k for k in section.parameters}      # the cell's names: probe.head -> probe_head
    keys.update({old: new for old, new in OLD_NAMES.items() if new in section.parameters and old not in keys})
    unknown = sorted(set(params) - set(COMMON_PARAMETERS) - set(keys))
    if unknown:
        raise UserError(f"unknown parameter(s) {unknown} for section {section.name}; its parameters are: "
                        f"{', '.join(COMMON_PARAMETERS + tuple(map(notebook_name, section.parameters)))}. "
                        "Check the spelling of `-p NAME VALUE`.")
    profile = get_profile(params.get("profile") or os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE)
    where = f"parameter of notebook {section.name}"
    overrides = {canonical_key(k, where) if k in OLD_NAMES else keys[k]: v
                 for k, v in params.items() if k in keys and v is not None}
    profile = profile.with_overrides(overrides, where=where)
    ctx = SectionContext(section, profile, profile_dir(profile.name, params.get("runs_dir")),
                         {k: profile.value(k) for k in overrides}, sections)
    for up in section.upstream:
        ctx.input_dir(up)
    tables.enable()
    return ctx


def upstream_summary(ctx: SectionContext, upstream: str) -> dict[str, Any]:
    """The summary an upstream section recorded when it finished (its `ctx.finish(...)` keywords)."""
    return read_json(ctx.input_dir(upstream) / "section.json").get("summary", {})


def load_data(ctx: SectionContext):
    """The prepared data of 00_data, for any section that declares it as input."""
    from twotower_lib.data import load_prepared

    return load_prepared(ctx.input_dir("00_data") / "prepared")


def corpus_summary(ctx: SectionContext, data) -> str:
    """Section 00's closing summary, every number from the prepared data: the corpus and its splits, the
    vocabulary beside the paper's, the share of training tokens the compared top-N covers, and the loss word
    frequencies alone give (`PreparedData.unigram_loss`), which a model must beat to have learned context."""
    import numpy as np

    from twotower_lib.paper import TABLE1_VOCAB

    m, top_n = data.manifest, ctx.profile.analysis.top_n
    counts = np.sort(np.asarray(data.counts))[::-1]
    return (f"At profile `{ctx.profile.name}` the corpus is {', '.join(s['name'] for s in m['sources'])}: "
            f"{m['documents']['train']:,} training and {m['documents']['valid']:,} validation documents, "
            f"{m['block_tokens']['train']:,} and {m['block_tokens']['valid']:,} tokens in blocks of {data.seq_len}, over "
            f"a WordPiece vocabulary of {data.vocab_size:,} (the paper: {TABLE1_VOCAB:,}). The {top_n:,} most frequent "
            f"tokens, over which the correlations are computed, cover {counts[:top_n].sum() / counts.sum():.0%} of the "
            f"training tokens. Word frequencies alone predict the validation text at {data.unigram_loss():.2f} nats a "
            "token: a model has learned context only where its loss is below that (section 02 reads every case "
            "against it).")
