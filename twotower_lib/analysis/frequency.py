"""Is the preference score just word frequency? (Section 8.1): Fig. 8, Table 4, partial correlations.

The paper plots scores against frequency-sorted token index (Fig. 8, top 1000) and reports
Spearman correlations among runs and with frequency rank (Table 4, top 5000). Beyond the paper:
the partial correlation of two runs' scores with log-frequency removed, which asks directly whether
the agreement between runs survives once frequency is accounted for.

Resolved ambiguities:
- Frequency and frequency rank come from the training split (rank 1 = most frequent; ties go to
  the smaller token id). Table 4's "frequency rank" keeps the paper's sign: a positive correlation
  means rarer tokens score higher.
- The partial correlation controls for log(count) linearly (Pearson) or for frequency rank
  (Spearman: ranks of both scores residualised on the rank of frequency).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from twotower_lib.analysis.correlation import check_counts, check_tables, scored_tokens, scored_top_tokens
from twotower_lib.analysis.table2 import CorrelationConfig, pairwise_correlations
from twotower_lib.errors import UserError
from twotower_lib.preference import frequency_rank

FREQUENCY = "frequency rank"


def fig8_data(tables: Mapping[str, pd.DataFrame], train_counts: np.ndarray, n: int = 1000,
              score_col: str = "score") -> pd.DataFrame:
    """Fig. 8: scores of the n most frequent tokens scored in all runs, in frequency order.

    Columns: position (0 = most frequent of these), frequency_rank (over the whole vocabulary),
    count, token_id, token, run, score.
    """
    tabs = check_tables(tables, score_col)
    first = next(iter(tabs.values()))
    counts = check_counts(train_counts, first.index)
    ids = scored_top_tokens(tabs, counts, n, score_col)
    rank = frequency_rank(counts)
    return pd.concat([pd.DataFrame({"position": np.arange(len(ids)), "frequency_rank": rank[ids],
                                    "count": counts[ids], "token_id": ids,
                                    "token": first["token"].reindex(ids).to_numpy(), "run": run,
                                    "score": t[score_col].reindex(ids).to_numpy(dtype=float)})
                      for run, t in tabs.items()], ignore_index=True)


def table4(tables: Mapping[str, pd.DataFrame], train_counts: np.ndarray,
           config: CorrelationConfig = CorrelationConfig(method="spearman"),
           doc_stats: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Table 4 (long form): Spearman correlation among runs and of each run with frequency rank.

    The frequency rank is a fixed vector (not resampled by the bootstrap). Pass the result to
    `table2.correlation_matrix` for the paper's square layout.
    """
    if config.method != "spearman":
        config = replace(config, method="spearman")
    return pairwise_correlations(tables, train_counts, config, doc_stats,
                                 extra={FREQUENCY: frequency_rank(train_counts).astype(float)})


def table4_grid(tables: Mapping[str, pd.DataFrame], train_counts: np.ndarray, ns: Sequence[int],
                score_cols: Sequence[str] = ("score", "score_logmean")) -> pd.DataFrame:
    """Table 4's rho (no intervals) for every N in `ns` (capped at the tokens scored in every run)
    and every score variant: one row per pair (frequency rank included), one column per (variant,
    N). The paper's N is 5000; a profile's own N can be smaller, and the answer can change with it."""
    cols = {}
    for col in score_cols:
        tabs = check_tables(tables, col)
        available = len(scored_tokens(tabs, check_counts(train_counts, next(iter(tabs.values())).index), col))
        for n in dict.fromkeys(min(n, available) for n in ns):
            t = table4(tables, train_counts, CorrelationConfig(n=n, method="spearman", score_col=col, n_boot=0,
                                                               n_permutations=0, progress=False))
            cols[(col, f"N = {int(t['n_tokens'].max())}")] = t.set_index(["a", "b"])["r"]
    return pd.DataFrame(cols).rename_axis(columns=["variant", "tokens"])


def partial_correlations(tables: Mapping[str, pd.DataFrame], train_counts: np.ndarray,
                         config: CorrelationConfig = CorrelationConfig(),
                         doc_stats: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Every pair of runs: the plain correlation and the one with log-frequency partialled out.

    Columns: a, b, method, n_tokens, r, r_partial, and for the partial one ci_low, ci_high, p_value
    when doc_stats / permutations are given. Tokens with zero training count never enter (the
    top-N tokens are all seen in training), so log(count) is finite.
    """
    if len(tables) < 2:
        raise UserError(f"partial correlations compare runs; got {len(tables)} run(s)")
    counts = check_counts(train_counts, check_tables(tables, config.score_col)[next(iter(tables))].index)
    with np.errstate(divide="ignore"):
        log_freq = np.log(counts.astype(float))
    plain = pairwise_correlations(tables, counts, replace(config, n_boot=0, n_permutations=0))
    partial = pairwise_correlations(tables, counts, config, doc_stats, control=log_freq)
    partial.insert(partial.columns.get_loc("r"), "r_plain", plain["r"].to_numpy())
    return partial.rename(columns={"r": "r_partial"}).rename(columns={"r_plain": "r"})
