"""The size ladder's rungs, families and seeds: what `runner` trains and `report` reads."""

# rung (layers x tower width) -> preset (models.config): the CPU rungs, every family at each
RUNGS = {"1x96": "cpu-small", "2x128": "cpu", "4x256": "cpu-large"}
FAMILIES = ("gpt", "bert", "elmo")      # the order the work goes in: ELMo's LSTMs cost most a token
# The GPU rungs (`--gpu`): Table 1's sizes, each preset of one family, trained on the same epoch with the same
# steps; most important first (Bert-base, then Bert-large, then GPT), as far as a call's deadline allows.
GPU_RUNGS = {"12x384": "paper-bert-base", "24x512": "paper-bert-large", "12x768": "paper-gpt"}
GPU_FAMILY = {"12x384": "bert", "24x512": "bert", "12x768": "gpt"}
# The passes rungs: a CPU rung's preset trained for several passes over the same epoch, for the one family
# that learns no context in one (BERT predicts 15% of its tokens, and its all-[MASK] loss stays at word
# frequencies' after one epoch at every size). Repeated text: a token axis beside the size axis, not a rung of it.
PASSES_RUNGS = {"1x96x8": ("cpu-small", 8)}        # rung -> (preset, passes over the epoch)
PASSES_FAMILY = {"1x96x8": "bert"}
SEEDS = 4                               # seeds a family at each rung: six seed pairs
