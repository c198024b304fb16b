"""Distributions over seed pairs, and the rule that turns one into a verdict.

Two runs of one configuration that differ only in the seed give one pair r; four seeds give six.
The spread of r over such pairs is the uncertainty that decides whether a correlation reproduces:
the document bootstrap of one pair holds the trained models fixed and cannot see it. A control
(untrained towers, independently trained single-tower pairs, shuffled token labels) measured with
the same statistic and the same number of pairs is the null beside it.

The pairs of one family share runs (with four seeds each run is in three of the six pairs), so
they are not independent draws: the central range below describes the pairs that were trained,
it is not a confidence interval, and no test here treats the pairs as independent.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from twotower_lib.errors import UserError

CENTRAL = (0.10, 0.90)  # the central range reported beside every median: 10th to 90th percentile
VERDICTS = ("reproduced", "partly", "not", "not attempted")

RULE = ("A correlation's verdict compares the distribution of r over seed pairs with the paper's value and with "
        "its controls' pairs (untrained towers, independent single-tower pairs, shuffled labels), pooled. "
        "**not**: the median pair is not above the controls' 90th percentile. **reproduced**: it is, and the paper's "
        "value lies within our central range (10th to 90th percentile of the pairs). **partly**: above the controls, "
        "but the paper's value lies outside that range. **not attempted**: fewer than two pairs, or no control pairs.")
CONTROLS_RULE = ("The item *pairs above their controls* (not in the paper) takes the first test alone, family by "
                 "family: **reproduced** where every family's median same-configuration pair is above its own "
                 "controls' 90th percentile, **partly** where some family's is, **not** where none is.")


def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, median, the central range (`CENTRAL` percentiles, linear interpolation), min and max."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"n": 0, "median": np.nan, "low": np.nan, "high": np.nan, "min": np.nan, "max": np.nan}
    low, high = np.quantile(v, CENTRAL)
    return {"n": int(v.size), "median": float(np.median(v)), "low": float(low), "high": float(high),
            "min": float(v.min()), "max": float(v.max())}


def verdict(ours: Sequence[float], controls: Sequence[float], paper: float | tuple[float, float]) -> str:
    """`RULE` applied to the pair values `ours`, the control pairs `controls` and the paper's value (or
    the range of its cells, when one verdict covers several of them)."""
    above = above_controls(ours, controls)
    if above is None:
        return "not attempted"
    if not above:
        return "not"
    o = summarize(ours)
    lo, hi = (paper, paper) if np.isscalar(paper) else paper
    return "reproduced" if hi >= o["low"] and lo <= o["high"] else "partly"


def above_controls(ours: Sequence[float], controls: Sequence[float]) -> bool | None:
    """`RULE`'s first test: is the median of `ours` above the controls' 90th percentile (None where fewer
    than two pairs or no control pairs were measured)?"""
    o, c = summarize(ours), summarize(controls)
    return None if o["n"] < 2 or c["n"] < 1 else bool(o["median"] > c["high"])


def controls_verdict(above: Sequence[bool | None]) -> str:
    """`CONTROLS_RULE`: one `above_controls` per family."""
    decided = [a for a in above if a is not None]
    if not decided:
        return "not attempted"
    return "reproduced" if all(decided) and len(decided) == len(above) else "partly" if any(decided) else "not"


def sign_flips(pairs: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Every same-configuration pair with r < 0, and what made it negative.

    `pairs` needs columns a, b, r, sign_depends_on_rule; `runs` run, margin, rules_agree (the seed
    study's tables). "near tie": one run's two order rules (mean p, mean log p) name different primary
    towers, so the sign is the order rule's choice; "mirrored": both rules agree in both runs, so the
    towers' roles really are swapped."""
    missing = {"a", "b", "r", "sign_depends_on_rule"} - set(pairs) | {"run", "margin", "rules_agree"} - set(runs)
    if missing:
        raise UserError(f"sign_flips needs the seed study's columns; missing {sorted(missing)}")
    margin = runs.set_index("run")["margin"]
    neg = pairs[pairs["r"] < 0].copy()
    neg["smaller margin"] = [min(margin.get(a, np.nan), margin.get(b, np.nan)) for a, b in zip(neg["a"], neg["b"])]
    neg["reading"] = np.where(neg["sign_depends_on_rule"].astype(bool), "near tie", "mirrored")
    return neg[["a", "b", "r", "smaller margin", "reading"]].reset_index(drop=True)


def family_summary(pairs: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per family: the same-configuration pairs' r (Eq. 4 and mean of log p) and order-free |r| beside the
    control pairs' |r|, the share of pairs whose sign depends on the order rule, and the runs' tower
    margins (relative gap of the towers' mean p)."""
    rows = []
    same = pairs[pairs["kind"] == "same"]
    for family, group in same.groupby("family_a", sort=False):
        ctrl = pairs[pairs["kind"].isin(("untrained", "independent", "shuffled")) & (pairs["family_a"] == family)]
        s, lm = summarize(group["r"]), summarize(group["r_logmean"])
        ab, cab = summarize(group["r"].abs()), summarize(ctrl["r"].abs())
        m = summarize(runs[(runs["kind"] == "case") & (runs["family"] == family)]["margin"])
        rows.append({"family": family, "pairs": s["n"], "median r": s["median"], "r low": s["low"], "r high": s["high"],
                     "median r (mean log p)": lm["median"], "median |r|": ab["median"],
                     "control pairs": cab["n"], "controls' median |r|": cab["median"], "controls' |r| high": cab["high"],
                     "sign depends on rule": float(group["sign_depends_on_rule"].astype(bool).mean()),
                     "median tower margin": m["median"]})
    return pd.DataFrame(rows)
