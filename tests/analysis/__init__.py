"""Tests of twotower_lib.analysis. `synthetic_runs` builds probing-stage outputs for them."""

from __future__ import annotations

import numpy as np
import pandas as pd


def synthetic_runs(n_runs: int = 2, vocab: int = 300, docs: int = 40, noise: float = 0.3,
                   occurrence_noise: float = 0.8, seed: int = 0):
    """Per-document sums and preference tables of `n_runs` runs sharing a latent token preference.

    Returns (tables, doc_stats, train_counts), in the probing stage's formats; each table is computed
    from its document sums exactly as Eq. 4 (score) and the authors' code (score_logmean) define.
    Each occurrence's probability is the token's p times lognormal(0, occurrence_noise) noise, so
    the tables also carry `true_score`, the score on unlimited text (log p1 - log p2 of the token).
    """
    rng = np.random.default_rng(seed)
    freq = 1.0 / np.arange(1, vocab + 1) ** 0.9                        # Zipf-like
    train_counts = rng.poisson(2e5 * freq / freq.sum()).astype(np.int64)
    latent = rng.normal(0, 1, vocab)                                   # shared preference
    tokens = [f"tok{i}" for i in range(vocab)]
    tables, doc_stats = {}, {}
    n = rng.poisson(np.outer(np.full(docs, 1.0), 400 * freq / freq.sum() * 30))   # (docs, vocab)
    for r in range(n_runs):
        pref = latent + noise * rng.normal(0, 1, vocab)
        base = rng.uniform(0.05, 0.3, vocab)
        p1 = np.clip(base * np.exp(pref / 4), 1e-4, 0.99)
        p2 = np.clip(base * np.exp(-pref / 4), 1e-4, 0.99)
        rows = []
        for d in range(docs):
            for t in np.nonzero(n[d])[0]:
                k = n[d, t]
                q1 = p1[t] * rng.lognormal(0, occurrence_noise, k)
                q2 = p2[t] * rng.lognormal(0, occurrence_noise, k)
                rows.append((d, t, k, q1.sum(), q2.sum(), np.log(q1).sum(), np.log(q2).sum()))
        ds = pd.DataFrame(rows, columns=["doc_id", "token_id", "n", "sum_p1", "sum_p2", "sum_logp1", "sum_logp2"])
        tot = ds.groupby("token_id")[["n", "sum_p1", "sum_p2", "sum_logp1", "sum_logp2"]].sum().reindex(range(vocab))
        table = pd.DataFrame({"token_id": np.arange(vocab), "token": tokens,
                              "count": tot["n"].fillna(0).astype(int).to_numpy()})
        table["rank"] = table["count"].rank(ascending=False, method="first").astype(int)
        table["p1_mean"] = (tot["sum_p1"] / tot["n"]).to_numpy()
        table["p2_mean"] = (tot["sum_p2"] / tot["n"]).to_numpy()
        table["logp1_mean"] = (tot["sum_logp1"] / tot["n"]).to_numpy()
        table["logp2_mean"] = (tot["sum_logp2"] / tot["n"]).to_numpy()
        table["score"] = np.log(table["p1_mean"]) - np.log(table["p2_mean"])
        table["score_logmean"] = table["logp1_mean"] - table["logp2_mean"]
        table["true_score"] = np.log(p1) - np.log(p2)
        tables[f"run{r + 1}"] = table
        doc_stats[f"run{r + 1}"] = ds
    return tables, doc_stats, train_counts
