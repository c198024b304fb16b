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
# Could the preference score be a disguised word frequency, one tower simply being better at
# frequent words? The paper's supplementary Section 8.1 answers no: Fig. 8 shows the scores in
# frequency order without a strong trend, and in Table 4 the Spearman correlation of each model's
# scores with frequency rank is only 0.16–0.22, while the models agree with one another far more
# (0.56–0.93).
#
# This section repeats both and adds the partial correlation of every pair of cases with
# log-frequency removed: if the agreement between two models survived only through frequency,
# it would vanish here.

# %% tags=["parameters"]
profile = "cpu"          # tiny | cpu | cpu-long | gpu | paper (see twotower_lib.profiles)
runs_dir = None          # where runs/<profile>/ lives; None: $TWOTOWER_RUNS or ./runs
cases = None             # None: the profile's cases, "model:seed" comma-separated
top_n = None             # None: the profile's N, the most frequent tokens compared (paper: 5000)
bootstrap = None         # None: the profile's number of bootstrap resamples

# %%
import pandas as pd

from twotower_lib import charts, pipeline, scorecard
from twotower_lib.analysis.correlation import CorrelationConfig, correlation_matrix
from twotower_lib.analysis.frequency import fig8_data, partial_correlations, table4

ctx = pipeline.open_section("06_frequency", globals())
charts.enable()
pd.DataFrame({"value": {k: str(v) for k, v in ctx.parameters.items()}}).rename_axis(f"profile {ctx.profile.name}")

# %% [markdown]
# ## Fig. 8: scores in frequency order

# %%
scores = pipeline.load_scores(ctx)
tables = {k: r.table for k, r in scores.items()}
counts = pipeline.load_data(ctx).counts
fig8 = fig8_data(tables, counts, n=min(1000, ctx.profile.top_n))
charts.score_vs_rank(fig8.rename(columns={"run": "case", "count": "frequency"}))

# %% [markdown]
# ## Table 4: Spearman correlation, with frequency rank as one more column

# %%
config = CorrelationConfig(n=ctx.profile.top_n, method="spearman", n_boot=ctx.profile.bootstrap,
                           n_permutations=1000, progress=False)
t4 = table4(tables, counts, config, doc_stats={k: r.doc_stats for k, r in scores.items()})
t4.round(3)

# %%
charts.correlation_heatmap(correlation_matrix(t4), title=f"Spearman rho over the top {ctx.profile.top_n} tokens")

# %% [markdown]
# ## Beyond the paper: agreement with frequency partialled out
#
# Pearson r of each pair of cases before (`r`) and after (`r_partial`) removing the linear effect
# of log-frequency from both score vectors, with the 95% bootstrap interval of the partial one.

# %%
partial_correlations(tables, counts, CorrelationConfig(n=ctx.profile.top_n, n_boot=ctx.profile.bootstrap,
                                                       n_permutations=1000, progress=False),
                     doc_stats={k: r.doc_stats for k, r in scores.items()}).round(3)

# %%
scorecard.record_frequency(ctx, t4)
ctx.finish(top_n=ctx.profile.top_n);
