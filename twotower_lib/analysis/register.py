"""Does a token's preference follow its register? A test the paper does not make.

The default corpus mixes sources of different registers (fiction, encyclopaedia, 1960s prose),
as the paper's does (BookCorpus, Wikipedia). If the two towers split the *registers* rather than
linguistic functions, a token's score s would follow which source the token belongs to. Three
measurements, each from what the pipeline already has:

- `tower_gap_by_source`: each tower's mean log-probability per position on each source's
  validation text. A register split shows as one tower winning on one source and the other
  tower on another.
- `source_log_ratios`: per token, how much more frequent it is in one source's training text
  than in the others' (smoothed log ratio of relative frequencies).
- `register_fit`: the share of the variance of s (over the compared tokens) that the sources'
  log ratios explain together (R² of a least-squares fit), and `partial_r`: a pair's correlation
  once both scores have the register fit removed. A pair whose r survives removal agrees on more
  than register.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def source_token_counts(data, split: str = "train") -> pd.DataFrame:
    """Token counts per source of `split`: a (V, S) frame, one column per source."""
    ids = np.asarray(data.train if split == "train" else data.valid).ravel()
    docs = np.asarray(data.train_doc_ids if split == "train" else data.valid_doc_ids).ravel()
    names, doc_source = np.unique(data.sources(split), return_inverse=True)
    source = doc_source[docs]                                                     # (positions,)
    return pd.DataFrame({name: np.bincount(ids[source == j], minlength=data.vocab_size)
                         for j, name in enumerate(names)})


def source_log_ratios(counts: pd.DataFrame, smoothing: float = 1.0) -> pd.DataFrame:
    """Per token and source: log of its relative frequency in the source over that in all other
    sources (add-`smoothing` counts), (V, S). Positive: the token is typical of the source."""
    rest = counts.sum(axis=1).to_numpy()[:, None] - counts.to_numpy()
    V = len(counts)

    def rel(c: np.ndarray) -> np.ndarray:
        return (c + smoothing) / (c.sum(axis=0, keepdims=True) + smoothing * V)
    return pd.DataFrame(np.log(rel(counts.to_numpy().astype(float))) - np.log(rel(rest.astype(float))),
                        columns=counts.columns)


def tower_gap_by_source(doc_stats: pd.DataFrame, doc_sources: np.ndarray) -> pd.DataFrame:
    """Per source: scored positions, each tower's mean log-probability, and primary minus secondary (nats)."""
    g = doc_stats.assign(source=doc_sources[doc_stats["doc_id"].to_numpy()]).groupby("source")[
        ["n", "sum_logp1", "sum_logp2"]].sum()
    out = pd.DataFrame({"positions": g["n"], "logp primary": g["sum_logp1"] / g["n"],
                        "logp secondary": g["sum_logp2"] / g["n"]})
    out["gap"] = out["logp primary"] - out["logp secondary"]
    return out


def _residual(y: np.ndarray, X: np.ndarray) -> np.ndarray:
    X1 = np.column_stack([np.ones(len(y)), X])
    coef, *_ = np.linalg.lstsq(X1, y, rcond=None)
    return y - X1 @ coef


def register_fit(scores: np.ndarray, ratios: np.ndarray) -> dict:
    """R² of s (n,) on the sources' log ratios (n, S), and each source's own Pearson r with s."""
    ok = np.isfinite(scores)
    s, X = scores[ok], ratios[ok]
    out = {"n_tokens": int(ok.sum()), "R2": float(1 - _residual(s, X).var() / s.var())}
    out.update({f"r {j}": float(np.corrcoef(s, X[:, j])[0, 1]) for j in range(X.shape[1])})
    return out


def partial_r(a: np.ndarray, b: np.ndarray, ratios: np.ndarray) -> tuple[float, float]:
    """Pearson r of two score vectors, and the same after the register fit is removed from both."""
    ok = np.isfinite(a) & np.isfinite(b)
    ra, rb = _residual(a[ok], ratios[ok]), _residual(b[ok], ratios[ok])
    return float(np.corrcoef(a[ok], b[ok])[0, 1]), float(np.corrcoef(ra, rb)[0, 1])
