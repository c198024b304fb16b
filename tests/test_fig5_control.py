"""Fig. 5's control study (`studies.fig5_control`): each seed's share within [-1, 1], trained and untrained, from a
pipeline run; the verdict over seeds the scorecard then shows."""

from __future__ import annotations

import json

import pytest

from studies.fig5_control import report
from twotower_lib import paper
from twotower_lib.book.profiles import get_profile
from twotower_lib.book.scorecard import decide_over_seeds
from twotower_lib.errors import UserError


@pytest.mark.slow
def test_the_control_measures_each_seed_trained_and_untrained_and_decides_fig5(built_book, tmp_path):
    root = built_book["pipe"].root                     # the tiny profile: its ICA reference is bert-large:1
    out = tmp_path / "fig5_control" / "shares.json"
    assert report.main(["--profile", "tiny", "--runs", str(root.parent), "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["run"] for r in rows] == ["bert-large-s1"]
    assert all(0 < r[k] <= 1 for r in rows for k in ("trained", "untrained")) and rows[0]["trained"] != rows[0]["untrained"]
    table = report.load(out)
    v = report.verdict(table, "tiny")
    assert v["verdict"] == paper.fig5_seed_verdict(table["trained"].tolist(), table["untrained"].tolist())
    report.write_book(out)
    row = {"id": "fig5", "item": "Fig. 5", "paper": "80%", "section": "05_ica", "ours": "81% of the values within [-1, 1]",
           "verdict": "reproduced", "note": "components scaled to unit variance"}
    decided = decide_over_seeds([row], "tiny", tmp_path)[0]
    assert decided["verdict"] == v["verdict"] and decided["decided_by"] == "seeds" and decided["spread"] == v["spread"]
    assert decided["ours"].startswith(v["seeds"]) and decided["ours"].endswith("This run: 81% of the values within [-1, 1]")
    assert decided["note"].startswith("verdict over seeds; the control is each seed's towers at 0 tokens")
    assert "Against the untrained towers" in report.sentence(table, "tiny")


def test_a_runs_folder_without_the_reference_family_is_refused_with_the_command(tmp_path):
    (tmp_path / "cpu" / "training").mkdir(parents=True)
    with pytest.raises(UserError, match="holds no bert-large run; train its seeds first:  python -m twotower_lib run "
                                        "01_training --profile cpu -p train.cases bert-large:1"):
        report.shares(tmp_path / "cpu", get_profile("cpu"))
