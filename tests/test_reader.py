"""What a reader sees: tables rendered for reading, the front page's scale and verdict table, the
chapters' re-run line, and the emergence chapter's generated result box."""

from __future__ import annotations

import itertools

import json

import numpy as np
import pandas as pd
import pytest

from studies.emergence import report as em
from twotower_lib import paper
from twotower_lib.book import front, tables
from twotower_lib.book.paper_tables import tokens_label
from twotower_lib.book.sections import SectionContext, find_section
from twotower_lib.book.profiles import get_profile, profile_dir


def test_a_table_reaches_the_reader_flat_rounded_and_without_empty_columns():
    df = pd.DataFrame({"case": ["a", "b"], "r": [0.123456, -0.5], "n": [np.int64(1234567), np.int64(3)],
                       "earlier": [np.nan, np.nan], "ok": [True, False]}).set_index("case")
    html = tables.reader_html(df)
    assert "<th>case</th>" in html and "earlier" not in html          # the index is a column; all-NaN column dropped
    assert "0.123" in html and "0.123456" not in html and "−0.5" in html
    assert "1,234,567" in html and ">yes<" in html and ">no<" in html
    assert html.count("<tr>") == 3                                     # one header row, not pandas' two
    named = tables.reader_html(pd.DataFrame({"bias_corrected": [0.1], "tower_0/loss": [1.0], "a<b": [2]}))
    assert "<th>bias_<wbr>corrected</th>" in named and "<th>tower_<wbr>0/<wbr>loss</th>" in named   # may break there
    assert "<th>a&lt;b</th>" in named                                  # and is escaped
    recipe = tables.reader_html(pd.DataFrame({"b": ["adam-whiten+refined15@0.03/logit"]}))
    assert "<td>adam-whiten+<wbr>refined15@<wbr>0.03/<wbr>logit</td>" in recipe   # a text cell breaks alike


def test_a_long_table_shows_its_first_rows_and_says_how_many():
    html = tables.reader_html(pd.DataFrame({"x": range(tables.MAX_ROWS + 5)}))
    assert html.count("<tr>") == tables.MAX_ROWS + 1 and f"of {tables.MAX_ROWS + 5:,} rows" in html


def test_multi_level_columns_are_joined():
    df = pd.DataFrame([[1.0, 2.0]], columns=pd.MultiIndex.from_tuples([("r", "Eq. 4"), ("r", "mean log p")]))
    assert list(tables.for_reader(df).columns) == ["r · Eq. 4", "r · mean log p"]


@pytest.mark.parametrize("tokens, label", [(0, "0"), (500_000, "500k"), (1 << 20, "1M"), (1 << 21, "2M"),
                                           (16_003_072, "16M"), (3_500_000, "3.5M")])
def test_token_counts_read_as_a_reader_writes_them(tokens, label):
    assert tokens_label(tokens) == label


def test_the_rerun_line_names_the_section_and_a_parameter_at_its_value():
    profile = get_profile("cpu")
    ctx = SectionContext(find_section("03_correlations"), profile, profile_dir("cpu"))
    line = ctx.rerun_markdown()
    top_n = profile.analysis.top_n   # the first numeric parameter: a value a reader would change, short to copy
    assert f"python -m twotower_lib run 03_correlations --profile cpu -p analysis.top_n {top_n}`" in line
    assert "`train.cases`" in line and "`analysis.bootstrap`" in line


def test_the_front_table_has_one_row_per_item_and_a_caveat_each():
    card = front.published_card("cpu")
    rows = front.verdict_rows(card)
    assert list(rows.columns) == ["claim", "the paper", front.OURS, "spread over seeds", "verdict",
                                  "division (a run left out)", "orientation (Eq. 3), signed r", "caveat"]
    assert len(rows) == len(card["rows"]) and rows["caveat"].str.len().gt(0).all()
    seeded = rows[rows["spread over seeds"].str.contains(r" to .*\(\d+ pairs", regex=True)]
    assert len(seeded) >= 5   # Table 2's cells and Table 4 rest on the seed study
    # every seed-decided correlation answers the partition question; the same-configuration ones orientation too
    assert seeded["division (a run left out)"].str.contains(r"(?:holds|unstable|not|no verdict): \d", regex=True).all()
    same = rows[rows["claim"].str.contains("two seeds")]
    assert same["orientation (Eq. 3), signed r"].str.contains(r"/\d resolved; signed median [+−]\d", regex=True).all()
    # how many pairs reach the paper's value, beside the range that may hold it on a few pairs
    assert seeded["spread over seeds"].str.contains(r"(?:none|\d+) reach(?:es)? 0\.\d\d", regex=True).sum() >= 5
    pair = lambda k, low: pd.Series({"unit": "seed pairs", "reach paper": k, "paper_low": low})
    assert [front._reaching(pair(k, low)) for k, low in ((0, 0.94), (1, 0.94), (2, 0.62))] == \
        [", none reach 0.94", ", 1 reaches 0.94", ", 2 reach 0.62"]
    assert front._reaching(pair(np.nan, 0.94)) == ""   # a study made before the count
    two = lambda k, k_high: pd.Series({"unit": "seed pairs", "reach paper": k, "reach paper high": k_high,
                                       "paper_low": 0.62, "paper_high": 0.72})   # Table 2's two Bert-large runs
    assert [front._reaching(two(k, k_high)) for k, k_high in ((2, 1), (1, 0), (0, 0))] == \
        [", 2 reach 0.62, 1 reaches 0.72", ", 1 reaches 0.62, none reach 0.72", ", none reach 0.62"]
    assert front._reaching(pd.Series({"unit": "runs", "reach paper": 3})) == ""


def test_a_verdict_decided_by_several_claims_names_what_decided_it():
    claims = pd.DataFrame({"claim": ["GPT, two seeds (x)", "ELMo, two seeds (x)"], "verdict": ["partly", "not"],
                           "above controls": [True, False]})
    # the item "pairs above their controls" counts families above their controls, not the claims' verdicts
    assert front._verdict_parts("controls", claims) == " (above their controls: GPT; not: ELMo)"
    assert front._verdict_parts("controls", claims.assign(**{"above controls": [True, True]})) == ""
    assert front._verdict_parts("same-config", claims) == " (the weakest: GPT partly; ELMo not)"
    assert front._verdict_parts("same-config", claims.assign(verdict=["not", "not"])) == ""
    table4 = pd.DataFrame({"claim": ["GPT vs Bert-large, Spearman (Table 4)",
                                     "ELMo, GPT, Bert-large vs frequency rank, Spearman (Table 4)"],
                           "verdict": ["partly", "not"], "above controls": [None, None]})
    assert front._verdict_parts("table4", table4) == " (the weakest: GPT vs Bert-large partly; ELMo, GPT, Bert-large vs frequency rank not)"
    card = front.published_card("cpu")
    rows = dict(zip([r["id"] for r in card["rows"]], front.verdict_rows(card)["verdict"]))
    assert "(the weakest" not in rows["controls"]


def _curves(end_r: list[float]) -> pd.DataFrame:
    pairs = [f"s{a}-s{b}" for a, b in itertools.combinations(range(1, 5), 2)]
    rows = [{"config": "c", "pair": pairs[i], "tokens": t, "r": r0 if t == 0 else r, "probe": "7 (whitened)",
             "model_type": "gpt"} for i, r in enumerate(end_r) for t, r0 in ((0, 0.01 * (i + 1)), (1000, None))]
    return pd.DataFrame(rows)


def test_the_emergence_result_box_applies_the_rule_to_the_end_of_training():
    box = em.result_box(_curves([0.9, 0.92, 0.95, 0.97]))
    assert "| `c` |" in box and "**reproduced**" in box
    assert "**not**" in em.result_box(_curves([0.01, -0.02, 0.03, 0.0]))
    # seed 1's towers with their roles swapped (its three pairs negative): the same division, the same verdict
    assert "**reproduced**" in em.result_box(_curves([-0.9, -0.92, -0.95, 0.97]))
    assert "median |r| of 0.94" in em.summary(_curves([0.9, 0.92, 0.95, 0.97]))
    assert "signed median −0.91" in em.summary(_curves([-0.9, -0.92, -0.95, 0.97]))


def test_each_claim_chapter_draws_the_paper_beside_ours():
    from twotower_lib.analysis import pos, word_groups
    from twotower_lib.analysis.frequency import FREQUENCY
    from twotower_lib.book import analyses, charts

    summary = pd.DataFrame([{"run": "gpt-s1", "against": a, "upos": t, "share_above": 0.7}
                            for a in ("median", "zero") for t in (*paper.FIG4_TAGS, "DET")])
    points = pos.claim_points(summary)
    assert list(points["row"].str.split().str[0]) == list(paper.FIG4_TAGS)          # the paper's seven, in its order
    verb = points[points["row"].str.startswith("VERB")].iloc[0]
    propn = points[points["row"].str.startswith("PROPN")].iloc[0]
    assert (verb["paper_low"], verb["paper_high"]) == (0.5, 1.0) and (propn["paper_low"], propn["paper_high"]) == (0.0, 0.5)

    g = {"share_one": 0.3, "share_none": 0.5, "mean_groups": 0.8}
    shares = word_groups.paper_points({"top words": g}, within_1=0.9)
    assert dict(zip(shares["paper_low"], shares["ours"])) == {paper.FIG5_WITHIN_1: 0.9,
                                                             paper.FIG6["share_one"]: 0.3,
                                                             paper.FIG6["share_none"]: 0.5}

    t4 = pd.DataFrame({"a": ["gpt-s1", "bert-base-s1"], "b": [FREQUENCY, FREQUENCY], "r": [0.3, 0.1],
                       "ci_low": [0.2, 0.0], "ci_high": [0.4, 0.2]})
    freq = analyses.frequency_points(t4).set_index("row")
    assert freq.loc["gpt-s1", "paper_low"] == 0.22 and pd.isna(freq.loc["bert-base-s1", "paper_low"])  # no Bert-base in Table 4
    for df in (points, shares, freq.reset_index()):
        spec = charts.paper_and_ours(df, "x", "t", percent=True, domain=(0, 1)).to_dict()
        assert len(spec["layer"]) >= 3


def test_a_chapter_summary_counts_its_verdicts(tmp_path, monkeypatch):
    from twotower_lib.book import scorecard

    monkeypatch.setattr(scorecard, "not_learned", lambda ctx, runs=None: [])   # the gate: test_pipeline
    ctx = SectionContext(find_section("06_frequency"), get_profile("tiny"), tmp_path / "tiny")
    assert scorecard.chapter_summary(ctx) == "This section recorded no paper item."
    scorecard.record(ctx, "fig8", "no trend", "reproduced", "")
    scorecard.record(ctx, "table4", "rho 0.1", "not", "")
    text = scorecard.chapter_summary(ctx)
    assert "checked 2 of the paper's items (1 reproduced, 1 not)" in text
    # each item by the name the front table gives it, so that two items of one table read apart
    assert "Fig. 8: no trend with frequency (reproduced); Table 4: Spearman between types (not)." in text


def test_the_front_page_counts_the_papers_own_claims_apart():
    """Beside the count of every item, the count of the items the paper itself reports (not those named "Not in
    the paper"), with "reproduced" said even at none."""
    rows = [{"item": "Table 2: x", "verdict": "partly"}, {"item": "Fig. 5: y", "verdict": "not"},
            {"item": "Not in the paper: z", "verdict": "reproduced"}, {"item": "Fig. 7: w", "verdict": "not attempted"}]
    assert front.paper_tally({"rows": rows}) == \
        "Of the 3 the paper itself reports: **0** reproduced, **1** partly, **1** not, **1** not attempted."
    assert front.paper_tally({"rows": rows[:1]}) == "Of the 1 the paper itself reports: **0** reproduced, **1** partly."


def test_the_first_screen_is_a_short_table_generated_from_the_results(tmp_path):
    """The front page's headline table (issue 105): at most six claims, no cell over 80 characters, ours as the seed
    study's median with its range, the scale as layers x width, tokens and top-N of the vocabulary, the verdict as
    the scorecard has it, and the same claim at Table 1's size read from the ladder's summary (so a changed ladder
    changes the cell); the README's block is at most 15 lines."""
    card = front.published_card("cpu")
    rows = front.headline_rows(card)
    assert 0 < len(rows) <= 6 and rows.map(lambda v: len(str(v))).to_numpy().max() <= 80
    by_id = {r["id"]: r for r in card["rows"]}
    claims = front.seed_claims("cpu").set_index("item")
    first = rows.iloc[0]
    assert first["verdict"] == front.MARK[by_id["table2.same-config"]["verdict"]].split(":")[0]
    assert first["ours (range)"].startswith(f"{claims.loc['table2.same-config', 'median']:.2f} (")
    p = get_profile("cpu")   # decided by the seed study: the recipe its study.json records (none: post-LN)
    trained = front._study_settings("cpu").get("bert-large", {})
    recipe = "learning" if trained.get("position") == "relative" else "post-LN"
    scale = f"measured at (top {p.analysis.top_n:,}/{p.data.vocab_size:,})"   # the top-N every row compares, said once
    assert first[scale] == (f"{p.model_config('bert-large').n_layer}×{p.model_config('bert-large').hidden} "
                            f"({recipe} recipe), {tokens_label(p.tokens_for('bert-large'))} tokens")
    ladder = pd.DataFrame({"rung": ["24x512"], "family": ["bert"], "partition: verdict": ["holds"],
                           "beyond word frequencies": [1.234], "learned context": [True], "tower parameters": [1]})
    moved = front.headline_rows(card, ladder)
    assert moved.iloc[0]["at Table 1's size"] == "24×512, post-LN recipe: holds, +1.23 nats of context"
    learning = pd.concat([ladder, ladder.assign(rung="24x512-pre", **{"beyond word frequencies": 0.2,
                                                                      "learned context": False})])
    assert front.headline_rows(card, learning).iloc[0]["at Table 1's size"] == \
        "24×512, learning recipe: no verdict, +0.20 nats of context"    # the gate, on its own rung
    assert (moved.iloc[1:]["at Table 1's size"] == "not attempted").all()
    (tmp_path / "ladder").mkdir()
    (tmp_path / "ladder" / "book.json").write_text(json.dumps({"parts": {"LADDER_TREND_SHORT": "**With size:** x."}}))
    assert front.size_sentence(tmp_path) == "**With size:** x. Every rung: [the ladder page](ladder.md)."
    assert "no committed report yet" in front.size_sentence(tmp_path / "none")
    block = front.readme_blocks("cpu")["VERDICTS"]
    assert len(block.strip().splitlines()) <= 15 and "**Tally**" in block


def test_the_context_sentence_names_each_familys_least_context_against_the_gate(tmp_path):
    (tmp_path / "p").mkdir()
    pd.DataFrame({"kind": ["case", "case", "case", "control"], "family": ["gpt", "gpt", "bert-large", "gpt"],
                  "beyond_word_frequencies": [0.9, 0.7, 0.1, -1.0]}).to_csv(tmp_path / "p" / "runs.csv", index=False)
    text = front.context_sentence("p", tmp_path)
    assert "GPT 0.70, Bert-large 0.10." in text and text.endswith("Bert-large: no verdict, the towers did not learn context.")
    assert front.context_sentence("none", tmp_path) == ""
