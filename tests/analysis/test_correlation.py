"""Correlations (Table 2, Fig. 3): against scipy, hand cases, a naive bootstrap, and bad input."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.analysis import synthetic_runs
from twotower_lib.analysis.correlation import (CorrelationConfig, bootstrap, correlate, correlation_matrix,
                                               fig3_data, pairwise_correlations, permutation_null, permutation_pvalue,
                                               score_matrix, scores_from_doc_stats, split_half_reliability,
                                               text_ceiling, top_tokens)
from twotower_lib.errors import UserError

FAST = dict(progress=False)


@pytest.fixture(scope="module")
def runs():
    return synthetic_runs(n_runs=3)


def test_correlate_matches_scipy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=200)
    y = 0.5 * x + rng.normal(size=200)
    y[:20] = np.round(y[:20])                        # ties for spearman
    assert correlate(x, y, "pearson") == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    assert correlate(x, y, "spearman") == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_partial_correlation_matches_formula(method):
    rng = np.random.default_rng(2)
    z = rng.normal(size=300)
    x = z + rng.normal(size=300)
    y = z + 0.5 * x + rng.normal(size=300)
    r = (lambda a, b: stats.pearsonr(a, b).statistic) if method == "pearson" else \
        (lambda a, b: stats.spearmanr(a, b).statistic)
    rxy, rxz, ryz = r(x, y), r(x, z), r(y, z)
    expected = (rxy - rxz * ryz) / np.sqrt((1 - rxz**2) * (1 - ryz**2))
    assert correlate(x, y, method, control=z) == pytest.approx(expected, abs=1e-10)
    assert correlate(x, y, method, control=z) < rxy   # the shared z inflated the plain correlation


def test_permutation_pvalue_matches_exact_scipy():
    x = np.array([1.0, 2.5, 2.0, 4.0, 3.0, 6.5, 5.0])
    y = np.array([2.0, 1.0, 3.5, 3.0, 5.0, 4.0, 6.0])
    r = stats.pearsonr(x, y).statistic
    perms = np.array(list(itertools.permutations(range(7))))                # all 5040 pairings
    exact = np.mean([abs(stats.pearsonr(x, y[p]).statistic) >= abs(r) - 1e-12 for p in perms])
    ours = permutation_pvalue(x, y, "pearson", n_permutations=40000, seed=0)
    assert ours == pytest.approx(exact, abs=0.01)
    # a perfect relation is never matched by chance beyond the identity permutation's share
    big = np.arange(50.0)
    assert permutation_pvalue(big, big**3, "spearman", n_permutations=999) == pytest.approx(1 / 1000)


def test_label_permutation_null_has_the_textbook_spread():
    """Shuffled labels: r is centred on 0 with sd 1/sqrt(n-1); its 97.5% quantile is about 1.96/sqrt(n)."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=1000), rng.normal(size=1000)
    y = 0.5 * x + y                                   # a real correlation does not move the null
    null = permutation_null(x, y, "pearson", n_permutations=4000, seed=0)
    assert abs(null.mean()) < 0.003 and null.std() == pytest.approx(1 / np.sqrt(999), rel=0.05)
    assert np.quantile(null, 0.975) == pytest.approx(1.96 / np.sqrt(1000), rel=0.08)


def test_top_tokens_hand_case():
    table = pd.DataFrame({"token_id": range(6), "token": list("abcdef"),
                          "score": [0.1, np.nan, 0.3, 0.2, -0.1, 0.5]})
    other = table.assign(score=[0.2, 0.1, np.nan, 0.1, 0.3, 0.4])
    counts = np.array([50, 100, 80, 10, 0, 30])
    # scored in both: 0, 3, 4(count 0 -> excluded), 5 -> by count: 0 (50), 5 (30), 3 (10)
    assert top_tokens({"a": table, "b": other}, counts, 3).tolist() == [0, 5, 3]
    with pytest.raises(UserError, match="only 3 tokens are scored"):
        top_tokens({"a": table, "b": other}, counts, 4)


def test_degenerate_inputs_raise():
    table = pd.DataFrame({"token_id": range(5), "token": list("abcde"), "score": [0.1, 0.2, 0.3, 0.4, 0.5]})
    counts = np.full(5, 10)
    with pytest.raises(UserError, match="constant"):
        correlate(np.ones(5), np.arange(5.0), names=("run a", "run b"))
    with pytest.raises(UserError, match="NaN"):
        correlate(np.array([1, np.nan, 3.0]), np.arange(3.0))
    with pytest.raises(UserError, match="all NaN"):
        top_tokens({"a": table.assign(score=np.nan)}, counts, 3)
    with pytest.raises(UserError, match="different vocabularies: token id 2"):
        top_tokens({"a": table, "b": table.assign(token=list("abxde"))}, counts, 3)
    with pytest.raises(UserError, match="different vocabularies"):
        top_tokens({"a": table, "b": table.iloc[:4]}, counts, 3)
    with pytest.raises(UserError, match="train_counts has only 3"):
        top_tokens({"a": table}, counts[:3], 3)
    with pytest.raises(UserError, match="constant"):
        pairwise_correlations({"a": table, "b": table.assign(score=1.0)}, counts,
                              CorrelationConfig(n=5, n_permutations=0, **FAST))
    with pytest.raises(UserError, match="not one of"):
        CorrelationConfig(method="kendall")


def test_scores_from_doc_stats_reproduce_tables(runs):
    tables, doc_stats, _ = runs
    ids = np.arange(50)
    for col in ("score", "score_logmean"):
        got = scores_from_doc_stats(doc_stats["run1"], ids, col)
        np.testing.assert_allclose(got, tables["run1"][col].to_numpy()[ids], rtol=1e-10)


def test_bootstrap_matches_naive_resampling(runs):
    _, doc_stats, _ = runs
    ids = np.array([0, 3, 7, 20])
    reps = bootstrap(doc_stats, ids, lambda s: s, n_boot=5, seed=3, **FAST)        # (5, runs, 4)
    rng = np.random.default_rng(3)
    docs = np.unique(doc_stats["run1"]["doc_id"])
    weights = rng.multinomial(len(docs), np.full(len(docs), 1 / len(docs)), size=5)
    for b in range(5):
        for i, run in enumerate(doc_stats):
            ds = doc_stats[run]
            w = ds["doc_id"].map(dict(zip(docs, weights[b])))
            s1 = (ds["sum_p1"] * w).groupby(ds["token_id"]).sum()
            s2 = (ds["sum_p2"] * w).groupby(ds["token_id"]).sum()
            expected = np.log(s1.reindex(ids)) - np.log(s2.reindex(ids))
            np.testing.assert_allclose(reps[b, i], expected.to_numpy(), rtol=1e-10)


def test_pairwise_correlations_with_intervals(runs):
    tables, doc_stats, counts = runs
    cfg = CorrelationConfig(n=150, n_boot=200, n_permutations=500, seed=1, **FAST)
    out = pairwise_correlations(tables, counts, cfg, doc_stats)
    assert list(zip(out["a"], out["b"])) == [("run1", "run2"), ("run1", "run3"), ("run2", "run3")]
    ids = top_tokens({"run1": tables["run1"], "run2": tables["run2"]}, counts, 150)
    s = lambda run: tables[run].set_index("token_id").loc[ids, "score"]  # noqa: E731
    assert out.loc[0, "r"] == pytest.approx(stats.pearsonr(s("run1"), s("run2")).statistic, abs=1e-12)
    true = lambda run: tables[run].set_index("token_id").loc[ids, "true_score"]  # noqa: E731
    truth = stats.pearsonr(true("run1"), true("run2")).statistic                  # unlimited-text r
    assert out.loc[0, "r"] < truth                                                # attenuated by noise ...
    assert out.loc[0, "ci_low"] < truth < out.loc[0, "ci_high"]                   # ... and the interval covers it
    assert (out["bootstrap_bias"] < 0).all()
    assert (out["p_value"] == 1 / 501).all()
    again = pairwise_correlations(tables, counts, cfg, doc_stats)
    pd.testing.assert_frame_equal(out, again)                              # seeded
    other = pairwise_correlations(tables, counts, CorrelationConfig(n=150, n_boot=200, n_permutations=0,
                                                                    seed=2, **FAST), doc_stats)
    assert not np.allclose(out["ci_low"], other["ci_low"])
    m = correlation_matrix(out)
    assert np.allclose(m.to_numpy(), m.to_numpy().T) and (np.diag(m) == 1).all()
    assert m.loc["run3", "run1"] == out.loc[1, "r"]


def test_bootstrap_interval_has_width_under_noise_and_none_for_identical_runs():
    """Resampling documents moves r when the scores are noisy (an interval of positive width around
    r), and two identical runs give r = 1 in every replicate (both are resampled together)."""
    tables, doc_stats, counts = synthetic_runs(occurrence_noise=2.0, docs=20)
    cfg = CorrelationConfig(n=100, n_boot=60, n_permutations=0, **FAST)
    out = pairwise_correlations(tables, counts, cfg, doc_stats).iloc[0]
    assert out["ci_high"] - out["ci_low"] > 0.02, out
    assert out["ci_low"] < out["r"] < out["ci_high"]
    same = pairwise_correlations({"a": tables["run1"], "b": tables["run1"]}, counts, cfg,
                                 {"a": doc_stats["run1"], "b": doc_stats["run1"]}).iloc[0]
    assert same["r"] == pytest.approx(1.0) and same["ci_low"] == pytest.approx(1.0) and same["ci_high"] == pytest.approx(1.0)


def test_split_half_reliability_and_text_ceiling():
    """Reliability is the share of a run's score variance that is not noise of the text: it matches
    corr(score, true score)^2 of the synthetic runs, and r / ceiling recovers the unlimited-text r."""
    tables, doc_stats, counts = synthetic_runs(occurrence_noise=2.0)
    ids = top_tokens(tables, counts, 150)
    t = tables["run1"].set_index("token_id").loc[ids]
    rel = split_half_reliability(doc_stats["run1"], ids)
    assert rel == pytest.approx(stats.pearsonr(t["score"], t["true_score"]).statistic ** 2, abs=0.03)
    assert rel < 0.9
    out = text_ceiling(tables, doc_stats, counts, [("run1", "run2")], 150).iloc[0]
    truth = stats.pearsonr(*(tables[r].set_index("token_id").loc[ids, "true_score"] for r in ("run1", "run2")))[0]
    assert out["r"] < out["ceiling"] < 0.9 and out["r"] < truth - 0.1           # noise attenuates r ...
    assert out["r_disattenuated"] == pytest.approx(truth, abs=0.03)            # ... by about the ceiling
    clean, clean_stats, _ = synthetic_runs(occurrence_noise=0.0)
    assert split_half_reliability(clean_stats["run1"], ids) == pytest.approx(1.0)
    with pytest.raises(UserError, match="n_splits"):
        split_half_reliability(doc_stats["run1"], ids, n_splits=0)
    with pytest.raises(UserError, match="at least 4 validation documents"):
        split_half_reliability(doc_stats["run1"][doc_stats["run1"]["doc_id"] < 3], ids)


def test_bootstrap_rejects_inconsistent_doc_stats(runs):
    tables, doc_stats, counts = runs
    cfg = CorrelationConfig(n=100, n_boot=10, n_permutations=0, **FAST)
    swapped = {"run1": doc_stats["run2"], "run2": doc_stats["run1"]}
    with pytest.raises(UserError, match="do not reproduce"):
        pairwise_correlations({k: tables[k] for k in ("run1", "run2")}, counts, cfg, swapped)
    fewer = dict(doc_stats, run2=doc_stats["run2"][doc_stats["run2"]["doc_id"] > 0])
    with pytest.raises(UserError, match="different validation documents"):
        pairwise_correlations({k: tables[k] for k in ("run1", "run2")}, counts, cfg, fewer)


def test_fig3_orders_by_reference(runs):
    tables, _, counts = runs
    df = fig3_data(tables, counts, "run2", n=100)
    ref = df[df["run"] == "run2"].sort_values("position")
    assert len(ref) == 100 and (np.diff(ref["score"].to_numpy()) <= 0).all()
    assert set(df["run"]) == set(tables)
    assert (df.groupby("run")["token_id"].apply(lambda s: tuple(s)).nunique()) == 1
    wide = score_matrix(tables, ref["token_id"].to_numpy())
    np.testing.assert_array_equal(wide["run2"].to_numpy(), ref["score"].to_numpy())
    with pytest.raises(UserError, match="reference run"):
        fig3_data(tables, counts, "nope")
