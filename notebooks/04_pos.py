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
# # Part-of-speech preference
#
# > "It can be seen that VERB, ADP, ADV, and AUX are constantly preferred by the primary tower, PROPN
# > is preferred by the secondary tower, while NOUN and ADJ are more spread out across the two towers.
# > This phenomenon is consistent within all three model types." — Section 5.2
#
# Which kinds of tokens does each tower prefer? The paper (Section 5.2, Fig. 4) tags a subset of
# the corpus with Stanza, gives every vocabulary token its most frequent universal POS tag, and
# looks at the preference scores of seven tags. Its claim, in every model type: VERB, ADP, ADV and
# AUX are preferred by the primary tower ($s > 0$), PROPN by the secondary tower ($s < 0$), and
# NOUN and ADJ are spread over both.
#
# This section tags `analysis.pos_docs` training documents (the backend is `analysis.pos_backend`: "auto" uses
# Stanza, the paper's tagger, where its English model is installed, and spaCy's `en_core_web_sm`
# otherwise), maps the tagger's words onto WordPiece tokens by character overlap, and checks each
# of the seven claims on the `analysis.top_n` most frequent tokens of every case. WordPiece continuation
# pieces ("##s", "##ed") are parts of words, not words: they form their own category, `SUBWORD`,
# and stay out of Fig. 4.

# %% tags=["parameters"]
profile = None               # None: $TWOTOWER_PROFILE, else cpu; or tiny | cpu-long | gpu | paper (twotower_lib.book.profiles)
runs_dir = None              # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/
train_cases = None           # None: the profile's cases, 'model:seed' comma-separated
analysis_top_n = None        # None: the profile's N, the most frequent tokens compared (paper: 5000)
analysis_pos_docs = None     # None: the profile's number of training documents to tag
analysis_pos_backend = None  # None: the profile's backend, auto | stanza | spacy

# %% tags=["hide-cell"]
from IPython.display import Markdown

from twotower_lib.book import analyses, charts, probing, scorecard, sections
from twotower_lib.analysis import pos

ctx = sections.open_section("04_pos", globals())
backend, tagger = pos.choose_tagger(ctx.profile.analysis.pos_backend)  # stops here if the backend is not installed
charts.enable()
ctx.parameter_table()

# %%
Markdown(ctx.rerun_markdown())

# %% [markdown]
# ## Each token's majority tag
#
# A token takes the tag it received most often in the tagged sample (`share` is how often that
# was); tokens never seen by the tagger get none. The most frequent tokens:

# %%
data = sections.load_data(ctx)
tags = analyses.vocabulary_pos(ctx, data, tagger)
print(f"backend: {backend}; {len(tags)} of {data.vocab_size} vocabulary tokens received a tag")
tags.assign(frequency=data.counts[tags["token_id"]]).nlargest(15, "frequency")[
    ["token", "upos", "share", "n_tagged", "frequency"]].reset_index(drop=True)

# %%
tags["upos"].value_counts().rename("tokens").to_frame().T

# %% [markdown]
# ## Fig. 4: preference score per tag
#
# The distribution of the scores of the tokens with each of the paper's seven tags, one panel per
# case (normalised densities; hover for values).

# %%
scores = probing.load_scores(ctx)
top = analyses.top_token_ids(data, ctx.profile.analysis.top_n)
fig4 = pos.fig4_data({k: r.table for k, r in scores.items()}, tags, tags=(*pos.UPOS, pos.SUBWORD), token_ids=top)
charts.score_distributions(
    fig4.rename(columns={"run": "case", "upos": "group"}).assign(frequency=data.counts[fig4["token_id"]]),
    list(pos.PAPER_TAGS), title=f"Preference score by POS tag (top {ctx.profile.analysis.top_n} tokens)")

# %% [markdown]
# ## Does the paper's claim hold?
#
# Fig. 4's claim is about where the tags sit relative to each other. But each run's scores carry
# an offset: the primary tower is better overall, so in one run most tokens can sit above zero and
# in another most below it. Each claim is therefore checked twice, and the scorecard judges the
# first: against the run's own median score over its tagged words (the threshold shown after
# "vs"), and against zero, the paper's literal reading. Per tag and case: ✓ or ✗ with the number
# that decided it — the tag's median score for "primary" (above the threshold) and "secondary"
# (below it), the share of the tag's tokens above the threshold for "spread" (between a quarter and three quarters). The
# collapsed cell below holds every tag's numbers.

# %%
summary = pos.pos_summary(fig4)
pos.claims_table(summary)

# %% tags=["hide-output"]
# Every tag's numbers, the paper's seven and the others
summary.round(3)

# %%
scorecard.record_pos(ctx, summary, backend)
ctx.finish(backend=backend, tagged_tokens=len(tags), claims_held=int(summary.query("against == 'median'")["holds"].fillna(False).astype(bool).sum()),
           claims_held_against_zero=int(summary.query("against == 'zero'")["holds"].fillna(False).astype(bool).sum()));

# %% [markdown]
# ## Summary
#
# What this chapter measured against the paper, generated from its own records (the scorecard's rows
# for this section):

# %%
Markdown(scorecard.result_box(ctx))
