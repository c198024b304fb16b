"""Fig. 5 against the untrained towers: is the sparsity after ICA made by training? (`python -m studies.fig5_control`)."""
