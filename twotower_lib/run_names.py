"""Run identities, named in one place.

A profile lists its cases as "model:seed" (`bert-large:2`). On disk and in every table a case is
"<model>-s<seed>" (`bert-large-s2`), a single-tower run of the independent-pairs control is
"<model>-k1-s<seed>" (`gpt-k1-s3`), two such runs scored as one model are "<model>-pair-<n>", and
a seed pair of the emergence study is "s<a>-s<b>".
"""

from __future__ import annotations

import re

from twotower_lib.errors import UserError

_SPEC = re.compile(r"^(?P<model>[a-z][a-z0-9-]*):(?P<seed>\d+)$")
_RUN = re.compile(r"^(?P<model>[a-z][a-z0-9-]*?)(?P<single>-k1)?-s(?P<seed>\d+)$")


def parse_spec(spec: object) -> tuple[str, int] | None:
    """"bert-large:2" -> ("bert-large", 2); None if `spec` is not of the form model:seed."""
    m = _SPEC.match(spec) if isinstance(spec, str) else None
    return (m["model"], int(m["seed"])) if m else None


def case_name(model: str, seed: int) -> str:
    """Directory and label of one case, e.g. "bert-large-s2"."""
    return f"{model}-s{seed}"


def control_name(model: str, seed: int) -> str:
    """Directory and label of one single-tower run of the independent-pairs control, e.g. "bert-large-k1-s3"."""
    return f"{model}-k1-s{seed}"


def model_of(run: str) -> str:
    """The model of a case or control run name: "bert-large-s2" and "bert-large-k1-s3" -> "bert-large"
    (a name of neither form is returned unchanged)."""
    m = _RUN.match(run)
    return m["model"] if m else run


def independent_pair_name(model: str, pair: int) -> str:
    """Directory and label of one scored pair of single-tower runs, e.g. "gpt-pair-1" (seeds 1+2)."""
    return f"{model}-pair-{pair}"


def quality_name(model: str) -> str:
    """Directory and label of the quality-gap control of a model: its single-tower run 1, final
    weights against an earlier snapshot, e.g. "gpt-quality"."""
    return f"{model}-quality"


def seed_pair_name(seed_a: int, seed_b: int) -> str:
    """A seed pair of the emergence study, e.g. "s1-s2"."""
    return f"s{seed_a}-s{seed_b}"


def seed_pair(name: str) -> tuple[int, int]:
    """The two seeds of a seed pair's name (`seed_pair_name`'s inverse: "s1-s2" -> (1, 2))."""
    m = re.fullmatch(r"s(\d+)-s(\d+)", name)
    if m is None:
        raise UserError(f"{name!r} is not a seed pair's name such as 's1-s2'")
    return int(m[1]), int(m[2])
