"""Analyses of preference scores, one module per part of the paper.

- `correlation`: two score vectors over a token set -- token choice, Pearson/Spearman, permutation p-values.
- `table2`: Section 5.1 -- Table 2 and Fig. 3, every pair with its interval and p-value.
- `uncertainty`: the document bootstrap, the text ceiling and the probe-seed ceiling.
- `register`: how much of a score the corpus's registers explain (per-source gaps, partial r).
- `pos`: Section 5.2 -- POS tags of vocabulary tokens (stanza or spaCy), Fig. 4 and its claim.
- `ica`: Section 5.3 -- whitening PCA (Eq. 5) and Amari ICA (Eq. 6-7), with the paper's ambiguities resolved.
- `word_groups`: Section 5.3 -- word vectors to components, the groups of Figs. 5-7 and Table 3.
- `frequency`: Section 8.1 -- Fig. 8, Table 4, partial correlations controlling log-frequency.

Every function takes the probing stage's tables (pandas) and returns tables a notebook only shows.
"""
