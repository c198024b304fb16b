"""Correlations (Table 2, Fig. 3): against scipy, hand cases, a naive bootstrap, and bad input."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.analysis import synthetic_runs
from twotower_lib.analysis.correlation import correlate, permutation_null, top_tokens, two_sided_p
from twotower_lib.analysis.table2 import CorrelationConfig, correlation_matrix, fig3_data, pairwise_correlations
from twotower_lib.analysis.uncertainty import (CEILING_FLOOR, bootstrap, corrected, pair_ceiling, scores_from_doc_stats,
                                               split_half_or_nan, split_half_reliability, text_ceiling)
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


def permutation_pvalue(x, y, method="pearson", control=None, n_permutations=10000, seed=0):
    """Two-sided permutation p-value of corr(x, y), from the library's null and its counting rule."""
    return two_sided_p(permutation_null(x, y, method, control, n_permutations, seed), correlate(x, y, method, control))


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


def test_spearman_brown_steps_a_reliability_up_and_down():
    from twotower_lib.analysis.uncertainty import spearman_brown

    assert spearman_brown(0.5, 2) == pytest.approx(2 / 3)          # half-text r 0.5 -> whole text
    assert spearman_brown(0.7, 1) == pytest.approx(0.7)
    assert spearman_brown(spearman_brown(0.6, 4), 0.25) == pytest.approx(0.6)   # k and 1/k undo each other
    assert spearman_brown(0.3, 1000) > 0.99


def test_a_pairs_ceiling_is_the_geometric_mean_of_its_reliabilities():
    assert pair_ceiling(0.81, 0.64) == pytest.approx(0.72)
    assert pair_ceiling(-0.2, 0.9) == 0.0                       # a negative reliability counts as none
    assert np.isnan(pair_ceiling(np.nan, 0.9))


def test_a_corrected_r_is_shown_only_above_the_ceilings_floor():
    """|r| / ceiling from the floor up: a text on which the runs' scores barely reproduce corrects nothing."""
    assert corrected(0.5, 0.8) == pytest.approx(0.625) and corrected(0.15, CEILING_FLOOR) == pytest.approx(0.15 / 0.3)
    assert np.isnan(corrected(0.15, 0.29)) and np.isnan(corrected(0.5, np.nan))


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
    ranks = split_half_reliability(doc_stats["run1"], ids, method="spearman")       # a Spearman claim's: of the ranks
    assert ranks == pytest.approx(stats.spearmanr(t["score"], t["true_score"]).statistic ** 2, abs=0.03)
    outlier = doc_stats["run1"].assign(sum_p1=lambda d: d["sum_p1"].where(d["token_id"] != ids[0], d["sum_p1"] * 1e8))
    assert split_half_reliability(outlier, ids) > rel + 0.1                  # one extreme token carries Pearson's ...
    assert split_half_reliability(outlier, ids, method="spearman") == pytest.approx(ranks, abs=0.01)  # ... not the ranks'
    clean, clean_stats, _ = synthetic_runs(occurrence_noise=0.0)
    assert split_half_reliability(clean_stats["run1"], ids) == pytest.approx(1.0)
    assert split_half_reliability(clean_stats["run1"], ids, method="spearman") == pytest.approx(1.0)
    with pytest.raises(UserError, match="n_splits"):
        split_half_reliability(doc_stats["run1"], ids, n_splits=0)
    with pytest.raises(UserError, match="method 'kendall' is not one of"):
        split_half_reliability(doc_stats["run1"], ids, method="kendall")
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
    np.testing.assert_array_equal(tables["run2"]["score"].reindex(ref["token_id"]).to_numpy(), ref["score"].to_numpy())
    with pytest.raises(UserError, match="reference run"):
        fig3_data(tables, counts, "nope")


def _reference_scores(ds: pd.DataFrame, weights: dict, ids: np.ndarray, score_col: str) -> np.ndarray:
    """One run's scores of `ids` from its document sums with per-document weights, by hand (NaN: unseen)."""
    w = ds["doc_id"].map(weights).to_numpy(float)
    g = pd.DataFrame({c: ds[c].to_numpy() * w for c in ("n", "sum_p1", "sum_p2", "sum_logp1", "sum_logp2")}
                     ).groupby(ds["token_id"].to_numpy()).sum().reindex(ids)
    with np.errstate(divide="ignore", invalid="ignore"):
        if score_col == "score":
            s = np.log(g["sum_p1"] / g["n"]) - np.log(g["sum_p2"] / g["n"])
        else:
            s = g["sum_logp1"] / g["n"] - g["sum_logp2"] / g["n"]
    return np.where(g["n"].to_numpy() > 0, s.to_numpy(), np.nan)


def _reference_r(x: np.ndarray, y: np.ndarray, method: str, z: np.ndarray | None) -> float:
    """(Partial) Pearson or Spearman r from the textbook formula, over the pairs where both are finite."""
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    z = None if z is None else z[keep]
    if method == "spearman":
        x, y = stats.rankdata(x), stats.rankdata(y)
        z = None if z is None else stats.rankdata(z)
    rxy = stats.pearsonr(x, y).statistic
    if z is None:
        return rxy
    rxz, ryz = stats.pearsonr(x, z).statistic, stats.pearsonr(y, z).statistic
    return (rxy - rxz * ryz) / np.sqrt((1 - rxz**2) * (1 - ryz**2))


@pytest.mark.parametrize("method,score_col,with_control,docs,n", [
    ("pearson", "score", False, 12, 120), ("spearman", "score_logmean", True, 12, 120),
    ("pearson", "score_logmean", True, 12, 120),
    ("pearson", "score", True, 5, 260)])         # rare tokens: some replicates miss some of them
def test_pairwise_correlations_match_a_computation_by_hand(method, score_col, with_control, docs, n):
    """Every number of Table 2's long form recomputed independently: the score column asked for, the
    (partial) correlation, rows against a fixed extra vector (never two extras), the permutation
    p-value and 97.5% quantile, and the document bootstrap (every replicate redone by hand, tokens
    unseen in a replicate left out) with its basic interval and bias. 100 replicates: more than one
    internal chunk of 64."""
    tables, doc_stats, counts = synthetic_runs(n_runs=3, occurrence_noise=2.0, docs=docs, seed=4)
    if docs < 10:  # twenty tokens seen in one document only: a replicate without it lacks them
        rare = np.argsort(-counts)[100:120]
        for run, ds in doc_stats.items():
            ds = doc_stats[run] = ds[~ds["token_id"].isin(rare) | (ds["doc_id"] == 0)].reset_index(drop=True)
            ones, ids = dict.fromkeys(np.unique(ds["doc_id"]), 1.0), tables[run]["token_id"].to_numpy()
            tables[run] = tables[run].assign(**{c: _reference_scores(ds, ones, ids, c) for c in ("score", "score_logmean")})
    rng = np.random.default_rng(0)
    log_count = np.log1p(counts.astype(float))
    extra = {"log count": log_count + rng.normal(0, 0.5, len(counts)), "noise": rng.normal(size=len(counts))}
    control = log_count if with_control else None
    cfg = CorrelationConfig(n=n, method=method, score_col=score_col, n_boot=100, n_permutations=300, seed=5, **FAST)
    out = pairwise_correlations(tables, counts, cfg, doc_stats, extra=extra, control=control)

    runs = list(tables)
    expected_pairs = [p for p in itertools.combinations(runs + list(extra), 2) if p[0] in tables or p[1] in tables]
    assert list(zip(out["a"], out["b"])) == expected_pairs            # no (extra, extra) row
    docs_ = np.unique(doc_stats["run1"]["doc_id"])
    weights = np.random.default_rng(cfg.seed).multinomial(len(docs_), np.full(len(docs_), 1 / len(docs_)), size=cfg.n_boot)
    missing = 0
    for row in out.itertuples():
        ids = top_tokens({k: tables[k] for k in (row.a, row.b) if k in tables}, counts, cfg.n, score_col)
        vec = lambda name: tables[name].set_index("token_id").loc[ids, score_col].to_numpy() \
            if name in tables else extra[name][ids]  # noqa: E731
        z = None if control is None else control[ids]
        r = _reference_r(vec(row.a), vec(row.b), method, z)
        assert row.n_tokens == len(ids) and row.r == pytest.approx(r, abs=1e-10)
        null = permutation_null(vec(row.a), vec(row.b), method, z, cfg.n_permutations, cfg.seed)
        assert row.p_value == pytest.approx((1 + (np.abs(null) >= abs(r) - 1e-12).sum()) / (1 + len(null)))
        assert row.perm_q975 == pytest.approx(np.quantile(null, 0.975))
        reps = []
        for w in weights:
            wd = dict(zip(docs_, w))
            rep = lambda name: _reference_scores(doc_stats[name], wd, ids, score_col) \
                if name in tables else extra[name][ids]  # noqa: E731
            reps.append(_reference_r(rep(row.a), rep(row.b), method, z))
        reps = np.array(reps)
        missing += sum(np.isnan(_reference_scores(doc_stats["run1"], dict(zip(docs_, w)), ids, score_col)).any()
                       for w in weights)
        q_lo, q_hi = np.quantile(reps, [0.025, 0.975])
        assert row.ci_low == pytest.approx(max(-1, 2 * r - q_hi), abs=1e-9)
        assert row.ci_high == pytest.approx(min(1, 2 * r - q_lo), abs=1e-9)
        assert row.bootstrap_bias == pytest.approx(reps.mean() - r, abs=1e-9)
    assert (out["ci_high"] - out["ci_low"] > 0.01).all()             # the noise is real: intervals have width
    assert (missing > 0) == (docs < 10)                              # the rare-token case exercises it
    plain = pairwise_correlations(tables, counts, CorrelationConfig(n=n, method=method, n_boot=0, n_permutations=0,
                                                                    **FAST))
    run_rows = [i for i, (a, b) in enumerate(expected_pairs) if a in tables and b in tables]
    changed = not np.allclose(out["r"].to_numpy()[run_rows], plain["r"].to_numpy())
    assert changed == (with_control or score_col != "score")       # the options reached r
    with pytest.raises(UserError, match="clash with run names"):
        pairwise_correlations(tables, counts, cfg, extra={"run2": log_count})


def test_basic_interval_reflects_the_replicates_and_stays_within_minus_one_and_one():
    from twotower_lib.analysis.uncertainty import basic_interval

    reps = np.column_stack([np.linspace(0.1, 0.5, 101), np.linspace(-0.2, 0.9, 101), np.linspace(-0.95, -0.5, 101)])
    estimate = np.array([0.3, 0.95, -0.9])
    lo, hi = basic_interval(reps, estimate, level=0.9)
    q05, q95 = np.quantile(reps, [0.05, 0.95], axis=0)
    np.testing.assert_allclose(lo, np.clip(2 * estimate - q95, -1, 1))
    np.testing.assert_allclose(hi, np.clip(2 * estimate - q05, -1, 1))
    assert hi[1] == 1.0 and lo[2] == -1.0           # clipped at the bounds of a correlation
    assert lo[0] == pytest.approx(0.6 - q95[0]) and hi[0] == pytest.approx(0.6 - q05[0])


def test_split_half_reliability_matches_a_computation_by_hand():
    """The split-half reliability redone by hand: random halves of the documents (as many splits as
    asked), each half's scores, Pearson r over tokens scored in both, mean, Spearman-Brown."""
    from twotower_lib.analysis.uncertainty import split_half_reliability

    tables, doc_stats, counts = synthetic_runs(occurrence_noise=2.0, docs=11, seed=2)
    ids = top_tokens(tables, counts, 120)
    for col in ("score", "score_logmean"):
        got = split_half_reliability(doc_stats["run1"], ids, n_splits=7, seed=3, score_col=col)
        docs = np.unique(doc_stats["run1"]["doc_id"])
        rng = np.random.default_rng(3)
        rs = []
        for _ in range(7):
            first = rng.permutation(len(docs)) < len(docs) // 2
            a = _reference_scores(doc_stats["run1"], dict(zip(docs, first.astype(float))), ids, col)
            b = _reference_scores(doc_stats["run1"], dict(zip(docs, (~first).astype(float))), ids, col)
            rs.append(_reference_r(a, b, "pearson", None))
        half = np.mean(rs)
        assert got == pytest.approx(2 * half / (1 + half), abs=1e-10)
    ceil = text_ceiling(tables, doc_stats, counts, [("run1", "run2")], 120, n_splits=7, seed=3,
                        score_col="score_logmean").iloc[0]
    rel = [split_half_reliability(doc_stats[r], ids, 7, 3, "score_logmean") for r in ("run1", "run2")]
    x, y = (tables[r].set_index("token_id").loc[ids, "score_logmean"].to_numpy() for r in ("run1", "run2"))
    assert ceil["r"] == pytest.approx(stats.pearsonr(x, y).statistic)
    assert [ceil["reliability_a"], ceil["reliability_b"]] == pytest.approx(rel)
    assert ceil["ceiling"] == pytest.approx(np.sqrt(rel[0] * rel[1]))
    assert ceil["r_disattenuated"] == pytest.approx(ceil["r"] / ceil["ceiling"])


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_permutation_null_with_a_control_shuffles_the_residuals(method):
    """With a control the null is that of the partial correlation: the residuals are permuted, so
    it is centred on 0 even where x and y share the control strongly, and its spread is 1/sqrt(n)."""
    rng = np.random.default_rng(3)
    z = rng.normal(size=800)
    x, y = z + 0.3 * rng.normal(size=800), z + 0.3 * rng.normal(size=800)
    null = permutation_null(x, y, method, z, n_permutations=3000, seed=1)
    assert abs(null.mean()) < 0.01 and null.std() == pytest.approx(1 / np.sqrt(799), rel=0.08)
    plain = permutation_null(x, y, method, None, n_permutations=3000, seed=1)
    assert abs(plain.mean()) < 0.01
    assert permutation_pvalue(x, y, method, z, 500, seed=0) > 0.01      # no partial correlation left ...
    assert permutation_pvalue(x, y, method, None, 500, seed=0) == pytest.approx(1 / 501)   # ... but a plain one


def test_same_run_agreement_is_r_over_the_top_tokens_of_the_chosen_column():
    from twotower_lib.analysis.uncertainty import same_run_agreement

    tables, _, counts = synthetic_runs(n_runs=2, occurrence_noise=1.0, seed=6)
    a, b = tables["run1"], tables["run2"]
    for col in ("score", "score_logmean"):
        ids = top_tokens({"first": a, "second": b}, counts, 80, col)
        x, y = (t.set_index("token_id").loc[ids, col] for t in (a, b))
        assert same_run_agreement(a, b, counts, 80, col) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    assert same_run_agreement(a, a, counts, 80) == pytest.approx(1.0)
    with pytest.raises(UserError, match="train_counts"):
        same_run_agreement(a, b, counts[:10], 80)


def test_the_limits_of_the_inputs_are_exactly_where_the_messages_say():
    """Boundaries: 3 tokens are enough and 2 are not; a level strictly inside (0, 1); no negative
    replicate counts; a vector of another length, with NaN or constant is named in the message."""
    CorrelationConfig(n=3, n_boot=0, n_permutations=0, level=0.5)
    for bad, msg in ((dict(n=2), "at least 3 tokens"), (dict(level=0.0), "strictly between"),
                     (dict(level=1.0), "strictly between"), (dict(n_boot=-1), ">= 0"),
                     (dict(n_permutations=-1), ">= 0"), (dict(score_col="p1_mean"), "score column")):
        with pytest.raises(UserError, match=msg):
            CorrelationConfig(**bad)
    assert correlate(np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0])) == pytest.approx(0.5)
    with pytest.raises(UserError, match="at least 3 tokens, got 2"):
        correlate(np.array([1.0, 2.0]), np.array([2.0, 1.0]))
    with pytest.raises(UserError, match="run b has 4 values but run a has 5"):
        correlate(np.arange(5.0), np.arange(4.0), names=("run a", "run b"))
    with pytest.raises(UserError, match="the control has NaN"):
        correlate(np.arange(5.0), np.arange(5.0) ** 2, control=np.array([1, 2, np.nan, 4, 5.0]))
    with pytest.raises(UserError, match="the control is constant"):
        correlate(np.arange(5.0), np.arange(5.0) ** 2, control=np.ones(5))
    assert permutation_null(np.arange(5.0), np.arange(5.0) ** 2, n_permutations=0).shape == (0,)


def test_each_input_check_names_what_is_wrong_and_stops_exactly_at_its_limit():
    """The checks of `check_counts`, `check_tables` and `_check_vectors` at their edges: a float or a 2-D count
    array, a token id one past the counts, one duplicated id, a bad first vector named as the first."""
    from twotower_lib.analysis.correlation import check_counts, check_tables

    ids = pd.Index([0, 1, 2])
    assert list(check_counts(np.array([3, 0, 1]), ids)) == [3, 0, 1]
    for bad in (np.array([3.0, 0.0, 1.0]), np.array([[3, 0, 1]])):
        with pytest.raises(UserError, match="1-D integer array"):
            check_counts(bad, ids)
    with pytest.raises(UserError, match="token id 3 but train_counts has only 3"):
        check_counts(np.array([3, 0, 1]), pd.Index([0, 1, 3]))
    table = pd.DataFrame({"token_id": [0, 1, 1, 2], "token": list("abbc"), "score": [0.1, 0.2, 0.3, 0.4]})
    with pytest.raises(UserError, match="lists token id 1 twice"):
        check_tables({"run": table})
    with pytest.raises(UserError, match="^run a has NaN"):
        correlate(np.array([1.0, np.nan, 3.0]), np.array([1.0, 3.0, 2.0]), names=("run a", "run b"))


def test_a_token_seen_once_in_training_is_scored():
    from twotower_lib.analysis.correlation import scored_tokens

    t = pd.DataFrame({"token": list("abcd"), "score": [0.1, 0.2, np.nan, 0.4]}, index=pd.Index(range(4), name="token_id"))
    assert list(scored_tokens({"run": t}, np.array([5, 1, 1, 0]), "score")) == [0, 1]


def test_a_replicate_keeps_its_correlation_with_three_tokens_left_and_loses_it_with_two():
    from twotower_lib.analysis.correlation import correlate_rows

    x = np.array([[1.0, 2.0, 3.0, np.nan], [1.0, 2.0, np.nan, np.nan]])
    y = np.array([[1.0, 3.0, 2.0, 4.0], [2.0, 1.0, 3.0, 4.0]])
    r = correlate_rows(x, y, "pearson", None)
    assert r[0] == pytest.approx(0.5) and np.isnan(r[1])


def test_the_permutation_null_is_seeded_and_counts_ties_with_the_observed_r():
    """A seed fixes the null (the default: 10,000 permutations from seed 0), and a permuted |r| equal to the
    observed one, to rounding, counts as at least as extreme."""
    x, y = np.arange(8.0), np.array([2.0, 1.0, 4.0, 3.0, 6.0, 5.0, 8.0, 7.0])
    default = permutation_null(x, y)
    assert default.shape == (10_000,) and np.array_equal(default, permutation_null(x, y, n_permutations=10_000, seed=0))
    assert permutation_pvalue(x, y) == permutation_pvalue(x, y, n_permutations=10_000, seed=0)
    assert two_sided_p(np.array([0.5 - 1e-12]), 0.5) == 1.0 and two_sided_p(np.array([0.4]), 0.5) == 0.5


def test_the_ceilings_and_the_bootstrap_are_seeded_and_take_their_documented_defaults(runs):
    """A seed fixes every draw: the defaults (20 splits and seed 0; a bootstrap from seed 0) give what passing
    them gives, and one split over exactly four documents is enough."""
    tables, doc_stats, counts = runs
    ids = top_tokens(tables, counts, 60)
    rel = split_half_reliability(doc_stats["run1"], ids)
    assert rel == split_half_reliability(doc_stats["run1"], ids, n_splits=20, seed=0)
    assert rel != split_half_reliability(doc_stats["run1"], ids, n_splits=21, seed=0)
    assert split_half_or_nan(doc_stats["run1"], ids) == rel                   # the same defaults
    out = text_ceiling(tables, doc_stats, counts, [("run1", "run2")], 60)
    pd.testing.assert_frame_equal(out, text_ceiling(tables, doc_stats, counts, [("run1", "run2")], 60, n_splits=20, seed=0))
    mean = lambda s: s.mean(axis=-1)   # noqa: E731
    pd.testing.assert_frame_equal(pd.DataFrame(bootstrap(doc_stats, ids, mean, 8, **FAST)),
                                  pd.DataFrame(bootstrap(doc_stats, ids, mean, 8, seed=0, **FAST)))
    four = doc_stats["run1"][doc_stats["run1"]["doc_id"].isin(np.unique(doc_stats["run1"]["doc_id"])[:4])]
    few = four["token_id"].value_counts()
    shared = np.array(sorted(set(few[few >= 1].index) & set(ids)))[:20]
    assert np.isfinite(split_half_reliability(four, shared, n_splits=1))


def test_a_basic_interval_is_clipped_at_both_ends():
    from twotower_lib.analysis.uncertainty import basic_interval

    lo, hi = basic_interval(np.full((50, 2), [0.5, -0.5]), np.array([0.9, -0.9]))
    assert lo.tolist() == [1.0, -1.0] and hi.tolist() == [1.0, -1.0]     # 2r - q = +-1.3, clipped


def test_a_text_ceiling_needs_exactly_four_documents(runs):
    tables, doc_stats, counts = runs
    docs = np.unique(doc_stats["run1"]["doc_id"])[:4]
    four = {r: d[d["doc_id"].isin(docs)] for r, d in doc_stats.items()}
    out = text_ceiling(tables, four, counts, [("run1", "run2")], 20).iloc[0]
    assert np.isfinite(out["reliability_a"]) and np.isfinite(out["ceiling"])


def test_a_token_scored_once_keeps_its_score_and_a_ceiling_of_zero_corrects_nothing(monkeypatch, runs):
    from twotower_lib.analysis import uncertainty

    once = pd.DataFrame({"doc_id": [0, 1], "token_id": [7, 7], "n": [1, 0], "sum_p1": [0.2, 0.0], "sum_p2": [0.1, 0.0],
                         "sum_logp1": [np.log(0.2), 0.0], "sum_logp2": [np.log(0.1), 0.0]})
    assert scores_from_doc_stats(once, np.array([7]))[0] == pytest.approx(np.log(2.0))
    tables, doc_stats, counts = runs
    monkeypatch.setattr(uncertainty, "split_half_reliability", lambda *a, **k: -0.2)   # a text that reproduces nothing
    out = text_ceiling(tables, doc_stats, counts, [("run1", "run2")], 20).iloc[0]
    assert out["ceiling"] == 0.0 and np.isnan(out["r_disattenuated"])
