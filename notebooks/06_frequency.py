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
# # Preference and word frequency
#
# > "Figure 8: Word preference score v.s. word index which is sorted in descending order." — Section 8.1
# > (with Table 4: "Pair-wise Spearman's rank correlation among Bert-large, ELMo, GPT, and frequency
# > rank, calculated on the most frequent 5000 words.")
#
# Could the preference score be a disguised word frequency, one tower simply being better at
# frequent words? The paper's supplementary Section 8.1 answers no: Fig. 8 shows the scores in
# frequency order without a strong trend, and in Table 4 the Spearman correlation of each model's
# scores with frequency rank is weak, while the models agree with one another far more. This chapter
# repeats both and adds the partial correlation of every pair of cases with log-frequency removed.

# %% tags=["parameters"]
profile = None             # None: $TWOTOWER_PROFILE, else cpu; or tiny | cpu-long | gpu | paper (twotower_lib.book.profiles)
runs_dir = None            # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/
train_cases = None         # None: the profile's cases, 'model:seed' comma-separated
analysis_top_n = None      # None: the profile's N, the most frequent tokens compared (paper: 5000)
analysis_bootstrap = None  # None: the profile's number of bootstrap resamples

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The code that loads the section"}
from IPython.display import HTML, Markdown

from twotower_lib.book import analyses, charts, paper_tables, probe_outputs, render, scorecard, sections
from twotower_lib.analysis.table2 import CorrelationConfig, correlation_matrix
from twotower_lib.analysis.frequency import fig8_data, partial_correlations, table4, table4_grid

ctx = sections.open_section("06_frequency", globals())
render.enable()
ctx.parameter_table()

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The computation: scores, counts and Table 4"}
scores = probe_outputs.load_scores(ctx)
tables = {k: r.table for k, r in scores.items()}
counts = sections.load_data(ctx).counts
config = CorrelationConfig(n=ctx.profile.analysis.top_n, method="spearman", n_boot=ctx.profile.analysis.bootstrap,
                           n_permutations=1000, progress=False)
t4 = table4(tables, counts, config, doc_stats={k: r.doc_stats for k, r in scores.items()})
scorecard.record_frequency(ctx, t4)

# %% [markdown]
# ## The result
#
# Each case's Spearman rho with frequency rank over the top-N tokens, with its 95% interval
# (validation documents resampled), against the paper's value for its model family.

# %%
charts.paper_and_ours(analyses.frequency_points(t4), "Spearman rho with frequency rank",
                      f"Table 4's last column: each case against frequency (top {ctx.profile.analysis.top_n} tokens)",
                      domain=(-1, 1))

# %% tags=["remove-input"]
Markdown(charts.PAPER_AND_OURS_KEY + "\n\n" + scorecard.verdicts_box(ctx))

# %% [markdown]
# **Caveats.**
#
# 1. A weak correlation with frequency alone proves nothing: scores that are pure noise have it too.
#    The test that matters is whether the agreement between models survives with frequency removed
#    (the partial correlations below).
# 2. The paper's Table 4 has one Bert-large run and does not say which; both of ours are held against it.
# 3. Rarer tokens are scored from fewer occurrences, so rho can change with N (the grid below gives
#    the profile's N and the paper's).

# %% tags=["remove-input"]
Markdown(ctx.rerun_markdown())

# %% [markdown]
# ## Fig. 8: scores in frequency order

# %% tags=["hide-input"]
fig8 = fig8_data(tables, counts, n=min(1000, ctx.profile.analysis.top_n))
charts.score_vs_rank(fig8.rename(columns={"run": "case", "count": "frequency"}))

# %% [markdown]
# ## Table 4: Spearman correlation, with frequency rank as one more column
#
# Each cell: our rho over the top-N tokens, its 95% interval (validation documents resampled;
# the frequency rank is fixed) and the paper's value under it. The paper's Table 4 has one
# Bert-large run and does not say which; both of ours are held against it.

# %% tags=["full-width"]
HTML(paper_tables.matrix_html(paper_tables.compare({"score": t4}, "table4"), [*tables, paper_tables.FREQUENCY],
                                           table="table4", caption="Table 4, ours [95% CI] and the paper's"))

# %% tags=["hide-cell", "full-width"] mystnb={"code_prompt_show": "Every number behind the table"}
# Every number behind the table (permutation p-values, bootstrap bias, the number of tokens)
t4.round(4)

# %% tags=["hide-output"]
# The same rho as a picture (folded: the table above gives each value)
charts.correlation_heatmap(correlation_matrix(t4), title=f"Spearman rho over the top {ctx.profile.analysis.top_n} tokens")

# %% [markdown]
# The same Spearman rho without intervals, in both score variants (the paper's Eq. 4 and the
# authors' code) and at two N: the profile's and the paper's 5000 (or every scored token, if
# fewer). The agreement between runs, and with frequency, can change with N: the rarer tokens
# added at larger N are scored from fewer occurrences.

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The same rho at two N, in both score variants"}
grid = table4_grid(tables, counts, [ctx.profile.analysis.top_n, 5000]).rename(columns=probe_outputs.VARIANTS, level="variant")
grid.round(3)

# %% [markdown]
# ## Beyond the paper: agreement with frequency partialled out
#
# Pearson r of each pair of cases before (`r`) and after (`r_partial`) removing the linear effect
# of log-frequency from both score vectors, with the 95% bootstrap interval of the partial one.

# %% tags=["hide-cell", "full-width"] mystnb={"code_prompt_show": "Pearson r before and after partialling out frequency"}
partial_correlations(tables, counts, CorrelationConfig(n=ctx.profile.analysis.top_n, n_boot=ctx.profile.analysis.bootstrap,
                                                       n_permutations=1000, progress=False),
                     doc_stats={k: r.doc_stats for k, r in scores.items()}).round(3)

# %% tags=["remove-cell"]
ctx.finish(top_n=ctx.profile.analysis.top_n, frequency_rho={f"{v}, {n}": grid.xs("frequency rank", level="b")[(v, n)].to_dict()
                                                  for v, n in grid.columns});

# %% [markdown]
# ## Summary

# %% tags=["remove-input"]
Markdown(scorecard.chapter_summary(ctx))
