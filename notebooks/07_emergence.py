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
# # When the preference emerges
#
# The paper reports where training ended: after about a day on six GPUs per case, two runs of
# Bert-large with different seeds agree on which tokens each tower prefers (r = 0.94). It does
# not say when that agreement appears. This section follows it along training: runs of one
# configuration, differing only in the seed, save their weights at 0, 2^16, 2^17, ... tokens;
# each is probed at every snapshot exactly as in section 02, and the preference scores of two
# runs are correlated over the most frequent tokens as in section 03 (each curve records its N).
#
# Three things to keep in mind when reading the curves:
#
# - the point at 0 tokens is the *untrained* control: probing heads on random, frozen towers;
# - a snapshot taken at t tokens of a longer run is not a run that *ended* at t tokens: its
#   steps were taken at a higher learning rate and it has not decayed yet. With the few hundred
#   steps of a CPU run this can put it ahead, not behind; each curve's last point is the end of a
#   run;
# - the 95% interval resamples validation documents: it covers the noise of scoring on finite
#   text, not the spread between seeds. That spread is measured directly where a configuration
#   was trained with four seeds (six pairs, below), and it is much larger.
#
# - **each curve was measured with the probe of its time**, named in the table below (column
#   `probe`, and the sentence after it). Most were measured with the earliest probe: heads trained
#   for a fixed three epochs on raw tower states, and BERT scored with the training corruption
#   (80/10/10) instead of [MASK] at every scored position. Section 02 shows what that probe missed
#   (its heads had not converged, and two probes of the same run differing only in the head seed
#   agreed far less than the current probe's); read those curves' r as blurred by probe noise, and
#   their BERT points as partly "which tower copies its input". A configuration measured again with
#   the current probe keeps its earlier curve beside it (`results/emergence/earlier-probe/`), and
#   the two are compared below. Across checkpoints that share runs, the relations below are
#   associations, not causes.
#
# The curves take hours of CPU time, so they are computed once by
# `python -m studies.emergence --all` and committed (`results/emergence/`, each with a
# manifest of the configuration, data hash, code version and packages); this notebook reads them.

# %% tags=["parameters"]
profile = None           # None: $TWOTOWER_PROFILE, else cpu; or tiny | cpu-long | gpu | paper (twotower_lib.book.profiles)
runs_dir = None          # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/

# %% tags=["hide-cell"]
import pandas as pd
from IPython.display import Markdown, display

from twotower_lib.book import charts, publish, sections
from twotower_lib.book import emergence_curves as em

ctx = sections.open_section("07_emergence", globals())
charts.enable()
curves = em.load_curves()
study = em.study_table(curves)
study

# %%
Markdown("Measured with " + em.probes_used(curves) + ".")

# %% [markdown]
# ## Cross-seed r against tokens seen
#
# One line per configuration (the mean r over its seed pairs; the band runs from the lowest to the
# highest pair, the spread over seeds), one panel per tower family, tokens on a log scale (the
# untrained point at 0 tokens is in the table below). Hover for the values.

# %%
spread = em.seed_spread(curves[curves["tokens"] > 0])
charts.curve_with_band(spread, "tokens", "r", "r_min", "r_max", "config",
                       title="Same-configuration, different-seed correlation: mean over seed pairs and their range",
                       x_title="tokens seen (log scale)", y_title="Pearson r", log_x=True, panel="model_type")

# %% [markdown]
# The same curves with word frequency partialled out (the correlation of the two runs' scores
# after removing what log-frequency predicts in each): how much of the agreement is "both
# runs treat frequent and rare tokens differently", and how much is specific to the token.

# %%
charts.curve_with_band(em.seed_spread(curves[curves["tokens"] > 0], "r_partial_logfreq"), "tokens", "r", "r_min", "r_max",
                       "config", title="Cross-seed r with log-frequency partialled out (mean over seed pairs, range)",
                       x_title="tokens seen (log scale)",
                       y_title="partial Pearson r", log_x=True, panel="model_type")

# %% [markdown]
# ## Which tower is primary?
#
# The sign of r rests on Eq. 3: in each run the *primary* tower is the one with the higher mean
# probability over all validation tokens. When the two towers of a run are almost equally good,
# that choice hangs on a tiny gap, and a run whose towers have split the vocabulary the same way
# as the other run's can still call the "other" tower primary: then the same pattern shows up as
# a *negative* r. The table gives each run's relative gap (primary minus secondary mean p, over
# the primary's) and which physical tower won it; where the gaps are tiny, read |r| as the
# strength of the shared pattern and the sign as unresolved.
#
# `r_physical` correlates the runs by physical tower index instead (tower 0 minus tower 1 in
# both). The two towers are built alike and initialised independently, so nothing makes one
# seed's tower 0 resemble the other seed's tower 0 more than its tower 1: which physical towers
# correspond is one coin flip per pair, made early in training and then kept, so `r_physical`
# keeps its sign along a pair and the sign itself means nothing. Its *size* is the order-free
# strength of the agreement; r additionally asks Eq. 3 to pick corresponding towers in both runs.

# %%
curves[["config", "pair", "tokens", "r", "r_physical", "margin_a", "margin_b", "primary_a", "primary_b"]].round(4)

# %% [markdown]
# The gaps also say how *strongly* two runs can agree. A run whose towers are almost equally good
# has barely divided the vocabulary between them, and it cannot share a division it has not made:
# over every trained point, |r| rises with the smaller of the two runs' gaps. BERT's towers end
# much closer to each other than GPT's, which is one reason its agreement is weaker and its sign
# unstable. (Points of one configuration share runs, so the correlation describes; it is not a test.)

# %%
charts.gap_scatter(em.gap_points(curves))

# %%
em.margin_relation(curves).round(3)

# %% [markdown]
# ## How much r moves between seeds
#
# The bootstrap interval above holds both trained models fixed. To see how much r depends on
# *which* two seeds were trained, a configuration with four seeds gives six pairs (not
# independent: every run is in three of them). Per snapshot: the mean r over the pairs, its
# standard deviation and range, and the mean order-free strength |r_physical|.

# %%
spread = em.seed_spread(curves)
spread[spread["pairs"] > 1].round(3)

# %% [markdown]
# ### The four GPT seeds, measured again
#
# The four-seed GPT configuration at 2M tokens (`gpt-cpu-v8192-2M-4seeds`) was trained again from
# the same seeds and probed with the current probe. Per seed pair at the runs' end, r under each
# probe in both score variants (Eq. 4's log of mean p, the authors' mean of log p, recorded by the
# current curve only), the order-free strength |r_physical| and the validation-text ceiling; the
# last two rows are the mean and SD over the six pairs, the uncertainty that decides reproduction.
# The sentence below says what else differs between the two measurements.

# %%
Markdown(em.probe_comparison_note("gpt-cpu-v8192-2M-4seeds"))

# %%
em.probe_comparison("gpt-cpu-v8192-2M-4seeds").round(3)

# %% [markdown]
# ### The Bert-base pairs at 16M tokens, measured again
#
# The two Bert-base pairs trained for 16M tokens (`bert-cpu-small-v8192-16M`, seeds 1 and 2, and
# `-s3s4`, seeds 3 and 4: no run shared) were the study's one BERT setting above r = 0.6 with the
# earliest probe, and `cpu-long` trains that setting for it. Both were trained again from the same
# seeds on the current corpus preparation and probed with the current probe. Because Eq. 3 can
# flip r's sign when a run's better tower changes, each pair is followed along training: r under
# each probe at every snapshot of either curve, the current curve's mean-of-log r, and the smaller of
# its two runs' tower gaps (near 0, which tower is primary is a coin flip).

# %%
for config in ("bert-cpu-small-v8192-16M", "bert-cpu-small-v8192-16M-s3s4"):
    display(Markdown(em.probe_comparison_note(config)))
    display(em.probe_comparison_along(config).round(3))

# %% [markdown]
# ## Width, depth, vocabulary and tower family
#
# The configurations below share the data, the batch, the paper's learning-rate schedule and
# the probe. BERT at the default's Bert-large size (2 layers of width 128 per tower, a vocabulary
# of 8,192), and BERT rows that each change one thing: narrower and shallower (the default's
# Bert-base size), twice as wide, twice as deep, half the vocabulary; then GPT and ELMo at the
# default size. Each cell is the mean r over the configuration's seed pairs at the snapshot
# nearest that many tokens; the last column is the order-free strength |r_physical| at the last of
# those points.

# %%
by_size = em.measured(curves, ["bert-cpu-v8192", "bert-cpu-small-v8192", "bert-cpu-wide-v8192",
                                       "bert-cpu-deep-v8192", "bert-cpu-v4096", "gpt-cpu-v8192", "elmo-cpu-v8192"])
em.size_table(curves, by_size).round(3)

# %% [markdown]
# Read the BERT rows with the seed spread in mind: where four BERT seeds were trained, r moved
# between seed pairs far more than the intervals above (table above), and every other BERT row is
# one pair. So this table ranks nothing firmly; what a single pair does show is its own course along
# training, and the order-free strength |r_physical| separates a weak agreement from a sign flipped
# by Eq. 3. The {doc}`decisions page <../book/decisions>` reads each row with its numbers (computed
# from these curves): the deep pair's flip, the wide and small-vocabulary rows, and ELMo, whose
# validation loss is not comparable with the others' (every position is predicted from both sides).

# %% [markdown]
# ## The learning-rate schedule at the default's budgets
#
# A GPT run of the default profile takes only a few hundred optimiser steps (its token budget in
# batches of `micro_batch` blocks; section 01 lists them). The paper's peak learning rate, 1e-3, warmed up over 6% of them and decayed
# linearly to 0, leaves such a short run under-trained: the snapshot at 1M tokens of the 4M run,
# which took most of its steps near the peak, had a lower validation loss than every run that
# ended at 1M. Configurations with the same budget and four seeds each (six pairs) vary the
# schedule: a three times higher peak, and the paper's peak held constant after warm-up. The table
# gives the end of each: mean r over the six pairs with its spread, the runs' mean validation
# loss, and the validation-text ceiling (section 03) where it was measured.

# %%
schedules = em.measured(curves, ["gpt-cpu-v8192-1M", "gpt-cpu-v8192-1M-lr3e-3", "gpt-cpu-v8192-1M-const"])
em.run_ends(curves, schedules).round(3)

# %% [markdown]
# Compare each schedule's mean r and its range over the six pairs with the paper's schedule, at
# their validation losses: whether a lower loss brings a higher agreement at this budget is what
# the table answers (the decisions page states the answer with its numbers).
#
# BERT is different. At the Bert-base size and 4M tokens, the 16M pair's snapshot at 4M (still
# near the peak rate) agreed more than the runs of the same seeds that had decayed to 0 by 4M,
# at the same validation loss. Holding the peak rate after warm-up, with four seeds again:

# %%
bert_schedules = em.measured(curves, ["bert-cpu-small-v8192", "bert-cpu-small-v8192-4M-const",
                                             "bert-cpu-v8192-2M-const"])
em.run_ends(curves, bert_schedules).round(3)

# %% [markdown]
# Read the held rate's rows against the decayed ones above, and against the tower gaps below: a
# rate decayed to 0 can leave a run's two towers almost equally good, and such runs agree with no
# one. Why every profile keeps the paper's schedule, with the numbers, is on the
# {doc}`decisions page <../book/decisions>`.

# %% [markdown]
# ## Where each configuration crosses r = 0.6
#
# The default `cpu` profile was to be the cheapest configuration and budget whose same-seed pairs
# reach r ≥ 0.6 over the 1000 most frequent tokens, with the whole book in an hour on 2 cores.
# Two findings of this study decided it. First, at this scale BERT's agreement depends on the
# seeds: the six pairs of the four-seed Bert-base-sized configuration scatter widely (table
# above), and the default Bert-large size changes sign along training. GPT's did not: every
# pair of four GPT seeds agrees, with the same sign, at the default's 1M tokens, as the earliest
# probe measured it (the current probe, at 2M tokens, finds one seed of four with its towers'
# roles reversed: the comparison above). Second, the
# hour: GPT trains slower per token than BERT here (it predicts every position over the whole
# vocabulary, BERT 15% of them) and every probe costs minutes, so 1M tokens per GPT run is what
# fits next to the paper's five cases and the controls. The default therefore adds a second GPT
# seed to the paper's five cases and reports both same-configuration pairs against their controls
# (section 03 and the scorecard). Beyond the hour, BERT at the Bert-base size trained for 16M
# tokens crossed 0.6 on two seed pairs that share no run (`bert-cpu-small-v8192-16M` and
# `-s3s4`) as the earliest probe measured them, which is why the overnight `cpu-long` profile
# trains a Bert-base pair at that budget. Measured again with the current probe, neither pair ends
# above 0.6: both agree most at their 4M snapshot and less from there on (the comparison above).
# `cpu-long`'s run end to end, with the controls, is at the end of this section. The
# {doc}`decisions page <../book/decisions>` gives each of these choices with its numbers; the lines
# below say what each configuration reaches and what its trend predicts.

# %%
crossing = em.first_crossing(curves, 0.6)
crossing

# %%
Markdown(em.describe(curves, crossing, 0.6) + "\n\n" + em.profile_note(ctx.profile))

# %% [markdown]
# ## What reaching r = 0.6 would take
#
# Where a curve still rises, a straight line through its last three points of |r| against
# log(tokens) says how many tokens would reach 0.6 *if the trend held*. That is a guess, not a
# law (the default-size curve rose and then fell). The table converts it into hours of training
# per run on this machine at the speed the study measured, and compares it with the token budget
# per model of the `gpu` and `paper` profiles (how many times over they cover it).

# %%
from twotower_lib.book.profiles import get_profile

budgets = {name: get_profile(name).tokens_for("bert-large") for name in ("gpu", "paper")}
em.budget_table(curves, 0.6, budgets=budgets).round(2)

# %% [markdown]
# ## Every point
#
# `r_mean_log` is r under the authors' score variant (mean of log p); curves measured before it was
# recorded leave it empty.

# %%
curves[["config", "pair", "tokens", "r", "ci_low", "ci_high", "r_mean_log", "p_value", "r_partial_logfreq", "ceiling",
        "val_loss_a", "val_loss_b", "head_loss_a", "head_loss_b", "probe"]].round(3)

# %% [markdown]
# ## This profile's own run
#
# The same-configuration pair of the profile whose book this is (section 03), for comparison
# with the study's curves.

# %%
own = sections.section_summary(ctx, "03_correlations")
pd.DataFrame(own.get("same_config", [])).assign(profile=ctx.profile.name).round(3)

# %% [markdown]
# ## Other profiles, run end to end
#
# The study's points are pairs of runs. A profile is the whole book: its cases, controls and
# analyses. The longer profiles cannot be re-run every time the book is built, so where one was
# run to the end its results were published (`python -m twotower_lib publish --profile NAME`,
# committed in `results/profiles/` with the code version and packages). Below: when each ran,
# for how long, its scorecard counts, and each of its same-configuration pairs against the
# highest control of the pair's own model. The verdict uses the scorecard's rule (paper r = 0.94).

# %%
published = publish.load_published(exclude=ctx.profile.name)
publish.overview(published)

# %%
publish.same_config_table(published).round(3)

# %%
ctx.finish(configs=sorted(curves["config"].unique()), crossing=crossing.reset_index().to_dict("records"));
