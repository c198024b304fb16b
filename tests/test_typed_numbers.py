"""No result number typed by hand into prose.

A number a reader sees in the book comes from a run or from `results/` through code (a notebook's
output, or a placeholder a build fills). This test scans the prose a person writes — the book's
pages, the markdown cells of the notebooks, the README outside its generated blocks — for
result-like numbers: decimals, percentages, and counts or durations with units. The paper's own
values, equation and section numbers, years and a few design constants are allowed.

No page may hold one (`BASELINE` lists exceptions, now none). The changelog appendix is history and keeps its
numbers as they were measured.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HISTORY = {f"book/{name}.md" for name in ("changelog", "changelog_december", "changelog_november", "changelog_november_early",
                                           "changelog_probe_studies", "changelog_earlier", "changelog_earliest")}  # the instrument's history, as measured

# The paper's own numbers (its tables, its claims as the scorecard quotes them), and design constants.
PAPER = {"0.94", "0.91", "0.27", "0.26", "0.57", "0.61", "0.63", "0.72", "0.62", "0.93", "0.56", "0.65", "0.16",
         "0.22", "0.18", "1.45", "1.0", "2.5", "0.01", "80%", "45%", "13%", "1.78", "0.9", "0.98"}  # 0.9, 0.98: Adam's betas
# Design constants: the confidence level and its quantile, vocabulary and width choices.
CONSTANTS = {"95%", "97.5%", "30,522", "8,192", "4,096", "1,024", "0.05", "0.95"}  # + the probe's goals

# Pages that may still hold typed numbers, with how many (the count can only fall): none now.
BASELINE: dict[str, int] = {}

NUMBER = re.compile(r"(?<![\w./\\-])[-−+]?(?:\d+(?:\.\d+)?\s?(?:min|ms|GiB|MiB|GB|MB|k|M)\b|\d+\.\d+%?|\d+%|"
                    r"\d{1,3}(?:,\d{3})+)(?![\w.])")
STRIP = [re.compile(p, re.S) for p in (r"```.*?```", r"<!--.*?-->", r"\$\$.*?\$\$", r"\$[^$\n]+\$", r"`[^`\n]+`",
                                       r"\]\([^)]*\)", r"https?://\S+", r"\{[a-z]+\}`[^`]*`",
                                       r"(?:Sections?|Eqs?\.|Tables?|Figs?\.|Python|arXiv|CC BY-SA) ?[\d.]+")]


def prose(path: Path) -> str:
    """The prose of a page: a notebook's markdown cells, or a page's text outside generated blocks."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        cells = re.split(r"^# %%", text, flags=re.M)
        text = "\n".join(re.sub(r"^# ?", "", c, flags=re.M) for c in cells if c.startswith(" [markdown]"))
    text = re.sub(r"<!-- (\w+):start -->.*?<!-- \1:end -->", "", text, flags=re.S)  # the generated blocks
    for pattern in STRIP:
        text = pattern.sub(" ", text)
    return text


def typed_numbers(path: Path) -> list[str]:
    return [m.group(0).lstrip("-−+") for m in NUMBER.finditer(prose(path))
            if m.group(0).lstrip("-−+") not in PAPER | CONSTANTS]


def pages() -> list[str]:
    found = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "book").glob("*.md"))]
    found += [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "notebooks").glob("*.py"))]
    return [p for p in found + ["README.md"] if p not in HISTORY]


@pytest.mark.parametrize("page", pages())
def test_no_result_number_is_typed_into_prose(page):
    found = typed_numbers(ROOT / page)
    allowed = BASELINE.get(page, 0)
    assert len(found) <= allowed, (f"{page} types {len(found)} result-like number(s) by hand (allowed {allowed}): "
                                   f"{found[:20]}; insert them from the run or results/ with code")


def test_the_scanner_finds_typed_numbers_and_ignores_code_and_the_paper(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("Our r is 0.35 and the run took 31.5 min on 4,039,936 tokens; 12% agree.\n"
                    "The paper's 0.94 and Eq. 4 in 2022 stay. `r = 0.77` is code, $x = 0.5$ is math.\n"
                    "```python\nprint(0.123)\n```\n")
    assert typed_numbers(page) == ["0.35", "31.5 min", "4,039,936", "12%"]
