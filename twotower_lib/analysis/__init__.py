"""Analyses of preference scores, one module per part of the paper.

- `correlation`: Section 5.1 -- Table 2, Fig. 3, bootstrap intervals, permutation p-values.
- `pos`: Section 5.2 -- POS tags of vocabulary tokens (stanza or spaCy), Fig. 4 and its claim.
- `ica`: Section 5.3 -- whitening PCA (Eq. 5), Amari ICA (Eq. 6-7), word groups, Figs. 5-7, Table 3.
- `frequency`: Section 8.1 -- Fig. 8, Table 4, partial correlations controlling log-frequency.

Every function takes the probing stage's tables (pandas) and returns tables a notebook only shows.
"""
