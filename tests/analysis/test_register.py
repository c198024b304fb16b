"""Register tests (twotower_lib.analysis.register): source counts, log ratios, per-source tower gaps,
the register fit and the partial correlation, on data built so that each answer is known."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from twotower_lib.analysis.register import (partial_r, register_fit, source_log_ratios, source_token_counts,
                                            tower_gap_by_source)


def test_source_counts_split_the_training_tokens_by_their_document_source():
    # 3 documents (books, wiki, books) over 2 blocks of 4 positions; token 5 only in wiki
    data = SimpleNamespace(train=np.array([[1, 2, 5, 5], [1, 1, 2, 3]]),
                           train_doc_ids=np.array([[0, 0, 1, 1], [2, 2, 2, 2]]), vocab_size=6,
                           sources=lambda split: np.array(["books", "wiki", "books"]))
    counts = source_token_counts(data)
    assert list(counts.columns) == ["books", "wiki"]
    assert counts["books"].tolist() == [0, 3, 2, 1, 0, 0]
    assert counts["wiki"].tolist() == [0, 0, 0, 0, 0, 2]
    ratios = source_log_ratios(counts)
    assert ratios.loc[5, "wiki"] > 0 > ratios.loc[5, "books"]   # typical of wiki, not of books
    assert ratios.loc[1, "books"] > 0 > ratios.loc[1, "wiki"]
    np.testing.assert_allclose(ratios["books"], -ratios["wiki"])  # two sources: each is the other's rest


def test_prepared_data_names_each_documents_source(tiny_data):
    sources = tiny_data.sources("valid")
    assert len(sources) == len(tiny_data.documents("valid")) and all(sources)
    assert [d.split("/")[0] for d in tiny_data.documents("valid")] == sources.tolist()


def test_tower_gap_by_source_finds_towers_winning_on_different_sources():
    doc_stats = pd.DataFrame({"doc_id": [0, 1, 2], "token_id": [7, 7, 8], "n": [2, 1, 4],
                              "sum_logp1": [-2.0, -3.0, -8.0], "sum_logp2": [-4.0, -3.0, -4.0]})
    gaps = tower_gap_by_source(doc_stats, np.array(["books", "books", "wiki"]))
    assert gaps.loc["books", "positions"] == 3 and gaps.loc["wiki", "positions"] == 4
    assert gaps.loc["books", "gap"] == pytest.approx((-5 + 7) / 3)   # primary better on books
    assert gaps.loc["wiki", "gap"] == pytest.approx((-8 + 4) / 4)    # secondary better on wiki


def test_register_fit_and_partial_r_separate_register_from_other_agreement():
    rng = np.random.default_rng(0)
    ratios = rng.normal(size=(2000, 3))
    register = ratios @ np.array([1.0, -0.5, 0.2])
    shared = rng.normal(size=2000)            # agreement that has nothing to do with register
    assert register_fit(register, ratios)["R2"] == pytest.approx(1.0)
    noise = rng.normal(size=2000)
    assert register_fit(noise, ratios)["R2"] < 0.01
    # two runs that share only register: r high, nothing left once register is removed
    r, r_partial = partial_r(register + rng.normal(size=2000), register + rng.normal(size=2000), ratios)
    assert r > 0.5 and abs(r_partial) < 0.1
    # two runs that share a non-register component: it survives
    r, r_partial = partial_r(shared + register + rng.normal(size=2000), shared - register + rng.normal(size=2000),
                             ratios)
    assert abs(r) < 0.1 and r_partial > 0.4
    a = register.copy()
    a[:10] = np.nan                            # tokens a run did not score are left out
    assert register_fit(a, ratios)["n_tokens"] == 1990
