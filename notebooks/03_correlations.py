# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Correlation of preference scores
#
# > "[W]e conclude the pair-wise correlation among the five cases we've experimented with in Table 2.
# > In light of the stable positive correlation, it can be concluded that there exists a stable
# > pattern of preference scores among two-tower language models." — Section 5.1
#
# If the preference of a token for one tower were an accident of initialisation, the score vectors $s$ of two
# independently trained models would be unrelated. The paper's central evidence (Section 5.1, Table 2, Fig. 3)
# is that they are not: two seeds of Bert-large correlate closely, other pairs less (its values beside ours below).
#
# :::{dropdown} What this chapter adds to the paper's Table 2
# This section computes the same correlations between the cases of the chosen profile, over its
# `analysis.top_n` most frequent tokens, and adds what the paper does not report: a 95% confidence interval
# (validation documents resampled), a permutation p-value (token labels shuffled), and three
# controls: the same pairs before training, independently trained single-tower pairs, and
# shuffled token labels.
#
# The ELMo here is the bidirectional one the paper's text describes; the page "The paper, its
# code, and this companion" measures the released code's ELMo beside it.
# :::

# %% tags=["parameters"]
profile = None                  # None: $TWOTOWER_PROFILE, else cpu; or tiny | cpu-long | gpu | paper (twotower_lib.book.profiles)
runs_dir = None                 # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/
train_cases = None              # None: the profile's cases, 'model:seed' comma-separated
analysis_top_n = None           # None: the profile's N, the most frequent tokens compared (paper: 5000)
analysis_bootstrap = None       # None: the profile's number of bootstrap resamples
analysis_controls = None        # None: the profile's controls (untrained, independent, permutation)
analysis_control_models = None  # None: the profile's; models whose pair gets the untrained and independent controls

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The code that loads the section"}
import itertools

import pandas as pd
from IPython.display import HTML, Markdown

from twotower_lib.book import analyses, charts, paper_tables, probe_outputs, render, scorecard, sections, study_parts
from twotower_lib.analysis.table2 import correlation_matrix, fig3_data

ctx = sections.open_section("03_correlations", globals())
render.enable()
ctx.parameter_table()

# %% tags=["remove-input"]
Markdown(ctx.rerun_markdown())

# %% [markdown]
# ## The spread over seeds

# %% tags=["remove-input"]
study_parts.show("SEEDS_SECTION", ctx.profile.name)

# %% tags=["remove-input"]
study_parts.show("SEEDS_STRIPS_CHART", ctx.profile.name)

# %% [markdown]
# :::{dropdown} How to read the chart; caveats; the two folded tables below
# Each mark is one pair of seeds (top lane) or one control pair (the lanes below) at its |r|, the statistic
# the verdict judges: a circle where r is positive, a cross where negative (one run's towers' roles swapped
# against the other's, as Eq. 3 names them). The red line is the paper's value (for a family the paper trained
# once, its Bert-large pair's, which the verdict holds it against).
#
# 1. Pairs that share a run are not independent (each seed is in three of a family's six pairs), so
#    the central range describes the seed pairs; it is not a confidence interval.
# 2. The sign of r rests on Eq. 3's choice of the primary tower; where a run's towers are nearly tied
#    that choice is a coin flip, so the verdict reads |r| and the sign answers the orientation question
#    alone (the result box's last column; the family table below).
# 3. The models are far smaller and see far fewer tokens than the paper's (the front page gives both
#    scales): a division that needs the paper's training may not have formed here.
#
# The first folded table gives, per family: r in both score variants, the order-free |r| beside the
# controls' |r| (a null's |r| is not zero), the share of pairs whose sign depends on the order rule,
# and the runs' tower margins. The second gives every negative same-configuration pair, and what made
# it negative: a *near tie* (one run's two order rules name different primary towers, so the sign is
# the rule's choice) or a *mirrored* division (both rules agree in both runs: the towers' roles really
# are swapped).
# :::

# %% tags=["hide-cell", "full-width"] mystnb={"code_prompt_show": "Per family: both score variants, |r| beside the controls', sign and margins"}
study_parts.show("SEEDS_FAMILY_TABLE", ctx.profile.name)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Every negative same-configuration pair, and what made it negative"}
study_parts.show("SEEDS_SIGN_FLIP_TABLE", ctx.profile.name)

# %% [markdown]
# ## Table 2: pair-wise correlation
#
# Pearson r between the preference vectors of every pair of cases, with its 95% interval, beside the
# paper's value (the summary at the end reads it in sentences).
#
# :::{dropdown} The interval, the p-value and the two score variants
# The bootstrap resamples validation *documents* (tokens within a document are not independent); the
# permutation p-value shuffles token labels. Both score variants are computed: the paper's Eq. 4 (the log
# of the mean probability) and the authors' public code (the mean of the log-probability); the scorecard
# judges the paper's. The interval says how much the finite validation text moves r; it says nothing
# about seeds — the spread over seed pairs (above) is the uncertainty that decides whether a result
# reproduces. An interval marked † does not contain its estimate: resampled text attenuates r, and the
# basic interval's correction for that can move it past the estimate.
# :::

# %% tags=["hide-input", "full-width"]
scores = probe_outputs.load_scores(ctx)
pairs_by = {col: analyses.correlations(ctx, scores, col) for col in probe_outputs.VARIANTS}
pairs = pairs_by["score"]
quality_by = {col: analyses.quality_correlations(ctx, scores, col) for col in probe_outputs.VARIANTS}
control_by = {col: analyses.control_correlations(ctx, pairs_by[col], col, quality_by[col]) for col in probe_outputs.VARIANTS}
control = control_by["score"]
table2 = paper_tables.compare(pairs_by, "table2", probe_outputs.same_config_pairs(ctx), control)
HTML(paper_tables.matrix_html(
    table2, list(scores), caption=f"Table 2, ours (Eq. 4) [95% CI] and the paper's, top {ctx.profile.analysis.top_n} tokens"))

# %% [markdown]
# :::{dropdown} The folded tables below: the same pairs seen five ways
# 1. One pair per row, in both score variants, with the highest control each pair is held against
#    (its own model's for a same-configuration pair, any model's otherwise) and the scorecard's
#    verdict on |r| of Eq. 4's score. A pair the paper has no row for (a second seed of another model) is
#    judged against the paper's same-configuration r.
# 2. The same pairs over words only: WordPiece continuation pieces ("##s", "##ed") and tokens of
#    punctuation alone left out, the `analysis.top_n` most frequent of the rest (no intervals). The
#    paper's own Table 3 has a suffix group scoring high in Bert-large and low in GPT: such pieces
#    alone can set the sign of a cross-type r.
# 3. Every number behind the two tables (permutation p-values, bootstrap bias, the number of tokens).
# 4. Each case's tower order by both rules, with its margin. Every r here is signed by Eq. 3's primary
#    tower (the higher mean probability); where the authors' rule (the higher mean log-probability)
#    names the other tower, every pair that run is in changes sign with the rule.
# 5. The matrix as a heat map.
# :::

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "One pair a row: both score variants, the highest control, the verdict"}
HTML(paper_tables.pairs_html(table2, {c: f"ours, {v}" for c, v in probe_outputs.VARIANTS.items()}))

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The same pairs over words only"}
words_by = {col: analyses.word_correlations(ctx, scores, col) for col in probe_outputs.VARIANTS}
pd.concat([analyses.side_by_side(pairs_by, ("a", "b"))[[f"r ({v})" for v in probe_outputs.VARIANTS.values()]],
           analyses.side_by_side(words_by, ("a", "b")).rename(columns=lambda c: c.replace("r (", "r, words only ("))],
          axis=1).round(3)

# %% tags=["hide-cell", "full-width"] mystnb={"code_prompt_show": "Every number behind the two tables"}
# Every number behind the two tables (permutation p-values, bootstrap bias, the number of tokens)
pd.concat(pairs_by.values(), ignore_index=True).round(4)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Each case's tower order by both rules"}
probe_outputs.tower_order(scores).round(4)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The matrix as a heat map"}
charts.correlation_heatmap(correlation_matrix(pairs), title=f"Pearson r over the top {ctx.profile.analysis.top_n} tokens (Eq. 4)")

# %% [markdown]
# ## Fig. 3: the scores themselves
#
# Every case's score for the most frequent tokens, ordered by the last same-configuration run's (the paper's: by
# Bert-large run 2); folded, since the seed study decides.

# %% tags=["hide-input", "hide-output"] mystnb={"code_prompt_show": "Fig. 3, one build's curves: {type}"}
reference = probe_outputs.same_config_pairs(ctx)[-1][1] if probe_outputs.same_config_pairs(ctx) else next(iter(scores))
fig3 = fig3_data({k: r.table for k, r in scores.items()}, sections.load_data(ctx).counts, reference,
                 n=min(1000, ctx.profile.analysis.top_n))
counts = scores[reference].table.set_index("token_id")["train_count"]
charts.score_lines(fig3.rename(columns={"run": "case"}).assign(frequency=fig3["token_id"].map(counts)), reference=reference)

# %% [markdown]
# ## Controls: is it cooperative training?
#
# Word frequency and the data alone can make two models' scores correlate: controls (none in the paper) say how
# high r gets without the paper's mechanism.
#
# :::{dropdown} The controls and the rule that reads them
# - **untrained**: the same-configuration pair probed before any training (heads on random, frozen towers);
# - **independent**: two single-tower models trained separately with the same budget, scored as a
#   pair by the same rule, and correlated with another such pair;
# - **permutation**: the 97.5% quantile of r between the same-configuration runs after shuffling
#   the token labels of one of them (the permutation p-value in Table 2 comes from the same shuffles).
#
# - **quality gap** (where the profile runs it): if s were only "which tokens gain most as a model
#   gets better", two runs would correlate whenever their towers differ in quality, with no division
#   of labour. A single-tower run scored against its own snapshot half way through training, by the
#   same rule, gives that better-vs-worse profile q; each case's r with q is in the table after
#   this one, and the control's r for a same-configuration pair is r(a, q) · r(b, q), what a shared
#   quality profile alone would give.
#
# The trained same-configuration correlation counts as reproduced only where its 95% interval of |r|
# lies above every control's |r| (the scorecard applies this rule, to Eq. 4's score). A build runs the
# controls its profile names (`analysis.controls`); the default runs the permutation alone, and its
# verdicts hold every family's pairs against the seed study's controls (the strip plots above: every
# family's control pairs, at the same sizes, budgets and probe).
#
# After this build's own control tables, three more: an earlier build of the `cpu` profile ran these
# controls for GPT and Bert-large (`-p analysis.control_models gpt,bert-large`, committed in
# `results/bert-controls/`). Where a case's r with its model's quality profile is high, what two runs
# agree on is associated with which tokens gain most as the model gets better, not necessarily a
# division of labour.
# :::

# %% tags=["hide-cell", "full-width"] mystnb={"code_prompt_show": "This build's controls"}
analyses.side_by_side(control_by, ("control", "model", "a", "b")).round(3) if len(control) else control

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "This build's cases against their model's quality profile"}
analyses.side_by_side(quality_by, ("quality of", "a")).round(3) if len(quality_by["score"]) else "no quality-gap control at this profile"

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "An earlier build with Bert-large's controls: its probe"}
study_parts.show("BERT_CONTROLS_PROBE")

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "An earlier build with Bert-large's controls: the controls"}
study_parts.show("BERT_CONTROLS_TABLE")

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "An earlier build with Bert-large's controls: the quality profile"}
study_parts.show("BERT_CONTROLS_QUALITY_TABLE")

# %% [markdown]
# ## Two ceilings: text and probe
#
# No correlation between two runs can exceed what each measurement allows: where r lies far below both
# ceilings (per pair, folded below), what separates the two runs is their training.
#
# :::{dropdown} How each ceiling is measured
# - **Text ceiling.** Each run's scores are measured on a finite validation text. Splitting the
#   validation documents into random halves, scoring each half and correlating the halves gives
#   each run's split-half reliability (stepped up to the whole text); √(rel_a · rel_b) bounds r.
#   It holds the probing heads fixed, so it says nothing about the heads.
# - **Probe ceiling.** A sample of the cases was probed again with heads that differ only in their
#   seed (section 02): √(rel_a · rel_b) of the two runs' probe-seed reliabilities bounds r (a run
#   outside the sample takes the sample's lowest). It does not see the error of the heads' finite
#   training data (the appendix "How the probe was validated" budgets every source).
#
# :::

# %% tags=["hide-cell", "full-width"] mystnb={"code_prompt_show": "Every pair's text and probe ceilings"}
ceiling = pd.concat([analyses.ceilings(ctx, scores, col) for col in probe_outputs.VARIANTS], ignore_index=True)
ceiling.round(3)

# %% [markdown]
# ## Does s read the register?
#
# If the towers split the corpus's *registers* (the paper's: BookCorpus fiction and Wikipedia), a token's s
# would follow its source, a different claim from the paper's: three tests and training on each source alone.
#
# :::{dropdown} The three register tests
# - **Per-source tower gap**: each run's primary minus secondary mean log-probability on each
#   source's validation text (nats per position). A register split shows as a gap that changes sign.
# - **Register fit**: per token, how much more frequent it is in each source than in the others
#   (smoothed log ratio of relative frequencies in the training text); the R² of s on these
#   ratios over the top tokens, and each source's r.
# - **Partial r**: each pair's r once the register fit is removed from both scores. What survives is
#   agreement beyond register.
#
# These are associations over tokens; training on each source alone is the direct test, the last two
# folded tables: the same-configuration pairs of this profile trained and probed on each source by
# itself (`-p data.corpus registry:books` and the others), beside the mixed corpus, committed once in
# `results/register/single_source.json`. One seed pair per corpus, each read against its own ceilings.
# If the towers split the registers, the pairs would agree less there. Over seeds, the size ladder's
# register rungs train one family on each source alone with its untrained controls (the last folded
# paragraph; the ladder page).
# :::

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The register tests in words"}
register = analyses.register_tests(ctx, scores, list(itertools.combinations(scores, 2)))
Markdown(analyses.describe_register(register, probe_outputs.same_config_pairs(ctx)))

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Per-source tower gap"}
register["gaps"].round(3)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Register fit"}
register["fit"].round(3)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Partial r of every pair"}
register["pairs"].pivot_table(index=["a", "b"], columns="variant", values=["r", "partial r"], sort=False).round(3) \
    if len(register["pairs"]) else register["pairs"]

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Each source alone: one seed pair per corpus"}
study_parts.show("REGISTER_TABLE")

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Each source alone, in words"}
study_parts.show("REGISTER")

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Each source alone over seeds (the ladder's register rungs)"}
study_parts.show("LADDER_REGISTER")

# %% tags=["remove-cell"]
scorecard.record_correlations(ctx, pairs, control, probe_outputs.same_config_pairs(ctx), pairs_by["score_logmean"])
scorecard.record_register(ctx)
same = pairs[[(a, b) in probe_outputs.same_config_pairs(ctx) for a, b in zip(pairs["a"], pairs["b"])]]
ctx.finish(pairs=len(pairs), top_n=ctx.profile.analysis.top_n,
           same_config=same[["a", "b", "r", "ci_low", "ci_high"]].to_dict("records"),
           same_config_logmean=pairs_by["score_logmean"].merge(same[["a", "b"]])[["a", "b", "r", "ci_low", "ci_high"]]
           .to_dict("records"),
           controls=control[["control", "model", "r"]].to_dict("records") if len(control) else [],
           ceilings=ceiling.to_dict("records"),
           words_only=words_by["score"][["a", "b", "r"]].to_dict("records"),
           quality=quality_by["score"][["quality of", "a", "r", "ci_low", "ci_high"]].to_dict("records")
           if len(quality_by["score"]) else [],
           register_fit=register["fit"].to_dict("records"), register_pairs=register["pairs"].to_dict("records"));

# %% [markdown]
# ## Summary
#
# The paper's evidence for a stable preference is that independently trained models' scores
# correlate. What this chapter measured, generated from the runs above:

# %% tags=["remove-input"]
Markdown(analyses.correlation_sentences(ctx, pairs, probe_outputs.same_config_pairs(ctx)) + "\n\n"
         + scorecard.chapter_summary(ctx))
