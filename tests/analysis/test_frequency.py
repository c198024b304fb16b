"""Frequency control (Fig. 8, Table 4, partial correlations) against scipy and hand cases."""

import numpy as np
import pytest
from scipy import stats

from tests.analysis import synthetic_runs
from twotower_lib.analysis.correlation import top_tokens
from twotower_lib.analysis.table2 import CorrelationConfig, correlation_matrix
from twotower_lib.analysis.frequency import FREQUENCY, fig8_data, partial_correlations, table4, table4_grid
from twotower_lib.preference import frequency_rank
from twotower_lib.errors import UserError


@pytest.fixture(scope="module")
def runs():
    return synthetic_runs(n_runs=2, seed=5)


def test_frequency_rank_hand_case():
    assert frequency_rank(np.array([5, 9, 5, 0, 12])).tolist() == [3, 2, 4, 5, 1]
    with pytest.raises(UserError, match="1-D"):
        frequency_rank(np.zeros((2, 2), dtype=int))


def test_fig8_in_frequency_order(runs):
    tables, _, counts = runs
    df = fig8_data(tables, counts, n=50)
    one = df[df["run"] == "run1"]
    assert one["position"].tolist() == list(range(50))
    assert (np.diff(one["count"].to_numpy()) <= 0).all()
    assert one["frequency_rank"].is_monotonic_increasing
    expected = tables["run1"].set_index("token_id").loc[one["token_id"], "score"].to_numpy()
    np.testing.assert_array_equal(one["score"].to_numpy(), expected)


def test_table4_matches_scipy_spearman(runs):
    tables, doc_stats, counts = runs
    cfg = CorrelationConfig(method="spearman", n=120, n_boot=100, n_permutations=200, progress=False)
    out = table4(tables, counts, cfg, doc_stats)
    assert set(zip(out["a"], out["b"])) == {("run1", "run2"), ("run1", FREQUENCY), ("run2", FREQUENCY)}
    ids = top_tokens({"run1": tables["run1"]}, counts, 120)
    score = tables["run1"].set_index("token_id").loc[ids, "score"]
    rank = frequency_rank(counts)[ids]
    row = out[(out["a"] == "run1") & (out["b"] == FREQUENCY)].iloc[0]
    assert row["r"] == pytest.approx(stats.spearmanr(score, rank).statistic, abs=1e-12)
    truth = stats.spearmanr(tables["run1"].set_index("token_id").loc[ids, "true_score"], rank).statistic
    assert row["ci_low"] < truth < row["ci_high"]
    m = correlation_matrix(out)
    assert list(m.index) == ["run1", "run2", FREQUENCY]


def test_table4_grid_gives_each_variant_and_n_its_own_column(runs):
    tables, _, counts = runs
    grid = table4_grid(tables, counts, [50, 120, 120])              # a repeated N counts once
    assert list(grid.columns) == [(c, f"N = {n}") for c in ("score", "score_logmean") for n in (50, 120)]
    for col in ("score", "score_logmean"):
        for n in (50, 120):
            ids = top_tokens({"run1": tables["run1"]}, counts, n)
            want = stats.spearmanr(tables["run1"].set_index("token_id").loc[ids, col], frequency_rank(counts)[ids])
            assert grid.loc[("run1", FREQUENCY), (col, f"N = {n}")] == pytest.approx(want.statistic, abs=1e-12)
    every = len(tables["run1"].dropna(subset=["score"]).query("token_id in @scored", local_dict={
        "scored": np.flatnonzero(counts > 0)}))
    assert [n for _, n in table4_grid(tables, counts, [10**6]).columns] == [f"N = {every}"] * 2   # capped


def test_partial_correlation_controls_log_frequency(runs):
    tables, doc_stats, counts = runs
    cfg = CorrelationConfig(n=120, n_boot=100, n_permutations=200, progress=False)
    out = partial_correlations(tables, counts, cfg, doc_stats)
    ids = top_tokens(tables, counts, 120)
    x = tables["run1"].set_index("token_id").loc[ids, "score"].to_numpy()
    y = tables["run2"].set_index("token_id").loc[ids, "score"].to_numpy()
    z = np.log(counts[ids])
    r = lambda a, b: stats.pearsonr(a, b).statistic  # noqa: E731
    expected = (r(x, y) - r(x, z) * r(y, z)) / np.sqrt((1 - r(x, z) ** 2) * (1 - r(y, z) ** 2))
    row = out.iloc[0]
    assert row["r"] == pytest.approx(r(x, y), abs=1e-12)
    assert row["r_partial"] == pytest.approx(expected, abs=1e-10)
    tx, ty = (tables[k].set_index("token_id").loc[ids, "true_score"].to_numpy() for k in ("run1", "run2"))
    truth = (r(tx, ty) - r(tx, z) * r(ty, z)) / np.sqrt((1 - r(tx, z) ** 2) * (1 - r(ty, z) ** 2))
    assert row["ci_low"] < truth < row["ci_high"]
    with pytest.raises(UserError, match="compare runs"):
        partial_correlations({"run1": tables["run1"]}, counts, cfg)
