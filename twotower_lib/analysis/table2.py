"""Table 2 and Fig. 3 (Section 5.1): every pair of runs correlated, with a confidence interval and a p-value.

The paper correlates the preference scores s (Eq. 4) of two trained models over the 5000 most
frequent tokens ("to suppress noises introduced by rare words") and reports one number per pair.
Beyond the paper, every correlation here gets
- a bootstrap 95% confidence interval: validation *documents* are resampled with replacement
  (tokens within a document are not independent), both runs' scores are recomputed from the
  resampled per-document sums, and the correlation is recomputed over the same token set
  (basic bootstrap interval: see `basic_interval` for why it may lie above r);
- a two-sided permutation p-value (one vector shuffled against the other).

Resolved ambiguities:
- "Correlation" in Table 2 is Pearson's r (Table 4 names Spearman explicitly; Table 2 does not).
- "The most frequent 5000 words" are counted on the training split, and only tokens scored in
  both runs qualify: the N most frequent *scored* tokens of each pair. Each cell of the pairwise
  matrix therefore uses its own pair's token set; Fig. 3 uses tokens scored in all runs.
- A bootstrap replicate in which a token has no occurrence left is computed on the remaining
  tokens of the set.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Mapping

import numpy as np
import pandas as pd

from twotower_lib.analysis.correlation import (METHODS, SCORE_COLUMNS, check_counts, check_tables, correlate,
                                               correlate_rows, permutation_null, scored_top_tokens, two_sided_p)
from twotower_lib.analysis.uncertainty import (basic_interval, bias_corrected, bootstrap, check_doc_stats,
                                               scores_from_doc_stats)
from twotower_lib.errors import UserError

@dataclass(frozen=True)
class CorrelationConfig:
    n: int = 5000                   # the N most frequent scored tokens (the paper: 5000)
    method: str = "pearson"         # "pearson" (Table 2) or "spearman" (Table 4)
    score_col: str = "score"        # "score" (Eq. 4) or "score_logmean" (the authors' code)
    n_boot: int = 1000              # bootstrap replicates; 0 = no confidence interval
    n_permutations: int = 10000     # permutations for the p-value; 0 = no p-value
    level: float = 0.95             # confidence level of the interval
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UserError(f"correlation method {self.method!r} is not one of {METHODS}")
        if self.score_col not in SCORE_COLUMNS:
            raise UserError(f"score column {self.score_col!r} is not one of {SCORE_COLUMNS}")
        if self.n < 3:
            raise UserError(f"n = {self.n}: a correlation needs at least 3 tokens")
        if not 0 < self.level < 1:
            raise UserError(f"confidence level {self.level} must be strictly between 0 and 1")
        if self.n_boot < 0 or self.n_permutations < 0:
            raise UserError("n_boot and n_permutations must be >= 0")



def pairwise_correlations(tables: Mapping[str, pd.DataFrame], train_counts: np.ndarray,
                          config: CorrelationConfig = CorrelationConfig(),
                          doc_stats: Mapping[str, pd.DataFrame] | None = None,
                          extra: Mapping[str, np.ndarray] | None = None,
                          control: np.ndarray | None = None) -> pd.DataFrame:
    """Every pair of runs (Table 2 as a long table), with bootstrap CI and permutation p-value.

    extra: fixed vectors indexed by token id compared like runs but never resampled (e.g. the
    frequency rank of Table 4). control: a vector indexed by token id to partial out (e.g.
    log-frequency). Columns: a, b, method, n_tokens, r, and when computed ci_low, ci_high,
    bootstrap_bias (mean replicate minus r; about minus the attenuation of r by finite validation
    text), p_value and perm_q975 (the 97.5% quantile of r with token labels shuffled). Without doc_stats (or with n_boot = 0) there is no interval.
    """
    tabs = check_tables(tables, config.score_col)
    vocab = next(iter(tabs.values())).index
    counts = check_counts(train_counts, vocab)
    extra = {k: _by_token(v, counts, k) for k, v in (extra or {}).items()}
    control = None if control is None else _by_token(control, counts, "the control")
    clash = set(extra) & set(tabs)
    if clash:
        raise UserError(f"extra vector name(s) {sorted(clash)} clash with run names")
    names = list(tabs) + list(extra)
    pairs = [(a, b) for a, b in combinations(names, 2) if a in tabs or b in tabs]
    if not pairs:
        raise UserError("pairwise correlations need at least two runs (or one run and an extra vector)")

    def vector(name: str, ids: np.ndarray) -> np.ndarray:
        return tabs[name][config.score_col].reindex(ids).to_numpy(dtype=float) if name in tabs else extra[name][ids]

    rows, token_sets = [], {}
    for a, b in pairs:
        ids = scored_top_tokens({k: tabs[k] for k in (a, b) if k in tabs}, counts, config.n, config.score_col)
        token_sets[a, b] = ids
        x, y, z = vector(a, ids), vector(b, ids), None if control is None else control[ids]
        row = {"a": a, "b": b, "method": config.method, "n_tokens": len(ids),
               "r": correlate(x, y, config.method, z, (a, b))}
        if config.n_permutations:
            null = permutation_null(x, y, config.method, z, config.n_permutations, config.seed, (a, b))
            row["p_value"] = two_sided_p(null, row["r"])
            row["perm_q975"] = float(np.quantile(null, 0.975))
        rows.append(row)
    out = pd.DataFrame(rows)
    if doc_stats is not None and config.n_boot:
        reps = _bootstrap_replicates(tabs, extra, control, check_doc_stats(doc_stats, list(tabs)), token_sets, config)
        out["ci_low"], out["ci_high"] = basic_interval(reps, out["r"].to_numpy(), config.level)
        out["bias_corrected"] = bias_corrected(out["ci_low"], out["ci_high"])
        out["bootstrap_bias"] = reps.mean(axis=0) - out["r"].to_numpy()
    cols = ["a", "b", "method", "n_tokens", "r", "ci_low", "ci_high", "bias_corrected", "bootstrap_bias", "p_value",
            "perm_q975"]
    return out[[c for c in cols if c in out.columns]]


def _bootstrap_replicates(tabs: Mapping[str, pd.DataFrame], extra: Mapping[str, np.ndarray], control: np.ndarray | None,
                          stats: Mapping[str, pd.DataFrame], token_sets: dict[tuple[str, str], np.ndarray],
                          config: CorrelationConfig) -> np.ndarray:
    """(n_boot, pairs) replicates of every pair's correlation, validation documents resampled (`bootstrap`);
    the per-document statistics must reproduce each run's table, and every replicate must be defined."""
    union = np.unique(np.concatenate(list(token_sets.values())))
    for run, ds in stats.items():
        full = scores_from_doc_stats(ds, union, config.score_col)
        table = tabs[run][config.score_col].reindex(union).to_numpy(dtype=float)
        if not np.allclose(full, table, rtol=1e-4, atol=1e-6, equal_nan=True):
            raise UserError(f"the per-document statistics of run {run!r} do not reproduce its preference "
                            f"table ({config.score_col}); they come from different probing runs")
    run_index = {r: i for i, r in enumerate(stats)}
    pos = {key: np.searchsorted(union, ids) for key, ids in token_sets.items()}

    def statistic(scores: np.ndarray) -> np.ndarray:                      # (B, runs, union)
        cols = []
        for (a, b), p in pos.items():
            ids = union[p]
            xa = scores[:, run_index[a], p] if a in tabs else np.broadcast_to(extra[a][ids], (len(scores), len(p)))
            xb = scores[:, run_index[b], p] if b in tabs else np.broadcast_to(extra[b][ids], (len(scores), len(p)))
            cols.append(correlate_rows(xa, xb, config.method, None if control is None else control[ids]))
        return np.stack(cols, axis=1)                                      # (B, pairs)

    reps = bootstrap(stats, union, statistic, config.n_boot, config.seed, config.score_col, config.progress)
    bad = ~np.isfinite(reps)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise UserError(f"bootstrap replicate {i} gave an undefined correlation for {list(token_sets)[j]} (constant "
                        f"or fewer than 3 scored tokens after resampling); use a larger N or more documents")
    return reps


def correlation_matrix(pairs: pd.DataFrame, value: str = "r") -> pd.DataFrame:
    """The square matrix of Table 2 from `pairwise_correlations` (1.0 on the diagonal)."""
    names = list(dict.fromkeys([*pairs["a"], *pairs["b"]]))
    m = pd.DataFrame(np.nan, index=names, columns=names)
    for _, row in pairs.iterrows():
        m.loc[row["a"], row["b"]] = m.loc[row["b"], row["a"]] = row[value]
    for n in names:
        m.loc[n, n] = 1.0
    return m


def fig3_data(tables: Mapping[str, pd.DataFrame], train_counts: np.ndarray, reference: str, n: int = 1000,
              score_col: str = "score") -> pd.DataFrame:
    """Fig. 3: scores of the n most frequent tokens (scored in all runs), ordered by the reference run.

    Columns: position (0 = highest reference score), token_id, token, run, score.
    """
    tabs = check_tables(tables, score_col)
    if reference not in tabs:
        raise UserError(f"reference run {reference!r} is not among the runs {list(tabs)}")
    ids = scored_top_tokens(tabs, check_counts(train_counts, tabs[reference].index), n, score_col)
    ref = tabs[reference][score_col].reindex(ids).to_numpy(dtype=float)
    ids = ids[np.lexsort((ids, -ref))]
    tokens = tabs[reference]["token"].reindex(ids).to_numpy()
    return pd.concat([pd.DataFrame({"position": np.arange(len(ids)), "token_id": ids, "token": tokens, "run": run,
                                    "score": t[score_col].reindex(ids).to_numpy(dtype=float)})
                      for run, t in tabs.items()], ignore_index=True)


def _by_token(v: np.ndarray, counts: np.ndarray, name: str) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    if v.shape != counts.shape:
        raise UserError(f"{name} must have one value per token id ({counts.shape[0]}), got shape {v.shape}")
    return v

