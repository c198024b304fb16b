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
# > "We find that, even though the language models start symmetrical, preference for certain
# > language functions emerges after training."
# > — He & Toyoizumi, Section 7
#
# The paper reports where training ended: two Bert-large runs with different seeds agree on which
# tokens each tower prefers (Table 2). It does not say when that agreement appears. This chapter
# follows it along training: runs of one configuration, differing only in the seed, save their
# weights at 0, 2^16, 2^17, … tokens; each snapshot is probed as in section 02, and two runs' scores
# are correlated as in section 03.
#
# :::{dropdown} Where the curves come from
# The curves take hours of CPU time, so they are computed once by `python -m studies.emergence --all`
# and committed (`results/emergence/`, each with its configuration, data hash, code version and
# packages); the study's report writes what this chapter shows into `results/emergence/book.json`,
# and this chapter reads it.
# :::

# %% tags=["parameters"]
profile = None   # None: $TWOTOWER_PROFILE, else cpu; or tiny | cpu-long | gpu | paper (twotower_lib.book.profiles)
runs_dir = None  # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The code that loads the section"}
import pandas as pd

from twotower_lib.book import publish, render, sections, study_parts

ctx = sections.open_section("07_emergence", globals())
render.enable()
part = study_parts.show  # the study's parts: Markdown, reader tables (HTML) and charts (Vega-Lite JSON)

# %% [markdown]
# How r depends on the towers' size, at one fixed budget of tokens, is the next page's question:
# {doc}`the size ladder <../book/ladder>`. This chapter follows r along training.

# %% [markdown]
# ## The result along training
#
# Each configuration trained with four seeds, at the end of its training: the distribution of r
# over its six seed pairs, the order-free strength |r|, and the same pairs before training (the
# untrained control), judged by the scorecard's rule against the paper's r at the end of its
# training. Only configurations measured with today's probe are judged (they come first); the others
# are shown as the earliest probe measured them.

# %% tags=["remove-input"]
part("EMERGENCE_RESULT")

# %% tags=["remove-input"]
part("EMERGENCE_CHART")

# %% [markdown]
# One line per configuration, one panel per tower family; the band runs from the lowest to the
# highest seed pair, and the dashed line is the paper's r at the end of its training. Only curves
# measured with today's probe are on it; those measured with the earliest probe, whose heads had not
# converged and whose values run higher, are on a chart of their own:

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The curves measured with the earliest probe"}
part("EMERGENCE_EARLIER_CHART")

# %% [markdown]
# :::{dropdown} Caveats
# 1. The earlier probe's curves (the chart just above; the sentence below names the probe of each; the
#    [changelog](../book/changelog.md) says what changed) cannot be compared with today's: read their r
#    as blurred by probe noise.
# 2. A snapshot at t tokens of a longer run is not a run that *ended* at t tokens: it has not
#    decayed its learning rate yet, and with a few hundred steps that can put it ahead.
# 3. The pairs of one configuration share runs (each run is in three of its six pairs), so the
#    range over pairs describes the seeds' spread; it is not six independent draws.
# :::
#
# **Re-run.** `python -m studies.emergence NAME` recomputes one configuration's curve (`--all`:
# every one, hours on 2 cores); `python -m twotower_lib run 07_emergence` rebuilds this chapter.

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Which probe measured each curve"}
part("EMERGENCE_PROBES_TEXT")

# %% tags=["hide-cell", "full-width"] mystnb={"code_prompt_show": "Every configuration of the study"}
part("EMERGENCE_STUDY_TABLE")

# %% [markdown]
# :::{dropdown} Which tower is primary?
# The sign of r rests on Eq. 3: in each run the *primary* tower is the one with the higher mean
# probability. When a run's two towers are almost equally good, that choice hangs on a tiny gap, and
# two runs that split the vocabulary alike can still name opposite towers primary: the same division
# then reads as a *negative* r. So read |r| as the strength of the shared division and the sign as
# Eq. 3's choice. A run whose towers are nearly equally good has barely divided the vocabulary, and
# over every trained point |r| rises with the smaller of the two runs' tower gaps (points of one
# configuration share runs, so this describes; it is not a test).
# :::

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "|r| against the smaller of the two runs' tower gaps (chart)"}
part("EMERGENCE_GAP_CHART")

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The tower margins of every point"}
part("EMERGENCE_MARGIN_TABLE")

# %% [markdown]
# :::{dropdown} How much r moves between seeds
# Per snapshot of each configuration with several seeds: the mean r over its pairs, their standard
# deviation and range, and the mean order-free strength.
# :::

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "How much r moves between seeds, per snapshot"}
part("EMERGENCE_SPREAD_TABLE")

# %% [markdown]
# :::{dropdown} Measured again with the current probe
# Three configurations were trained again from the same seeds and probed with the current probe:
# the four GPT seeds of `gpt-cpu-v8192-2M-4seeds`, and the two Bert-base pairs of
# `bert-cpu-small-v8192-16M` and `-s3s4`, which share no run. Per
# pair, r under each probe (Eq. 4, and the authors' mean of log p where recorded), the order-free
# strength and the validation-text ceiling; for the Bert-base pairs, along training, with the
# smaller of the two runs' tower gaps.
# :::

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Measured again with the current probe: per pair"}
part("EMERGENCE_COMPARED_TABLE")

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Measured again: the Bert-base pairs along training"}
part("EMERGENCE_ALONG_TABLE")

# %% [markdown]
# :::{dropdown} Width, depth, vocabulary and tower family
# These configurations share the data, the batch, the paper's learning-rate schedule and the probe:
# BERT at the default's Bert-large size, then rows that each change one thing (the default's
# Bert-base size, twice as wide, twice as deep, half the vocabulary), then GPT and ELMo at the
# default size. Each cell is the mean r over the configuration's seed pairs at the snapshot nearest
# that many tokens; the last column is the order-free strength at the last of them. Most rows are one
# seed pair, so this ranks nothing firmly; the {doc}`decisions page <../book/decisions>` reads each
# row with its numbers.
# :::

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Width, depth, vocabulary and tower family"}
part("EMERGENCE_SIZES_TABLE")

# %% [markdown]
# :::{dropdown} The learning-rate schedule at the default's budgets
# A run of the default profile takes only a few hundred optimiser steps (section 01 lists them).
# Configurations with the same budget and four seeds each vary the paper's schedule: a three times
# higher peak, and the paper's peak held after warm-up. Per schedule, at the end: mean r over the six
# pairs with its spread, the runs' mean validation loss and, where measured, the validation-text
# ceiling. GPT first, then BERT.
# :::

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The learning-rate schedules: GPT"}
part("EMERGENCE_SCHEDULES_TABLE")

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The learning-rate schedules: BERT"}
part("EMERGENCE_BERT_SCHEDULES_TABLE")

# %% [markdown]
# A rate decayed to 0 can leave a run's two towers almost equally good, and such runs agree with no
# one. Why every profile keeps the paper's schedule is on the {doc}`decisions page <../book/decisions>`.
# Every point of every curve is in `results/emergence/*.parquet`.

# %% [markdown]
# ## This profile's own pairs, and the other profiles
#
# The same-configuration pairs of this book's profile (section 03), then every profile run end to
# end and published (`python -m twotower_lib publish --profile NAME`, committed in
# `results/profiles/` with its code version and packages): when each ran, for how long, and each of
# its same-configuration pairs against the highest control of the pair's own model.

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "This profile's own same-configuration pairs"}
own = sections.upstream_summary(ctx, "03_correlations")
pd.DataFrame(own.get("same_config", [])).assign(profile=ctx.profile.name)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Every published profile: when it ran, for how long"}
published = publish.load_published(exclude=ctx.profile.name)
publish.overview_by_profile(published)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Every published profile's same-configuration pairs against its controls"}
publish.same_config_table(published)

# %% [markdown]
# ## Summary

# %% tags=["remove-input"]
part("EMERGENCE_SUMMARY")

# %% tags=["remove-cell"]
ctx.finish(parts=sorted(k for k in study_parts.load()[0] if k.startswith("EMERGENCE_")));
