"""Every Markdown table the reader sees has as many cells in each row as in its header: the README, the book's
pages and every committed study part (a `|` inside a cell must be escaped, or the row splits)."""

import json
import re
from pathlib import Path

from twotower_lib.book.tables import FULL_WIDTH

ROOT = Path(__file__).resolve().parent.parent


def table_rows(text: str) -> list[list[str]]:
    """Each Markdown table of `text` as its rows' cell counts' source lines (header first)."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.strip().startswith("|"):
            current.append(line.strip())
        else:
            if len(current) >= 2 and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", current[1]):
                tables.append(current)
            current = []
    return tables


def cells(row: str) -> int:
    return len(re.split(r"(?<!\\)\|", row.strip().strip("|")))


def broken(text: str) -> list[str]:
    out = []
    for table in table_rows(text):
        width = cells(table[0])
        out += [f"{row[:80]}… ({cells(row)} cells, header {width})" for row in table[2:] if cells(row) != width]
    return out


def test_a_row_with_an_unescaped_bar_is_caught():
    assert broken("| a | b |\n|---|---|\n| x | \\|r\\| |\n") == []
    assert broken("| a | b |\n|---|---|\n| x | |r| |\n")


def test_every_markdown_table_keeps_its_columns():
    texts = {"README.md": (ROOT / "README.md").read_text()}
    texts |= {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "book").glob("*.md"))}
    for path in sorted((ROOT / "results").glob("*/book.json")):
        for name, part in json.loads(path.read_text())["parts"].items():
            if not part.lstrip().startswith(("{", "<")) or part.startswith(FULL_WIDTH):   # Markdown, or across the margin
                texts[f"{path.relative_to(ROOT)}:{name}"] = part
    bad = {where: rows for where, text in texts.items() if (rows := broken(text))}
    assert not bad, bad
