"""Distributions over seed pairs: the statistics the verdicts over seeds read (the rules: `paper`).

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

import itertools
from typing import Sequence

import numpy as np
import pandas as pd

from twotower_lib.errors import UserError
from twotower_lib.paper import CENTRAL, CONTROL_QUANTILE, MARGIN_Z, orientation_verdict, partition_verdict, seed_verdict

def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, median, the central range (`CENTRAL` percentiles, linear interpolation), min and max."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"n": 0, "median": np.nan, "low": np.nan, "high": np.nan, "min": np.nan, "max": np.nan}
    low, high = np.quantile(v, CENTRAL)
    return {"n": int(v.size), "median": float(np.median(v)), "low": float(low), "high": float(high),
            "min": float(v.min()), "max": float(v.max())}


def verdict(seed_a: Sequence, seed_b: Sequence, ours: Sequence[float], controls: Sequence[float],
            paper: float | tuple[float, float]) -> str:
    """`paper.RULE` applied to the pairs of seeds (`seed_a`, `seed_b`) with values `ours` (signed: the rule reads
    |r|), the control pairs `controls` and the paper's value (or the range of its cells, when one verdict covers
    several of them). Values of single runs (against frequency rank) pass each run's seed as both."""
    division = partition(seed_a, seed_b, ours, controls)["verdict"]
    o = summarize(np.abs(np.asarray(ours, dtype=float)))
    return seed_verdict(division, o["low"], o["high"], paper)


def above_controls(ours: Sequence[float], controls: Sequence[float]) -> bool | None:
    """`paper.RULE`'s first test: is the median |r| of `ours` above the controls' |r| at `CONTROL_QUANTILE` (None
    where fewer than two pairs or no control pairs were measured)?"""
    o, c = summarize(np.abs(np.asarray(ours, dtype=float))), summarize(np.abs(np.asarray(controls, dtype=float)))
    return None if o["n"] < 2 or c["n"] < 1 else bool(o["median"] > c["high"])


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


# ---------------------------------------------------------------------- the two questions a signed r mixes
#
# A signed r between two runs answers two questions at once: does the same *division* of tokens between the
# towers repeat (whatever tower is called primary), and does Eq. 3 give the same tower the same *role*? Flip
# which tower one run calls primary and every r of its pairs changes sign. The partition question is asked of
# an order-free statistic, |r|; the orientation question of the Eq. 3 margins and the signs.

MARGIN_BOOTSTRAP = 1000        # document resamples for a margin's SE


def leave_one_seed_out(seed_a: Sequence, seed_b: Sequence, values: Sequence[float]) -> tuple[float, float]:
    """The lowest and highest median of `values` over the pairs left when one run is dropped, run by run (a run
    named by its seed, or by its name where the pairs join two families): how far the median moves with which
    seeds happened to be trained (NaN with fewer than three runs)."""
    a, b, v = np.asarray(seed_a), np.asarray(seed_b), np.asarray(values, dtype=float)
    seeds = np.union1d(a, b)
    if seeds.size < 3:
        return float("nan"), float("nan")
    medians = [float(np.median(v[(a != s) & (b != s)])) for s in seeds]
    return min(medians), max(medians)


def partition(seed_a: Sequence[int], seed_b: Sequence[int], r: Sequence[float], controls_r: Sequence[float],
              shuffled_r: Sequence[float] = ()) -> dict:
    """`paper.PARTITION_RULE` for one configuration's seed pairs (`seed_a`, `seed_b`, signed `r`) against the control
    pairs' signed r (`controls_r`; untrained and independent); the shuffled-label null beside."""
    abs_r, ctrl = np.abs(np.asarray(r, dtype=float)), np.abs(np.asarray(controls_r, dtype=float))
    o = summarize(abs_r)
    lo, hi = leave_one_seed_out(seed_a, seed_b, abs_r)
    threshold = float(np.quantile(ctrl, CONTROL_QUANTILE)) if ctrl.size else float("nan")
    shuffled = np.abs(np.asarray(shuffled_r, dtype=float))
    verdict_ = partition_verdict(o["median"], lo, threshold)
    return {"pairs": o["n"], "median |r|": o["median"], "loo low": lo, "loo high": hi, "min |r|": o["min"],
            "max |r|": o["max"], "controls": int(ctrl.size), "controls |r| threshold": threshold,
            "controls max |r|": float(ctrl.max()) if ctrl.size else float("nan"),
            "shuffled max |r|": float(shuffled.max()) if shuffled.size else float("nan"), "verdict": verdict_}


def margin_and_se(n: Sequence[float], sum_p1: Sequence[float], sum_p2: Sequence[float],
                  resamples: int = MARGIN_BOOTSTRAP, seed: int = 0) -> tuple[float, float]:
    """Eq. 3's relative margin |P1 - P2| / max(P1, P2) of the towers' mean p over all validation positions, from
    per-document counts and sums, and its standard error over `resamples` document bootstrap resamples."""
    n, s1, s2 = (np.asarray(x, dtype=float) for x in (n, sum_p1, sum_p2))
    if not (n.shape == s1.shape == s2.shape) or n.ndim != 1 or n.sum() <= 0:
        raise UserError(f"margin_and_se needs per-document n, sum_p1, sum_p2 of one length with positions (got "
                        f"{n.shape}, {s1.shape}, {s2.shape})")

    def margin(w: np.ndarray) -> np.ndarray:
        p1, p2 = (w @ s1) / (w @ n), (w @ s2) / (w @ n)
        return np.abs(p1 - p2) / np.maximum(p1, p2)

    estimate = float(margin(np.ones((1, n.size)))[0])
    if n.size < 2:                              # one document: nothing to resample
        return estimate, float("nan")
    weights = np.random.default_rng(seed).multinomial(n.size, np.full(n.size, 1.0 / n.size), size=resamples)
    return estimate, float(np.std(margin(weights.astype(float)), ddof=1))


def triad_share(seed_a: Sequence[int], seed_b: Sequence[int], r: Sequence[float]) -> float:
    """The share of seed triads whose three pairwise r multiply to a positive number: the share whose signs a
    per-run choice of primary tower can explain (a division shared up to orientation gives 1; NaN without a
    triad)."""
    sign = {frozenset((a, b)): np.sign(v) for a, b, v in zip(seed_a, seed_b, r)}
    seeds = sorted(set(seed_a) | set(seed_b))
    triads = [t for t in itertools.combinations(seeds, 3)
              if all(frozenset(p) in sign for p in itertools.combinations(t, 2))]
    if not triads:
        return float("nan")
    return float(np.mean([np.prod([sign[frozenset(p)] for p in itertools.combinations(t, 2)]) > 0 for t in triads]))


def orientation(runs: pd.DataFrame, seed_a: Sequence[int], seed_b: Sequence[int], r: Sequence[float],
                untrained_margins: Sequence[float], shared: float = 0.0) -> dict:
    """`paper.ORIENTATION_RULE` for one configuration: `runs` has one row per seed (seed, margin, margin_se — NaN where
    no per-document sums were kept, so only the untrained test applies), the seed pairs' signed r, and the
    untrained towers' margins. `shared`: the |r| at or below which a pair shares no division (the partition's
    control threshold), so that its sign is not read; such pairs and the triads holding them are left out."""
    if runs.empty or not {"seed", "margin", "margin_se"} <= set(runs):
        raise UserError("orientation needs a runs table with columns seed, margin, margin_se")
    u = np.asarray(untrained_margins, dtype=float)
    floor = float(np.quantile(u, CONTROL_QUANTILE)) if u.size else float("nan")
    se = runs["margin_se"].to_numpy(dtype=float)
    by_se = np.where(np.isfinite(se), runs["margin"].to_numpy() > MARGIN_Z * se, True)
    resolved = dict(zip(runs["seed"], by_se & (runs["margin"].to_numpy() > floor if u.size else True)))
    a, b, v = np.asarray(seed_a), np.asarray(seed_b), np.asarray(r, dtype=float)
    read = np.abs(v) > shared
    both = read & np.array([bool(resolved.get(x, False) and resolved.get(y, False)) for x, y in zip(a, b)], dtype=bool)
    verdict_ = orientation_verdict(len(runs), v.size, bool((v[both] < 0).any()), all(resolved.values()),
                                   v[read].tolist())
    return {"runs": len(runs), "resolved runs": int(sum(resolved.values())),
            "median margin": float(np.median(runs["margin"])), "median margin SE": float(np.nanmedian(se))
            if np.isfinite(se).any() else float("nan"), "untrained margin threshold": floor,
            "pairs read": int(read.sum()), "positive pairs": float(np.mean(v[read] > 0)) if read.any() else float("nan"),
            "consistent triads": triad_share(a[read], b[read], v[read]), "verdict": verdict_}
