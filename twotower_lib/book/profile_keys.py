"""The keys a profile can be overridden by (`-p section.field value`): their names and types, the flat
names of earlier versions, and the conversion of a command-line or papermill value to a field's type."""

from __future__ import annotations

import sys
from dataclasses import fields
from typing import Any

from twotower_lib.book.stage_plans import SECTIONS
from twotower_lib.errors import UserError

# Overridable keys ("section.field") in declaration order, with their annotated types ("int", "str | None", ...).
# `probe.replicate` is not one: the probing section asks for the second head seed where it reports it.
OVERRIDABLE: dict[str, str] = {f"{section}.{f.name}": str(f.type) for section, cls in SECTIONS.items() for f in fields(cls)
                               if f"{section}.{f.name}" != "probe.replicate"}

# The flat names of earlier versions, accepted for a while with a note naming the new key.
OLD_NAMES: dict[str, str] = {
    "corpus": "data.corpus", "vocab_size": "data.vocab_size", "seq_len": "data.seq_len", "data_seed": "data.seed",
    "doc_words": "data.doc_words", "max_docs": "data.max_docs", "valid_fraction": "data.valid_fraction",
    "cases": "train.cases", "train_tokens": "train.tokens", "model_tokens": "train.model_tokens",
    "model_lr": "train.model_lr", "model_final_lr": "train.model_final_lr", "precision": "train.precision",
    "micro_batch": "train.micro_batch", "grad_accum": "train.grad_accum", "launcher": "train.launcher",
    "num_gpus": "train.num_gpus", "threads_per_run": "train.threads_per_run",
    "probe_tokens": "probe.train_positions", "probe_max_epochs": "probe.max_epochs", "probe_head": "probe.head",
    "probe_features": "probe.features", "probe_precondition": "probe.precondition",
    "bert_events": "probe.bert_events",
    "top_n": "analysis.top_n", "bootstrap": "analysis.bootstrap", "controls": "analysis.controls",
    "control_models": "analysis.control_models", "pos_docs": "analysis.pos_docs", "pos_backend": "analysis.pos_backend",
    "ica_reference": "analysis.ica_reference", "ica_tokens": "analysis.ica_tokens", "ica_dim": "analysis.ica_dim",
    "ica_starts": "analysis.ica_starts",
}


# Keys of earlier versions whose option left the profile, with where it went.
RETIRED_KEYS: dict[str, str] = dict.fromkeys(
    ("probe.refine_iters", "probe_refine_iters", "probe.ridge", "probe_ridge", "probe.penalty"),
    "the full-batch refinement of the linear heads is a study of the probe now: python -m studies.probe refine RUN "
    "--iters 15 --ridge 0.03")


def canonical_key(key: str, where: str = "-p") -> str:
    """`key` as "section.field": an old flat name is mapped with a note on stderr; an unknown one is an error."""
    if key in RETIRED_KEYS:
        raise UserError(f"parameter {key!r} ({where}) is retired: {RETIRED_KEYS[key]}")
    if key in OVERRIDABLE:
        return key
    if key in OLD_NAMES:
        print(f"note: parameter {key!r} ({where}) is now {OLD_NAMES[key]!r}; the old name will stop working",
              file=sys.stderr)
        return OLD_NAMES[key]
    raise UserError(f"unknown parameter {key!r} ({where}); the parameters are: {', '.join(OVERRIDABLE)}")


def notebook_name(key: str) -> str:
    """A key's name in a notebook's parameters cell (papermill needs an identifier): "probe.train_positions" ->
    "probe_train_positions"."""
    return key.replace(".", "_")


def coerce(key: str, raw: Any, where: str = "-p") -> Any:
    """Convert `raw` (a string from the command line, or a value papermill injected) to `key`'s type
    (`OVERRIDABLE`: int, float, str, bool, tuple[str, ...], or one of them "| None": "none" gives None)."""
    optional, kind = OVERRIDABLE[key].endswith(" | None"), OVERRIDABLE[key].removesuffix(" | None")
    try:
        if optional and (raw is None or (isinstance(raw, str) and raw.lower() in ("none", "null", ""))):
            return None
        if kind == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            return int(raw) if not isinstance(raw, str) else int(raw.replace("_", ""))
        if kind == "float":
            if isinstance(raw, bool):
                raise ValueError
            return float(raw)
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
            return words[str(raw).lower()]
        if kind == "str":
            if not isinstance(raw, str) or not raw:
                raise ValueError
            return raw
        # tuple[...] fields: a comma-separated string or a list
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        return tuple(str(i).strip() for i in items if str(i).strip())
    except (TypeError, ValueError, KeyError):
        expected = {"int": "an integer", "float": "a number", "str": "a non-empty string",
                    "bool": "true or false"}.get(kind, "a comma-separated list") + (" or none" if optional else "")
        raise UserError(f"invalid value {raw!r} for parameter {key!r} ({where}): expected {expected}") from None


# ---------------------------------------------------------------------- the profiles
