"""The paper's side of the scorecard: every table and figure of the paper as an item, its claim in the
paper's words and numbers, and the section that measures it; and each correlation it reports as the pairs
of tower families it compares (`CLAIMS`, which the seed study and the front page's lead figure read).
Written once, here; our side is never typed (`scorecard`)."""

from __future__ import annotations

from dataclasses import dataclass

from twotower_lib.paper import FIG5_WITHIN_1, FIG6, FREQUENCY_RANGE, SAME_CONFIG_R, TABLE1, TABLE2, TABLE4


def _t1(name: str) -> str:
    layers, hidden = TABLE1[name][:2]
    return f"{name} {layers}{' layers' if name == 'ELMo' else ''} x {hidden}"


_T2 = TABLE2
_T4 = TABLE4
FREQUENCY_LOW, FREQUENCY_HIGH = FREQUENCY_RANGE


@dataclass(frozen=True)
class PaperItem:
    id: str         # stable key sections record under
    item: str       # which table/figure and what exactly
    paper: str      # the paper's value or claim
    section: str    # the section that measures it


PAPER_ITEMS: tuple[PaperItem, ...] = (
    PaperItem("table1", "Table 1: network configurations",
              "; ".join(_t1(m) for m in TABLE1), "01_training"),
    PaperItem("table2.same-config", "Table 2: Bert-large run 1 vs run 2 (same configuration, different seeds)",
              f"Pearson r = {SAME_CONFIG_R} (top 5000 tokens)", "03_correlations"),
    PaperItem("table2.base-large", "Table 2: Bert-base vs Bert-large (same type, different size)",
              f"r = {_T2['Bert-base', 'Bert-large-run1']} (run 1), {_T2['Bert-base', 'Bert-large-run2']} (run 2)", "03_correlations"),
    PaperItem("table2.cross-type", "Table 2: Bert-large vs ELMo and vs GPT (different model types)",
              f"r = {_T2['ELMo', 'Bert-large-run1']} / {_T2['ELMo', 'Bert-large-run2']} (ELMo), "
              f"{_T2['GPT', 'Bert-large-run1']} / {_T2['GPT', 'Bert-large-run2']} (GPT)", "03_correlations"),
    PaperItem("table2.elmo-gpt", "Table 2: ELMo vs GPT", f"r = {_T2['ELMo', 'GPT']}", "03_correlations"),
    PaperItem("table2.bert-base-others", "Table 2: Bert-base vs ELMo and vs GPT", f"r = {_T2['ELMo', 'Bert-base']}, {_T2['GPT', 'Bert-base']}", "03_correlations"),
    PaperItem("same-config.other", "Not in the paper: two runs of another model type, same configuration, "
              "different seeds (the cpu profile adds GPT run 2: on a CPU the pattern emerges first in GPT)",
              f"(not reported; the paper's same-configuration pair is Bert-large, r = {SAME_CONFIG_R})", "03_correlations"),
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
              f"sparse: about {FIG5_WITHIN_1:.0%} of the values within [-1, 1], a few large", "05_ica"),
    PaperItem("fig6", "Fig. 6: number of word groups (|value| > 2.5) per word",
              f"about {FIG6['share_one']:.0%} of words in exactly one group, {FIG6['share_none']:.0%} in none, "
              f"{FIG6['mean_groups']} groups per word on average", "05_ica"),
    PaperItem("fig7", "Fig. 7: example word groups", "groups are semantically meaningful (numbers, names, past tense)",
              "05_ica"),
    PaperItem("table3", "Table 3: mean preference score and rank of 22 ICA word groups",
              "group ranks agree across Bert-large, ELMo and GPT; syntactic groups score higher than semantic ones",
              "05_ica"),
    PaperItem("fig8", "Fig. 8: preference score against frequency-sorted token index",
              "no strong trend with frequency", "06_frequency"),
    PaperItem("table4", "Table 4: Spearman rank correlation with frequency rank (top 5000)",
              f"ELMo-GPT {_T4['ELMo', 'GPT']}, GPT-Bert-large {_T4['GPT', 'Bert-large']}, ELMo-Bert-large "
              f"{_T4['ELMo', 'Bert-large']}; with frequency rank {FREQUENCY_LOW}-{FREQUENCY_HIGH}", "06_frequency"),
)
ITEMS_BY_ID = {i.id: i for i in PAPER_ITEMS}
# each item's name where a line or a table cell names it (the front table, a chapter's summary)
SHORT_NAMES = {"table1": "Table 1: model sizes", "table2.same-config": "Table 2: two seeds of Bert-large agree",
               "same-config.other": "Two seeds of GPT, ELMo, Bert-base agree (not in the paper)",
               "table2.base-large": "Table 2: Bert-base vs Bert-large", "table2.cross-type": "Table 2: Bert-large vs ELMo, GPT",
               "table2.elmo-gpt": "Table 2: ELMo vs GPT", "table2.bert-base-others": "Table 2: Bert-base vs ELMo, GPT",
               "controls": "Pairs above their controls (not in the paper)", "register": "Same pairs on one corpus source (not in the paper)",
               "fig3": "Fig. 3: score curves", "fig4": "Fig. 4: POS preference", "fig5": "Fig. 5: sparse ICA vectors",
               "fig6": "Fig. 6: word groups per word", "fig7": "Fig. 7: example groups", "table3": "Table 3: ICA groups' scores",
               "fig8": "Fig. 8: no trend with frequency", "table4": "Table 4: Spearman between types"}
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
    paper: tuple[float, float]               # the lowest and highest of the paper's values (Bert-large's two runs)
    statistic: str = "r"                     # "r" (Pearson, Eq. 4's score) or "rho" (Spearman, Table 4)

    @property
    def reported(self) -> bool:
        """Whether the paper reports this correlation; where it does not (a second seed of a family other than
        Bert-large), `paper` holds its Bert-large pair's r, the value the verdict holds the claim against."""
        return self.item != "same-config.other"


_SAME = (SAME_CONFIG_R, SAME_CONFIG_R)


def _cells(table: dict, *pairs: tuple[str, str]) -> tuple[float, float]:
    """The lowest and highest of the paper's cells of `pairs` in `table` (the rule asks each to be reached)."""
    values = [table[p] for p in pairs]
    return min(values), max(values)

CLAIMS: tuple[Claim, ...] = (
    Claim("table2.same-config", "Bert-large, two seeds (Table 2)", (("bert-large", "bert-large"),), _SAME),
    Claim("same-config.other", "GPT, two seeds (not in the paper)", (("gpt", "gpt"),), _SAME),
    Claim("same-config.other", "ELMo, two seeds (not in the paper)", (("elmo", "elmo"),), _SAME),
    Claim("same-config.other", "Bert-base, two seeds (not in the paper)", (("bert-base", "bert-base"),), _SAME),
    Claim("table2.base-large", "Bert-base vs Bert-large (Table 2)", (("bert-base", "bert-large"),),
          _cells(_T2, ("Bert-base", "Bert-large-run1"), ("Bert-base", "Bert-large-run2"))),
    Claim("table2.cross-type", "Bert-large vs ELMo (Table 2)", (("bert-large", "elmo"),),
          _cells(_T2, ("ELMo", "Bert-large-run1"), ("ELMo", "Bert-large-run2"))),
    Claim("table2.cross-type", "Bert-large vs GPT (Table 2)", (("bert-large", "gpt"),),
          _cells(_T2, ("GPT", "Bert-large-run1"), ("GPT", "Bert-large-run2"))),
    Claim("table2.elmo-gpt", "ELMo vs GPT (Table 2)", (("elmo", "gpt"),), _cells(_T2, ("ELMo", "GPT"))),
    Claim("table2.bert-base-others", "Bert-base vs ELMo (Table 2)", (("bert-base", "elmo"),), _cells(_T2, ("ELMo", "Bert-base"))),
    Claim("table2.bert-base-others", "Bert-base vs GPT (Table 2)", (("bert-base", "gpt"),), _cells(_T2, ("GPT", "Bert-base"))),
    Claim("table4", "ELMo vs GPT, Spearman (Table 4)", (("elmo", "gpt"),), _cells(_T4, ("ELMo", "GPT")), "rho"),
    Claim("table4", "GPT vs Bert-large, Spearman (Table 4)", (("gpt", "bert-large"),), _cells(_T4, ("GPT", "Bert-large")),
          "rho"),
    Claim("table4", "ELMo vs Bert-large, Spearman (Table 4)", (("elmo", "bert-large"),), _cells(_T4, ("ELMo", "Bert-large")),
          "rho"),
)
