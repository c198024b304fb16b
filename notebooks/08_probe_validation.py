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
# # Appendix: the probe's validation studies
#
# Every number in this book is read through probing heads, so the heads are checked before their
# scores are believed. The method is stated once on the page "How the probe was validated"; this
# appendix shows the committed measurements behind each of its choices (`results/probe/`, each file
# with the command that made it): which head, in which coordinates, trained on how many positions, and
# how far from its optimum. Every number on this page is read from those files; how the probe reached
# its current form, and what each change did to the book's numbers, is in the changelog appendix.
# Each study's headline table is shown; its per-run and per-pair tables are folded under "Show output".

# %% tags=["parameters"]
profile = None   # None: $TWOTOWER_PROFILE, else cpu (only its name is shown; the studies are committed)
runs_dir = None  # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The code that loads the section"}
from twotower_lib.book import render, sections, study_parts

part = study_parts.show  # a study's table, chart or text, as its report wrote it (`python -m studies.probe book`)

ctx = sections.open_section("08_probe_validation", globals())
render.enable()

# %% [markdown]
# ## The error budget
#
# How far each source of error moves the default profile's GPT same-configuration pair, in units of
# r, each read from a committed study (the table says which).

# %%
part("ERROR_BUDGET_CHART")

# %%
part("ERROR_BUDGET")

# %% [markdown]
# ## The head: a linear read-out
#
# *Probe-seed reliability* is the agreement of two head sets trained on the same frozen features that
# differ only in their seed (`studies/probe/reliability.py`, `results/probe/reliability.json`; runs
# `gpt-s1` and `bert-base-s1`, the same validation text). Each recipe is trained twice; the table gives
# its reliability and its validation loss. The linear read-out (a head whose output vectors are the frozen
# input embedding: a concave likelihood) is the recipe whose two seeds agree most.

# %%
part("PROBE_RELIABILITY")

# %% [markdown]
# A replicate is a second probe only if nothing of the first set's training depends on it. Each head set has
# its own optimiser and schedule (`probe.training.train_heads`); the same runs probed with both sets on one
# schedule, and on their own, show what sharing did (`studies/probe/replicate_schedule.py`,
# `results/probe/replicate_schedule.json`).

# %%
part("PROBE_REPLICATE_SCHEDULE")

# %% [markdown]
# ## The coordinates: whitened features
#
# Reliability is not optimality: a stalled optimiser is as reproducible as a converged one. Training
# the same linear heads on *whitened* features (folded back into heads on the features as they are)
# changes only the coordinates the optimiser works in, so a converged probe gives the same scores both
# ways. The first table compares every case of the default profile probed both ways
# (`studies/probe/compare_versions.py`, `results/probe/whitening_cases.json`); the second, each recipe
# trained longer (`results/probe/whitening.json`). Where the two parametrisations disagree, at least
# one is not at its optimum; since the likelihood is concave, the lower validation loss marks the head
# closer to it.

# %% tags=["hide-output", "full-width"]
part("PROBE_CHANGE")

# %%
part("PROBE_WHITENING")

# %% [markdown]
# ### Against a head defined by its objective
#
# :::{dropdown} What the three tables compare
# Experiments on the frozen `gpt-s1` (`studies/probe/optimum_experiments.py`, one file each in
# `results/probe/optimum/`, each with its command). A recipe `A+refinedN` is `A`'s heads taken on by
# N full-batch L-BFGS iterations toward the minimum of the mean cross-entropy plus a ridge
# (`optimum.refine_head`; `@R`: with ridge R): a head defined by an objective rather than by where an
# optimiser stopped. The first table gives, per recipe and tower, the head's held-out loss and its
# *certificate* on its own training positions (`optimum.certificate`): at the optimum of a linear head
# every token's predicted count equals its observed count, so the relative gaps over tokens seen at
# least 20 times, and the preconditioned gradient's norm, say how far the head is from it. The second
# table compares recipes that differ in one thing only (the start, or the half of the positions seen);
# the third every two recipes of an experiment. Two starts refined to one objective value give one
# answer; the recipe whose scores lie nearest that answer is the default (whitened AdamW), and its
# remaining distance from it is the optimiser's row of the error budget.
# :::

# %% tags=["hide-output"]
part("PROBE_OPTIMUM_RECIPES")

# %% tags=["hide-output"]
part("PROBE_OPTIMUM_COUNTERPARTS")

# %% tags=["hide-output"]
part("PROBE_OPTIMUM_AGREEMENT")

# %% [markdown]
# ### Does the recipe move the between-run correlations?
#
# What the book reads is the correlation *between* runs. The default probe against the defined head
# (its heads refined toward the objective above), on the four runs of the default profile's two
# same-configuration pairs at the default's training positions (`studies/probe/compare_versions.py`,
# `results/probe/defined_cases.json`): first per case, then every two cases under each probe. The
# difference between a pair's r under the two is an error of the estimator, beside the text and
# probe-seed ceilings. One run per case and one probe seed.

# %% tags=["hide-output"]
part("PROBE_DEFINED")

# %% tags=["hide-output"]
part("PROBE_DEFINED_PAIRS")

# %% [markdown]
# More probe data is the other way toward the optimum: the default probe with four times the training
# positions (`--train-positions 800000`) on the GPT pair (`results/probe/positions_800k_cases.json`).

# %% tags=["hide-output"]
part("PROBE_800K_PAIRS")

# %% [markdown]
# ### Where r stops moving with the probe's training data
#
# The same two runs probed on a GPU with a second head seed at sixteen times the default's positions
# (`studies/probe/positions.py`, `results/probe/positions_cases.json`), and a GPU probe at the
# default's positions beside the CPU's (`gpu-200k`: the device is not what changes). The first table
# gives the pair's r at each size, the second each run's agreement with its largest probe. The
# probe-seed reliability is a ceiling on the optimiser's noise, not on the error of the heads' finite
# training data; the gap between the two is what these tables measure.

# %% tags=["hide-output"]
part("PROBE_POSITIONS_PAIRS")

# %% tags=["hide-output"]
part("PROBE_POSITIONS_RUNS")

# %% [markdown]
# Is that error noise of the probe's data, or a bias of heads trained on little of it? Two independent
# draws of positions (`--seed 1`, `--seed 2`: each its own blocks and head start) tell them apart. If
# the small probes were the large one plus independent noise, two draws that agree at r would each
# agree with an exact probe at √r, better than with each other; where they agree with the largest probe
# only about as well as with each other, part of a small probe's error is shared by every probe of its
# size, a bias that only more positions show. The tables give every two probings of each run (Eq. 4),
# then each run's and each pair's values.

# %% tags=["hide-output"]
part("PROBE_POSITIONS_AGREEMENT")

# %% tags=["hide-output"]
part("PROBE_NOISE_RUNS")

# %% tags=["hide-output"]
part("PROBE_NOISE_PAIRS")

# %% [markdown]
# The Bert-large pair and Table 2's GPT–Bert-large pairs, each run probed with the most positions
# measured for it (`results/probe/positions_largest.json`): how far the same-configuration and the
# cross-type pairs move when the heads see more text.

# %% tags=["hide-output"]
part("PROBE_LARGEST_PAIRS")

# %% [markdown]
# ## Probe recipes on the same runs
#
# Each recipe the probe has had, on the default profile's GPT pair (`results/probe/recipes.json`;
# `python -m studies.probe.compare_recipes` regenerates it): fixed epochs on raw tower states; the
# converged probe on raw states or on the joint LayerNorm's slice; the tied head, with and without a
# cool-down; the default (the linear read-out with an averaged cool-down); and the recipe of the
# authors' released code (`ProbeConfig.as_released`). The single-tower run `gpt-k1-s1` gives each
# recipe's shortfall (`head_minus_cooperative` where `towers` is 1: what the heads fail to read out of a
# tower the decoder reads completely). Per run and recipe: time, epochs, the best head against the
# cooperative model and the probe-seed reliability; then per recipe the two runs' correlation, and how
# far the recipes agree on one run. The minutes were measured beside other jobs and compare nothing;
# `benchmarks/bench_probe.py` times recipes side by side.

# %% tags=["hide-output"]
part("PROBE_RECIPES_RUNS")

# %% tags=["hide-output"]
part("PROBE_RECIPES_PAIRS")

# %% tags=["hide-output"]
part("PROBE_RECIPES_ACROSS")

# %% [markdown]
# Three probes timed side by side on the same runs in one process on idle cores
# (`benchmarks/bench_probe.py`, `results/probe/bench_probe.log`, whose header names the configurations
# and the commit): minutes, epochs, and the best head's validation loss minus the cooperative model's.
# One head seed per probe here.

# %% tags=["hide-output"]
part("PROBE_BENCHMARK")

# %% [markdown]
# ## The dtype the probe computes in
#
# The default profile's Bert-large pair, trained in fp32, probed on one CPU in fp32, in bf16, and in bf16
# with fp32 scoring logits (`studies/probe/precision.py`, `results/probe/precision.json`): the pair's
# correlation in each, then how well each run's scores agree between dtypes. Since the dtype moves the
# scores, the probe's `auto` dtype is fp32 on every CPU.

# %% tags=["hide-output"]
part("PROBE_PRECISION_PAIRS")

# %% tags=["hide-output"]
part("PROBE_PRECISION_RUNS")

# %% [markdown]
# ## Summary
#
# - The head is a linear read-out on whitened features, trained until its held-out loss stops improving
#   and then through an averaged cool-down: the read-out is the recipe whose head seeds agree most, the
#   whitened coordinates the ones whose heads land nearest the head its objective defines.
# - Its own error is measured in three parts — the optimiser's (against the defined head), the probe
#   data's (against probes with more positions) and the validation text's (a document bootstrap) — and
#   set in the error budget beside the spread over training seeds; the budget names the largest.

# %%
ctx.finish()
