"""How a table reaches the reader: every pandas DataFrame a chapter displays is rendered by
`reader_html`, not by pandas' default, so that no index-style header, all-empty column, raw float or
thousand-row dump reaches the book. `enable` registers it in the running IPython kernel."""

from __future__ import annotations

import html
import math
import numbers
import re
from typing import Any

import numpy as np
import pandas as pd

MAX_ROWS = 40  # longer tables show their first rows and say how many there are


def cell(value: Any) -> str:
    """A value as the reader sees it: three decimals at most (a true minus sign), thousands separated,
    yes/no for truth values, a dash for a missing value."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}".replace("-", "−")
    if isinstance(value, numbers.Real):
        x = float(value)
        if math.isnan(x):
            return "—"
        if 0 < abs(x) < 0.001:
            return f"{x:.1e}".replace("-", "−")
        text = f"{x:,.0f}" if abs(x) >= 1000 else (f"{x:.3f}".rstrip("0").rstrip(".") or "0")
        return "0" if text in ("-0", "0") else text.replace("-", "−")
    if value is None or value is pd.NA or value is pd.NaT:
        return "—"
    return html.escape(str(value))


def keyed(key: str, value: str, shown: str | None = None) -> str:
    """`shown` (by default `value`) in a span that names the quantity it shows (`data-key`) and its value
    (`data-value`): wherever the book shows one key it must show one value, which the built book's self-check
    (tests/test_book.py) verifies across all pages."""
    return (f'<span class="tt-key" data-key="{html.escape(key)}" data-value="{html.escape(value)}">'
            f'{value if shown is None else shown}</span>')


def markdown_row(cells: Any) -> str:
    """One row of a Markdown table: each cell on one line with its `|` escaped, so that a cell holding |r| or
    |W| keeps the row's columns (an empty cell shows a dash)."""
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") or "—" for c in cells) + " |"


def markdown_table(header: Any, rows: Any) -> str:
    """A Markdown table of `header` and `rows` (each a sequence of cells), every cell through `markdown_row`."""
    header = list(header)
    return "\n".join([markdown_row(header), "|" + "---|" * len(header), *(markdown_row(r) for r in rows)]) + "\n"


FULL_WIDTH = '<div class="full-width">'


def full_width(markdown: str) -> str:
    """A Markdown part (a wide table) set across the page's margin, as the front's table: the theme's full-width
    block around it, with the blank lines that keep its inside Markdown (`study_parts.show` renders it as such)."""
    return f"{FULL_WIDTH}\n\n{markdown.rstrip()}\n\n</div>\n"


def for_reader(df: pd.DataFrame) -> pd.DataFrame:
    """`df` flattened for reading: named index levels become ordinary columns, multi-level column
    names are joined, and columns with no value at all are dropped."""
    out = df.copy()
    if isinstance(out.columns, pd.MultiIndex):
        out.columns = [" · ".join(str(p) for p in c if str(p)) for c in out.columns]
    if any(name is not None for name in out.index.names) or not isinstance(out.index, pd.RangeIndex):
        out = out.reset_index()
    out.columns = [str(c) for c in out.columns]
    return out.loc[:, out.notna().any(axis=0)] if len(out) else out


def reader_html(df: pd.DataFrame) -> str:
    """The HTML of `df` as a chapter shows it (`for_reader`, `cell`; names and text `breakable`), at most
    `MAX_ROWS` rows."""
    flat = for_reader(df)
    shown = flat.head(MAX_ROWS)
    head = "".join(f"<th>{breakable(c)}</th>" for c in shown.columns)
    body = "".join("<tr>" + "".join(f"<td>{breakable(v) if isinstance(v, str) else cell(v)}</td>" for v in row) + "</tr>"
                   for row in shown.itertuples(index=False, name=None))
    note = (f'<p class="table-note">The first {MAX_ROWS} of {len(flat):,} rows.</p>' if len(flat) > MAX_ROWS else "")
    return f'<table class="reader-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}'


def breakable(name: str) -> str:
    """A name (a column's, a file's, a setting's, a recipe's), escaped, that may break after a `_`, `/`, `+`, `@`,
    `:` or `=` (bias_corrected, levers/after.json, adam-whiten+refined15@0.03) as prose breaks at a space: unbroken,
    the longest name would set its column's width."""
    return re.sub(r"([_/+@:=])", r"\1<wbr>", html.escape(name))


def enable() -> None:
    """Render every DataFrame displayed in this IPython kernel with `reader_html` (no-op outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is not None:
        ip.display_formatter.formatters["text/html"].for_type(pd.DataFrame, reader_html)


def brief(text: str, limit: int = 90) -> str:
    """As many of `text`'s "; "-separated clauses as fit in `limit` characters (at least the first, cut at
    a comma, else a word)."""
    out = ""
    for clause in str(text).split(";"):
        clause = clause.strip()
        longer = f"{out}; {clause}" if out else clause
        if len(longer) > limit:
            cut = clause[:limit].rsplit(", " if ", " in clause[:limit] else " ", 1)[0]   # at a comma where one fits
            return (out + "; …") if out else cut.rstrip(",:(") + " …"
        out = longer
    return out
