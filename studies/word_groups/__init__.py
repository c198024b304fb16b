"""Section 5.3's word groups against the untrained towers, over seeds: are Fig. 5's sparsity, Fig. 6's groups per
word and Table 3's ranks made by training? (`python -m studies.word_groups`)."""
