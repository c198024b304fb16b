"""The paper-shaped tables: the paper's values land beside ours, in the paper's layout."""

import re

import pandas as pd
import pytest

from twotower_lib import paper
from twotower_lib.book import paper_tables


def _pairs(rows):
    return pd.DataFrame(rows, columns=["a", "b", "n_tokens", "r", "ci_low", "ci_high"])


PAIRS = _pairs([("gpt-s1", "gpt-s2", 1000, 0.30, 0.25, 0.35),
                ("gpt-s1", "bert-large-s1", 1000, 0.10, 0.05, 0.15),
                ("gpt-s2", "bert-large-s1", 1000, 0.12, 0.07, 0.17),
                ("bert-large-s1", "bert-large-s2", 1000, 0.90, 0.86, 0.93)])
LOGMEAN = PAIRS.assign(r=PAIRS["r"] + 0.05)


def test_the_paper_values_are_the_printed_tables():
    assert paper_tables.paper_value("elmo-s1", "gpt-s1") == 0.91
    assert paper_tables.paper_value("gpt-s1", "elmo-s1") == 0.91  # symmetric
    assert paper_tables.paper_value("bert-large-s2", "bert-base-s1") == 0.62
    assert paper_tables.paper_value("bert-large-s1", "bert-large-s2") == 0.94
    assert paper_tables.paper_value("gpt-s1", "gpt-s2") is None  # the paper has one GPT run
    assert paper_tables.paper_value("gpt-s1", "bert-large-s2", "table4") == 0.65
    assert paper_tables.paper_value("bert-large-s1", "frequency rank", "table4") == 0.18
    assert paper_tables.paper_value("bert-large-s1", "bert-large-s2", "table4") is None
    # every off-diagonal cell of the paper's 5 x 5 Table 2 is there
    assert len(paper_tables.TABLE2) == 10 and len(paper_tables.TABLE4) == 6


def test_compare_joins_variants_paper_controls_and_verdicts():
    control = pd.DataFrame({"control": ["untrained", "independent", "untrained"], "model": ["gpt", "gpt", "bert-large"],
                            "r": [0.02, 0.20, 0.40]})
    out = paper_tables.compare({"score": PAIRS, "score_logmean": LOGMEAN}, "table2",
                               [("gpt-s1", "gpt-s2"), ("bert-large-s1", "bert-large-s2")], control).set_index(["a", "b"])
    assert out.loc[("gpt-s1", "gpt-s2"), "r_score_logmean"] == pytest.approx(0.35)
    assert pd.isna(out.loc[("gpt-s1", "gpt-s2"), "paper"]) and out.loc[("gpt-s1", "gpt-s2"), "same_config"]
    # a same-configuration pair is held against its own model's highest control, others against any model's
    assert out.loc[("gpt-s1", "gpt-s2"), "highest_control"] == 0.20
    assert out.loc[("bert-large-s1", "bert-large-s2"), "highest_control"] == 0.40
    assert out.loc[("gpt-s1", "bert-large-s1"), "highest_control"] == 0.40
    # CI [0.25, 0.35] above 0.20 but far from 0.94: partly; [0.86, 0.93] above 0.40 and within 0.1 of 0.94
    assert out.loc[("gpt-s1", "gpt-s2"), "verdict"] == "partly"
    assert out.loc[("bert-large-s1", "bert-large-s2"), "verdict"] == "reproduced"
    assert out.loc[("gpt-s1", "bert-large-s1"), "verdict"] == "not"  # 0.05 is below the 0.40 control
    assert out.loc[("gpt-s2", "bert-large-s1"), "verdict"] == "—"  # no paper row, not a same-config pair


def test_the_matrix_has_the_papers_layout_with_both_numbers_in_a_cell():
    comp = paper_tables.compare({"score": PAIRS}, "table2", [("bert-large-s1", "bert-large-s2")])
    cases = ["gpt-s1", "gpt-s2", "bert-large-s1", "bert-large-s2"]
    page = paper_tables.matrix_html(comp, cases, caption="Table 2")
    rows = re.findall(r"<tr>(.*?)</tr>", page)
    assert len(rows) == 1 + len(cases)  # header + one per case
    assert all(r.count("<td>") == len(cases) for r in rows[1:])
    assert "GPT<br><span class='tt-ci'>gpt-s1</span>" in page and "Bert-large-run2<br>" in page and "gpt-s2</th>" in page
    run1_run2 = re.search(r"<td><b>0\.90</b>.*?</td>", page).group(0)
    assert "[0.86, 0.93]" in run1_run2 and "paper 0.94" in run1_run2
    assert "<td>—</td>" in page  # gpt-s2 vs bert-large-s2 was not measured
    assert "white-space:nowrap" in page


def test_the_pairs_table_lists_paper_rows_first_with_both_variants():
    comp = paper_tables.compare({"score": PAIRS, "score_logmean": LOGMEAN}, "table2",
                                [("gpt-s1", "gpt-s2"), ("bert-large-s1", "bert-large-s2")], pd.DataFrame(
                                    {"control": ["untrained"], "model": ["gpt"], "r": [0.1]}))
    page = paper_tables.pairs_html(comp, {"score": "Eq. 4", "score_logmean": "mean of log p"})
    body = re.findall(r"<tr>(.*?)</tr>", page)
    assert "<th>paper</th>" in body[0] and "<th>Eq. 4</th>" in body[0] and "<th>verdict</th>" in body[0]
    assert "Bert-large-run1 vs Bert-large-run2<br><span class='tt-ci'>bert-large-s1 vs bert-large-s2</span>" in body[1]
    # † : outside its interval, printed with the bias-corrected estimate it belongs to
    assert "<td>0.94</td><td>0.90 [0.86, 0.93]</td><td>0.95 (bias-corrected 0.90 [0.86, 0.93])†</td>" in body[1]
    assert body[-1].count("<td>—</td>") >= 1  # a pair the paper has no row for comes last, without a paper value


def test_points_keep_the_papers_pairs_and_a_same_config_fallback():
    pts = paper_tables.points(PAIRS, "table2.x")
    assert [p["pair"] for p in pts] == ["gpt-s1 vs bert-large-s1", "bert-large-s1 vs bert-large-s2"]
    assert pts[1] == {"item": "table2.x", "pair": "bert-large-s1 vs bert-large-s2", "paper": 0.94, "ours": 0.90,
                      "ci_low": 0.86, "ci_high": 0.93, "bias_corrected": pytest.approx(0.895)}
    same = paper_tables.points(PAIRS.iloc[:1], "same", fallback=0.94)
    assert same[0]["paper"] == 0.94 and same[0]["ours"] == 0.30


def test_the_pos_claims_table_puts_the_paper_beside_each_run():
    from twotower_lib.analysis import pos

    fig4 = pd.DataFrame({"run": ["a"] * 6 + ["b"] * 3, "upos": ["VERB", "VERB", "PROPN", "PROPN", "NOUN", "X"]
                         + ["VERB", "VERB", "PROPN"], "score": [0.2, 0.4, 0.1, 0.3, -0.1, 1.0, -0.2, -0.1, -0.3],
                         "token_id": range(9)})
    table = pos.claims_table(pos.pos_summary(fig4))
    assert list(table.columns) == ["the paper (Fig. 4)", "tokens", "a", "b"]
    assert list(table.index.get_level_values(0)) == [t for t in paper.FIG4_TAGS for _ in range(2)]
    verb_rel, verb_zero = ("VERB", "median s > the run's median"), ("VERB", "median s > 0")
    assert table.loc[verb_rel, "the paper (Fig. 4)"] == "primary" and table.loc[verb_rel, "tokens"] == 2
    # run a's median over its tagged tokens is +0.25: VERB's +0.30 sits above it; b's is -0.20
    assert table.loc[verb_rel, "a"] == "✓ +0.30 vs +0.25" and table.loc[verb_zero, "a"] == "✓ +0.30 vs +0.00"
    assert table.loc[verb_rel, "b"] == "✓ -0.15 vs -0.20" and table.loc[verb_zero, "b"] == "✗ -0.15 vs +0.00"
    assert table.loc[("PROPN", "median s < the run's median"), "a"] == "✓ +0.20 vs +0.25"
    assert table.loc[("PROPN", "median s < 0"), "a"] == "✗ +0.20 vs +0.00"
    assert table.loc[("NOUN", "25-75% of s > 0"), "a"] == "✗ 0% above +0.00"
    assert table.loc[("ADJ", "25-75% of s > 0"), "tokens"] == 0 and table.loc[("ADJ", "25-75% of s > 0"), "a"] == "no token"


def test_a_comparison_is_printed_at_the_precision_that_decides_it():
    from twotower_lib.analysis.pos import compared

    assert compared(0.30, 0.25) == "+0.30 vs +0.25"
    assert compared(0.0012, 0.0) == "+0.001 vs +0.000" and compared(-0.00004, 0.0) == "-0.00004 vs +0.00000"
    assert compared(0.0, 0.0) == "+0.00 vs +0.00"           # equal: two decimals say so


def test_table1_has_the_papers_rows_with_its_values_beside_ours():
    configs = pd.DataFrame({"model_type": ["elmo", "gpt", "gpt", "bert"], "n_layer": [2, 4, 4, 4],
                            "hidden": [256, 128, 128, 96], "intermediate": [0, 512, 512, 384], "n_head": [0, 4, 4, 4]},
                           index=["elmo-s1", "gpt-s1", "gpt-s2", "bert-base-s1"])
    t1 = paper_tables.table1(configs)
    assert list(t1.columns) == ["ELMo", "GPT", "Bert-base"]
    assert list(t1.index) == ["Number of layers", "Hidden size", "Intermediate size", "Attention heads"]
    assert t1.loc["Hidden size", "ELMo"] == "256 (paper 4096)"
    assert t1.loc["Attention heads", "ELMo"] == "- (paper -)"
    assert t1.loc["Intermediate size", "Bert-base"] == "384 (paper 1024)"


def test_tower_order_reports_both_rules_and_the_margin():
    import types

    from twotower_lib.book import probe_outputs

    def art(mean_p, mean_logp, primary, agree):
        return types.SimpleNamespace(manifest={"ordering": {"mean_p": mean_p, "mean_logp": mean_logp,
                                                            "primary_tower": primary, "rules_agree": agree}})

    table = probe_outputs.tower_order({"a-s1": art([0.0098, 0.0096], [-6.77, -6.74], 0, False),
                                 "a-s2": art([0.0096, 0.0099], [-6.82, -6.74], 1, True)})
    assert table.loc["a-s1", "primary tower (mean p, Eq. 3)"] == 0 and table.loc["a-s1", "primary tower (mean log p)"] == 1
    assert not table.loc["a-s1", "rules agree"] and table.loc["a-s2", "rules agree"]
    assert table.loc["a-s1", "relative margin"] == pytest.approx(0.0002 / 0.0098)


def test_intervals_that_miss_their_estimate_are_marked():
    from twotower_lib.book.paper_tables import OUTSIDE, interval, mark_outside

    marked = "(bias-corrected 0.78 [0.75, 0.82])" + OUTSIDE       # the estimate the interval belongs to, inside it
    assert interval(0.73, 0.75, 0.82) == marked and interval(0.8, 0.75, 0.82) == "[0.75, 0.82]"
    assert interval(0.2, 0.25, 0.35, "{:+.2f}") == "(bias-corrected +0.30 [+0.25, +0.35])" + OUTSIDE
    text = "a vs b: r = 0.73 [0.75, 0.82] (x); c: r = 0.35, CI [0.35, 0.42]; d: r = −0.04 [−0.08, −0.01]"
    assert mark_outside(text) == text.replace("[0.75, 0.82]", marked)
    assert mark_outside(mark_outside(text)) == mark_outside(text)  # marks once
