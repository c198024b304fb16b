"""How far a score or a correlation can be trusted: the document bootstrap behind every confidence
interval, the split-half text ceiling, and the probe-seed ceiling.

- The bootstrap resamples validation *documents* with replacement (tokens within a document are not
  independent), recomputes every run's scores from the resampled per-document sums, and recomputes
  the statistic over the same token set (basic interval: see `basic_interval` for why it may lie above r).
- The text ceiling (`text_ceiling`) is what a finite validation text allows two runs to correlate
  at; the probe ceiling (`same_run_agreement` between two head seeds) is what the heads' seed allows.
  Neither sees the error of the heads' finite training data, which only more probe data shows
  (`studies/probe/positions.py`, `results/probe/README.md`: the head seeds can agree far better than
  the scores agree with a larger probe's).
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import pandas as pd
from scipy import sparse
from tqdm import tqdm

from twotower_lib.analysis.correlation import (SCORE_COLUMNS, check_counts, check_tables, correlate, correlate_rows,
                                               scored_top_tokens)
from twotower_lib.errors import UserError
from twotower_lib.preference import DOC_COLUMNS, replicate_table

# ---------------------------------------------------------------------- bootstrap over documents


def check_doc_stats(doc_stats: Mapping[str, pd.DataFrame], runs: list[str]) -> dict[str, pd.DataFrame]:
    """Per-document sums of every run; all runs must cover the same validation documents."""
    out: dict[str, pd.DataFrame] = {}
    docs0: tuple[str, np.ndarray] | None = None
    for run in runs:
        if run not in doc_stats:
            raise UserError(f"no per-document statistics for run {run!r} (have {sorted(doc_stats)}); "
                            f"bootstrap intervals need them for every run compared")
        df = doc_stats[run]
        missing = set(DOC_COLUMNS) - set(df.columns)
        if missing:
            raise UserError(f"per-document statistics of run {run!r} lack column(s) {sorted(missing)}")
        if df.empty:
            raise UserError(f"per-document statistics of run {run!r} are empty")
        docs = np.unique(df["doc_id"].to_numpy())
        if docs0 is None:
            docs0 = (run, docs)
        elif not np.array_equal(docs, docs0[1]):
            raise UserError(f"runs {docs0[0]!r} and {run!r} were probed on different validation documents "
                            f"({len(docs0[1])} vs {len(docs)}); bootstrap needs one shared document set")
        out[run] = df
    return out


class _DocSums:
    """Sparse (documents x tokens) sums of one run, restricted to a token set."""

    def __init__(self, df: pd.DataFrame, docs: np.ndarray, token_ids: np.ndarray, score_col: str):
        df = df[df["token_id"].isin(token_ids)]
        rows = np.searchsorted(docs, df["doc_id"].to_numpy())
        cols = pd.Index(token_ids).get_indexer(df["token_id"].to_numpy())
        shape = (len(docs), len(token_ids))
        names = ("sum_p1", "sum_p2") if score_col == "score" else ("sum_logp1", "sum_logp2")
        self.score_col = score_col
        self.m = {k: sparse.csc_matrix((df[k].to_numpy(dtype=float), (rows, cols)), shape=shape)
                  for k in ("n", *names)}
        self.names = names

    def scores(self, weights: np.ndarray) -> np.ndarray:
        """Scores under document weights (B, docs) -> (B, tokens); NaN where a token has no occurrence."""
        s = {k: (m.T @ weights.T).T for k, m in self.m.items()}                 # each (B, tokens)
        a, b = s[self.names[0]], s[self.names[1]]
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.score_col == "score":
                # log(sum_p1 / n) - log(sum_p2 / n): the count cancels
                out = np.log(a) - np.log(b)
            else:
                out = (a - b) / s["n"]
        out[s["n"] <= 0] = np.nan
        return out


def scores_from_doc_stats(doc_stats: pd.DataFrame, token_ids: np.ndarray, score_col: str = "score") -> np.ndarray:
    """The preference scores of token_ids recomputed from all documents (should equal the table's)."""
    docs = np.unique(doc_stats["doc_id"].to_numpy())
    return _DocSums(doc_stats, docs, np.asarray(token_ids), score_col).scores(np.ones((1, len(docs))))[0]


def bootstrap(doc_stats: Mapping[str, pd.DataFrame], token_ids: np.ndarray,
              statistic: Callable[[np.ndarray], np.ndarray], n_boot: int, seed: int = 0,
              score_col: str = "score", progress: bool = True) -> np.ndarray:
    """Document bootstrap of `statistic(scores)`, scores (B, runs, tokens) in doc_stats' order.

    Each replicate draws as many documents as there are, with replacement (seeded), and recomputes
    every run's scores of `token_ids` from the resampled sums; all runs share the replicate's
    documents. Returns statistic's output stacked over replicates, (n_boot, ...).
    """
    runs = list(doc_stats)
    docs = np.unique(next(iter(doc_stats.values()))["doc_id"].to_numpy())
    sums = [_DocSums(doc_stats[r], docs, np.asarray(token_ids), score_col) for r in runs]
    rng = np.random.default_rng(seed)
    out = []
    for start in tqdm(range(0, n_boot, 64), desc="bootstrap", disable=not progress, leave=False):
        b = min(64, n_boot - start)
        weights = rng.multinomial(len(docs), np.full(len(docs), 1.0 / len(docs)), size=b).astype(float)
        scores = np.stack([s.scores(weights) for s in sums], axis=1)         # (b, runs, tokens)
        out.append(statistic(scores))
    return np.concatenate(out, axis=0)


def basic_interval(replicates: np.ndarray, estimate: np.ndarray, level: float = 0.95
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Basic (reverse-percentile) bootstrap interval per column: [2r - q_hi, 2r - q_lo], within [-1, 1].

    Why not the plain percentile interval: resampling documents adds a second dose of sampling
    noise to both score vectors, so replicate correlations sit *below* r by about as much as r
    itself sits below the correlation on unlimited validation text. The percentile interval would
    then lie below r, sometimes entirely; the basic interval reflects that shift and covers the
    unlimited-text correlation, which is the quantity of interest.
    """
    alpha = (1 - level) / 2
    q_lo, q_hi = np.quantile(replicates, [alpha, 1 - alpha], axis=0)
    return np.clip(2 * estimate - q_hi, -1, 1), np.clip(2 * estimate - q_lo, -1, 1)


def bias_corrected(low, high):
    """The estimate a basic interval belongs to: its centre, 2r - (q_lo + q_hi) / 2, r corrected by the shift of
    the replicates' central quantiles. It lies in the interval by construction, where r itself may not (see
    `basic_interval`); it is computed from the interval alone, so committed intervals carry it too."""
    return (np.asarray(low, dtype=float) + np.asarray(high, dtype=float)) / 2


def all_bias_corrected(obj):
    """`obj` (JSON-like: dicts, lists, values) with `with_bias_corrected` applied to every dict that holds an
    interval: what a results file is written through, so that each interval it holds carries its estimate."""
    if isinstance(obj, dict):
        return with_bias_corrected({k: all_bias_corrected(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return [all_bias_corrected(v) for v in obj]
    return obj


def with_bias_corrected(record: dict, digits: int | None = None) -> dict:
    """`record` (with ci_low, ci_high) with its `bias_corrected` estimate added; unchanged without an interval."""
    lo, hi = record.get("ci_low"), record.get("ci_high")
    if not all(isinstance(v, (int, float)) and np.isfinite(v) for v in (lo, hi)):
        return record
    value = float(bias_corrected(lo, hi))
    return record | {"bias_corrected": round(value, digits) if digits is not None else value}



# ---------------------------------------------------------------------- ceilings: the validation text, the probe


MIN_SPLIT_DOCS = 4  # two halves of at least two documents each
RELIABILITY_SPLITS = 20  # random halves of the validation documents a split-half reliability averages
CEILING_FLOOR = 0.3  # below this text ceiling a corrected |r| (|r| / ceiling) is noise over noise: not shown


def pair_ceiling(rel_a: float, rel_b: float) -> float:
    """The ceiling a validation text puts on two runs' r, sqrt(rel_a * rel_b) of their split-half reliabilities
    (a negative reliability counts as 0); NaN where either is missing."""
    rel = np.array([rel_a, rel_b], dtype=float)
    return float(np.sqrt(np.clip(rel, 0, None).prod())) if np.isfinite(rel).all() else np.nan


def corrected(abs_r: float, ceiling: float) -> float:
    """|r| / ceiling, the agreement an unlimited text would show; NaN where the ceiling is missing or below
    CEILING_FLOOR (noise over noise)."""
    return abs_r / ceiling if ceiling >= CEILING_FLOOR else np.nan


def spearman_brown(r: float, k: float) -> float:
    """The reliability of a measurement k times as long as one whose two parallel forms correlate at r:
    k r / (1 + (k - 1) r) (a half-text correlation stepped up to the whole text: k = 2)."""
    return k * r / (1 + (k - 1) * r)


def split_half_reliability(doc_stats: pd.DataFrame, token_ids: np.ndarray, n_splits: int = RELIABILITY_SPLITS, seed: int = 0,
                           score_col: str = "score", method: str = "pearson") -> float:
    """How well one run's scores of `token_ids` would reproduce on another validation text of the same size.

    The validation documents are split into two random halves, the scores are computed on each half
    and correlated (`method`, over tokens scored in both halves; mean over `n_splits` splits), and the
    half-text correlation is stepped up to the whole text with Spearman-Brown, 2r / (1 + r). With
    method "spearman" it is the reliability of the scores' ranks, the ceiling of a Spearman claim
    (Spearman-Brown on a rank correlation is the usual approximation).
    """
    if n_splits < 1:
        raise UserError(f"n_splits must be at least 1, got {n_splits}")
    docs = np.unique(doc_stats["doc_id"].to_numpy())
    if len(docs) < MIN_SPLIT_DOCS:
        raise UserError(f"split-half reliability needs at least {MIN_SPLIT_DOCS} validation documents, got {len(docs)}")
    sums = _DocSums(doc_stats, docs, np.asarray(token_ids), score_col)
    rng = np.random.default_rng(seed)
    halves = np.stack([rng.permutation(len(docs)) < len(docs) // 2 for _ in range(n_splits)])   # (S, docs)
    first, second = sums.scores(halves.astype(float)), sums.scores((~halves).astype(float))      # (S, tokens)
    r = correlate_rows(first, second, method, None)
    if not np.isfinite(r).all():
        raise UserError("a split half left fewer than 3 scored tokens; use more validation documents or fewer tokens")
    return spearman_brown(float(np.mean(r)), 2)


def split_half_or_nan(doc_stats: pd.DataFrame, token_ids: np.ndarray, n_splits: int = RELIABILITY_SPLITS,
                      seed: int = 0, score_col: str = "score", method: str = "pearson") -> float:
    """`split_half_reliability`, or NaN where the validation text has too few documents to split in halves."""
    if doc_stats["doc_id"].nunique() < MIN_SPLIT_DOCS:
        return np.nan
    return split_half_reliability(doc_stats, token_ids, n_splits, seed, score_col, method)


def text_ceiling(tables: Mapping[str, pd.DataFrame], doc_stats: Mapping[str, pd.DataFrame], train_counts: np.ndarray,
                 pairs: list[tuple[str, str]], n: int, n_splits: int = RELIABILITY_SPLITS, seed: int = 0,
                 score_col: str = "score") -> pd.DataFrame:
    """Per pair of runs: r, each run's split-half reliability, and the ceiling sqrt(rel_a * rel_b).

    Why: two runs scored on a finite validation text cannot correlate above that ceiling even if
    their preferences were identical (the classical attenuation bound). A cross-seed r far below a
    ceiling near 1 is a difference between the trained seeds, not noise of the text; r / ceiling
    (`r_disattenuated`) is the correlation an unlimited validation text would give, if the noise of
    the two runs' scores were independent (both runs read the same text, so it is an approximation).
    With fewer than MIN_SPLIT_DOCS validation documents the reliabilities and the ceiling are NaN.
    """
    tabs = check_tables(tables, score_col)
    counts = check_counts(train_counts, next(iter(tabs.values())).index)
    stats = check_doc_stats(doc_stats, sorted({x for p in pairs for x in p}))
    rows = []
    for a, b in pairs:
        ids = scored_top_tokens({a: tabs[a], b: tabs[b]}, counts, n, score_col)
        r = correlate(tabs[a][score_col].reindex(ids).to_numpy(float), tabs[b][score_col].reindex(ids).to_numpy(float),
                      names=(a, b))
        # too few documents to split (tiny test data): no ceiling, rather than no table
        rel = [split_half_or_nan(stats[x], ids, n_splits, seed, score_col) for x in (a, b)]
        ceiling = pair_ceiling(*rel)
        rows.append({"a": a, "b": b, "n_tokens": len(ids), "r": r, "reliability_a": rel[0], "reliability_b": rel[1],
                     "ceiling": ceiling, "r_disattenuated": r / ceiling if ceiling > 0 else np.nan})
    return pd.DataFrame(rows)


def same_run_agreement(table: pd.DataFrame, other: pd.DataFrame, train_counts: np.ndarray, n: int,
                       score_col: str = "score") -> float:
    """Pearson r over the n most frequent tokens between two measurements of *one* frozen run.

    The probe-seed reliability is this with `other` from heads that differ only in their seed
    (`probe.replicate_table`): the text ceiling holds the heads fixed, this one holds the run and
    the text fixed and changes only the heads' seed, so it is the ceiling the optimiser's noise puts on
    any correlation (not the heads' finite training data: see the module's docstring). Section 02 also
    uses it to compare two probe recipes, or two amounts of probe data, on one run.
    """
    tabs = check_tables({"first": table, "second": other}, score_col)
    ids = scored_top_tokens(tabs, check_counts(train_counts, tabs["first"].index), n, score_col)
    return correlate(*(t[score_col].reindex(ids).to_numpy(float) for t in tabs.values()), names=("first", "second"))



def probe_seed_reliability(artifact, data, n: int) -> dict[str, float]:
    """The probe-seed reliability of one probe artifact (a `PreferenceResult` probed with a second head
    seed) over the n most frequent tokens, per score variant: `same_run_agreement` against its
    replicate heads' scores (`preference.replicate_table`; a UserError where it has none)."""
    other = replicate_table(artifact.path, data)
    return {c: same_run_agreement(artifact.table, other, data.counts, n, c) for c in SCORE_COLUMNS}
