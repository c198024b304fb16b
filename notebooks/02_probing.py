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
# # Probing and preference scores
#
# After cooperative training the embedding and both towers are frozen, and for each tower
# separately a new output head is trained on that tower's states alone (the paper's Fig. 2).
# Each head gives the probability of the correct token at every validation position (Eq. 2).
# The tower with the higher mean probability is called the primary tower (Eq. 3), and each
# vocabulary token $a$ gets the preference score
#
# $$ s_a = \log \bar p_{1a} - \log \bar p_{2a}, $$
#
# the log of the primary tower's mean probability of $a$ over $a$'s occurrences, minus the
# secondary tower's (Eq. 4). The authors' public code averages log-probabilities instead; both
# are in the artifact (`score` and `score_logmean`), and the book uses the paper's.
#
# One detail the paper does not discuss matters for everything after this section: the heads
# of different models must start from *different* random weights. With one probing seed for
# every model, head 1 of run A and head 1 of run B start identical, and the trace of that start
# that survives head training is shared between the runs by tower index. An earlier version of
# this reproduction did that: two *untrained* Bert-large models' scores then correlated at
# r = −0.34 (their primary towers had opposite indices), and a trained pair whose primary towers
# had the same index looked better than it was. `tests/test_probe.py` keeps the effect under
# test with towers that carry no information at all (shared head seeds: r ≈ 0.7; own seeds:
# r ≈ 0). The probe now derives each model's head seed from its weights.

# %% tags=["parameters"]
profile = "cpu"          # tiny | cpu | cpu-long | gpu | paper (see twotower_lib.profiles)
runs_dir = None          # where runs/<profile>/ lives; None: $TWOTOWER_RUNS or ./runs
cases = None             # None: the profile's cases, "model:seed" comma-separated
probe_tokens = None      # None: the profile's budget of training tokens for the probing heads
controls = None          # None: the profile's controls (untrained, independent, permutation)
control_models = None    # None: the profile's; models whose pair gets the untrained and independent controls

# %%
import pandas as pd

from twotower_lib import charts, pipeline

ctx = pipeline.open_section("02_probing", globals())
charts.enable()
pd.DataFrame({"value": {k: str(v) for k, v in ctx.parameters.items()}}).rename_axis(f"profile {ctx.profile.name}")

# %% [markdown]
# ## Probing every case
#
# The validation loss of each tower's own head next to the cooperative model's: a head reading
# one tower only predicts worse than the two towers together, and the gap between the two heads
# is what the ordering of Eq. 3 is based on.

# %%
summary = pipeline.probe_cases(ctx)
summary

# %% [markdown]
# ## The scores of one case
#
# Each point is a token: its mean probability under the secondary tower (x) and the primary
# tower (y). Points above the diagonal are better predicted by the primary tower ($s > 0$).
# Hover for the token, its training frequency and its score.

# %%
scores = pipeline.load_scores(ctx)
first = next(iter(scores))
charts.tower_scatter(scores[first].table, title=f"{first}: each token's mean probability under each tower")

# %% [markdown]
# The tokens each tower prefers most in that case, among tokens seen at least 20 times in the
# validation text (rarer tokens have noisy scores).

# %%
frequent = scores[first].table.query("count >= 20")
pd.concat({"primary tower prefers": frequent.nlargest(10, "score")[["token", "count", "score"]].reset_index(drop=True),
           "secondary tower prefers": frequent.nsmallest(10, "score")[["token", "count", "score"]].reset_index(drop=True)},
          axis=1)

# %% [markdown]
# ## Probing the controls
#
# The same probing for the controls section 03 compares against (none of them is in the paper):
#
# - **untrained**: the same-configuration pair at initialisation (its weight snapshot at 0
#   tokens): heads trained on randomly initialised, frozen towers;
# - **independent**: per same-configuration model, four single-tower models trained separately;
#   runs 1 and 2 (and 3 and 4) are then scored as if they were the two towers of one model, with
#   the same rule (primary = the one with the higher mean probability).

# %%
controls_summary = pipeline.probe_controls(ctx)
controls_summary

# %%
ctx.finish(cases=list(summary.index), primary=summary["primary tower"].to_dict(),
           controls=list(controls_summary.index));
