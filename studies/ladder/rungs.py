"""The size ladder's rungs, families and seeds: what `runner` trains and `report` reads."""

# rung (layers x tower width) -> preset (models.config): the CPU rungs, every family at each
RUNGS = {"1x96": "cpu-small", "2x128": "cpu", "4x256": "cpu-large"}
FAMILIES = ("gpt", "bert", "elmo")      # the order the work goes in: ELMo's LSTMs cost most a token
# The GPU rungs (`--gpu`): Table 1's sizes, each preset of one family, trained on the same epoch with the same
# steps; most important first (Bert-base, then Bert-large, then GPT), as far as a call's deadline allows.
GPU_RUNGS = {"12x384": "paper-bert-base", "24x512": "paper-bert-large", "12x768": "paper-gpt"}
GPU_FAMILY = {"12x384": "bert", "24x512": "bert", "12x768": "gpt"}
SEEDS = 4                               # seeds a family at each rung: six seed pairs
