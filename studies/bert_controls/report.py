"""The default profile run with Bert-large's own controls too (`results/bert-controls/cpu.json`, a published
run: its README has the commands), as section 03 shows it: each model's controls, each case's r with each
model's quality profile (Eq. 4's score), and the probe that measured them. Committed because the default
profile runs the controls for GPT only; Bert-large's add their own training runs and probes. `write_book`
puts the tables into `results/bert-controls/book.json`, which the book reads.

    python -m studies.bert_controls
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from twotower_lib.artifacts import read_json
from twotower_lib.book import study_parts
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.book.tables import reader_html
from twotower_lib.probe.config import measured_with, probe_label

RESULTS = PROJECT_ROOT / "results" / "bert-controls"


def tables(published: dict) -> dict[str, pd.DataFrame]:
    """The published run's controls (per model and control) and quality correlations (per model and case)."""
    summary = published["sections"]["03_correlations"]["summary"]
    return {"controls": pd.DataFrame(summary["controls"]).set_index(["model", "control"]).sort_index(),
            "quality": pd.DataFrame(summary["quality"]).set_index(["quality of", "a"])[["r", "ci_low", "ci_high"]]}


def probe_sentence(published: dict) -> str:
    """Which probe measured the run, flagged where it is not the current one."""
    version, precondition = published["probe"]["version"], published["probe"]["config"].get("precondition")
    older = measured_with(version, precondition)
    return (f"{older}, so these are not this run's numbers." if older else
            f"Measured with probe version {probe_label(version, precondition)}.")


def book_parts(published: dict) -> dict[str, str]:
    t = tables(published)
    return {"BERT_CONTROLS_PROBE": probe_sentence(published),
            "BERT_CONTROLS_TABLE": reader_html(t["controls"].round(3)),
            "BERT_CONTROLS_QUALITY_TABLE": reader_html(t["quality"].round(3))}


def write_book(results: Path = RESULTS) -> Path:
    """Section 03's parts into `results/bert-controls/book.json`, from `cpu.json`."""
    source = Path(results) / "cpu.json"
    return study_parts.write(Path(results), book_parts(read_json(source)), {}, [source], "python -m studies.bert_controls")
