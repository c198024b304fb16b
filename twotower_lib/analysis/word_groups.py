"""Word groups of Section 5.3: token occurrences -> ICA components (`fit_word_ica`), and the groups
they define (a word belongs to component j's group when |y_j| > 2.5): Figs. 5-7 and Table 3.

How the whitening and the unmixing are computed, and how the paper's ambiguities are resolved:
`analysis.ica`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from twotower_lib.paper import FIG5_WITHIN_1, FIG6
from twotower_lib.analysis.ica import ICAConfig, ICAResult, PCAConfig, PCAWhitening, as_matrix, fit_ica, fit_whitening
from twotower_lib.errors import UserError
from twotower_lib.preference import frequency_order


# ---------------------------------------------------------------------- word vectors -> components


@dataclass
class WordICA:
    """The fitted map from an embedding vector to its d independent components."""

    whitening: PCAWhitening
    ica: ICAResult
    scale: np.ndarray           # (d,) multiplies y: unit variance, positive long tail (or ones)

    def transform(self, x: np.ndarray) -> np.ndarray:
        """(n, D) vectors -> (n, d) components."""
        return (self.whitening.transform(x) @ self.ica.unmixing.T) * self.scale


def sample_occurrences(blocks: np.ndarray, n_tokens: int, special_ids, seed: int) -> np.ndarray:
    """`n_tokens` token occurrences of a seeded sample of whole blocks (rows of `blocks`, in corpus
    order), special tokens left out: the rows Section 5.3 stacks, one per occurrence."""
    blocks = np.asarray(blocks)
    if blocks.ndim != 2 or len(blocks) == 0:
        raise UserError(f"blocks must be a non-empty (n_blocks, seq_len) array, got shape {blocks.shape}")
    order = np.random.default_rng(seed).permutation(len(blocks))
    n_blocks = max(1, -(-n_tokens // blocks.shape[1]))
    ids = blocks[np.sort(order[:n_blocks])].ravel()
    return ids[~np.isin(ids, list(special_ids))][:n_tokens]


def fit_word_ica(embedding: np.ndarray, sample_token_ids: np.ndarray, pca: PCAConfig = PCAConfig(),
                 config: ICAConfig = ICAConfig()) -> WordICA:
    """Section 5.3 end to end: one row per token occurrence, whiten (Eq. 5), unmix (Eq. 6-7).

    Rows of one token are identical, so each distinct token is used once with its occurrence count
    as weight: the same estimate as stacking every occurrence, at the cost of the distinct tokens.
    """
    embedding = as_matrix(embedding, "embedding matrix")
    ids = np.asarray(sample_token_ids)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise UserError("sample_token_ids must be a non-empty 1-D integer array of token ids "
                        f"(one per occurrence), got dtype {ids.dtype} and shape {ids.shape}")
    if ids.min() < 0 or ids.max() >= embedding.shape[0]:
        raise UserError(f"sample_token_ids hold ids outside [0, {embedding.shape[0]}) of the embedding "
                        f"(min {ids.min()}, max {ids.max()}); the sample and the model disagree on the vocabulary")
    tokens, counts = np.unique(ids, return_counts=True)
    x = embedding[tokens]                                           # (distinct, D)
    whitening = fit_whitening(x, pca, counts)
    p = whitening.transform(x)                                      # (distinct, d)
    result = fit_ica(p, config, counts)
    scale = np.ones(pca.d)
    if config.standardize:
        y = p @ result.unmixing.T                                   # (distinct, d)
        v = counts / counts.sum()
        mean = v @ y
        std = np.sqrt(v @ (y - mean) ** 2)
        skew = v @ (y - mean) ** 3
        scale = np.where(skew < 0, -1.0, 1.0) / std
    return WordICA(whitening=whitening, ica=result, scale=scale)



# ---------------------------------------------------------------------- groups: Figs. 5-7, Table 3


def fig5_within_1(components: np.ndarray, token_ids: np.ndarray, tokens: list[str], train_counts: np.ndarray) -> float:
    """Fig. 5's statistic: the share of its heatmap's values (`fig5_data`: the 500 most frequent words) within
    [-1, 1] (each component at unit variance; a Gaussian puts `paper.GAUSSIAN_WITHIN_1` there)."""
    return float(fig5_data(components, token_ids, tokens, train_counts)["value"].abs().le(1).mean())


def fig5_data(components: np.ndarray, token_ids: np.ndarray, tokens: list[str], train_counts: np.ndarray,
              top_n: int = 500) -> pd.DataFrame:
    """The heatmap of Fig. 5: the top_n most frequent words x d components, long format.

    components: (words, d) rows for `token_ids`; tokens: the vocabulary strings indexed by token id.
    Columns: word_index (0 = most frequent), token_id, token, component, value.
    """
    components, token_ids = _check_components(components, token_ids)
    counts = _counts_for(train_counts, token_ids)
    order = frequency_order(counts, token_ids)[:top_n]
    d = components.shape[1]
    return pd.DataFrame({
        "word_index": np.repeat(np.arange(len(order)), d),
        "token_id": np.repeat(token_ids[order], d),
        "token": np.repeat(np.asarray(tokens, dtype=object)[token_ids[order]], d),
        "component": np.tile(np.arange(d), len(order)),
        "value": components[order].ravel(),
    })


def membership(components: np.ndarray, threshold: float = 2.5) -> np.ndarray:
    """(words, d) bool: word in component j's group when |y_j| > threshold."""
    return np.abs(np.asarray(components)) > threshold


# The paper's Fig. 5 and Fig. 6 shares (`paper`), by what they measure.
PAPER_SHARES = {"values within [-1, 1] (Fig. 5)": ("share_within_1", FIG5_WITHIN_1),
                "words in exactly one group (Fig. 6)": ("share_one", FIG6["share_one"]),
                "words in no group (Fig. 6)": ("share_none", FIG6["share_none"])}


def paper_points(summaries: dict[str, dict[str, float]], within_1: float | None = None) -> pd.DataFrame:
    """Fig. 5's and Fig. 6's shares against the paper's (`charts.paper_and_ours`): one row per share, one
    series per set of words counted (`summaries`: name -> `fig6_data`'s summary); `within_1` replaces
    the Fig. 5 share (e.g. over the words Fig. 5 shows)."""
    rows = []
    for label, (key, paper) in PAPER_SHARES.items():
        for name, summary in summaries.items():
            ours = within_1 if key == "share_within_1" and within_1 is not None else summary[key]
            rows.append({"row": label, "series": name, "ours": ours, "paper_low": paper, "paper_high": paper})
    return pd.DataFrame(rows)


def fig6_data(components: np.ndarray, threshold: float = 2.5) -> tuple[pd.DataFrame, dict[str, float]]:
    """Fig. 6: how many words belong to k groups, plus the paper's three numbers.

    Returns (histogram with columns n_groups, n_words, share; summary with share_one, share_none,
    mean_groups, share_within_1 -- the last is Fig. 5's "about 80% of values within [-1, 1]").
    """
    y = np.asarray(components)
    if y.ndim != 2 or y.shape[0] == 0:
        raise UserError(f"components must be a non-empty (words, d) matrix, got shape {y.shape}")
    k = membership(y, threshold).sum(axis=1)
    hist = np.bincount(k, minlength=y.shape[1] + 1)
    last = max(int(k.max()), 1)
    table = pd.DataFrame({"n_groups": np.arange(last + 1), "n_words": hist[: last + 1],
                          "share": hist[: last + 1] / len(k)})
    summary = {"share_one": float((k == 1).mean()), "share_none": float((k == 0).mean()),
               "mean_groups": float(k.mean()), "share_within_1": float((np.abs(y) <= 1).mean()),
               "n_words": int(len(k))}
    return table, summary


def group_members(components: np.ndarray, token_ids: np.ndarray, tokens: list[str], train_counts: np.ndarray,
                  threshold: float = 2.5) -> pd.DataFrame:
    """Every (group, member) pair; the data of Fig. 7 (word lists or clouds sized by frequency).

    Columns: component, token_id, token, value, count (training frequency), typicality (1 = the
    member with the largest |y_j|).
    """
    components, token_ids = _check_components(components, token_ids)
    counts = _counts_for(train_counts, token_ids)
    word, comp = np.nonzero(membership(components, threshold))
    df = pd.DataFrame({"component": comp, "token_id": token_ids[word],
                       "token": np.asarray(tokens, dtype=object)[token_ids[word]],
                       "value": components[word, comp], "count": counts[word]})
    df["abs"] = df["value"].abs()
    df = df.sort_values(["component", "abs", "token_id"], ascending=[True, False, True], kind="stable")
    df["typicality"] = df.groupby("component").cumcount() + 1
    return df.drop(columns="abs").reset_index(drop=True)


def group_names(members: pd.DataFrame, n_words: int = 5) -> pd.Series:
    """Each group's name: its n_words most typical members, comma-separated (Table 3's first column)."""
    top = members[members["typicality"] <= n_words]
    return top.groupby("component")["token"].agg(lambda s: ", ".join(s)).rename("group")


def table3(members: pd.DataFrame, tables: dict[str, pd.DataFrame], score_col: str = "score",
           min_scored: int = 5) -> pd.DataFrame:
    """Table 3: the mean preference score of each group's members per run, with its rank.

    Rows: groups with at least `min_scored` scored members in every run. Columns: component, group
    (five most typical words), n_members, then `<run>` (mean score) and `<run> rank` (1 = highest
    mean among these groups) for each run.
    """
    if members.empty:
        raise UserError("no word belongs to any group (no |y_j| above the threshold); "
                        "lower the threshold or check the ICA input")
    if not tables:
        raise UserError("table3 needs at least one preference table")
    out = pd.DataFrame({"n_members": members.groupby("component").size()})
    out.insert(0, "group", group_names(members))
    keep = pd.Series(True, index=out.index)
    for run, table in tables.items():
        if score_col not in table.columns or "token_id" not in table.columns:
            raise UserError(f"preference table of run {run!r} lacks column 'token_id' or {score_col!r}")
        indexed = table.set_index("token_id")
        if "token" in indexed.columns:
            seen = members["token_id"].map(indexed["token"])
            if (seen.notna() & (seen != members["token"])).any() or seen.isna().any():
                raise UserError(f"the preference table of run {run!r} and the ICA words disagree on the "
                                f"vocabulary; use the run whose embedding the ICA was fitted on, or one "
                                f"trained with the same tokenizer")
        s = members["token_id"].map(indexed[score_col])
        s = s[np.isfinite(s.to_numpy(dtype=float))]
        grouped = s.groupby(members.loc[s.index, "component"])
        out[run] = grouped.mean()
        keep &= grouped.size().reindex(out.index, fill_value=0) >= min_scored
    out = out[keep]
    if out.empty:
        raise UserError(f"no group has {min_scored} or more scored members in every run; "
                        f"lower min_scored or use more scored tokens")
    for run in tables:
        out[f"{run} rank"] = out[run].rank(ascending=False, method="min").astype(int)
    return out.sort_values(f"{next(iter(tables))} rank").reset_index()


def table3_agreement(table: pd.DataFrame, runs: list[str]) -> pd.DataFrame:
    """Spearman correlation of the groups' mean scores between runs (the paper: group ranks agree)."""
    missing = [r for r in runs if r not in table.columns]
    if missing or len(runs) < 2:
        raise UserError(f"table3_agreement needs at least two runs that are columns of the table; missing {missing}")
    return table[runs].corr(method="spearman")



# ---------------------------------------------------------------------- helpers


def _check_components(components: np.ndarray, token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    components = np.asarray(components)
    token_ids = np.asarray(token_ids)
    if components.ndim != 2 or token_ids.shape != (components.shape[0],):
        raise UserError(f"components (words, d) and token_ids (words,) disagree: shapes "
                        f"{components.shape} and {token_ids.shape}")
    return components, token_ids


def _counts_for(train_counts: np.ndarray, token_ids: np.ndarray) -> np.ndarray:
    counts = np.asarray(train_counts)
    if token_ids.size and (token_ids.max() >= counts.shape[0] or token_ids.min() < 0):
        raise UserError(f"token id {token_ids.max()} is outside the training counts (length {counts.shape[0]}); "
                        f"the counts and the vocabulary disagree")
    return counts[token_ids]

