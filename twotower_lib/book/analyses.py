"""What the analysis sections (03-06) compute from the probed cases: correlations with their
intervals and controls (the quality gap among them) in both score variants, over all tokens and
over words only, the register tests, the two ceilings, the POS tags of the vocabulary and the word
ICA of the reference case. Each function reads a section's context and calls the plain-argument
functions of `twotower_lib.analysis`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twotower_lib.book.probing import probe_reliability
from twotower_lib.book.probe_outputs import VARIANTS, load_controls, load_quality, same_config_pairs
from twotower_lib.book.sections import SectionContext, load_data
from twotower_lib.errors import UserError
from twotower_lib.run_names import case_name, model_of

if TYPE_CHECKING:
    import pandas as pd


def correlations(ctx: SectionContext, scores: dict, score_col: str = "score") -> pd.DataFrame:
    """Table 2 as a long table: every pair of `scores` over the profile's top_n most frequent tokens,
    with a bootstrap 95% CI that resamples validation documents and a permutation p-value, for one
    score variant (`score`: Eq. 4, log of mean p; `score_logmean`: the authors' mean of log p)."""
    from twotower_lib.analysis.table2 import CorrelationConfig, pairwise_correlations

    cfg = CorrelationConfig(n=ctx.profile.analysis.top_n, n_boot=ctx.profile.analysis.bootstrap, n_permutations=1000, progress=False,
                            score_col=score_col)
    return pairwise_correlations({k: r.table for k, r in scores.items()}, load_data(ctx).counts, cfg,
                                 doc_stats={k: r.doc_stats for k, r in scores.items()}).assign(variant=score_col)


def correlation_sentences(ctx: SectionContext, pairs: pd.DataFrame, same_config: list[tuple[str, str]]) -> str:
    """Section 03's result in two generated sentences: this build's same-configuration pairs against the
    paper's Bert-large pair, and its pairs of different models against Table 2's range."""
    from twotower_lib.book.paper_tables import TABLE2
    from twotower_lib.paper import SAME_CONFIG_R

    same = {frozenset(p) for p in same_config}
    is_same = [frozenset((a, b)) in same for a, b in zip(pairs["a"], pairs["b"])]
    mine, other = pairs[is_same], pairs[[not x for x in is_same]]
    lo, hi = min(TABLE2.values()), max(v for v in TABLE2.values() if v != SAME_CONFIG_R)
    text = f"**This build, over the top {ctx.profile.analysis.top_n} tokens.** "
    text += ("Same configuration, two seeds: " + "; ".join(f"{r.a} vs {r.b} r = {r.r:+.2f}" for r in mine.itertuples())
             + f" (the paper's Bert-large pair: {SAME_CONFIG_R:.2f}). ") if len(mine) else "No same-configuration pair. "
    if len(other):
        text += (f"Different models: {len(other)} pairs, median r = {other['r'].median():+.2f} (from {other['r'].min():+.2f} "
                 f"to {other['r'].max():+.2f}; the paper's Table 2: {lo:.2f} to {hi:.2f}).")
    return text + " One build is one draw per pair; the seed study above gives the spread."


def frequency_points(t4: pd.DataFrame) -> pd.DataFrame:
    """Table 4's last column as the frequency chapter's lead figure reads it (`charts.paper_and_ours`): per
    case, its Spearman rho with frequency rank and 95% interval, and the paper's value for its family."""
    import pandas as pd

    from twotower_lib.analysis.frequency import FREQUENCY
    from twotower_lib.book.paper_tables import paper_value

    rows = t4[(t4["b"] == FREQUENCY) | (t4["a"] == FREQUENCY)]
    out = []
    for r in rows.itertuples():
        case = r.a if r.b == FREQUENCY else r.b
        paper = paper_value(case, FREQUENCY, "table4")
        out.append({"row": case, "series": "ours", "ours": r.r, "ours_low": r.ci_low, "ours_high": r.ci_high,
                    "paper_low": paper, "paper_high": paper})
    return pd.DataFrame(out)


def side_by_side(by_variant: dict[str, pd.DataFrame], keys: tuple[str, ...] = ("a", "b")) -> pd.DataFrame:
    """Rows of the same pairs in both score variants, r and CI of each next to each other."""
    import pandas as pd

    parts = []
    for col, frame in by_variant.items():
        keep = [c for c in ("r", "ci_low", "ci_high") if c in frame.columns]
        parts.append(frame.set_index(list(keys))[keep].rename(columns=lambda c: f"{c} ({VARIANTS[col]})"))
    return pd.concat(parts, axis=1)


def text_ceilings(ctx: SectionContext, scores: dict, score_col: str = "score") -> pd.DataFrame:
    """Per same-configuration pair: each run's split-half reliability over the profile's top_n tokens and the
    ceiling sqrt(rel_a * rel_b) that finite validation text puts on their r (`uncertainty.text_ceiling`)."""
    from twotower_lib.analysis.uncertainty import text_ceiling

    return text_ceiling({k: r.table for k, r in scores.items()}, {k: r.doc_stats for k, r in scores.items()},
                        load_data(ctx).counts, same_config_pairs(ctx), ctx.profile.analysis.top_n,
                        score_col=score_col).assign(variant=score_col)


def ceilings(ctx: SectionContext, scores: dict, score_col: str = "score") -> pd.DataFrame:
    """Per same-configuration pair, in one score variant: r, the validation-text ceiling
    (`text_ceilings`) and the probe ceiling sqrt(rel_a * rel_b) from each run's probe-seed
    reliability (`probe_reliability`); a run outside the profile's reliability sample takes the lowest
    reliability measured on the sample (`probe reliability from` says which)."""
    import numpy as np

    text = text_ceilings(ctx, scores, score_col).rename(columns={"ceiling": "text ceiling"})
    pairs = same_config_pairs(ctx)
    if not pairs:
        return text
    rel = probe_reliability(ctx, scores)
    col = f"reliability ({VARIANTS[score_col]})"
    lowest = rel[col].min() if len(rel) else np.nan
    for side in ("a", "b"):
        text[f"probe reliability {side}"] = text[side].map(rel[col] if len(rel) else {}).fillna(lowest)
    own = text["a"].isin(rel.index) & text["b"].isin(rel.index)
    text["probe reliability from"] = np.where(own, "each run's own", f"the lowest of {', '.join(rel.index) or 'none'}")
    text["probe ceiling"] = np.sqrt(text["probe reliability a"].clip(lower=0) * text["probe reliability b"].clip(lower=0))
    return text[["variant", "a", "b", "n_tokens", "r", "text ceiling", "probe ceiling", "reliability_a", "reliability_b",
                 "probe reliability a", "probe reliability b", "probe reliability from"]]


def word_correlations(ctx: SectionContext, scores: dict, score_col: str = "score") -> pd.DataFrame:
    """Table 2's r (no intervals) over words only: WordPiece continuation pieces ("##s") and tokens of
    punctuation alone left out, then the profile's top_n most frequent of the rest. The paper's own
    Table 3 has a suffix group scoring +0.65 in Bert-large and -1.78 in GPT: such pieces alone can
    set the sign of a cross-type r."""
    import numpy as np

    from twotower_lib.analysis.table2 import CorrelationConfig, pairwise_correlations
    from twotower_lib.analysis.pos import is_continuation

    def words_only(table: pd.DataFrame) -> pd.DataFrame:
        piece = is_continuation(table["token"]) | ~table["token"].astype(str).map(lambda t: any(c.isalnum() for c in t))
        return table.assign(**{score_col: table[score_col].where(~piece, np.nan)})

    cfg = CorrelationConfig(n=ctx.profile.analysis.top_n, n_boot=0, n_permutations=0, progress=False, score_col=score_col)
    return pairwise_correlations({k: words_only(r.table) for k, r in scores.items()}, load_data(ctx).counts,
                                 cfg).assign(variant=score_col)


def quality_correlations(ctx: SectionContext, scores: dict, score_col: str = "score") -> pd.DataFrame:
    """The quality-gap control: each case's r with each model's better-vs-worse profile (a single-tower
    run's final weights against its last snapshot at or before half its training, scored by the same
    rule), with its CI. A high
    r says the case's s is largely "which tokens gain most as a model improves", whatever the towers do."""
    import pandas as pd

    rows = []
    for model, quality in load_quality(ctx).items():
        label = f"{model} quality gap"
        for case, art in scores.items():
            r = correlations(ctx, {case: art, label: quality}, score_col).iloc[0]
            rows.append({"quality of": model, **r.to_dict()})
    return pd.DataFrame(rows)


def control_correlations(ctx: SectionContext, pairs: pd.DataFrame, score_col: str = "score",
                         quality: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each control's correlation, computed like the trained same-configuration pair's, one row per control.

    `pairs` are the trained cases' correlations: the label-permutation control is the 97.5%
    quantile of r with the token labels of the same-configuration pair shuffled (its `perm_q975`).
    `quality` (`quality_correlations`, same variant) adds, per same-configuration pair of a model with
    a quality-gap control, the r that a shared quality profile alone would give: r(a, q) x r(b, q).
    """
    import pandas as pd

    rows = []
    for control, model, arts in load_controls(ctx):
        r = correlations(ctx, arts, score_col).iloc[0]
        rows.append({"control": control, "model": model, **r.to_dict()})
    for a, b in same_config_pairs(ctx) if quality is not None and len(quality) else []:
        by_case = quality[quality["quality of"] == model_of(a)].set_index("a")["r"]
        if a in by_case and b in by_case:
            rows.append({"control": "quality gap", "model": model_of(a), "a": a, "b": b, "variant": score_col,
                         "n_tokens": int(quality["n_tokens"].min()), "r": by_case[a] * by_case[b],
                         "note": f"the r a shared quality profile alone would give: r(a, quality) x r(b, quality) "
                                 f"= {by_case[a]:.2f} x {by_case[b]:.2f}"})
    if "permutation" in ctx.profile.analysis.controls:
        same = same_config_pairs(ctx)
        for row in pairs.itertuples():
            if (row.a, row.b) in same and hasattr(row, "perm_q975"):
                rows.append({"control": "permutation", "model": model_of(row.a), "a": row.a,
                             "b": f"{row.b} (labels shuffled)",
                             "n_tokens": row.n_tokens, "r": row.perm_q975, "variant": score_col,
                             "note": "97.5% quantile of r over 1000 shuffles of the token labels"})
    return pd.DataFrame(rows)


def register_tests(ctx: SectionContext, scores: dict, pairs: list[tuple[str, str]]) -> dict[str, pd.DataFrame]:
    """Does s follow the register (`analysis.register`)? Three tables over the profile's top_n tokens:
    `gaps` (primary minus secondary log-probability per source, for every case and control run),
    `fit` (per case and score variant: the R² of s on the sources' log frequency ratios, and each
    source's r), `pairs` (r and partial r once the register fit is removed, per pair and variant).
    Empty tables where the corpus has a single source."""
    import pandas as pd

    from twotower_lib.analysis.register import (partial_r, register_fit, source_log_ratios, source_token_counts,
                                                tower_gap_by_source)

    data = load_data(ctx)
    valid_sources = data.sources("valid")
    counts = source_token_counts(data)
    if counts.shape[1] < 2:
        return {"gaps": pd.DataFrame(), "fit": pd.DataFrame(), "pairs": pd.DataFrame()}
    runs = dict(scores)
    for _, _, arts in load_controls(ctx):
        runs.update(arts)
    gaps = pd.DataFrame({name: tower_gap_by_source(art.doc_stats, valid_sources)["gap"] for name, art in runs.items()}).T
    gaps.columns = [f"gap {c}" for c in gaps.columns]
    ids = top_token_ids(data, ctx.profile.analysis.top_n)
    ratios = source_log_ratios(counts).to_numpy()[ids]                          # (n, S)
    fit, rows = [], []
    for col, variant in VARIANTS.items():
        s = {name: art.table.set_index("token_id")[col].to_numpy()[ids] for name, art in scores.items()}
        for name, values in s.items():
            f = register_fit(values, ratios)
            fit.append({"case": name, "variant": variant, "n_tokens": f["n_tokens"], "R2": f["R2"],
                        **{f"r with {src}": f[f"r {j}"] for j, src in enumerate(counts.columns)}})
        for a, b in pairs:
            r, r_partial = partial_r(s[a], s[b], ratios)
            rows.append({"a": a, "b": b, "variant": variant, "r": r, "partial r": r_partial})
    return {"gaps": gaps, "fit": pd.DataFrame(fit), "pairs": pd.DataFrame(rows)}


def describe_register(tests: dict[str, pd.DataFrame], same: list[tuple[str, str]], strong: float = 0.2) -> str:
    """The register tests in words, every number from `tests` (Eq. 4's score): whether any trained
    case's towers win on different sources, the R² range, each same-configuration pair's r and
    partial r, and how the different-configuration pairs with |r| >= `strong` change."""
    gaps, fit, pairs = tests["gaps"], tests["fit"], tests["pairs"]
    if gaps.empty:
        return "The corpus has a single source, so there is no register to test."
    eq4 = fit[fit["variant"] == VARIANTS["score"]].set_index("case")["R2"]
    split = [name for name in eq4.index if (gaps.loc[name] > 0).any() and (gaps.loc[name] < 0).any()]
    lines = [("In no trained case is one tower better on one source and the other tower better on another: the "
              "gaps differ in size between sources, not in sign." if not split else
              f"In {', '.join(split)} one tower is better on some sources and the other on the rest."),
             f"The sources' log frequency ratios explain R² = {eq4.min():.2f} to {eq4.max():.2f} of the variance "
             f"of s (highest: {eq4.idxmax()}; lowest: {eq4.idxmin()})."]
    cross = []
    for a, b, r, partial in pairs[pairs["variant"] == VARIANTS["score"]][["a", "b", "r", "partial r"]].itertuples(index=False):
        if (a, b) in same:
            lines.append(f"Same configuration, {a} vs {b}: r = {r:.2f}, {partial:.2f} with register removed.")
        elif abs(r) >= strong:
            cross.append((abs(r), abs(partial)))
    if cross:
        lines.append(f"The {len(cross)} different-configuration pairs with |r| >= {strong}: mean |r| "
                     f"{sum(c[0] for c in cross) / len(cross):.2f}, {sum(c[1] for c in cross) / len(cross):.2f} "
                     "with register removed.")
    return " ".join(lines)


def sample_texts(data, split: str, n: int, seed: int = 0) -> list[str]:
    """A seeded sample of `n` documents of `split` (all if fewer), in corpus order, read in one pass."""
    import numpy as np

    total = len(data.documents(split))
    if total == 0:
        raise UserError(f"the prepared data at {data.path} has no {split!r} documents to sample")
    keep = set(np.random.default_rng(seed).permutation(total)[:n].tolist())
    return [t for i, t in enumerate(data.texts(split)) if i in keep]


def vocabulary_pos(ctx: SectionContext, data, tagger) -> pd.DataFrame:
    """Tag `pos_docs` training documents with `tagger` (from `analysis.pos.choose_tagger`) and give each token its
    majority UPOS: the table of `analysis.pos.majority_tags`, also saved in the section's output."""
    from twotower_lib.analysis.pos import vocabulary_pos as tag_vocabulary
    from twotower_lib.artifacts import atomic_write_bytes

    texts = sample_texts(data, "train", ctx.profile.analysis.pos_docs, seed=ctx.profile.data.seed)
    table = tag_vocabulary(texts, data.tokenizer, tagger)
    atomic_write_bytes(ctx.out / "vocabulary_pos.parquet", table.to_parquet(index=False))
    return table


def ica_starts_summary(ica) -> dict[str, Any]:
    """What the ICA's starts say about its answer: how many converged, the spread of their final losses,
    which start was kept, and how many of its components most starts find (stability >= 0.9)."""
    import numpy as np

    starts = ica.starts or [ica]
    losses = [r.loss[-1] for r in starts if r.converged]
    stability = ica.stability()
    return {"ICA starts converged": f"{len(losses)} of {len(starts)}",
            "loss spread over converged starts (nats)": round(float(max(losses) - min(losses)), 4) if losses else None,
            "start kept (0: W_0 = I)": ica.start,
            "components with stability >= 0.9": (f"{int((stability >= 0.9).sum())} of {len(stability)}"
                                                 if np.isfinite(stability).any() else "one start only")}


def top_token_ids(data, n: int):
    """Ids of the n most frequent tokens of the training split, special tokens left out (ties: lower id)."""
    import numpy as np

    from twotower_lib.preference import frequency_order

    counts = np.asarray(data.counts).copy()
    counts[list(data.special_ids.values())] = -1
    return frequency_order(counts)[: min(n, int((counts > 0).sum()))]


def ica_reference(ctx: SectionContext) -> str:
    """The case name of the profile's `ica_reference`; UserError if it is not one of the cases."""
    if ctx.profile.analysis.ica_reference not in ctx.profile.train.cases:
        raise UserError(f"ica_reference {ctx.profile.analysis.ica_reference!r} is not one of the cases {list(ctx.profile.train.cases)}; "
                        f"pick one with  -p analysis.ica_reference MODEL:SEED")
    model, seed = ctx.profile.analysis.ica_reference.split(":")
    return case_name(model, int(seed))


def word_ica(ctx: SectionContext, data):
    """Section 5.3's word vectors and their ICA, from the reference case's trained input embedding
    (`embedding_ica`). Returns (fitted WordICA, token ids of the distinct sampled tokens, their components (words,
    d), their occurrences in the sample, the PCA spectrum of every direction)."""
    from twotower_lib.analysis.ica import pca_spectrum
    from twotower_lib.models import load_embedding

    embedding = load_embedding(ctx.input_dir("01_training") / ica_reference(ctx))       # (vocab, E), float64
    fitted, token_ids, components, counts = embedding_ica(embedding, data, ctx.profile)
    return fitted, token_ids, components, counts, pca_spectrum(embedding[token_ids], counts)


def embedding_ica(embedding, data, profile):
    """The ICA of one input embedding as `profile` sets it: a seeded sample of `ica_tokens` token occurrences of
    the training split (whole blocks, special tokens left out) picks the rows, each occurrence one row; whitening
    PCA to d = `ica_dim` (0: the paper's share of the width, `analysis.ica.paper_dim`) and Amari ICA from
    `ica_starts` starts follow (`analysis.word_groups.fit_word_ica`; the converged start of highest likelihood).
    Returns (fitted WordICA, the distinct sampled token ids, their components (words, d), their occurrences)."""
    import numpy as np

    from twotower_lib.analysis.ica import ICAConfig, PCAConfig, paper_dim
    from twotower_lib.analysis.word_groups import fit_word_ica, sample_occurrences

    a = profile.analysis
    ids = sample_occurrences(data.train, a.ica_tokens, data.special_ids.values(), profile.data.seed)
    d = a.ica_dim or paper_dim(embedding.shape[1])
    fitted = fit_word_ica(embedding, ids, PCAConfig(d=d), ICAConfig(max_iter=5000, starts=a.ica_starts, seed=profile.data.seed))
    token_ids, counts = np.unique(ids, return_counts=True)
    return fitted, token_ids, fitted.transform(embedding[token_ids]), counts


def fig4_shuffle_markdown(test: dict) -> str:
    """`pos.tag_shuffle_test`'s result as section 04 shows it: per case the claims held with Eq. 3's primary, with the
    towers' roles swapped and in the better of the two, then their sum against the shuffled tags' in one sentence."""
    from twotower_lib.book.tables import markdown_table
    from twotower_lib.paper import CONTROL_QUANTILE, FIG4_CLAIM

    n = len(FIG4_CLAIM)
    table = markdown_table(["case", "with Eq. 3's primary", "roles swapped", "better of the two"],
                           ([r.run, f"{r.held}/{n}", f"{r.held_swapped}/{n}", f"{r.best}/{n}"]
                            for r in test["runs"].itertuples()))
    return (table + f"\nIn all, {test['observed']} claims hold in the cases' better orientations; with each case's "
            f"tags shuffled among its tokens, {test['null_mean']:.1f} on average and {test['null_high']:.0f} at the "
            f"{CONTROL_QUANTILE * 100:.0f}th percentile, so p = {test['p']:.2g} over {test['permutations']:,} "
            "shuffles." + (f" Shuffled only among tokens of about the same frequency ({test['frequency_bins']} bins of "
                           f"frequency rank), which keeps how tags go with frequency, the sum is "
                           f"{test['frequency_null_mean']:.1f} on average, p = {test['frequency_p']:.2g}: whether the "
                           "tags' sides are more than their tokens' frequency gives (reported beside; the verdict "
                           "reads the first p)." if "frequency_p" in test else "") + "\n")
