"""Distributions over seed pairs: the summary, the verdict rule, the sign flips, the scorecard and the
front page that read them, and the seed study's runner at the tiny profile."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from studies.seeds import book as seeds
from twotower_lib import paper
from twotower_lib.analysis import seed_spread
from twotower_lib.book import front, study_parts
from twotower_lib.book.paper_items import CLAIMS
from twotower_lib.book.scorecard import decide_over_seeds

ROOT = Path(__file__).resolve().parents[1]


def test_summarize_gives_the_median_and_the_central_range():
    s = seed_spread.summarize([0.1, 0.2, 0.3, 0.4, 0.5, np.nan])
    assert s["n"] == 5 and s["median"] == pytest.approx(0.3)
    assert s["low"] == pytest.approx(0.14) and s["high"] == pytest.approx(0.46)  # 10th and 90th percentile
    assert seed_spread.summarize([])["n"] == 0


@pytest.mark.parametrize("ours, controls, paper, expected", [
    ([0.8, 0.9, 0.99], [0.0, 0.1, -0.1], 0.94, "reproduced"),     # above the null, the paper inside our range
    ([-0.8, -0.9, 0.99], [0.0, 0.1, -0.1], 0.94, "reproduced"),   # the same division, seed 1's towers' roles swapped
    ([0.3, 0.4, 0.35], [0.0, 0.1, -0.1], 0.94, "partly"),         # above the null, the paper outside
    ([-0.4, 0.4, -0.3], [0.0, 0.1, -0.1], 0.4, "reproduced"),     # signs that disagree decide nothing
    ([0.5, 0.5, 0.05], [0.0, 0.1], 0.5, "partly"),                # leaving seed 1 out brings it down to the null
    ([0.3, 0.4, 0.35], [0.3, 0.5, -0.6], 0.94, "not"),            # a null as strong as the pairs (|r| of both)
    ([0.5, 0.6, 0.55], [0.0, 0.1], (0.55, 0.58), "reproduced"),   # a range of cells overlapping ours
    ([0.9], [0.0], 0.94, "not attempted"),                        # one pair: no seed can be left out
    ([0.9, 0.8, 0.85], [], 0.94, "not attempted"),                # no null
])
def test_the_verdict_rule(ours, controls, paper, expected):
    seed_a, seed_b = [1, 1, 2][:len(ours)], [2, 3, 3][:len(ours)]
    assert seed_spread.verdict(seed_a, seed_b, ours, controls, paper) == expected
    # flip the roles of one seed's towers: every pair it is in changes sign, and the verdict does not change
    flip = [-v if 1 in (a, b) else v for a, b, v in zip(seed_a, seed_b, ours)]
    assert seed_spread.verdict(seed_a, seed_b, flip, controls, paper) == expected


@pytest.mark.parametrize("above, expected", [
    ([True, True], "reproduced"), ([True, False], "partly"), ([False, False], "not"),
    ([True, None], "partly"),           # a family without its null cannot count as above it
    ([None, None], "not attempted"),
])
def test_the_controls_rule_takes_each_family_alone(above, expected):
    assert paper.controls_verdict(above) == expected


def test_above_controls_is_the_verdict_rules_first_test():
    assert seed_spread.above_controls([0.3, 0.4, 0.35], [0.0, 0.1, -0.1]) is True
    assert seed_spread.above_controls([0.3, 0.4, 0.35], [0.3, 0.5, 0.6]) is False
    assert seed_spread.above_controls([-0.3, -0.4, 0.35], [0.0, 0.1, -0.1]) is True   # |r| against |r|
    assert seed_spread.above_controls([0.3, 0.4, 0.35], [0.0, 0.1, -0.5]) is False
    assert seed_spread.above_controls([0.9], [0.0]) is None


def _study() -> seeds.SeedStudy:
    """Four GPT seeds, one of them (s4) with its towers' roles mirrored; s3's order rules disagree."""
    cases = pd.DataFrame({"kind": "case", "family": "gpt", "seed": [1, 2, 3, 4],
                          "run": [f"gpt-s{i}" for i in range(1, 5)], "primary_eq3": [1, 1, 1, 0],
                          "rules_agree": [True, True, False, True], "margin": [0.05, 0.04, 0.001, 0.06],
                          "beyond_word_frequencies": [1.0, 0.9, 1.1, 0.8]})
    untrained = cases.assign(kind="untrained", margin=[0.002, 0.001, 0.003, 0.002])
    rows, null, flat = [], iter([-0.05, 0.05, -0.02, 0.02, 0.01, -0.01]), iter([0.03, -0.04, 0.02, -0.01, 0.05, 0.0])
    for a in range(1, 5):
        for b in range(a + 1, 5):
            r = 0.5 * (-1 if 4 in (a, b) else 1)
            pair = {"family_a": "gpt", "family_b": "gpt", "a": f"gpt-s{a}", "b": f"gpt-s{b}", "seed_a": a, "seed_b": b}
            rows.append(pair | {"kind": "same", "r": r, "r_logmean": r, "rho": r, "sign_depends_on_rule": 3 in (a, b)})
            rows.append(pair | {"kind": "shuffled", "r": next(null), "r_logmean": 0.0, "rho": 0.0,
                                "sign_depends_on_rule": False})
            u = next(flat)
            rows.append(pair | {"kind": "untrained", "r": u, "r_logmean": u, "rho": u, "sign_depends_on_rule": False})
    return seeds.SeedStudy(pd.DataFrame(rows), pd.concat([cases, untrained], ignore_index=True),
                           {"seeds": 4, "families": ["gpt"]})


def test_a_claim_whose_runs_did_not_learn_context_gets_no_verdict():
    """`paper.CONTEXT_RULE`: one run 0.4 nats beyond word frequencies (the gate is 0.5) takes the claim's verdict and
    its division's to "no verdict", whatever its correlations; the least of its runs' values stands beside it."""
    study = _study()
    short = seeds.SeedStudy(study.pairs, study.runs.assign(beyond_word_frequencies=[1.0, 0.4, 1.1, 0.8] * 2), study.study)
    learned, not_learned = (seeds.claim_rows(s).set_index("claim").loc["GPT, two seeds (not in the paper)"]
                            for s in (study, short))
    assert learned["learned context"] and learned["beyond word frequencies"] == pytest.approx(0.8)
    assert not not_learned["learned context"] and not_learned["beyond word frequencies"] == pytest.approx(0.4)
    assert (not_learned["verdict"], not_learned["partition verdict"]) == (paper.NO_CONTEXT, paper.NO_CONTEXT)
    assert learned["verdict"] == "partly" and not_learned["median"] == learned["median"]   # the statistics stay
    unknown = seeds.SeedStudy(study.pairs, study.runs.drop(columns="beyond_word_frequencies"), study.study)
    assert seeds.claim_rows(unknown)["verdict"].eq(paper.NO_CONTEXT).all()   # a study without the loss: not passed


def test_a_failed_probes_pairs_are_marked_in_pairs_csv_and_left_out_of_every_claim(tmp_path):
    """`report.with_validity`: a case whose worst head is no better than its untrained towers' heads (s2 here) marks
    every trained pair it is in, its shuffled pairs too; the controls' pairs stand. The book leaves those out."""
    from studies.seeds.report import with_validity

    study = _study()
    runs = study.runs.assign(head_loss=[5.0, 7.5, 5.1, 5.2] + [7.0] * 4)
    pairs = with_validity(study.pairs, runs)
    failed = pairs[~pairs["valid probes"]]
    assert set(failed["kind"]) == {"same", "shuffled"} and all("gpt-s2" in (a, b) for a, b in zip(failed["a"], failed["b"]))
    assert len(failed) == 6 and pairs.loc[pairs["kind"] == "untrained", "valid probes"].all()
    assert with_validity(study.pairs, runs.query("kind == 'case'"))["valid probes"].all()   # no untrained yet: not judged
    d = tmp_path / "cpu"
    d.mkdir()
    pairs.to_csv(d / "pairs.csv", index=False)
    runs.to_csv(d / "runs.csv", index=False)
    (d / "study.json").write_text(__import__("json").dumps(study.study | {"families": ["gpt"]}))
    loaded = seeds.load("cpu", tmp_path)
    trained = loaded.pairs[loaded.pairs["kind"] != "untrained"]
    assert loaded.study["failed probe pairs"] == 6 and "gpt-s2" not in set(trained["a"]) | set(trained["b"])
    row = seeds.claim_rows(loaded).set_index("claim").loc["GPT, two seeds (not in the paper)"]
    assert row["pairs"] == 3
    assert "6 pairs of a run whose probe failed are left out" in seeds.section_markdown(loaded, "cpu")


def test_a_claim_is_answered_as_two_questions():
    """s4's towers are mirrored: the signed median is 0, the division (|r|) repeats in every pair, and Eq. 3's
    orientation does not repeat between resolved runs; s3's margin is within the untrained towers'. The verdict
    judges the division: the paper's 0.94 lies above every pair's |r| of 0.5, so "partly"."""
    row = seeds.claim_rows(_study()).set_index("claim").loc["GPT, two seeds (not in the paper)"]
    assert row["signed median"] == pytest.approx(0.0) and row["median"] == pytest.approx(0.5)
    assert row["verdict"] == "partly"
    assert row["partition median |r|"] == pytest.approx(0.5) and row["partition verdict"] == "holds"
    assert row["partition loo low"] == pytest.approx(0.5) and row["partition shuffled max |r|"] == pytest.approx(0.05)
    assert row["orientation verdict"] == "not" and row["orientation resolved runs"] == 3
    assert row["controls' high"] < 0.05                 # the untrained pairs, not the shuffled labels


def test_a_claim_the_paper_does_not_report_says_so_in_its_paper_cell():
    """A family the paper trained once is held against the paper's Bert-large pair: the section's table marks that
    pair's r and says under the table whose it is (the claim's label says "not in the paper"), instead of showing it
    as the family's own."""
    table = seeds.section_markdown(_study(), "cpu")
    row = next(line for line in table.splitlines() if line.startswith("| GPT, two seeds"))
    assert row.split(" | ")[1] == f"{paper.SAME_CONFIG_R}{seeds.HELD_TO_BERT_LARGE}"
    assert f"\\{seeds.HELD_TO_BERT_LARGE} The paper's Bert-large pair" in table.split(":::{dropdown}")[0]
    assert not next(c for c in CLAIMS if c.label.startswith("GPT, two seeds")).reported
    assert CLAIMS[0].reported and CLAIMS[0].label.startswith("Bert-large, two seeds")


def test_the_seed_section_folds_each_claims_division_and_orientation_under_its_verdicts():
    """Section 03's result box: claim, paper, ours, controls and verdict on the page; every claim's division and
    orientation one click away, in a dropdown under it (issue 105: the audit folded, complete)."""
    shown, folded = seeds.section_markdown(_study(), "cpu").split(":::{dropdown}")
    claims = [line.split(" | ")[0] for line in shown.splitlines() if line.startswith("| ") and "---" not in line][1:]
    rows = [line.split(" | ") for line in shown.splitlines() if line.startswith("| ") and "---" not in line]
    assert claims and all(len(r) == 8 for r in rows)                 # one number per cell, each column labelled
    assert all(0 <= float(r[2]) <= 1 and r[4].split()[0].isdigit() for r in rows[1:]) and "seed pairs" in rows[0][4]
    audit = [line for line in folded.splitlines() if line.startswith("| ") and "---" not in line]
    assert audit[0].startswith("| claim | division") and [a.split(" | ")[0] for a in audit[1:]] == claims
    assert all(line.count(" | ") == 2 and "—" != line.split(" | ")[1] for line in audit[1:2])


def test_a_claims_text_ceiling_is_the_median_over_its_pairs_and_corrects_its_division():
    """Each pair's ceiling is sqrt(rel_a * rel_b) of its runs' reliabilities; a run without one leaves the claim
    without a ceiling; a ceiling below the floor is shown without a corrected |r|."""
    from dataclasses import replace

    rel = pd.DataFrame({"text_reliability": [0.81, 0.64, 0.49, 0.36], "text_reliability_spearman": [0.7, 0.6, 0.5, 0.4]},
                       index=[f"gpt-s{i}" for i in range(1, 5)])
    claim = "GPT, two seeds (not in the paper)"
    row = seeds.claim_rows(replace(_study(), reliability=rel)).set_index("claim").loc[claim]
    median = lambda col: np.median([np.sqrt(rel[col].iloc[a] * rel[col].iloc[b]) for a in range(4) for b in range(a + 1, 4)])
    assert row["text ceiling"] == pytest.approx(median("text_reliability"))
    assert front.ceiling_note(row) == f"; text ceiling {median('text_reliability'):.2f}, " \
                                      f"corrected {0.5 / median('text_reliability'):.2f}"
    assert np.isnan(seeds.claim_rows(replace(_study(), reliability=rel.iloc[:3])).set_index("claim").loc[claim, "text ceiling"])
    # a Spearman claim reads the reliability of the scores' ranks; without that column it has no ceiling
    pairs = _study().pairs.query("kind == 'same'")
    assert seeds.claim_ceiling(replace(_study(), reliability=rel), pairs, "rho") == \
        pytest.approx(median("text_reliability_spearman"))
    assert np.isnan(seeds.claim_ceiling(replace(_study(), reliability=rel[["text_reliability"]]), pairs, "rho"))
    low = pd.Series({"text ceiling": 0.2, "partition median |r|": 0.5})
    assert front.ceiling_note(low) == "; text ceiling 0.20: too low to correct"
    assert front.ceiling_note(seeds.claim_rows(_study()).iloc[0]) == ""     # no reliabilities measured


def test_the_frequency_claim_reads_the_ceiling_of_its_runs_ranks():
    """A run against frequency rank: the rank is counted on the training text (no validation noise), so each run's
    ceiling is sqrt(rel) of its ranks' reliability and the claim's the median over its case runs, shown in place
    of a division; a run without a reliability leaves the claim without a ceiling."""
    from dataclasses import replace

    study = _study()
    study = replace(study, runs=study.runs.assign(rho_frequency_rank=[-0.1, -0.05, 0.0, 0.02, 0.01, 0.0, -0.01, 0.02]))
    rel = pd.DataFrame({"text_reliability": [0.9, 0.9, 0.9, 0.9], "text_reliability_spearman": [0.81, 0.64, 0.49, 0.36]},
                       index=[f"gpt-s{i}" for i in range(1, 5)])
    row = seeds.claim_rows(replace(study, reliability=rel)).set_index("claim").loc[seeds.FREQUENCY_CLAIM]
    assert row["unit"] == "runs" and row["text ceiling"] == pytest.approx(np.median([0.9, 0.8, 0.7, 0.6]))
    assert front.division_cell(row) == "no division; text ceiling 0.75"
    without = seeds.claim_rows(replace(study, reliability=rel.iloc[:3])).set_index("claim").loc[seeds.FREQUENCY_CLAIM]
    assert np.isnan(without["text ceiling"]) and front.division_cell(without) == ""


def test_sign_flips_say_whether_a_near_tie_or_a_mirrored_division():
    s = _study()
    flips = seed_spread.sign_flips(s.pairs[s.pairs["kind"] == "same"], s.runs[s.runs["kind"] == "case"])
    assert set(zip(flips["a"], flips["b"])) == {("gpt-s1", "gpt-s4"), ("gpt-s2", "gpt-s4"), ("gpt-s3", "gpt-s4")}
    reading = dict(zip(zip(flips["a"], flips["b"]), flips["reading"]))
    assert reading[("gpt-s3", "gpt-s4")] == "near tie" and reading[("gpt-s1", "gpt-s4")] == "mirrored"


def test_family_summary_counts_pairs_controls_and_rule_dependence():
    s = _study()
    t = seed_spread.family_summary(s.pairs, s.runs).iloc[0]
    assert t["pairs"] == 6 and t["control pairs"] == 12   # six untrained and six shuffled-label pairs
    assert t["median r"] == pytest.approx(0.0) and t["median |r|"] == pytest.approx(0.5)
    assert t["sign depends on rule"] == pytest.approx(0.5)


def _write(study: seeds.SeedStudy, root: Path, profile: str) -> Path:
    """`study` committed as the seed study of `profile` under `root/seeds/`, its book parts written; `root`
    is the results folder the book reads."""
    d = root / "seeds" / profile
    d.mkdir(parents=True)
    study.pairs.to_csv(d / "pairs.csv", index=False)
    study.runs.to_csv(d / "runs.csv", index=False)
    (d / "study.json").write_text('{"seeds": 4, "families": ["gpt"]}')
    seeds.write_book(root / "seeds")
    return root


def test_the_scorecard_decides_correlations_over_seeds_and_keeps_the_run_as_a_point(tmp_path):
    results = _write(_study(), tmp_path, "p")
    rows = [{"id": "same-config.other", "item": "x", "paper": "y", "section": "03_correlations",
             "ours": "gpt-s1 vs gpt-s2: r = 0.50", "verdict": "partly", "note": "controls: ..."},
            {"id": "fig5", "item": "x", "paper": "y", "section": "05_ica", "ours": "80%", "verdict": "reproduced", "note": ""}]
    out = decide_over_seeds(rows, "p", results)
    assert out[0]["verdict"] == "partly"  # |r| 0.5 in every pair: above the untrained pairs, below the paper's 0.94
    assert "median |r| 0.50" in out[0]["ours"] and "This run: gpt-s1 vs gpt-s2" in out[0]["ours"]
    assert out[1] == rows[1]
    assert decide_over_seeds(out, "p", results) == out     # a record decided before is decided anew, not twice
    assert decide_over_seeds(rows, "no-such-profile", results) == rows
    controls = [{"id": "controls", "item": "x", "paper": "y", "section": "03_correlations",
                 "ours": "gpt-s1 vs gpt-s2: r = 0.50 (not run: untrained, independent)", "verdict": "partly", "note": ""}]
    decided = decide_over_seeds(controls, "p", results)[0]
    # GPT's median |r| (0.5) is above its untrained pairs' 90th percentile: the only family decides 'reproduced'
    assert decided["verdict"] == "reproduced" and decided["decided_by"] == "seeds"
    assert "GPT, two seeds: median |r| 0.50, above its controls' 6 pairs" in decided["ours"]


def test_a_profiles_parts_are_shown_at_that_profile_and_elsewhere_say_where_they_were_measured(tmp_path):
    results = _write(_study(), tmp_path, "p")
    section = study_parts.part("SEEDS_SECTION", "p", results)
    assert section.startswith("Seed study of profile `p`") and "GPT, two seeds" in section
    assert "Not measured at profile `q`: committed for `p` only" in study_parts.part("SEEDS_SECTION", "q", results)
    assert study_parts.load(results)[0]["SEEDS_SECTION@p"] == section       # without a profile: full names
    from IPython.display import HTML, Markdown

    from twotower_lib.book.render import SavedChart

    assert isinstance(study_parts.show("SEEDS_FAMILY_TABLE", "p", results), HTML)          # a reader table
    assert isinstance(study_parts.show("SEEDS_STRIPS_CHART", "p", results), SavedChart)    # a chart, drawn offline
    assert isinstance(study_parts.show("SEEDS_STRIPS_CHART", "q", results), Markdown)      # where it is not measured
    claims = front.seed_claims("p", results / "seeds")
    assert list(claims["claim"]) == list(seeds.claim_rows(_study())["claim"]) and claims["paper_low"].iloc[0] == 0.94
    (results / "seeds" / "p" / "pairs.csv").write_text("kind\n")          # the study's results changed: stale
    assert study_parts.stale(results) and "python -m studies.seeds.book" in study_parts.stale(results)[0]


def test_the_shortfall_table_summarises_the_single_tower_probes():
    single = pd.DataFrame({"family": ["gpt", "gpt", "elmo"], "seed": [1, 2, 1], "run": ["a", "b", "c"],
                           "val_loss_model": 6.0, "val_loss_head": [6.01, 6.05, 5.9], "shortfall": [0.01, 0.05, -0.1],
                           "epochs": 6})
    s = seeds.SeedStudy(_study().pairs, _study().runs, {}, single)
    t = seeds.shortfall_table(s)
    assert t.loc["GPT", "single-tower probes"] == 2 and t.loc["GPT", "largest shortfall"] == pytest.approx(0.05)
    assert t.loc["ELMo", "median shortfall"] == pytest.approx(-0.1)
    assert seeds.shortfall_table(_study()).empty


def test_claim_rows_recompute_from_the_table_by_the_rule(tmp_path):
    s = _study()
    t = seeds.claim_rows(s)
    row = t[t["claim"].str.startswith("GPT")].iloc[0]
    same = s.pairs[s.pairs["kind"] == "same"]
    ctrl = s.pairs[s.pairs["kind"] == "untrained"]["r"]
    assert row["median"] == pytest.approx(np.median(same["r"].abs())) and row["pairs"] == 6
    assert row["signed median"] == pytest.approx(np.median(same["r"]))
    assert row["verdict"] == seed_spread.verdict(same["a"], same["b"], same["r"], ctrl, 0.94)
    assert row["reach paper"] == (same["r"].abs() >= 0.94).sum()   # the pairs at or above the paper's value
    k = int(row["reach paper"])
    assert seeds._fmt(row).endswith(f"over 6 seed pairs, {k or 'none'} reaching the paper's 0.94")
    two = row.copy()   # a claim the paper gives two values (run 1, run 2): how many pairs reach each
    two["paper"], two["reach paper"], two["reach paper high"] = (0.72, 0.62), 1, 0
    assert seeds._fmt(two).endswith(", 1 reaching the paper's 0.62, none its 0.72")
    two["reach paper"] = 0
    assert seeds._fmt(two).endswith(", none reaching the paper's 0.62")


def test_the_readme_blocks_are_up_to_date_with_the_committed_results():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, block in front.readme_blocks("cpu").items():
        assert block in text, (f"README.md's {name} block is out of date with the committed results (results/profiles/"
                               "cpu.json, results/seeds/cpu/, results/gpu/book.json): run  python -m twotower_lib "
                               "publish --readme")


def test_a_book_page_with_an_unknown_placeholder_fails_the_build():
    from twotower_lib.book.build import fill_placeholders
    from twotower_lib.errors import UserError

    with pytest.raises(UserError, match="NO_SUCH"):
        fill_placeholders("<!-- NO_SUCH: nothing -->", {"profile": "tiny", "rows": [], "counts": {}, "points": []})


@pytest.mark.slow
def test_the_seed_study_runs_resumes_and_reports_at_the_tiny_profile(tmp_path):
    env = {**__import__("os").environ, "TWOTOWER_RUNS": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "studies.seeds", "--profile", "tiny", "--seeds", "2", "--families", "gpt",
           "--controls", "shuffled,untrained,independent", "--results", str(tmp_path / "out")]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    pairs = pd.read_csv(tmp_path / "out" / "tiny" / "pairs.csv")
    assert sorted(pairs["kind"]) == ["independent", "same", "shuffled", "untrained"]
    assert pairs["valid probes"].dtype == bool   # each pair says whether both its probes count
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)  # resumes: nothing retrained
    assert again.returncode == 0 and "training" not in again.stderr
    assert pd.read_csv(tmp_path / "out" / "tiny" / "pairs.csv").equals(pairs)
    exports = sorted(p.relative_to(tmp_path / "out" / "tiny" / "probes").as_posix()
                     for p in (tmp_path / "out" / "tiny" / "probes").rglob("*.json"))
    assert exports == ["cases/gpt-s1.json", "cases/gpt-s2.json", *(f"independent/gpt-k1-s{s}.json" for s in range(1, 5)),
                       "pairs/gpt-pair-1.json", "pairs/gpt-pair-2.json", "untrained/gpt-s1.json", "untrained/gpt-s2.json"]
    __import__("shutil").rmtree(tmp_path / "runs")   # a new machine: only the committed exports are left
    fresh = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert fresh.returncode == 0 and "training" not in fresh.stderr and "probing" not in fresh.stderr
    assert pd.read_csv(tmp_path / "out" / "tiny" / "pairs.csv").equals(pairs)
    untrained = tmp_path / "out" / "tiny" / "probes" / "untrained" / "gpt-s2.json"
    before = __import__("json").loads(untrained.read_text())
    untrained.unlink()   # an untrained control to make again with no trained run here: one step, not the whole run
    init = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert init.returncode == 0, init.stdout[-2000:] + init.stderr[-2000:]
    root = tmp_path / "runs" / "tiny"
    assert __import__("json").loads((root / "seeds" / "init" / "gpt-s2" / "manifest.json").read_text())["steps"] == 1
    assert not [*root.glob("**/training/gpt-s2/manifest.json")]    # the case itself was not trained again
    assert __import__("json").loads(untrained.read_text())["manifest"]["identity"] == before["manifest"]["identity"]
    assert pd.read_csv(tmp_path / "out" / "tiny" / "pairs.csv").equals(pairs)
    rel = subprocess.run(cmd + ["--reliability"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert rel.returncode == 0, rel.stdout[-2000:] + rel.stderr[-2000:]
    runs = pd.read_csv(tmp_path / "out" / "tiny" / "reliability.csv")
    assert sorted(runs["run"]) == ["gpt-s1", "gpt-s2"]
    assert (runs[["text_reliability", "text_reliability_spearman"]].stack().dropna().abs() <= 1).all()
    assert (runs["val_loss_cooperative"] == runs["val_loss_cooperative_committed"]).all()
    assert (runs["primary_eq3"] == runs["primary_eq3_committed"]).all()
    check = __import__("json").loads((tmp_path / "out" / "tiny" / "reliability.json").read_text())["reproduced_pairs"]
    # the same probes: r as pairs.csv rounds it (6 significant digits), no sign flipped
    assert check["pairs"] == 1 and check["max |delta |r||"] < 1e-6 and check["sign flips"] == 0
    none = subprocess.run(cmd + ["--reliability", "--results", str(tmp_path / "none")], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert none.returncode != 0 and "no committed report" in none.stderr     # nothing to measure against
    bad = subprocess.run(cmd[:3] + ["--profile", "tiny", "--families", "nope"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and "nope" in bad.stdout


def test_the_independent_control_covers_the_profiles_control_models_unless_named(capsys):
    """`--independent` names the families whose single-tower pairs are trained; by default the profile's
    `analysis.control_models` (GPT at `cpu`); a family outside `--families` is refused before any work."""
    from studies.seeds.runner import cli, independent_families
    from twotower_lib.book.profiles import get_profile

    cpu, families = get_profile("cpu"), ("gpt", "bert-large", "bert-base", "elmo")
    assert independent_families(cpu, families, None) == ["gpt"]
    assert independent_families(cpu, families, ("bert-large", "elmo")) == ["bert-large", "elmo"]
    assert cli(["--profile", "cpu", "--families", "gpt", "--independent", "elmo"]) == 1
    assert "--independent 'elmo': name families of --families (gpt)" in capsys.readouterr().out


def test_the_study_reuses_a_single_tower_run_the_pipeline_trained_and_trains_the_others_itself(tmp_path):
    """At `cpu` the pipeline no longer trains the independent control, but a run it trained earlier (the same
    weights) is read where it is instead of being trained again."""
    from studies.seeds.runner import Layout
    from twotower_lib.book.profiles import get_profile

    layout = Layout(get_profile("cpu"), tmp_path)
    assert layout.run_dir("gpt", 1, towers=2) == tmp_path / "training" / "gpt-s1"          # a case of the pipeline
    assert layout.run_dir("gpt", 1, towers=1) == tmp_path / "seeds" / "training" / "gpt-k1-s1"
    (tmp_path / "training" / "gpt-k1-s1").mkdir(parents=True)
    (tmp_path / "training" / "gpt-k1-s1" / "manifest.json").write_text("{}")
    assert layout.run_dir("gpt", 1, towers=1) == tmp_path / "training" / "gpt-k1-s1"


def test_the_study_takes_the_pipelines_probe_of_a_shared_case_only_where_it_is_the_same_artifact(tmp_path):
    """`share_pipeline_probes`: the pipeline's probe of a case is copied into the study where its settings, probe
    version and weights (sha256) are the study's; another probe setting or other weights are probed again."""
    import json
    from dataclasses import asdict

    from studies.seeds.runner import Layout, share_pipeline_probes
    from twotower_lib.artifacts import sha256_file
    from twotower_lib.book.profiles import get_profile
    from twotower_lib.probe.config import PROBE_VERSION

    prof = get_profile("cpu")
    cfg, layout = prof.probe_config(replicate=False), Layout(prof, tmp_path)
    for name, weights in (("bert-large-s1", b"one"), ("bert-large-s2", b"two"), ("gpt-s1", b"three")):
        run = tmp_path / "training" / name
        run.mkdir(parents=True)
        (run / "manifest.json").write_text("{}")
        (run / "model.safetensors").write_bytes(weights)
        probe = asdict(cfg) if name != "gpt-s1" else asdict(prof.probe_config(replicate=True))
        sha = sha256_file(run / "model.safetensors") if name != "bert-large-s2" else "0" * 64   # s2: other weights
        (tmp_path / "probing" / name).mkdir(parents=True)
        (tmp_path / "probing" / name / "manifest.json").write_text(json.dumps(
            {"identity": {"version": PROBE_VERSION, "weights_sha256": sha, "probe": probe}}))
    assert share_pipeline_probes(layout, ["bert-large-s1", "bert-large-s2", "gpt-s1", "elmo-s1"], cfg) == ["bert-large-s1"]
    assert (layout.probe_dir("cases", "bert-large-s1") / "manifest.json").exists()
    assert not layout.probe_dir("cases", "bert-large-s2").exists() and not layout.probe_dir("cases", "gpt-s1").exists()
    assert share_pipeline_probes(layout, ["bert-large-s1"], cfg) == []       # already there: kept, not copied again
