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
    assert (m, se) == s.margin_and_se(n, s1, s2, resamples=1000, seed=0)   # the default: seeded, 1,000 resamples
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


def test_the_rules_at_their_boundaries():
    """Each threshold of the rules, met exactly: which side of it a value falls on is part of the rule."""
    # RULE: the paper's value at either end of our central range is inside it
    a, b, ours, controls = [1, 1, 2], [2, 3, 3], [0.2, 0.4, 0.6], [0.0, 0.1]
    low, high = s.summarize(ours)["low"], s.summarize(ours)["high"]
    assert s.verdict(a, b, ours, controls, low) == s.verdict(a, b, ours, controls, high) == "reproduced"
    assert s.verdict(a, b, ours, controls, high + 0.01) == "partly"
    # two pairs and one control pair are enough; a median equal to the controls' 90th percentile is not above it
    assert s.above_controls([0.5, 0.7], [0.1]) is True and s.above_controls([0.5], [0.1]) is None
    assert s.above_controls([0.5, 0.7], []) is None and s.above_controls([0.3, 0.5], [0.4]) is False
    # three seeds are enough to leave one out
    assert s.leave_one_seed_out([1, 1, 2], [2, 3, 3], [0.2, 0.4, 0.6]) == (0.2, 0.6)
    # the partition: a median |r| equal to the controls' threshold does not hold
    pairs = _pairs({(1, 2): 0.3, (1, 3): 0.3, (2, 3): 0.3})
    assert s.partition(*pairs, controls_r=[0.3])["verdict"] == "not"
    assert s.partition(*pairs, controls_r=[0.29])["verdict"] == "holds"


def test_a_margin_is_resolved_above_two_ses_not_at_them():
    a, b = zip(*itertools.combinations(range(1, 4), 2))
    positive = [0.5, 0.5, 0.5]

    def verdict(z: float) -> str:
        return s.orientation(_runs([z * 0.01] * 3, [0.01] * 3), a, b, positive, [0.0])["verdict"]

    assert verdict(2.5) == "holds" and verdict(s.MARGIN_Z) == "unresolved" and verdict(1.5) == "unresolved"


def test_orientation_reads_only_pairs_above_the_shared_threshold_and_needs_three_runs():
    resolved = _runs([0.05] * 3, [0.005] * 3)
    a, b = [1, 1, 2], [2, 3, 3]
    # one pair's |r| equals the partition's threshold: it shares no division, its sign is not read
    at = s.orientation(resolved, a, b, [-0.2, 0.1, 0.1], [0.001], shared=0.2)
    assert at["pairs read"] == 0 and at["verdict"] == "unresolved"
    assert s.orientation(resolved, a, b, [-0.21, 0.1, 0.1], [0.001], shared=0.2)["verdict"] == "not"
    assert s.orientation(resolved, a, b, [0.5] * 3, [0.001])["verdict"] == "holds"           # three runs are enough
    # two runs are one pair: no repetition to judge, as for the partition
    assert s.orientation(resolved.iloc[:2], [1], [2], [0.5], [0.001])["verdict"] == "not attempted"
    assert s.orientation(resolved, [], [], [], [0.001])["verdict"] == "not attempted"         # no pair


def test_margin_and_se_at_its_smallest_inputs():
    # one document of one position: a margin, no SE; two documents: an SE
    m, se = s.margin_and_se([1.0], [0.5], [0.4])
    assert m == pytest.approx(0.2) and np.isnan(se)
    assert np.isfinite(s.margin_and_se([3.0, 5.0], [1.0, 2.0], [0.5, 1.5])[1])
    with pytest.raises(UserError):
        s.margin_and_se([0.0, 0.0], [0.0, 0.0], [0.0, 0.0])       # no positions


def test_a_negative_pair_names_the_smaller_of_its_runs_margins():
    pairs = pd.DataFrame({"a": ["x"], "b": ["y"], "r": [-0.4], "sign_depends_on_rule": [False]})
    runs = pd.DataFrame({"run": ["x", "y"], "margin": [0.1, 0.3], "rules_agree": [True, True]})
    flips = s.sign_flips(pairs, runs)
    assert flips["smaller margin"].tolist() == [0.1] and flips["reading"].tolist() == ["mirrored"]


def test_a_pair_or_product_of_zero_has_no_sign():
    """r = 0 exactly is neither a negative pair nor a positive one: not a sign flip, not a mirrored pair, not a
    balanced triad."""
    resolved = _runs([0.05] * 3, [0.005] * 3)
    zero = s.orientation(resolved, [1, 1, 2], [2, 3, 3], [0.0, 0.5, 0.5], [0.001], shared=-1.0)  # all read
    assert zero["pairs read"] == 3 and zero["positive pairs"] == pytest.approx(2 / 3)
    assert zero["verdict"] == "unresolved"
    assert s.triad_share([1, 1, 2], [2, 3, 3], [0.5, 0.5, 0.0]) == 0.0
    pairs = pd.DataFrame({"a": ["x", "x"], "b": ["y", "z"], "r": [0.0, -0.1], "sign_depends_on_rule": [False, True]})
    runs = pd.DataFrame({"run": ["x", "y", "z"], "margin": [0.1, 0.2, 0.3], "rules_agree": [True, True, False]})
    assert s.sign_flips(pairs, runs)["b"].tolist() == ["z"]


def test_a_pair_with_one_unresolved_run_says_nothing_about_orientation():
    runs = _runs([0.05, 0.05, 0.001], [0.005] * 3)            # run 3's margin is within its noise
    assert s.orientation(runs, [1, 1, 2], [2, 3, 3], [0.5, -0.5, -0.5], [0.0])["verdict"] == "unresolved"
    # a margin equal to the untrained towers' threshold is not above it
    assert s.orientation(_runs([0.05] * 3, [0.001] * 3), [1, 1, 2], [2, 3, 3], [0.5] * 3, [0.05])["resolved runs"] == 0


def test_a_leave_one_out_median_at_the_threshold_is_unstable():
    r = {(1, 2): 0.5, (1, 3): 0.5, (2, 3): 0.2}                # drop seed 1: the median falls to 0.2
    assert s.partition(*_pairs(r), controls_r=[0.2])["verdict"] == "unstable"


def test_the_margin_se_is_the_sample_sd_of_the_resampled_margins():
    n, s1, s2 = [30.0, 50.0, 20.0], [9.0, 16.0, 5.0], [8.0, 14.0, 5.5]
    assert np.isfinite(s.margin_and_se(n, s1, s2, resamples=2)[1])       # two resamples: one degree of freedom
    m, se = s.margin_and_se(n, s1, s2, resamples=5, seed=3)
    w = np.random.default_rng(3).multinomial(3, [1 / 3] * 3, size=5).astype(float)
    p1, p2 = (w @ np.array(s1)) / (w @ np.array(n)), (w @ np.array(s2)) / (w @ np.array(n))
    assert se == pytest.approx(np.std(np.abs(p1 - p2) / np.maximum(p1, p2), ddof=1))


def test_the_family_summary_reads_each_familys_trained_runs_only():
    pairs = pd.DataFrame({"kind": ["same", "same", "untrained"], "family_a": ["gpt", "bert", "gpt"],
                          "r": [0.4, 0.2, 0.1], "r_logmean": [0.4, 0.2, 0.1], "sign_depends_on_rule": [0, 1, 0]})
    runs = pd.DataFrame({"kind": ["case", "case", "untrained", "case"], "family": ["gpt", "gpt", "gpt", "bert"],
                         "margin": [0.02, 0.04, 0.5, 0.9]})
    t = s.family_summary(pairs, runs).set_index("family")
    assert t.loc["gpt", "median tower margin"] == pytest.approx(0.03) and t.loc["bert", "median tower margin"] == 0.9
