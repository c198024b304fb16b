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
# # ICA word groups
#
# > "Another interesting trend that can be seen from the table is that syntactic words which have
# > less semantic meaning tend to have larger preference scores. In contrast, words with more solid
# > semantic meaning tend to have smaller preference scores." — Section 5.3
#
# The paper reduces the word vectors of a corpus sample with PCA to $d$ dimensions and unmixes them with
# independent component analysis (Amari's rule, Eq. 6–7): the result is sparse (Fig. 5), most words fall in one
# or two "groups" (the words far out on a component; Fig. 6), the groups look meaningful (Fig. 7), and their mean
# preference scores rank alike in Bert-large, ELMo and GPT (Table 3).
#
# :::{dropdown} The word vectors here, and two readings of the paper's formulas
# Here the word vectors are the trained input embedding of the case `analysis.ica_reference`, one row
# per token occurrence in a sample of `analysis.ica_tokens` training tokens. Two readings of the
# paper's formulas (its README notes both): ICA needs *whitened* input, so Eq. 5 is taken as
# $P = (X - \bar x)\, V_d\, S_d^{-1/2}$; Eq. 7 as $g(y) = \operatorname{sgn}(y)\,(1 - e^{-\sqrt{2}|y|})/2$. Each
# component is scaled to unit variance, so the threshold 2.5 means 2.5 standard deviations.
# :::

# %% tags=["parameters"]
profile = None                 # None: $TWOTOWER_PROFILE, else cpu; or tiny | cpu-long | gpu | paper (twotower_lib.book.profiles)
runs_dir = None                # where runs/<profile>/ lives; None: $TWOTOWER_RUNS, else the project's runs/
train_cases = None             # None: the profile's cases, 'model:seed' comma-separated
analysis_ica_reference = None  # None: the profile's reference case ('model:seed') for the word vectors
analysis_ica_tokens = None     # None: the profile's number of token occurrences in the corpus sample
analysis_ica_dim = None        # None: the profile's d; 0: the paper's share of the embedding width (128 of 1024)
analysis_ica_starts = None     # None: the profile's number of ICA starts (the identity first, then seeded random rotations)
analysis_top_n = None          # None: the profile's N: Fig. 6's shares over the N most frequent words (and over all)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The code that loads the section"}
import numpy as np
import pandas as pd
from IPython.display import Markdown

from twotower_lib.book import analyses, charts, probe_outputs, render, scorecard, sections, study_parts
from twotower_lib import paper
from twotower_lib.analysis import word_groups
from twotower_lib.analysis.word_groups import fig5_data, fig5_within_1, fig6_data, group_members, table3, table3_agreement

ctx = sections.open_section("05_ica", globals())
reference = analyses.ica_reference(ctx)  # the case name; stops here if it is not one of the cases
render.enable()
ctx.parameter_table()

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The computation: whitening, ICA, the groups and Table 3"}
data = sections.load_data(ctx)
fitted, token_ids, components, sample_counts, spectrum = analyses.word_ica(ctx, data)
d = components.shape[1]
tokens = data.tokens
fig5 = fig5_data(components, token_ids, tokens, data.counts)
within_1 = fig5_within_1(components, token_ids, tokens, data.counts)
top = np.isin(token_ids, analyses.top_token_ids(data, ctx.profile.analysis.top_n))
fig6 = {f"top {int(top.sum())} words": fig6_data(components[top]), f"all {len(token_ids)} tokens": fig6_data(components)}
groups_per_word = next(iter(fig6.values()))[1]
scores = probe_outputs.load_scores(ctx)
runs = [reference] + [k for k in scores if k != reference]
members = group_members(components, token_ids, tokens, data.counts)
t3 = table3(members, {k: scores[k].table for k in runs})
scorecard.record_ica(ctx, groups_per_word, within_1, int(members["component"].nunique()),
                     t3[runs] if len(runs) > 1 else None, fitted.ica.converged,
                     words=f"the {ctx.profile.analysis.top_n} most frequent", fig6_all=fig6[f"all {len(token_ids)} tokens"][1], d=d)

# %% [markdown]
# ## The result
#
# The paper's shares of Figs. 5 and 6 against ours, over the most frequent words and over every
# sampled token (the paper does not say which words it counted).

# %% tags=["hide-input"]
charts.paper_and_ours(word_groups.paper_points({name: g for name, (_, g) in fig6.items()}, within_1),
                      "share", f"{reference}: sparsity and groups after ICA (d = {d})", percent=True, domain=(0, 1))

# %% tags=["remove-input"]
Markdown(charts.PAPER_AND_OURS_KEY + " The Fig. 5 share is over the words Fig. 5 shows.\n\n" + scorecard.verdicts_box(ctx))

# %% [markdown]
# :::{dropdown} Caveats
# 1. The word vectors are a small model's input embedding, narrower than the paper's, and $d$ keeps
#    the paper's share of its width (`analysis.ica_dim`); how many groups a word can join grows with $d$.
# 2. The ICA likelihood is not concave: starts from different rotations can end at different optima.
#    The fit of highest likelihood is used, and each component's stability across starts is below.
# 3. Fig. 7's "meaningful" groups are shown, not judged: read the lists.
# :::

# %% tags=["remove-input"]
Markdown(ctx.rerun_markdown())

# %% [markdown]
# ## PCA whitening and ICA
#
# How many directions the whitening keeps, and whether the ICA converged to *the* answer (folded below).
#
# :::{dropdown} How many directions to keep
# How many directions to keep? The paper kept $d = 128$ of a 1,024-wide embedding: an eighth.
# Here the embedding is narrower, so by default $d$ keeps the same share of the width
# (`ica_dim = 0`); a fixed $d = 128$ would keep half of a 256-wide embedding. The chart shows why
# the choice matters: whitening scales every kept direction to unit variance, so a direction
# holding a tiny share of the variance weighs as much in the ICA as the first; and ICA can only
# separate directions that are not Gaussian (excess kurtosis 0).
# :::

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "The principal directions of the word vectors (chart)"}
charts.pca_spectrum(spectrum, d, title=f"{reference}: the principal directions of its word vectors (dashed: d = {d})")

# %% [markdown]
# :::{dropdown} Convergence, and several starts
# Did the ICA converge by the library's criterion (largest entry of $I - E[g(y)y^\top]$ below the
# tolerance)? The steps are L-BFGS steps preconditioned by a block-diagonal model of the Hessian
# (Picard's): they meet the tolerance in one or two hundred steps where the paper's plain rule needs
# thousands (if they stop paying, the plain rule takes over; "of them Newton" counts the
# preconditioned steps).
#
# And is what it converged to *the* answer? On word vectors, runs from different starting rotations
# each meet the tolerance at different optima (the table gives how far apart this build's starts
# ended). So the rule runs from `analysis.ica_starts` starts — $W_0 = I$ as in the paper, then seeded random rotations — and the
# converged fit of highest likelihood is used. A component's *stability* is the median, over the
# other converged starts, of its largest |correlation| with one of theirs (1: every start found it);
# the groups of unstable components are the ones to read with care.
# :::

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Whitening and ICA in numbers: directions kept, convergence, starts"}
pd.DataFrame({"value": {
    "reference case": reference, "token occurrences in the sample": int(sample_counts.sum()),
    "distinct tokens (words)": len(token_ids), "embedding width": fitted.whitening.mean.shape[0],
    "d": d, "variance kept by PCA": f"{fitted.whitening.explained:.1%}",
    "excess kurtosis of the kept directions (median)": f"{spectrum['excess kurtosis'].head(d).median():.2f}",
    "excess kurtosis of the rest (median)": f"{spectrum['excess kurtosis'].iloc[d:].median():.2f}"
    if len(spectrum) > d else "none left",
    "ICA converged": fitted.ica.converged, "ICA steps (of them Newton)": f"{fitted.ica.n_iter} ({fitted.ica.newton_steps})",
    "final max |I - E[g(y) y^T]|": f"{fitted.ica.gradient:.1e}", **analyses.ica_starts_summary(fitted.ica)}})

# %% [markdown]
# ## Fig. 5: the representation after ICA
#
# The most frequent words (columns) on the $d$ components (rows), against the paper's sparse picture; below it,
# the same towers untrained.

# %% tags=["hide-input"]
print(f"{within_1:.1%} of the values shown are within [-1, 1] (paper: about {paper.FIG5_WITHIN_1:.0%}; a Gaussian: {paper.GAUSSIAN_WITHIN_1:.0%})")
charts.component_heatmap(fig5, title=f"{reference}: the {fig5['word_index'].nunique()} most frequent words after ICA")

# %% tags=["remove-input"]
study_parts.show("WORD_GROUPS_FIG5", ctx.profile.name)

# %% [markdown]
# ## Fig. 6: groups per word
#
# The paper does not say which words it counted, and rare tokens are outliers on many components: the shares
# are over the `analysis.top_n` most frequent words (what the scorecard judges) and over every sampled token.

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Fig. 6's shares both ways, beside the paper's"}
hist = pd.concat([h.assign(words=name) for name, (h, _) in fig6.items()], ignore_index=True)
pd.DataFrame({**{name: [f"{g['share_one']:.0%}", f"{g['share_none']:.0%}", f"{g['mean_groups']:.2f}"]
                 for name, (_, g) in fig6.items()},
              "paper": [f"about {paper.FIG6['share_one']:.0%}", f"about {paper.FIG6['share_none']:.0%}",
                        f"{paper.FIG6['mean_groups']:.2f}"]},
             index=["words in exactly one group", "words in no group", "groups per word (mean)"])

# %% tags=["hide-input"]
charts.group_histogram(hist)

# %% tags=["remove-input"]
study_parts.show("WORD_GROUPS_FIG6", ctx.profile.name)

# %% [markdown]
# ## Table 3: each group's mean score
#
# Each group (named by its most typical members; one with too few scored members left out) with its members'
# mean score and rank in every case (1: most preferred by the primary tower), then Spearman's rho of the
# groups' means between cases (the paper's columns rank its groups closely alike; the scorecard reads |rho|).

# %% tags=["hide-cell", "full-width"] mystnb={"code_prompt_show": "Table 3: every group's mean score and rank in every case"}
t3.round(3)

# %% tags=["hide-cell"] mystnb={"code_prompt_show": "Spearman's rho of the groups' means between cases"}
table3_agreement(t3, runs).round(3) if len(runs) > 1 else "one case only: nothing to compare"

# %% tags=["remove-input"]
study_parts.show("WORD_GROUPS_TABLE3", ctx.profile.name)

# %% [markdown]
# ## Fig. 7: example groups
#
# The three groups the reference case's primary tower prefers most and least, as ranked lists of
# their most typical members (text size by frequency).

# %% tags=["hide-input"]
shown = pd.concat([t3.head(3), t3.tail(3)]).drop_duplicates("component")
labels = "#" + shown["component"].astype(str) + " (s = " + shown[reference].map("{:+.2f}".format) + ")"
examples = shown[["component"]].assign(group=labels).merge(members[members["typicality"] <= 8], on="component")
charts.group_word_lists(examples, title=f"Word groups most and least preferred by {reference}'s primary tower")

# %% tags=["remove-cell"]
ctx.finish(reference=reference, d=d, converged=fitted.ica.converged, ica_steps=fitted.ica.n_iter, groups=len(t3),
           ica_starts=analyses.ica_starts_summary(fitted.ica),
           **groups_per_word, fig6_all_tokens=fig6[f"all {len(token_ids)} tokens"][1]);

# %% [markdown]
# ## Summary

# %% tags=["remove-input"]
Markdown(scorecard.chapter_summary(ctx))
