"""Correlation of preference vectors across runs (Section 5.1): Table 2, Fig. 3, and their uncertainty.

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
from typing import Callable, Mapping

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.stats import rankdata
from tqdm import tqdm

from twotower_lib.errors import UserError
from twotower_lib.preference import frequency_order

METHODS = ("pearson", "spearman")
SCORE_COLUMNS = ("score", "score_logmean")      # Eq. 4 (log of mean p) / authors' code (mean of log p)
DOC_COLUMNS = ("doc_id", "token_id", "n", "sum_p1", "sum_p2", "sum_logp1", "sum_logp2")


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


# ---------------------------------------------------------------------- inputs


def check_tables(tables: Mapping[str, pd.DataFrame], score_col: str = "score") -> dict[str, pd.DataFrame]:
    """Validate preference tables and return them indexed by token_id, sorted.

    All runs must share one vocabulary: the same token ids with the same token strings.
    """
    if not tables:
        raise UserError("no preference tables given; pass {run name: table} for at least one run")
    out: dict[str, pd.DataFrame] = {}
    first: tuple[str, pd.DataFrame] | None = None
    for run, table in tables.items():
        missing = {"token_id", "token", score_col} - set(table.columns)
        if missing:
            raise UserError(f"preference table of run {run!r} lacks column(s) {sorted(missing)}; "
                            f"it should come from the probing stage")
        if table["token_id"].duplicated().any():
            dup = int(table.loc[table["token_id"].duplicated(), "token_id"].iloc[0])
            raise UserError(f"preference table of run {run!r} lists token id {dup} twice")
        t = table.set_index("token_id").sort_index()
        scores = t[score_col].to_numpy(dtype=float)
        if not np.isfinite(scores).any():
            raise UserError(f"run {run!r} has no finite {score_col!r} (all NaN); its probing produced no scores")
        if first is None:
            first = (run, t)
        else:
            run0, t0 = first
            if not t.index.equals(t0.index):
                raise UserError(f"runs {run0!r} and {run!r} have different vocabularies ({len(t0)} vs {len(t)} "
                                f"token ids); compare runs trained with the same tokenizer")
            diff = t["token"].to_numpy() != t0["token"].to_numpy()
            if diff.any():
                tid = int(t.index[diff.argmax()])
                raise UserError(f"runs {run0!r} and {run!r} have different vocabularies: token id {tid} is "
                                f"{t0.loc[tid, 'token']!r} in one and {t.loc[tid, 'token']!r} in the other")
        out[run] = t
    return out


def check_counts(train_counts: np.ndarray, vocab_ids: pd.Index) -> np.ndarray:
    """Training-split counts as an int array indexed by token id, covering the tables' vocabulary."""
    counts = np.asarray(train_counts)
    if counts.ndim != 1 or not np.issubdtype(counts.dtype, np.integer):
        raise UserError(f"train_counts must be a 1-D integer array indexed by token id, "
                        f"got dtype {counts.dtype} and shape {counts.shape}")
    if len(vocab_ids) and (vocab_ids.min() < 0 or vocab_ids.max() >= len(counts)):
        raise UserError(f"the preference tables hold token id {vocab_ids.max()} but train_counts has only "
                        f"{len(counts)} entries; counts and tables come from different vocabularies")
    if (counts < 0).any():
        raise UserError("train_counts has negative entries")
    return counts


def top_tokens(tables: Mapping[str, pd.DataFrame], train_counts: np.ndarray, n: int,
               score_col: str = "score") -> np.ndarray:
    """Ids of the n most frequent training tokens that have a finite score in every given run.

    Ties in frequency go to the smaller token id. Raises UserError when fewer than n qualify.
    """
    tabs = check_tables(tables, score_col)
    return scored_top_tokens(tabs, check_counts(train_counts, next(iter(tabs.values())).index), n, score_col)


def scored_tokens(tabs: dict[str, pd.DataFrame], counts: np.ndarray, score_col: str) -> np.ndarray:
    """Ids of the tokens seen in training with a finite score in every run (checked input, as below)."""
    ids = next(iter(tabs.values())).index.to_numpy()
    ok = counts[ids] > 0
    for t in tabs.values():
        ok &= np.isfinite(t[score_col].to_numpy(dtype=float))
    return ids[ok]


def scored_top_tokens(tabs: dict[str, pd.DataFrame], counts: np.ndarray, n: int, score_col: str) -> np.ndarray:
    """`top_tokens` on checked input: `tabs` from `check_tables`, `counts` from `check_counts`."""
    cand = scored_tokens(tabs, counts, score_col)
    if len(cand) < n:
        raise UserError(f"only {len(cand)} tokens are scored in all of {list(tabs)} and seen in training, "
                        f"fewer than N = {n}; lower N (e.g. the profile's top_n) or probe on more text")
    return cand[frequency_order(counts[cand], cand)[:n]]


def score_matrix(tables: Mapping[str, pd.DataFrame], token_ids: np.ndarray, score_col: str = "score") -> pd.DataFrame:
    """(tokens x runs) scores, indexed by token_id in the given order."""
    tabs = check_tables(tables, score_col)
    return pd.DataFrame({run: t[score_col].reindex(token_ids).to_numpy(dtype=float) for run, t in tabs.items()},
                        index=pd.Index(token_ids, name="token_id"))


# ---------------------------------------------------------------------- correlation primitives


def _prepare(x: np.ndarray, y: np.ndarray, method: str, control: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Rows ranked (spearman) and, with a control z, residualised on [1, z]; then centred."""
    if method == "spearman":
        x, y = rankdata(x, axis=-1), rankdata(y, axis=-1)
        control = None if control is None else rankdata(control)
    if control is not None:
        zc = control - control.mean()
        x = x - ((x - x.mean(-1, keepdims=True)) @ zc / (zc @ zc))[..., None] * zc
        y = y - ((y - y.mean(-1, keepdims=True)) @ zc / (zc @ zc))[..., None] * zc
    return x - x.mean(-1, keepdims=True), y - y.mean(-1, keepdims=True)


def _corr_rows(x: np.ndarray, y: np.ndarray, method: str, control: np.ndarray | None = None) -> np.ndarray:
    """Row-wise (partial) correlation of x and y, shapes (B, n) or (n,)."""
    xc, yc = _prepare(x, y, method, control)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (xc * yc).sum(-1) / np.sqrt((xc * xc).sum(-1) * (yc * yc).sum(-1))


def _check_vectors(x: np.ndarray, y: np.ndarray, names: tuple[str, str], control: np.ndarray | None) -> None:
    vectors = [(x, names[0]), (y, names[1])] + ([] if control is None else [(control, "the control")])
    for v, name in vectors:
        if v.shape != x.shape:
            raise UserError(f"{name} has {v.shape[0]} values but {names[0]} has {x.shape[0]}")
        if not np.isfinite(v).all():
            raise UserError(f"{name} has NaN or infinite values among the {len(v)} tokens compared")
        if np.ptp(v) == 0:
            raise UserError(f"{name} is constant over the {len(v)} tokens compared; "
                            f"a correlation with it is undefined")
    if len(x) < 3:
        raise UserError(f"a correlation needs at least 3 tokens, got {len(x)}")


def correlate(x: np.ndarray, y: np.ndarray, method: str = "pearson", control: np.ndarray | None = None,
              names: tuple[str, str] = ("x", "y")) -> float:
    """Pearson/Spearman correlation of x and y; with `control`, the partial correlation given it.

    The partial Spearman correlation residualises the ranks of x and y on the ranks of the control.
    """
    if method not in METHODS:
        raise UserError(f"correlation method {method!r} is not one of {METHODS}")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    control = None if control is None else np.asarray(control, dtype=float)
    _check_vectors(x, y, names, control)
    r = float(_corr_rows(x, y, method, control))
    if not np.isfinite(r):
        raise UserError(f"the correlation of {names[0]} and {names[1]} is undefined: after removing the "
                        f"control one of them is constant")
    return r


def permutation_null(x: np.ndarray, y: np.ndarray, method: str = "pearson", control: np.ndarray | None = None,
                     n_permutations: int = 10000, seed: int = 0, names: tuple[str, str] = ("x", "y")) -> np.ndarray:
    """Correlations of x with y after shuffling y's token labels, (n_permutations,): the label-permutation control.

    With a control, the residuals of x and y (after removing the control) are permuted.
    """
    correlate(x, y, method, control, names)  # the same checks as the observed correlation
    xc, yc = _prepare(np.asarray(x, float), np.asarray(y, float), method,
                      None if control is None else np.asarray(control, float))
    xs, ys = xc / np.linalg.norm(xc), yc / np.linalg.norm(yc)
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, n_permutations, 256):
        b = min(256, n_permutations - start)
        perm = rng.permuted(np.broadcast_to(ys, (b, len(ys))), axis=1)     # (b, n)
        out.append(perm @ xs)
    return np.concatenate(out) if out else np.empty(0)


def permutation_pvalue(x: np.ndarray, y: np.ndarray, method: str = "pearson", control: np.ndarray | None = None,
                       n_permutations: int = 10000, seed: int = 0, names: tuple[str, str] = ("x", "y")) -> float:
    """Two-sided permutation p-value of corr(x, y): (1 + #{|r_perm| >= |r|}) / (1 + n_permutations)."""
    r = correlate(x, y, method, control, names)
    return _two_sided_p(permutation_null(x, y, method, control, n_permutations, seed, names), r)


def _two_sided_p(null: np.ndarray, r: float) -> float:
    return (1 + int((np.abs(null) >= abs(r) - 1e-12).sum())) / (1 + len(null))


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


def _replicate_corr(x: np.ndarray, y: np.ndarray, method: str, control: np.ndarray | None) -> np.ndarray:
    """Row-wise correlation of bootstrap replicates; rows with missing tokens use the rest."""
    r = _corr_rows(x, y, method, control)
    for i in np.nonzero(~(np.isfinite(x) & np.isfinite(y)).all(axis=1))[0]:
        keep = np.isfinite(x[i]) & np.isfinite(y[i])
        r[i] = _corr_rows(x[i, keep], y[i, keep], method, None if control is None else control[keep]) \
            if keep.sum() >= 3 else np.nan
    return r


# ---------------------------------------------------------------------- Table 2 and Fig. 3


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
            row["p_value"] = _two_sided_p(null, row["r"])
            row["perm_q975"] = float(np.quantile(null, 0.975))
        rows.append(row)
    out = pd.DataFrame(rows)
    if doc_stats is not None and config.n_boot:
        stats = check_doc_stats(doc_stats, list(tabs))
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
                cols.append(_replicate_corr(xa, xb, config.method, None if control is None else control[ids]))
            return np.stack(cols, axis=1)                                      # (B, pairs)

        reps = bootstrap(stats, union, statistic, config.n_boot, config.seed, config.score_col, config.progress)
        bad = ~np.isfinite(reps)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise UserError(f"bootstrap replicate {i} gave an undefined correlation for {pairs[j]} (constant "
                            f"or fewer than 3 scored tokens after resampling); use a larger N or more documents")
        out["ci_low"], out["ci_high"] = basic_interval(reps, out["r"].to_numpy(), config.level)
        out["bootstrap_bias"] = reps.mean(axis=0) - out["r"].to_numpy()
    cols = ["a", "b", "method", "n_tokens", "r", "ci_low", "ci_high", "bootstrap_bias", "p_value", "perm_q975"]
    return out[[c for c in cols if c in out.columns]]


# ---------------------------------------------------------------------- the validation-text ceiling

MIN_SPLIT_DOCS = 4  # two halves of at least two documents each


def split_half_reliability(doc_stats: pd.DataFrame, token_ids: np.ndarray, n_splits: int = 20, seed: int = 0,
                           score_col: str = "score") -> float:
    """How well one run's scores of `token_ids` would reproduce on another validation text of the same size.

    The validation documents are split into two random halves, the scores are computed on each half
    and correlated (Pearson, over tokens scored in both halves; mean over `n_splits` splits), and the
    half-text correlation is stepped up to the whole text with Spearman-Brown, 2r / (1 + r).
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
    r = _replicate_corr(first, second, "pearson", None)
    if not np.isfinite(r).all():
        raise UserError("a split half left fewer than 3 scored tokens; use more validation documents or fewer tokens")
    half = float(np.mean(r))
    return 2 * half / (1 + half)


def text_ceiling(tables: Mapping[str, pd.DataFrame], doc_stats: Mapping[str, pd.DataFrame], train_counts: np.ndarray,
                 pairs: list[tuple[str, str]], n: int, n_splits: int = 20, seed: int = 0,
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
        rel = [split_half_reliability(stats[x], ids, n_splits, seed, score_col)
               if stats[x]["doc_id"].nunique() >= MIN_SPLIT_DOCS else np.nan for x in (a, b)]
        ceiling = float(np.sqrt(max(rel[0], 0) * max(rel[1], 0)))
        rows.append({"a": a, "b": b, "n_tokens": len(ids), "r": r, "reliability_a": rel[0], "reliability_b": rel[1],
                     "ceiling": ceiling, "r_disattenuated": r / ceiling if ceiling > 0 else np.nan})
    return pd.DataFrame(rows)


def same_run_agreement(table: pd.DataFrame, other: pd.DataFrame, train_counts: np.ndarray, n: int,
                       score_col: str = "score") -> float:
    """Pearson r over the n most frequent tokens between two measurements of *one* frozen run.

    The probe-seed reliability is this with `other` from heads that differ only in their seed
    (`probe.replicate_table`): the text ceiling holds the heads fixed, this one holds the run and
    the text fixed and changes only the heads, so it is the ceiling the instrument itself puts on
    any correlation. Section 02 also uses it to compare two probe recipes on one run.
    """
    tabs = check_tables({"first": table, "second": other}, score_col)
    ids = scored_top_tokens(tabs, check_counts(train_counts, tabs["first"].index), n, score_col)
    return correlate(*(t[score_col].reindex(ids).to_numpy(float) for t in tabs.values()), names=("first", "second"))


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
