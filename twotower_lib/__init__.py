"""twotower_lib: the library behind the two-tower paper companion.

Pipeline, one module group per stage:
data (corpus, tokenizer, blocks) -> models (two-tower LMs) -> train (DeepSpeed)
-> probe (per-tower heads, preference scores) -> analysis (correlations, POS, ICA,
frequency) -> book (papermill notebooks, jupyter-book).
"""

__version__ = "0.1.0"
