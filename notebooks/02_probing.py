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
# :::{dropdown} One detail the paper does not discuss: each model's heads start from their own seed
# The heads of different models must start from *different* random weights. With one probing seed for
# every model, head 1 of run A and head 1 of run B start identical, and the trace of that start
# that survives head training is shared between the runs by tower index: two models that learned
# nothing would correlate. The probe derives each model's head seed from its weights, and
# `tests/test_probe.py` keeps the effect under test with towers that carry no information at all
# (the appendix changelog records what the shared seed once did to this book's numbers).
# :::

# %% tags=["parameters"]
profile = None                  # None: $TWOTOWER_PROFILE, else cpu; or tiny | cpu-long | gpu | paper (twotower_lib.book.profiles)
runs_dir = None                 # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/
train_cases = None              # None: the profile's cases, 'model:seed' comma-separated
probe_head = None               # None: the profile's; linear or tied (Eq. 2: the frozen input embedding decodes), mlp (the authors' code)
probe_features = None           # None: the profile's; joint_ln (slice of the joint LayerNorm) or raw tower states
probe_precondition = None       # None: the profile's; whiten (heads train on whitened features, folded back) or none
probe_bert_events = None        # None: the profile's; mask ([MASK] at every probed position) or corrupt (80/10/10)
probe_train_blocks = None       # None: the profile's; training blocks whose features train the heads
probe_train_positions = None    # None: the profile's budget of training tokens for the probing heads
probe_holdout_fraction = None   # None: the profile's; extra share of blocks held out to decide when the heads have converged
probe_schedule = None           # None: the profile's; 'plateau': held-out stopping; 'linear': warm-up + linear decay over max_epochs
probe_max_epochs = None         # None: the profile's cap on the heads' epochs (they stop once converged)
probe_tol = None                # None: the profile's; nats: an epoch that improves no head's held-out loss by more is a plateau
probe_lr_drops = None           # None: the profile's; plateaus answered by lowering the rate (x lr_drop) before the cool-down
probe_lr_drop = None            # None: the profile's; see twotower_lib.probe.config.ProbeConfig
probe_cooldown_epochs = None    # None: the profile's; after the last plateau: the rate falls linearly to 0 over these epochs, then stop
probe_cooldown_average = None   # None: the profile's; the heads end at the uniform average of their weights over the cool-down
probe_batch_size = None         # None: the profile's; positions per head-training step
probe_lr = None                 # None: the profile's peak rate of the heads (its own None: HEAD_LR[head])
probe_warmup_fraction = None    # None: the profile's; of the first epoch (plateau) or of all steps (linear)
probe_weight_decay = None       # None: the profile's; see twotower_lib.probe.config.ProbeConfig
probe_eval_blocks = None        # None: the profile's; validation blocks scored (its own None: all)
probe_bert_eval_passes = None   # None: the profile's; BERT: disjoint masking passes, so every validation token is scored once
probe_forward_batch = None      # None: the profile's; blocks per tower forward pass
probe_feature_dtype = None      # None: the profile's; the cached training features: bf16 or fp32 (towers that vary below bf16's resolution)
probe_precision = None          # None: the profile's; 'auto': bf16 on GPUs, fp32 on CPUs; 'fp32', 'bf16'
probe_score_precision = None    # None: the profile's; log p of held-out and validation positions: 'fp32', 'bf16' or 'auto'
probe_seed = None               # None: the profile's; see twotower_lib.probe.config.ProbeConfig
analysis_controls = None        # None: the profile's controls (untrained, independent, permutation)
analysis_control_models = None  # None: the profile's; models whose pair gets the untrained and independent controls
analysis_top_n = None           # None: the profile's N, the most frequent tokens the probe-seed reliability is read over
analysis_reliability_models = None      # None: the profile's; the first case of each is probed with a second head set
analysis_bert_events_comparison = None  # None: the profile's; probe one BERT case again with the training corruption

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The code that loads the section"}
import pandas as pd
from IPython.display import Markdown

from twotower_lib import run_names
from twotower_lib.book import charts, probe_outputs, probing, render, sections, study_parts

ctx = sections.open_section("02_probing", globals())
render.enable()
ctx.parameter_table()

# %% [markdown]
# ## Probing every case
#
# The validation loss of each tower's own head next to the cooperative model's: a head reading
# one tower only predicts worse than the two towers together, and the gap between the two heads
# is what the ordering of Eq. 3 is based on.
#
# What the heads read and where BERT is probed are choices the paper leaves open, and each changes
# the numbers, so they are parameters here (folded below).
#
# :::{dropdown} The probe's choices: the head, its features, BERT's events, when training stops, whitening
# - **head** (`probe.head`): by default the head the paper's Eq. 2 writes, read out linearly — a
#   linear map of the tower's features whose output vectors are the frozen input embedding $x_a$,
#   with a bias per token (`linear`). Its likelihood is concave in the weights, so two heads that
#   differ only in their seed train towards the same optimum, and the instrument agrees with itself
#   (below) — though agreeing with itself does not yet mean reaching that optimum (the appendix
#   notebook of the probe's validation studies). The `tied` head puts GELU and LayerNorm before the embedding, the
#   cooperative decoder's own shape: it reads a little more, but each seed finds its own optimum,
#   and two seeds agree far less, with a longer cool-down too (the appendix notebook). The authors'
#   code trains an untied decoder (`mlp`: a full V x H matrix of its own, many times the linear
#   head's weights), whose held-out loss rises again after a few epochs of the probe's positions.
# - **features** (`probe.features`): by default each tower's slice of the frozen joint LayerNorm
#   over the two towers' concatenation — what the cooperative decoder itself read, and what the
#   authors' heads read. The alternative, `raw`, is the tower's output as it is; for ELMo that is an
#   unnormalised LSTM output whose scale differs between towers, so each tower's scale would set
#   how fast its head learns.
# - **BERT's events** (`probe.bert_events`): Eq. 1 defines BERT's state at a predicted position with
#   [MASK] at that position, so every position a BERT head trains on or is scored at has [MASK] at
#   the input. Reusing the training corruption instead (80/10/10: [MASK], a random token, unchanged)
#   lets the towers see the answer at one position in ten; with Eq. 4's log of the *mean*
#   probability those positions dominate a hard token's p̄, and the score then measures which
#   tower copies its input better — an event GPT and ELMo do not have. The comparison is below.
# - **training to convergence**: the heads train at a constant rate until their loss on held-out
#   training text stops improving (by the probe's tolerance `tol` over an epoch), then for two more epochs while the
#   rate falls linearly to zero, and they end at the average of their weights over those two epochs,
#   not after a fixed number of steps. AdamW moves every weight by about the rate at every step, so a
#   head stopped at a constant rate is one random draw around its optimum; the cool-down and the
#   average leave less of that draw.
# - **whitened features** (`probe.precondition`: `whiten` by default, `none` for the features as
#   they are): each head trains on its tower's features after subtracting their mean and
#   multiplying by the inverse square root of their covariance, and is then folded back into a head
#   on the features as they are. A converged probe would give the same scores either way; at the
#   profile's `probe.train_positions` positions it does not, and the appendix notebook of the probe's
#   validation studies shows why whitened is the default: of the recipes tried it lands nearest the head defined by its
#   objective, in every family.
# :::

# %% tags=["full-width"]
summary = probing.probe_cases(ctx)
summary

# %% [markdown]
# ## Probing the controls
#
# The same probing for the controls section 03 compares against (none of them is in the paper).
#
# :::{dropdown} The controls, and which a build runs
# - **untrained**: the same-configuration pair at initialisation (its weight snapshot at 0
#   tokens): heads trained on randomly initialised, frozen towers;
# - **independent**: per same-configuration model, four single-tower models trained separately;
#   runs 1 and 2 (and 3 and 4) are then scored as if they were the two towers of one model, with
#   the same rule (primary = the one with the higher mean probability).
#
# A build runs the controls its profile names (`analysis.controls`). The default profile runs only
# the shuffled-label permutation here: its seed study (section 03) measured the untrained and
# independent controls of every family, with as many pairs as the cases, the same sizes, budgets and probe,
# and the verdicts read them there. `-p analysis.controls untrained,independent,permutation,quality`
# runs them in this build as well.
# :::

# %% tags=["hide-output"]
controls_summary = probing.probe_controls(ctx)
controls_summary

# %% [markdown]
# ## Is the instrument good enough?
#
# Every number after this section is read through these heads, so three checks come first.
#
# **Did the heads converge?** Each head's loss on the training positions (dashed) and on held-out
# training text (solid) per epoch; training stopped where the held-out loss stopped improving.

# %% tags=["hide-output"]
charts.probe_curves(probing.probe_curves(ctx))

# %% [markdown]
# **Do the heads read what the towers know?** For a single-tower model (the independent control's
# k = 1 runs) the tower carries everything its own decoder used, so a fresh head on that tower should
# reach the model's own validation loss. The difference is the *probe shortfall*: what the head fails
# to read (goal: at most 0.05 nats). For two-tower models the same difference (best head minus the
# cooperative model) also contains what the other tower contributed, so it is shown but is not a
# shortfall. The last columns give Eq. 3's relative margin (how far apart the towers' mean probabilities
# are, as a share of the primary's) and whether the two order rules — mean probability (Eq. 3) and mean
# log-probability (the authors' code) — agree: where they do not, every correlation the run enters
# changes sign with the rule.

# %% tags=["full-width"]
quality = probing.probe_quality(ctx)
quality.round(3)

# %% [markdown]
# Where the profile has a committed seed study, its single-tower probes (the
# independent control's runs at the same sizes, budgets and probe) give the shortfall for every family.
# A negative shortfall means the fresh head predicts better than the model's own decoder did: at these
# budgets the decoder itself is short of converged, so the head reads at least what it used.

# %% tags=["remove-input", "hide-output"] mystnb={"code_prompt_show": "The shortfall of every family (the seed study's single-tower probes)"}
study_parts.show("SEEDS_SHORTFALL_TABLE", ctx.profile.name)

# %% [markdown]
# **Does the instrument agree with itself?**
#
# :::{dropdown} The probe-seed reliability
# The cases of `analysis.reliability_models` (the first
# case of each model it names; every case where it names none) are probed with a second set of heads
# that differs only in the head seed (same frozen run, same features, same validation text). The
# correlation of the two score vectors over the top-N tokens is the *probe-seed reliability*: no
# correlation between runs measured with these heads can be expected above it (goal: at least 0.95).
# It reads alike on every run, so a sample of runs measures it for the rest; section 03 uses the lowest
# measured value for a run outside the sample. It is a second ceiling, beside the validation-text
# ceiling of section 03 — a ceiling, not a certificate: two seeds of one optimiser can stop short of
# the optimum in the same way (the appendix notebook).
# :::

# %% tags=["hide-output"]
reliability = probing.probe_reliability(ctx, probe_outputs.load_scores(ctx))
reliability.round(3)

# %% [markdown]
# ## How the probe was validated
#
# The studies behind the probe's recipe — head kinds, whitened coordinates, the defined head, the
# probe's training positions — are committed measurements shown in the appendix notebook
# {doc}`The probe's validation studies <08_probe_validation>`; the appendix page "How the probe was
# validated" states the method once with its error budget.

# %% [markdown]
# ## BERT: [MASK] at the probed position, or the training corruption
#
# One BERT case probed both ways: the heads' and the cooperative model's validation loss (the
# corruption shows the answer at one probed position in ten, so its losses are lower), and the
# correlation between the two score vectors of the same frozen run.

# %% tags=["hide-output"]
bert_cases = [c for c in summary.index if run_names.model_of(c).startswith("bert")]
compare = bert_cases and ctx.profile.probe.bert_events == "mask" and ctx.profile.analysis.bert_events_comparison
events = probing.compare_bert_events(ctx, bert_cases[-1]) if compare else None
events.round(3) if events is not None else ("not measured at this profile (`analysis.bert_events_comparison`; the "
                                            "`cpu-long` profile measures it)" if bert_cases else "no BERT case at this profile")

# %% [markdown]
# ## The scores of one case
#
# Each point is a token: its mean probability under the secondary tower (x) and the primary
# tower (y). Points above the diagonal are better predicted by the primary tower ($s > 0$).
# Hover for the token, its training frequency and its score.

# %% tags=["hide-output"]
scores = probe_outputs.load_scores(ctx)
first = next(iter(scores))
charts.tower_scatter(scores[first].table, title=f"{first}: each token's mean probability under each tower")

# %% [markdown]
# The tokens each tower prefers most in that case, among tokens seen at least 20 times in the
# validation text (rarer tokens have noisy scores).

# %% tags=["hide-output"]
frequent = scores[first].table.query("count >= 20")
pd.concat({"primary tower prefers": frequent.nlargest(10, "score")[["token", "count", "score"]].reset_index(drop=True),
           "secondary tower prefers": frequent.nsmallest(10, "score")[["token", "count", "score"]].reset_index(drop=True)},
          axis=1)

# %% [markdown]
# ## Summary

# %% tags=["remove-input"]
Markdown(probing.probing_summary(quality, reliability, sections.load_data(ctx).unigram_loss()))

# %%
shortfall = quality["shortfall"].dropna()
ctx.finish(cases=list(summary.index), primary=summary["primary tower"].to_dict(),
           controls=list(controls_summary.index),
           shortfall=shortfall.round(4).to_dict(),
           reliability=reliability.iloc[:, :2].round(4).to_dict("index"),
           order_rules_disagree=[p for p, ok in quality["order rules agree"].items() if not ok],
           bert_events=events.iloc[:, -2:].iloc[0].round(4).to_dict() if events is not None else None,
           probe_minutes=round(float(quality["minutes"].sum()), 2));
