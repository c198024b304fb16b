"""The partition and orientation questions a signed r mixes (`analysis.seed_spread`): each statistic on cases
whose answer is known by construction."""

import itertools

import numpy as np
import pandas as pd
import pytest

from twotower_lib.analysis import seed_spread as s
from twotower_lib.errors import UserError


def _pairs(values: dict) -> tuple[list, list, list]:
    keys = sorted(values)
    return [k[0] for k in keys], [k[1] for k in keys], [values[k] for k in keys]


def test_leave_one_seed_out_drops_each_seed_in_turn():
    # four seeds; seed 4's pairs are the only high ones: dropping it gives the lowest median
    r = {(a, b): (0.9 if 4 in (a, b) else 0.1) for a, b in itertools.combinations(range(1, 5), 2)}
    lo, hi = s.leave_one_seed_out(*_pairs(r))
    assert lo == pytest.approx(0.1)           # seeds 1-3: three pairs at 0.1
    assert hi == pytest.approx(0.9)           # drop seed 1: pairs (2,3)=0.1, (2,4)=0.9, (3,4)=0.9 -> 0.9
    assert np.isnan(s.leave_one_seed_out([1], [2], [0.5])[0])


def test_partition_is_blind_to_orientation_and_judges_against_controls():
    # the same division with seed 2 mirrored: signed r mixes signs, |r| does not
    r = {(a, b): (-0.7 if 2 in (a, b) else 0.7) for a, b in itertools.combinations(range(1, 5), 2)}
    a, b, v = _pairs(r)
    flipped = s.partition(a, b, v, controls_r=[0.1, -0.2, 0.05, -0.1])
    assert flipped["median |r|"] == pytest.approx(0.7) and flipped["verdict"] == "holds"
    assert s.partition(a, b, np.abs(v), controls_r=[0.1, -0.2])["median |r|"] == flipped["median |r|"]
    assert s.partition(a, b, v, controls_r=[0.8, -0.9, 0.75])["verdict"] == "not"
    assert s.partition(a, b, v, controls_r=[])["verdict"] == "not attempted"
    # the median above the controls, but one seed carries it: unstable
    r2 = {(x, y): (0.9 if 4 in (x, y) else 0.35 if (x, y) == (1, 2) else 0.15) for x, y in itertools.combinations(range(1, 5), 2)}
    assert s.partition(*_pairs(r2), controls_r=[0.2, 0.1, -0.2])["verdict"] == "unstable"


def test_margin_and_se_from_document_sums():
    rng = np.random.default_rng(0)
    n = rng.integers(50, 100, size=200).astype(float)
    p1, p2 = 0.30, 0.27
    s1, s2 = n * p1 * (1 + 0.05 * rng.standard_normal(200)), n * p2 * (1 + 0.05 * rng.standard_normal(200))
    m, se = s.margin_and_se(n, s1, s2)
    assert m == pytest.approx((s1.sum() - s2.sum()) / s1.sum())
    assert 0 < se < 0.01 and m > s.MARGIN_Z * se
    same_m, same_se = s.margin_and_se(n, s1, s1 * (1 + 0.05 * rng.standard_normal(200)))
    assert same_m < s.MARGIN_Z * same_se or same_m < 0.02    # towers alike: the margin is noise-sized
    assert np.isnan(s.margin_and_se([10.0], [5.0], [4.0])[1])      # one document: no bootstrap SE
    with pytest.raises(UserError):
        s.margin_and_se([1.0, 2.0], [0.5], [0.4])


def test_triad_share_counts_balanced_triads():
    seeds = range(1, 5)
    orient = {1: 1, 2: -1, 3: 1, 4: -1}            # one shared division, orientations at random
    balanced = {(a, b): 0.5 * orient[a] * orient[b] for a, b in itertools.combinations(seeds, 2)}
    assert s.triad_share(*_pairs(balanced)) == 1.0
    one_off = dict(balanced)
    one_off[(1, 2)] = -one_off[(1, 2)]             # a sign no choice of primary tower explains
    assert s.triad_share(*_pairs(one_off)) == 0.5   # it sits in two of the four triads
    assert np.isnan(s.triad_share([1], [2], [0.3]))


def _runs(margins, ses):
    return pd.DataFrame({"seed": range(1, len(margins) + 1), "margin": margins, "margin_se": ses})


def test_orientation_verdicts():
    a, b = zip(*itertools.combinations(range(1, 5), 2))
    positive, mixed = [0.5] * 6, [0.5, -0.5, 0.5, -0.5, 0.5, -0.5]
    resolved, noisy = _runs([0.05] * 4, [0.005] * 4), _runs([0.004] * 4, [0.005] * 4)
    untrained = [0.001, 0.002, 0.003]
    assert s.orientation(resolved, a, b, positive, untrained)["verdict"] == "holds"
    assert s.orientation(resolved, a, b, mixed, untrained)["verdict"] == "not"
    out = s.orientation(noisy, a, b, mixed, untrained)
    assert out["verdict"] == "unresolved" and out["resolved runs"] == 0
    # margins above their SE but within the untrained towers' margins: not resolved either
    assert s.orientation(resolved, a, b, mixed, [0.06, 0.07])["verdict"] == "unresolved"
    # no per-document sums (NaN SE): the untrained test alone decides
    assert s.orientation(_runs([0.05] * 4, [np.nan] * 4), a, b, positive, untrained)["verdict"] == "holds"
    assert s.orientation(resolved, a, b, positive, untrained)["positive pairs"] == 1.0
    with pytest.raises(UserError):
        s.orientation(pd.DataFrame({"seed": [1]}), [1], [2], [0.1], untrained)
