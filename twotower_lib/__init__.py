"""twotower_lib: the library behind the two-tower paper companion.

Pipeline, one module group per stage:
data (corpus, tokenizer, blocks) -> models (two-tower LMs) -> train (DeepSpeed)
-> probe (per-tower heads, preference scores) -> analysis (correlations, POS, ICA,
frequency) -> book (papermill notebooks, jupyter-book).
"""

__version__ = "0.1.0"

from twotower_lib.workers import keep_freed_memory, pin_cpu_kernels

keep_freed_memory()  # faster CPU steps: see its docstring (TWOTOWER_MALLOC=default turns it off)
pin_cpu_kernels()  # the same numbers on every x86 CPU: see its docstring (TWOTOWER_CPU_KERNELS=native turns it off)
