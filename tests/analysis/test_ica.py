"""PCA whitening, Amari ICA and ICA word groups: references, planted sources, hand cases."""

import numpy as np
import pandas as pd
import pytest

from twotower_lib.analysis import ica
from twotower_lib.analysis.ica import (ICAConfig, PCAConfig, amari_index, fit_ica, fit_whitening, g,
                                       paper_dim, pca_spectrum)
from twotower_lib.analysis.word_groups import (fig5_data, fig6_data, fit_word_ica, group_members, group_names,
                                               table3, table3_agreement)
from twotower_lib.errors import UserError

QUIET = ICAConfig(progress=False)


def mixture(n=4000, m=4, seed=0):
    rng = np.random.default_rng(seed)
    sources = rng.laplace(size=(n, m)) / np.sqrt(2)
    mixing = rng.standard_normal((m, m))
    return sources @ mixing.T + 3.0, mixing                 # a non-zero mean, removed by centring


def test_nonlinearity_is_eq7_and_the_score_of_rho():
    y = np.array([-2.0, -0.3, 0.0, 0.7, 3.0])
    expected = np.sign(y) * (1 - np.exp(-np.sqrt(2) * np.abs(y))) / 2
    np.testing.assert_allclose(g(y), expected)
    assert g(np.array([1.0]))[0] == pytest.approx((1 - np.exp(-np.sqrt(2))) / 2)
    rho = lambda v: np.abs(v) / 2 - (1 - np.exp(-np.sqrt(2) * np.abs(v))) / (2 * np.sqrt(2))   # the source model
    h = 1e-6                                                 # rho' = g (numerically)
    np.testing.assert_allclose((rho(y + h) - rho(y - h)) / (2 * h), g(y), atol=1e-6)


def test_whitening_matches_numpy_eigendecomposition():
    x, _ = mixture(n=3000, m=5)
    w = fit_whitening(x, PCAConfig(d=3))
    p = w.transform(x)
    np.testing.assert_allclose(np.cov(p.T, bias=True), np.eye(3), atol=1e-10)
    ev = np.linalg.eigvalsh(np.cov(x.T, bias=True))[::-1]
    np.testing.assert_allclose(w.eigenvalues, ev[:3], rtol=1e-10)
    assert w.explained == pytest.approx(ev[:3].sum() / ev.sum())
    literal = fit_whitening(x, PCAConfig(d=3, center=False))   # the uncentred reading of Eq. 5
    assert np.abs(literal.transform(x).mean(0)).max() > 0.1


def test_whitening_rejects_bad_input():
    x, _ = mixture(n=500, m=4)
    with pytest.raises(UserError, match="between 1 and the vector width 4"):
        fit_whitening(x, PCAConfig(d=5))
    with pytest.raises(UserError, match="span only 2 dimensions"):
        fit_whitening(np.hstack([x[:, :2], x[:, :2]]), PCAConfig(d=3))
    with pytest.raises(UserError, match="NaN"):
        fit_whitening(np.where(np.eye(500, 4) > 0, np.nan, x), PCAConfig(d=2))


def test_amari_index_hand_cases():
    perm_scaled = np.array([[0, 2.0, 0], [-0.5, 0, 0], [0, 0, 3.0]])
    assert amari_index(perm_scaled) == 0.0
    # rows: 0.5 + 0, columns: 0 + 0.5 -> 1 / (2 * 2 * 1)
    assert amari_index(np.array([[1.0, 0.5], [0.0, 1.0]])) == pytest.approx(0.25)
    with pytest.raises(UserError, match="square"):
        amari_index(np.ones((2, 3)))


def test_ica_recovers_planted_sources_and_drivers_agree():
    x, mixing = mixture()
    w = fit_whitening(x, PCAConfig(d=4))
    to_sources = lambda r: r.unmixing @ (w.components / np.sqrt(w.eigenvalues)).T @ mixing  # noqa: E731
    newton = fit_ica(w.transform(x), ICAConfig(tol=1e-4, progress=False))          # L-BFGS on the block Newton
    block = fit_ica(w.transform(x), ICAConfig(memory=0, tol=1e-4, progress=False))  # the block Newton alone
    bold = fit_ica(w.transform(x), ICAConfig(newton=False, tol=1e-4, progress=False))
    paper = fit_ica(w.transform(x), ICAConfig(newton=False, adaptive=False, lr=0.01, tol=1e-4,
                                              max_iter=20000, progress=False))
    for r in (newton, block, bold, paper):
        assert r.converged and r.gradient < 1e-4
        assert amari_index(to_sources(r)) < 0.03
    assert max(newton.n_iter, block.n_iter) < bold.n_iter < paper.n_iter
    # the same fixed point, reached four ways (W entries are of order 3)
    np.testing.assert_allclose(newton.unmixing, paper.unmixing, atol=5e-3)
    np.testing.assert_allclose(block.unmixing, paper.unmixing, atol=5e-3)
    np.testing.assert_allclose(bold.unmixing, paper.unmixing, atol=5e-3)
    assert np.all(np.diff(newton.loss) <= 1e-6 * np.abs(newton.loss[1:]))   # never uphill (beyond rounding)


def test_several_starts_keep_the_best_converged_fit_and_say_which_components_they_share():
    x, mixing = mixture()
    p = fit_whitening(x, PCAConfig(d=4)).transform(x)
    one = fit_ica(p, ICAConfig(tol=1e-4, progress=False))
    many = fit_ica(p, ICAConfig(tol=1e-4, starts=4, seed=1, progress=False))
    assert [r.start for r in many.starts] == [0, 1, 2, 3] and many.converged
    np.testing.assert_allclose(many.starts[0].unmixing, one.unmixing)        # start 0 is W_0 = I, as before
    assert many.loss[-1] == min(r.loss[-1] for r in many.starts if r.converged)
    # planted independent sources: one optimum up to order and sign, found from every start
    assert all(amari_index(r.unmixing @ np.linalg.inv(many.unmixing)) < 0.01 for r in many.starts)
    assert many.stability().min() > 0.99 and np.isnan(one.stability()).all()
    with pytest.raises(UserError, match="starts"):
        fit_ica(p, ICAConfig(starts=0, progress=False))
    from twotower_lib.book.analyses import ica_starts_summary

    summary = ica_starts_summary(many)
    assert summary["ICA starts converged"] == "4 of 4" and summary["components with stability >= 0.9"] == "4 of 4"
    assert 0 <= summary["loss spread over converged starts (nats)"] < 1e-3
    assert ica_starts_summary(one)["components with stability >= 0.9"] == "one start only"


def test_stalled_newton_steps_hand_over_to_the_plain_rule(monkeypatch):
    x, _ = mixture()
    p = fit_whitening(x, PCAConfig(d=4)).transform(x)
    plain = fit_ica(p, ICAConfig(newton=False, tol=1e-4, progress=False))
    monkeypatch.setattr(ica, "_newton_direction", lambda grad, hessian: np.zeros_like(grad))  # Newton goes nowhere
    handed = fit_ica(p, ICAConfig(tol=1e-4, progress=False))
    assert handed.converged and handed.newton_steps == ica.STALL_STEPS
    np.testing.assert_allclose(handed.unmixing, plain.unmixing, atol=5e-3)


def test_pca_spectrum_tells_gaussian_from_heavy_tailed_directions():
    rng = np.random.default_rng(0)
    x = np.column_stack([3 * rng.laplace(size=20000), rng.standard_normal(20000), np.zeros(20000)])
    spectrum = pca_spectrum(x)
    assert len(spectrum) == 2                                   # the constant direction spans nothing
    assert spectrum["cumulative share"].iloc[-1] == pytest.approx(1.0)
    assert spectrum["share"].iloc[0] == pytest.approx(18 / 19, abs=0.01)        # Laplace(b=3): variance 18
    assert spectrum["excess kurtosis"].iloc[0] == pytest.approx(3.0, abs=0.3)   # Laplace: 3
    assert abs(spectrum["excess kurtosis"].iloc[1]) < 0.2                      # Gaussian: 0
    assert paper_dim(1024) == 128 and paper_dim(256) == 32 and paper_dim(8) == 2


def test_weights_equal_repeated_rows():
    x, _ = mixture(n=600, m=4, seed=3)
    k = np.random.default_rng(0).integers(1, 4, size=len(x))
    rep = np.repeat(x, k, axis=0)
    a, b = fit_whitening(x, PCAConfig(d=4), weights=k), fit_whitening(rep, PCAConfig(d=4))
    np.testing.assert_allclose(a.components, b.components, atol=1e-8)
    ra = fit_ica(a.transform(x), QUIET, weights=k)
    rb = fit_ica(b.transform(rep), QUIET)
    assert ra.n_iter == rb.n_iter
    np.testing.assert_allclose(ra.unmixing, rb.unmixing, atol=1e-4)
    with pytest.raises(UserError, match="non-negative"):
        fit_ica(a.transform(x), QUIET, weights=-k)


def test_ica_reports_non_convergence():
    x, _ = mixture(n=1000)
    with pytest.warns(UserWarning, match="without converging"):
        r = fit_ica(fit_whitening(x, PCAConfig(d=4)).transform(x), ICAConfig(max_iter=2, progress=False))
    assert not r.converged and r.n_iter == 2 and r.gradient >= 1e-3


def test_word_ica_recovers_planted_codes():
    rng = np.random.default_rng(0)
    vocab, width, d = 2000, 12, 6
    codes = rng.laplace(size=(vocab, d)) * (rng.random((vocab, d)) < 0.3)      # sparse word codes
    mixing = rng.standard_normal((width, d))
    embedding = codes @ mixing.T + 0.01 * rng.standard_normal((vocab, width))
    freq = 1 / np.arange(1, vocab + 1) ** 0.5
    sample = rng.choice(vocab, size=20000, p=freq / freq.sum())              # one row per occurrence
    model = fit_word_ica(embedding, sample, PCAConfig(d=d), QUIET)
    y = model.transform(embedding[sample])
    np.testing.assert_allclose(y.std(0), 1, rtol=1e-6)                      # standardised on the sample
    assert (((y - y.mean(0)) ** 3).mean(0) > 0).all()                       # long tail positive
    linear = (model.ica.unmixing @ (model.whitening.components / np.sqrt(model.whitening.eigenvalues)).T
              @ mixing) * model.scale[:, None]
    assert amari_index(linear) < 0.02
    match = np.abs(np.corrcoef(model.transform(embedding).T, codes.T)[:d, d:])
    assert (match.max(axis=1) > 0.98).all() and len(set(match.argmax(axis=1))) == d   # one code each
    with pytest.raises(UserError, match="outside"):
        fit_word_ica(embedding, np.array([0, vocab]), PCAConfig(d=d), QUIET)
    with pytest.raises(UserError, match="integer"):
        fit_word_ica(embedding, np.array([0.5]), PCAConfig(d=6), QUIET)


# ---------------------------------------------------------------------- groups (hand cases)

Y = np.array([[3.0, 0.0, -2.6],     # word 0: groups 0 and 2
              [0.5, 0.2, 0.1],      # word 1: none
              [2.6, 0.0, 0.0],      # word 2: group 0
              [0.0, -4.0, 0.0]])    # word 3: group 1
IDS = np.array([10, 11, 12, 13])
TOKENS = [f"w{i}" for i in range(14)]
COUNTS = np.arange(14) * 10


def test_fig6_hand_case():
    hist, summary = fig6_data(Y)
    assert hist["n_words"].tolist() == [1, 2, 1]
    assert summary == pytest.approx({"share_one": 0.5, "share_none": 0.25, "mean_groups": 1.0,
                                     "share_within_1": 8 / 12, "n_words": 4})


def test_fig5_top_words_by_frequency():
    df = fig5_data(Y, IDS, TOKENS, COUNTS, top_n=2)
    assert df["token"].unique().tolist() == ["w13", "w12"]                  # most frequent first
    assert df[df["token"] == "w13"]["value"].tolist() == [0.0, -4.0, 0.0]


def test_group_members_names_and_table3():
    members = group_members(Y, IDS, TOKENS, COUNTS)
    assert members[["component", "token", "typicality"]].values.tolist() == [
        [0, "w10", 1], [0, "w12", 2], [1, "w13", 1], [2, "w10", 1]]
    assert group_names(members, 1).tolist() == ["w10", "w13", "w10"]
    scores = pd.DataFrame({"token_id": range(14), "token": TOKENS, "score": np.linspace(-1, 1, 14)})
    other = scores.assign(score=-scores["score"])
    t = table3(members, {"a": scores, "b": other}, min_scored=1)
    s = scores.set_index("token_id")["score"]
    by_comp = t.set_index("component")
    assert by_comp.loc[0, "a"] == pytest.approx((s[10] + s[12]) / 2)
    assert by_comp.loc[1, "a"] == pytest.approx(s[13])
    assert by_comp.loc[1, "a rank"] == 1 and by_comp.loc[1, "b rank"] == 3  # reversed scores, reversed ranks
    assert by_comp.loc[0, "n_members"] == 2 and by_comp.loc[0, "group"] == "w10, w12"
    assert table3_agreement(t, ["a", "b"]).loc["a", "b"] == pytest.approx(-1.0)
    with pytest.raises(UserError, match="disagree on the vocabulary"):
        table3(members, {"a": scores.assign(token=[f"x{i}" for i in range(14)])}, min_scored=1)
    with pytest.raises(UserError, match="no group has 3"):
        table3(members, {"a": scores}, min_scored=3)
    with pytest.raises(UserError, match="no word belongs"):
        table3(group_members(Y / 10, IDS, TOKENS, COUNTS), {"a": scores})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_ica_divergence_is_an_error():
    x, _ = mixture(n=1000)
    with pytest.raises(UserError, match="diverged"):
        fit_ica(fit_whitening(x, PCAConfig(d=4)).transform(x),
                ICAConfig(newton=False, adaptive=False, lr=50.0, progress=False))


def test_sample_occurrences_takes_whole_seeded_blocks_without_specials():
    from twotower_lib.analysis.word_groups import sample_occurrences

    blocks = np.arange(40).reshape(10, 4)                        # 10 blocks of 4 tokens
    ids = sample_occurrences(blocks, n_tokens=7, special_ids=[0, 5], seed=3)
    assert len(ids) == 7 and not np.isin(ids, [0, 5]).any()
    # whole blocks, in corpus order: each id's block neighbours come with it
    assert list(ids) == sorted(ids)
    assert np.array_equal(ids, sample_occurrences(blocks, 7, [0, 5], seed=3))
    assert not np.array_equal(ids, sample_occurrences(blocks, 7, [0, 5], seed=4))
    with pytest.raises(UserError, match="non-empty"):
        sample_occurrences(np.zeros((0, 4), dtype=int), 3, [], 0)
