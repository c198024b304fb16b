"""The paper's side of the scorecard: every table and figure of the paper as an item, its claim in the
paper's words and numbers, and the section that measures it; and each correlation it reports as the pairs
of tower families it compares (`CLAIMS`, which the seed study and the front page's lead figure read).
Written once, here; our side is never typed (`scorecard`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperItem:
    id: str         # stable key sections record under
    item: str       # which table/figure and what exactly
    paper: str      # the paper's value or claim
    section: str    # the section that measures it


PAPER_ITEMS: tuple[PaperItem, ...] = (
    PaperItem("table1", "Table 1: network configurations",
              "ELMo 2 layers x 4096; GPT 12 x 768; Bert-base 12 x 384; Bert-large 24 x 512", "01_training"),
    PaperItem("table2.same-config", "Table 2: Bert-large run 1 vs run 2 (same configuration, different seeds)",
              "Pearson r = 0.94 (top 5000 tokens)", "03_correlations"),
    PaperItem("table2.base-large", "Table 2: Bert-base vs Bert-large (same type, different size)",
              "r = 0.72 (run 1), 0.62 (run 2)", "03_correlations"),
    PaperItem("table2.cross-type", "Table 2: Bert-large vs ELMo and vs GPT (different model types)",
              "r = 0.57 / 0.61 (ELMo), 0.57 / 0.63 (GPT)", "03_correlations"),
    PaperItem("table2.elmo-gpt", "Table 2: ELMo vs GPT", "r = 0.91", "03_correlations"),
    PaperItem("table2.bert-base-others", "Table 2: Bert-base vs ELMo and vs GPT", "r = 0.27, 0.26", "03_correlations"),
    PaperItem("same-config.other", "Not in the paper: two runs of another model type, same configuration, "
              "different seeds (the cpu profile adds GPT run 2: on a CPU the pattern emerges first in GPT)",
              "(not reported; the paper's same-configuration pair is Bert-large, r = 0.94)", "03_correlations"),
    PaperItem("controls", "Not in the paper: each same-configuration pair's r against its controls (untrained "
              "towers, independent single-tower pairs, shuffled labels, a shared quality profile)",
              "(no controls reported)", "03_correlations"),
    PaperItem("register", "Not in the paper: each same-configuration pair trained on one source of the corpus "
              "alone (19th-century books, Wikipedia, 1960s American prose), against its shuffled-label control",
              "(the paper's corpus mixes two registers; not tested)", "03_correlations"),
    PaperItem("fig3", "Fig. 3: preference scores of the five cases over the top 1000 tokens",
              "run 1 and run 2 of Bert-large follow almost the same curve; other cases follow it to a lesser degree",
              "03_correlations"),
    PaperItem("fig4", "Fig. 4: preference-score distribution per POS tag (Bert-large, GPT, ELMo)",
              "VERB, ADP, ADV, AUX preferred by the primary tower; PROPN by the secondary; NOUN and ADJ spread; "
              "same in all three model types", "04_pos"),
    PaperItem("fig5", "Fig. 5: word vectors after PCA + ICA (d = 128)",
              "sparse: about 80% of the values within [-1, 1], a few large", "05_ica"),
    PaperItem("fig6", "Fig. 6: number of word groups (|value| > 2.5) per word",
              "about 45% of words in exactly one group, 13% in none, 1.45 groups per word on average", "05_ica"),
    PaperItem("fig7", "Fig. 7: example word groups", "groups are semantically meaningful (numbers, names, past tense)",
              "05_ica"),
    PaperItem("table3", "Table 3: mean preference score and rank of 22 ICA word groups",
              "group ranks agree across Bert-large, ELMo and GPT; syntactic groups score higher than semantic ones",
              "05_ica"),
    PaperItem("fig8", "Fig. 8: preference score against frequency-sorted token index",
              "no strong trend with frequency", "06_frequency"),
    PaperItem("table4", "Table 4: Spearman rank correlation with frequency rank (top 5000)",
              "ELMo-GPT 0.93, GPT-Bert-large 0.65, ELMo-Bert-large 0.56; with frequency rank 0.16-0.22", "06_frequency"),
)
ITEMS_BY_ID = {i.id: i for i in PAPER_ITEMS}
# Items that test one finding of the paper together (a figure judged with the table it plots, a second statistic
# of the same comparison): the front page counts each group once, at its weakest verdict, beside the per-item tally.
FINDINGS: dict[str, tuple[str, ...]] = {
    "two runs of one configuration agree": ("table2.same-config", "fig3"),
    "different families agree": ("table2.cross-type", "table2.elmo-gpt", "table2.bert-base-others", "table4", "fig8"),
}
# How the scorecard's picture names the items its points come from.
POINT_LABELS = {"table2.same-config": "Table 2: Bert-large, two seeds", "same-config.other": "two seeds of another model",
                "table2.base-large": "Table 2: Bert-base vs Bert-large", "table2.cross-type": "Table 2: Bert-large vs ELMo, GPT",
                "table2.elmo-gpt": "Table 2: ELMo vs GPT", "table2.bert-base-others": "Table 2: Bert-base vs ELMo, GPT",
                "table4": "Table 4 (Spearman)"}


@dataclass(frozen=True)
class Claim:
    """One correlation the paper reports, as pairs of families: Table 2 (Pearson r) or Table 4 (Spearman)."""

    item: str                                # the scorecard item it decides
    label: str                               # what a reader sees
    families: tuple[tuple[str, str], ...]    # the family pairs whose seed pairs it pools
    paper: tuple[float, float]               # the paper's value, or the range of its cells (Bert-large's two runs)
    statistic: str = "r"                     # "r" (Pearson, Eq. 4's score) or "rho" (Spearman, Table 4)


PAPER_SAME_CONFIG_R = 0.94  # Table 2: Bert-large run 1 vs run 2, the paper's one same-configuration pair
_SAME = (PAPER_SAME_CONFIG_R, PAPER_SAME_CONFIG_R)

CLAIMS: tuple[Claim, ...] = (
    Claim("table2.same-config", "Bert-large, two seeds (Table 2)", (("bert-large", "bert-large"),), _SAME),
    Claim("same-config.other", "GPT, two seeds (not in the paper)", (("gpt", "gpt"),), _SAME),
    Claim("same-config.other", "ELMo, two seeds (not in the paper)", (("elmo", "elmo"),), _SAME),
    Claim("same-config.other", "Bert-base, two seeds (not in the paper)", (("bert-base", "bert-base"),), _SAME),
    Claim("table2.base-large", "Bert-base vs Bert-large (Table 2)", (("bert-base", "bert-large"),), (0.62, 0.72)),
    Claim("table2.cross-type", "Bert-large vs ELMo (Table 2)", (("bert-large", "elmo"),), (0.57, 0.61)),
    Claim("table2.cross-type", "Bert-large vs GPT (Table 2)", (("bert-large", "gpt"),), (0.57, 0.63)),
    Claim("table2.elmo-gpt", "ELMo vs GPT (Table 2)", (("elmo", "gpt"),), (0.91, 0.91)),
    Claim("table2.bert-base-others", "Bert-base vs ELMo (Table 2)", (("bert-base", "elmo"),), (0.27, 0.27)),
    Claim("table2.bert-base-others", "Bert-base vs GPT (Table 2)", (("bert-base", "gpt"),), (0.26, 0.26)),
    Claim("table4", "ELMo vs GPT, Spearman (Table 4)", (("elmo", "gpt"),), (0.93, 0.93), "rho"),
    Claim("table4", "GPT vs Bert-large, Spearman (Table 4)", (("gpt", "bert-large"),), (0.65, 0.65), "rho"),
    Claim("table4", "ELMo vs Bert-large, Spearman (Table 4)", (("elmo", "bert-large"),), (0.56, 0.56), "rho"),
)
