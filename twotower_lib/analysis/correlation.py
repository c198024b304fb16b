"""Correlating two preference vectors over a token set: which tokens, which correlation, how surprising.

The building blocks of Table 2 (`table2`), the ceilings and intervals (`uncertainty`) and the
frequency control (`frequency`): tables are checked (`check_tables`), the N most frequent tokens
scored in every run are chosen (`scored_top_tokens`), and two vectors are correlated (Pearson or
Spearman, optionally with a control partialled out) with a two-sided permutation p-value.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from twotower_lib.errors import UserError
from twotower_lib.preference import frequency_order

METHODS = ("pearson", "spearman")


SCORE_COLUMNS = ("score", "score_logmean")      # Eq. 4 (log of mean p) / authors' code (mean of log p)



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


def check_method(method: str) -> None:
    """A clear error for a method this module does not compute (the others would silently be Pearson's)."""
    if method not in METHODS:
        raise UserError(f"correlation method {method!r} is not one of {METHODS}")


def correlate(x: np.ndarray, y: np.ndarray, method: str = "pearson", control: np.ndarray | None = None,
              names: tuple[str, str] = ("x", "y")) -> float:
    """Pearson/Spearman correlation of x and y; with `control`, the partial correlation given it.

    The partial Spearman correlation residualises the ranks of x and y on the ranks of the control.
    """
    check_method(method)
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    control = None if control is None else np.asarray(control, dtype=float)
    _check_vectors(x, y, names, control)
    r = float(_corr_rows(x, y, method, control))
    if not np.isfinite(r):
        raise UserError(f"the correlation of {names[0]} and {names[1]} is undefined: after removing the "
                        f"control one of them is constant")
    return r


def correlate_rows(x: np.ndarray, y: np.ndarray, method: str, control: np.ndarray | None) -> np.ndarray:
    """Row-wise correlation of bootstrap replicates; rows with missing tokens use the rest."""
    check_method(method)
    r = _corr_rows(x, y, method, control)
    for i in np.nonzero(~(np.isfinite(x) & np.isfinite(y)).all(axis=1))[0]:
        keep = np.isfinite(x[i]) & np.isfinite(y[i])
        r[i] = _corr_rows(x[i, keep], y[i, keep], method, None if control is None else control[keep]) \
            if keep.sum() >= 3 else np.nan
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


def two_sided_p(null: np.ndarray, r: float) -> float:
    return (1 + int((np.abs(null) >= abs(r) - 1e-12).sum())) / (1 + len(null))

