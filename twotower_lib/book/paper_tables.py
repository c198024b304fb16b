"""The paper's correlation tables in the paper's shape, with the paper's number beside ours.

Table 2 (Pearson r among the five cases) and Table 4 (Spearman rho among three cases and the
frequency rank) are written here once, as printed. Our cases are named "<model>-s<seed>"; the
paper's five are ELMo, GPT, Bert-base and two Bert-large runs, so `PAPER_CASES` maps run 1 of each
model (and run 2 of Bert-large) to the paper's row. A case the paper has no row for (a second GPT
seed, the controls) gets our number and no paper number. Table 4 names one Bert-large without
saying which run: both of ours are held against it.

`compare` joins a long correlation frame (`analyses.correlations`: a, b, r, ci_low, ci_high) with the
paper; `matrix_html` lays it out as the paper's square table (ours, its interval, the paper's
value in every cell) and `pairs_html` as one readable row per pair with the verdict.
"""

from __future__ import annotations

import html
from typing import Callable, Mapping

import pandas as pd

from twotower_lib.analysis.frequency import FREQUENCY  # the extra "case" of Table 4
from twotower_lib.analysis.uncertainty import bias_corrected, with_bias_corrected
from twotower_lib import paper
from twotower_lib.paper import TABLE1
from twotower_lib.run_names import model_of

PAPER_CASES = {"elmo-s1": "ELMo", "gpt-s1": "GPT", "bert-base-s1": "Bert-base",
               "bert-large-s1": "Bert-large-run1", "bert-large-s2": "Bert-large-run2"}
TABLE4_CASES = {"elmo-s1": "ELMo", "gpt-s1": "GPT", "bert-large-s1": "Bert-large", "bert-large-s2": "Bert-large",
                FREQUENCY: "Frequency Rank"}


MODEL_NAMES = {"elmo": "ELMo", "gpt": "GPT", "bert-base": "Bert-base", "bert-large": "Bert-large"}
_TABLE1_ROWS = (("Number of layers", "n_layer"), ("Hidden size", "hidden"), ("Intermediate size", "intermediate"),
                ("Attention heads", "n_head"))


def table1(configs: pd.DataFrame) -> pd.DataFrame:
    """Table 1's layout (a row per quantity, a column per model), each cell "ours (paper ...)".
    `configs`: one row per run, indexed by run name, with columns n_layer, hidden, intermediate,
    n_head and model_type; the first run of each model stands for it."""
    columns = {}
    for run, row in configs.iterrows():
        model = model_of(run)
        if model in columns:
            continue
        paper = TABLE1.get(MODEL_NAMES.get(model, ""))
        cells = []
        for i, (_, key) in enumerate(_TABLE1_ROWS):
            ours = "-" if row["model_type"] == "elmo" and key in ("intermediate", "n_head") else str(row[key])
            cells.append(ours if paper is None else f"{ours} (paper {'-' if paper[i] is None else paper[i]})")
        columns[MODEL_NAMES.get(model, model)] = cells
    return pd.DataFrame(columns, index=[label for label, _ in _TABLE1_ROWS]).rename_axis("Table 1")


def _symmetric(values: dict[tuple[str, str], float]) -> dict[frozenset, float]:
    return {frozenset(k): v for k, v in values.items()}


# Tables 2 and 4 (`twotower_lib.paper`), each pair looked up in either order.
TABLE2 = _symmetric(paper.TABLE2)
TABLE4 = _symmetric(paper.TABLE4)
TABLES = {"table2": (TABLE2, PAPER_CASES), "table4": (TABLE4, TABLE4_CASES)}


def paper_value(a: str, b: str, table: str = "table2") -> float | None:
    """The paper's value for our cases `a` and `b` in `table` ("table2" or "table4"), or None."""
    values, names = TABLES[table]
    if a not in names or b not in names or names[a] == names[b]:
        return None
    return values.get(frozenset((names[a], names[b])))


def compare(by_variant: Mapping[str, pd.DataFrame], table: str = "table2",
            same_config: list[tuple[str, str]] = (), control: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per pair: the paper's value, ours in every score variant (r, ci_low, ci_high with the
    variant's column as suffix, e.g. `r_score`), and, where `control` is given, the highest control |r|
    the pair is held against (its own model's for a same-configuration pair, any model's otherwise)
    and the scorecard's verdict on the first variant (`paper.correlation_verdict`)."""
    variants = list(by_variant)
    out = None
    for col in variants:
        part = by_variant[col][["a", "b", "n_tokens", "r", "ci_low", "ci_high"]].rename(
            columns={c: f"{c}_{col}" for c in ("r", "ci_low", "ci_high")})
        out = part if out is None else out.merge(part.drop(columns="n_tokens"), on=["a", "b"], how="outer")
    same = {frozenset(p) for p in same_config}
    out.insert(2, "same_config", [frozenset((a, b)) in same for a, b in zip(out["a"], out["b"])])
    out.insert(3, "paper", [paper_value(a, b, table) for a, b in zip(out["a"], out["b"])])
    if control is None:
        return out

    def highest(a: str, same_pair: bool) -> float | None:
        if not len(control):
            return None
        rows = control[control["model"] == model_of(a)] if same_pair else control
        return float(rows["r"].abs().max()) if len(rows) else None

    first = variants[0]
    out["highest_control"] = [highest(a, s) for a, s in zip(out["a"], out["same_config"])]
    verdicts = []
    for row in out.itertuples():
        value = row.paper if not pd.isna(row.paper) else paper.SAME_CONFIG_R if row.same_config else None
        ci = (getattr(row, f"ci_low_{first}"), getattr(row, f"ci_high_{first}"))
        verdicts.append("—" if value is None or pd.isna(ci[0]) else paper.correlation_verdict(ci, value, row.highest_control))
    out["verdict"] = verdicts
    return out


def number(x: float | None, fmt: str = "+.2f") -> str:
    """A number as the book prints it in prose and tables: `fmt`, a true minus sign, "—" when missing."""
    return "—" if x is None or pd.isna(x) else format(x, fmt).replace("-", "−")


def tokens_label(t: float) -> str:
    """A token count as the book prints it, to within a tenth: 500k, 1M, 16M (a snapshot at 2**21
    tokens reads 2M; 0 stays 0)."""
    if t >= 1e6:
        m = t / 1e6
        return f"{m:.0f}M" if abs(m - round(m)) <= 0.1 * m else f"{m:.1f}M"
    return f"{t / 1e3:.0f}k" if t else "0"


OUTSIDE = "†"  # marks an interval that does not contain its estimate (the scorecard page says why)


def interval(r: float, lo: float, hi: float, fmt: str | Callable[[float], str] = "{:.2f}") -> str:
    """"[lo, hi]"; where the interval does not contain r, the estimate it belongs to is printed with it
    ("bias-corrected x [lo, hi]", `uncertainty.bias_corrected`) and marked `OUTSIDE`: the basic bootstrap
    interval corrects for the attenuation of resampled r and can lie beside r."""
    show = fmt.format if isinstance(fmt, str) else fmt
    bounds = f"[{show(lo)}, {show(hi)}]"
    if lo <= r <= hi:
        return bounds
    return f"(bias-corrected {show(float(bias_corrected(lo, hi)))} {bounds}){OUTSIDE}"


def mark_outside(text: str) -> str:
    """`text` with every "r = x [lo, hi]" whose interval does not contain x written as `interval` writes it (the
    bias-corrected estimate inside, `OUTSIDE` after), for texts written before, such as published scorecards."""
    import re

    def mark(m: re.Match) -> str:
        r, lo, hi = (float(m.group(i).replace("−", "-")) for i in (1, 2, 3))
        if lo <= r <= hi:
            return m.group(0)
        return f"r = {m.group(1)} {interval(r, lo, hi)}"

    return re.sub(r"r = ([-−]?\d+\.\d+),? (?:CI )?\[([-−]?\d+\.\d+), ([-−]?\d+\.\d+)\]" + OUTSIDE + "?", mark, text)


def _r_with_ci(r: float, lo: float, hi: float) -> str:
    if r is None or pd.isna(r):
        return "—"
    return f"{r:.2f}" + ("" if lo is None or pd.isna(lo) else f" {interval(r, lo, hi)}")


def _short(case: str, table: str) -> str:
    """The paper's name of our case, or the case itself where the paper has none."""
    return TABLES[table][1].get(case, case)


def _label_html(case: str, table: str) -> str:
    """A header cell: the paper's name over our run name (one short line each)."""
    names = TABLES[table][1]
    if case in names and names[case] != case:
        return f"{html.escape(names[case])}<br><span class='tt-ci'>{html.escape(case)}</span>"
    return html.escape(case)


# A one-line matrix keeps each number beside its interval (`table.` outranks the book's wrapping cells,
# `.bd-article table td`); elsewhere the book wraps a cell that does not fit.
_STYLE = ("<style>.tt-paper-table td,.tt-paper-table th{white-space:nowrap;padding:.2em .4em;"
          "text-align:center}.tt-paper-table td.tt-pair,.tt-paper-table th.tt-row{text-align:left}"
          "table.tt-one-line td{white-space:nowrap}"
          ".tt-paper-table .tt-paper{color:#666;font-size:85%}.tt-paper-table .tt-ci{color:#444;font-size:85%}</style>")


def matrix_html(comparison: pd.DataFrame, cases: list[str], variant: str = "score", table: str = "table2",
                caption: str = "") -> str:
    """The paper's square layout: a row and a column per case; each cell holds our r, its interval (beside it
    for up to six cases, under it for more) and, where the paper has the pair, the paper's value under them. HTML for
    the book, read across the margin (the cell tag `full-width`)."""
    one_line = len(cases) <= 6   # six cases fit the page's width with each number beside its interval
    cells: dict[frozenset, str] = {}
    for row in comparison.itertuples():
        r, lo, hi = (getattr(row, f"{c}_{variant}") for c in ("r", "ci_low", "ci_high"))
        ci = "" if pd.isna(lo) else f"{' ' if one_line else '<br>'}<span class='tt-ci'>{interval(r, lo, hi)}</span>"
        ours = "—" if pd.isna(r) else f"<b>{r:.2f}</b>{ci}"
        paper = "" if pd.isna(row.paper) else f"<br><span class='tt-paper'>paper {row.paper:.2f}</span>"
        cells[frozenset((row.a, row.b))] = ours + paper
    head = "".join(f"<th>{_label_html(c, table)}</th>" for c in cases)
    body = []
    for a in cases:
        tds = "".join("<td>1.0</td>" if a == b else f"<td>{cells.get(frozenset((a, b)), '—')}</td>" for b in cases)
        body.append(f"<tr><th class='tt-row'>{_label_html(a, table)}</th>{tds}</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return (f"{_STYLE}<table class='tt-paper-table{' tt-one-line' if one_line else ''}'>{cap}<thead><tr><th></th>"
            f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def pairs_html(comparison: pd.DataFrame, variants: Mapping[str, str], table: str = "table2") -> str:
    """One row per pair: the pair, the paper's value, ours [95% CI] in every variant (`variants`:
    column -> heading), the highest control and the verdict, where `compare` computed them."""
    heads = ["pair", "paper", *variants.values()]
    extra = [c for c in ("highest_control", "verdict") if c in comparison]
    heads += [{"highest_control": "highest control |r|", "verdict": "verdict"}[c] for c in extra]
    rows = []
    order = comparison.assign(_paper=comparison["paper"].isna()).sort_values(["_paper", "same_config"],
                                                                              ascending=[True, False], kind="stable")
    for row in order.itertuples():
        pair = (f"{html.escape(_short(row.a, table))} vs {html.escape(_short(row.b, table))}"
                f"<br><span class='tt-ci'>{html.escape(row.a)} vs {html.escape(row.b)}</span>")
        paper = "—" if pd.isna(row.paper) else f"{row.paper:.2f}"
        ours = [_r_with_ci(*(getattr(row, f"{c}_{col}") for c in ("r", "ci_low", "ci_high"))) for col in variants]
        tail = []
        if "highest_control" in extra:
            tail.append("—" if pd.isna(row.highest_control) else f"{row.highest_control:.2f}")
        if "verdict" in extra:
            tail.append(f"<b>{html.escape(row.verdict)}</b>")
        rows.append("<tr>" + f"<td class='tt-pair'>{pair}</td>" + "".join(f"<td>{c}</td>" for c in [paper, *ours, *tail])
                    + "</tr>")
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    return f"{_STYLE}<table class='tt-paper-table'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def points(pairs: pd.DataFrame, item: str, table: str = "table2", fallback: float | None = None) -> list[dict]:
    """Plain records for the scorecard's picture, one per pair of `pairs` (a, b, r, ci_low, ci_high)
    that the paper reports (or, with `fallback`, held against that value)."""
    out = []
    for r in pairs.itertuples():
        paper = paper_value(r.a, r.b, table)
        paper = fallback if paper is None else paper
        if paper is None or pd.isna(r.r):
            continue
        lo, hi = (getattr(r, c, float("nan")) for c in ("ci_low", "ci_high"))
        out.append(with_bias_corrected(
            {"item": item, "pair": f"{r.a} vs {r.b}", "paper": float(paper), "ours": float(r.r),
             "ci_low": None if pd.isna(lo) else float(lo), "ci_high": None if pd.isna(hi) else float(hi)}))
    return out
