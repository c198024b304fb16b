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
# # Cooperative training
#
# Each case of the paper is one two-tower language model: a shared word embedding, two towers
# of the same configuration with independent random initialisation, and an output layer tied to
# the embedding that reads the two towers' concatenated states (Eq. 1). The paper trains five
# cases (Table 2's rows): ELMo, GPT, a smaller and a larger BERT, and the larger BERT a second
# time with another seed. It used DeepSpeed, Adam ($\beta_1 = 0.9$, $\beta_2 = 0.98$, weight decay
# 0.01, learning rate 1e-3) and about a day on six V100 GPUs per case (Section 4.3); Table 1 lists the sizes.
#
# This section trains the cases of the chosen profile with the same optimiser settings through
# DeepSpeed, for the profile's token budget (per model where `train.model_tokens` sets one), with the
# paper's peak learning rate unless `train.model_lr` sets another for a model. A
# finished case is kept, so re-running this notebook only trains what is missing.
#
# With the `independent` control on, it also trains four single-tower models (k = 1) for every
# model that has a same-configuration pair, at that model's size and budget: the raw material of
# the control that asks whether two *independently* trained networks would show the same pattern
# (section 03).

# %% tags=["parameters"]
profile = None                  # None: $TWOTOWER_PROFILE, else cpu; or tiny | cpu-long | gpu | paper (twotower_lib.book.profiles)
runs_dir = None                 # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/
train_cases = None              # None: the profile's cases, 'model:seed' comma-separated (e.g. 'gpt:1,gpt:2')
train_tokens = None             # None: the profile's budget, in training tokens seen per case
train_model_tokens = None       # None: the profile's budgets of single models (see the profile table)
train_model_lr = None           # None: the profile's peak learning rates of single models (others: 1e-3)
train_model_final_lr = None     # None: the profile's; where single models' decay ends, as a fraction of the peak (others: 0)
train_precision = None          # None: the profile's precision (fp32 | bf16 | fp16)
train_engine = None             # None: the profile's engine (deepspeed | torch | torch-compile | torch-compile-layers)
train_model_engine = None       # None: the profile's engine of each single model, see the profile table
train_label_bucket = None       # None: the profile's; BERT's predicted positions padded to a multiple (compiled: 1024)
train_vocab_multiple = None     # None: the profile's; the decoder's columns padded to a multiple (bf16 GPUs: 64)
train_micro_batch = None        # None: the profile's blocks per process and accumulation step
train_model_micro_batch = None  # None: the profile's micro-batches of single models, e.g. more, smaller steps for BERT
train_norm_scheme = None        # None: the profile's; BERT's layers: post (Hugging Face's BertLayer) | pre (pre-LN)
train_position = None           # None: the profile's; BERT's word order: absolute (a position table) | relative | none
train_mask_rate = None          # None: the profile's; BERT's share of positions predicted each training step
train_mask_style = None         # None: the profile's; BERT's chosen positions: corrupt (80/10/10) | mask (all [MASK])
train_grad_accum = None         # None: the profile's accumulation steps per optimiser step
train_launcher = None           # None: the profile's launcher (python | deepspeed)
train_num_gpus = None           # None: the profile's GPU count for the DeepSpeed launcher
analysis_controls = None        # None: the profile's controls; 'independent' adds four single-tower runs per pair here
analysis_control_models = None  # None: the profile's; models whose pair gets the untrained and independent controls
train_threads_per_run = None    # None: the profile's; CPU threads per run, runs side by side (0: one at a time)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The code that loads the section"}
import pandas as pd
from IPython.display import Markdown

from twotower_lib.book import charts, paper_tables, render, scorecard, sections, training

ctx = sections.open_section("01_training", globals())
render.enable()
ctx.parameter_table()

# %% [markdown]
# ## The models
#
# The size of every case at this profile (the paper's Table 1 sizes are the `paper` profile).
# `hidden` is the width of one tower; the shared embedding is twice as wide, so the tied output
# layer reads the concatenation of both towers.

# %%
data = sections.load_data(ctx)
configs = pd.DataFrame([{"run": name, "training tokens": ctx.profile.tokens_for(model),
                         **ctx.profile.model_config(model, vocab_size=data.vocab_size, towers=towers).to_dict()}
                        for name, model, seed, towers in training.training_runs(ctx.profile)]).set_index("run")
paper_tables.table1(configs)

# %% tags=["hide-output"]
# Every run's configuration (the controls' single-tower runs too)
configs[["model_type", "n_layer", "hidden", "intermediate", "n_head", "towers", "vocab_size", "seq_len", "training tokens"]]

# %% [markdown]
# ## Training

# %% tags=["full-width"]
summary = training.train_cases(ctx, data)
summary

# %% [markdown]
# Training loss (lines) and validation loss on held-out documents (points) against the number
# of tokens seen. Hover for values; drag to pan, scroll to zoom.

# %%
charts.training_curves(training.training_log(ctx, list(summary.index)))

# %% [markdown]
# ## Summary

# %% tags=["remove-input"]
Markdown(training.training_summary(ctx, summary))

# %%
scorecard.record_table1(ctx)
ctx.finish(runs=list(summary.index), tokens_seen=summary["tokens seen"].to_dict(),
           minutes=summary["minutes"].to_dict());
