"""The size ladder's rungs, families and seeds: what `runner` trains and `report` reads."""

from __future__ import annotations

from dataclasses import dataclass, replace

from twotower_lib.book.profiles import LEARNING_BERT, get_profile


CORPUS = "brown"                        # the size and passes rungs' corpus
MIXED = "mixed"                         # the default corpus, every source together (`data.sources`' `registry`)
THINNED = "mixed-thinned"               # the mixed corpus's training split thinned to Brown's size (`runner.thin`)


@dataclass(frozen=True)
class Rung:
    """One rung: a preset (models.config), the one family it trains (None: every family), its passes over the
    epoch, whether it trains on a GPU (`--gpu`: bf16 through the torch engine), and its corpus: one source of the
    default corpus alone (a registry part, `data.sources`)."""

    preset: str
    family: str | None = None
    passes: int = 1
    gpu: bool = False
    corpus: str = CORPUS
    recipe: tuple[tuple[str, object], ...] = ()   # `TrainConfig` changes from the ladder's own training (BERT's levers);
                                                  # a rung with one checks the context gate before it probes
    micro_batch: int | None = None                # sequences a step (None: the ladder's `runner.MICRO_BATCH`)
    budget_s: float | None = None                 # a wall-clock budget per run, the schedule fitted to it (Cramming's):
                                                  # `passes` is then the most it may read


FAMILIES = ("gpt", "bert", "elmo")      # the order the work goes in: ELMo's LSTMs cost most a token
RUNGS = {
    # the CPU size rungs (layers x tower width): every family at each, one pass over the epoch
    "1x96": Rung("cpu-small"), "2x128": Rung("cpu"), "4x256": Rung("cpu-large"),
    # the GPU size rungs: Table 1's sizes, each preset of one family, on the same epoch with the same steps; most
    # important first (Bert-base, then Bert-large, then GPT), as far as a call's deadline allows
    "12x384": Rung("paper-bert-base", "bert", gpu=True), "24x512": Rung("paper-bert-large", "bert", gpu=True),
    "12x768": Rung("paper-gpt", "gpt", gpu=True),
    # the passes rungs: a size rung's preset trained for several passes over the same epoch, for the one family
    # that learns no context in one (BERT predicts 15% of its tokens, and its all-[MASK] loss stays at word
    # frequencies' after one epoch at every size). Repeated text: a token axis beside the size axis, not a rung
    # of it. Named by `--rungs` only.
    "1x96x8": Rung("cpu-small", "bert", passes=8), "2x128x8": Rung("cpu", "bert", passes=8),
    "4x256x8": Rung("cpu-large", "bert", passes=8),
    # three passes: the register rungs' BERT recipe below, on Brown, so that every corpus of that row runs as many steps
    "2x128x3": Rung("cpu", "bert", passes=3),
    "12x384x4": Rung("paper-bert-base", "bert", passes=4, gpu=True),
    # Table 1's Bert-large with the recipe the CPU pilots chose (`studies.bert_recipe`, `LEARNING_BERT`: pre-LN layers,
    # the relative position bias, 40% of the positions all [MASK]), steps of 256 sequences that fill the GPU, for a
    # wall-clock budget a seed; the GPU call (`benchmarks/gpu_bert_recipe.sh`) checks the context gate after its first seed before probing anything
    "24x512-pre": Rung("paper-bert-large", "bert", passes=64, gpu=True, micro_batch=256, budget_s=100,
                       recipe=tuple(LEARNING_BERT.items())),
    # BERT's size axis: the CPU size rungs' presets with the same recipe, two passes of Brown at 8 sequences a step
    # (the pilots' steps: with the ladder's post-LN recipe, one pass at 32, no BERT rung learned context). Named by
    # `--rungs` only; the top rung first, to time it
    **{f"{size}-pre": Rung(preset, "bert", passes=2, micro_batch=8, recipe=tuple(LEARNING_BERT.items()))
       for size, preset in (("1x96", "cpu-small"), ("2x128", "cpu"), ("4x256", "cpu-large"))},
    # the register rungs: a size rung's run on another source of the default corpus alone, for a family whose
    # division repeats on Brown at that size; with Brown's, the direct register test over seeds (does a division
    # repeat without a mixture of registers to divide?). Named by `--rungs` only.
    "2x128-books": Rung("cpu", "gpt", corpus="books"), "2x128-wiki": Rung("cpu", "gpt", corpus="wiki"),
    # BERT at this size repeats its division on the default profile's mixed corpus and not on Brown, even over eight
    # passes: its run on the mixed corpus with the ladder's recipe (one epoch) says whether the text or the recipe does
    "2x128-mixed": Rung("cpu", "bert", corpus=MIXED),
    # the mixed corpus holds several times Brown's distinct text as well as a mixture of registers: the same mixture
    # thinned to Brown's number of training blocks (every source kept in proportion; the same tokenizer and
    # validation text as `2x128-mixed`), trained three passes (about `2x128-mixed`'s steps), tells the two apart
    "2x128x3-thinned": Rung("cpu", "bert", passes=3, corpus=THINNED),
    # BERT on one source alone, as GPT's register rungs, for the thinned mixture's passes (at this size BERT learns no
    # context in one epoch of a source): does its division need the mixture, or does one source's text give it?
    "2x128x3-books": Rung("cpu", "bert", passes=3, corpus="books"),
    "2x128x3-wiki": Rung("cpu", "bert", passes=3, corpus="wiki"),
}
SEEDS = 4                               # seeds a family at each rung: six seed pairs


def size_rungs(gpu: bool) -> list[str]:
    """The size axis's rungs on the CPU or on a GPU: what `python -m studies.ladder [--gpu]` runs by default."""
    return [name for name, r in RUNGS.items() if r.gpu == gpu and r.passes == 1 and r.corpus == CORPUS]


def on_size_axis(rung: str, family: str) -> bool:
    """Whether a family's rung is a point of the size chart, table and trend: for GPT and ELMo a size rung (one pass
    of Brown); for BERT a rung of its learning recipe, on the CPU or the GPU (its post-LN rungs learned no context at
    any size: the ladder page names them in a note, off the axis)."""
    r = RUNGS.get(rung, Rung("", passes=passes(rung), corpus=corpus_of(rung)))
    if family == "bert":
        return bool(r.recipe) and r.corpus == CORPUS
    return r.passes == 1 and r.corpus == CORPUS and not r.recipe


def size_rung(rung: str) -> str:
    """The size rung whose preset a passes rung trains for longer (a size rung is its own, as is a passes rung on a
    corpus no size rung reads): one preset and one seed are one initialisation, so the two rungs' untrained towers
    are the same towers."""
    r = RUNGS[rung]
    return next((name for name, s in RUNGS.items()     # another recipe builds other towers (pre-LN: other layers)
                 if (s.preset, s.gpu, s.passes, s.corpus, s.recipe) == (r.preset, r.gpu, 1, r.corpus, r.recipe)), rung)


def is_source(corpus: str) -> bool:
    """Whether a corpus is one source of the default corpus alone (Brown, books, wiki), not a mixture of them."""
    return corpus not in (MIXED, THINNED)


def corpus_of(rung: str) -> str:
    """The corpus source of a rung (Brown where the rung is not the ladder's, as in a test's exports)."""
    return RUNGS[rung].corpus if rung in RUNGS else CORPUS


def passes(rung: str) -> int:
    """Passes over the epoch of a rung (one where the rung is not the ladder's, as in a test's exports)."""
    return RUNGS[rung].passes if rung in RUNGS else 1


PROBE = get_profile("cpu").probe_config()  # the default profile's probe


def probe_config(rung: str):
    """The default profile's probe, in fp32 on every rung: on CPUs that is what its `precision="auto"` resolves to;
    on the GPU rungs "auto" would train the heads in bf16, another measurement. The GPU rungs also cache the heads'
    training features in fp32, as the CPU size rungs in `FP32_FEATURES` and their passes rungs do
    (`ProbeConfig.feature_dtype`): a passes rung probes as its size rung does."""
    if RUNGS[rung].gpu:
        return replace(PROBE, precision="fp32", feature_dtype="fp32")
    return replace(PROBE, feature_dtype="fp32") if size_rung(rung) in FP32_FEATURES else PROBE


# The CPU size rungs whose probe caches the heads' training features in fp32, as the GPU rungs' does: from 4 x 256 the
# features of one epoch's BERT vary below bf16's resolution, and heads trained on them cached in bf16 can fail on
# the validation text; below it, and for the other families, the two caches give the same scores (the changelog).
FP32_FEATURES = ("4x256",)
