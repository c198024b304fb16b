"""The emergence study's two charts: cross-seed r along training with its band, and |r| against the
smaller tower gap. Built on the book's chart conventions (`twotower_lib.book.charts`)."""

from __future__ import annotations

import pandas as pd

from twotower_lib.book.charts import LEGEND_BELOW, WIDTH, alt


def curve_with_band(df: pd.DataFrame, x: str, y: str, lo: str, hi: str, series: str,
                    title: str, x_title: str, y_title: str, log_x: bool = False, panel: str | None = None,
                    reference: tuple[float, str] | None = None) -> alt.Chart:
    """A line per `series` with its confidence band, e.g. cross-seed r against tokens seen; with `panel`,
    one small chart per value of that column (so that each holds a handful of lines); with `reference`
    (value, label), a dashed horizontal rule there, e.g. the paper's r."""
    xs = alt.X(f"{x}:Q", title=x_title, scale=alt.Scale(type="log") if log_x else alt.Scale())
    width = WIDTH if panel is None else WIDTH // 2
    base = alt.Chart(width=width, height=320 if panel is None else 220)
    color = alt.Color(f"{series}:N", legend=LEGEND_BELOW if panel is None else alt.Legend(orient="right", labelLimit=220))
    band = base.mark_area(opacity=0.2).encode(x=xs, y=alt.Y(f"{lo}:Q", title=y_title), y2=f"{hi}:Q", color=color)
    line = base.mark_line(point=True).encode(
        x=xs, y=f"{y}:Q", color=color,
        tooltip=[f"{series}:N", alt.Tooltip(f"{x}:Q", format=","), alt.Tooltip(f"{y}:Q", format=".3f"),
                 alt.Tooltip(f"{lo}:Q", format=".3f"), alt.Tooltip(f"{hi}:Q", format=".3f")])
    layers = [band, line]
    if reference is not None:
        layers.append(base.mark_rule(strokeDash=[6, 4], color="black").encode(
            y=alt.datum(reference[0]), tooltip=alt.value(f"{reference[1]}: {reference[0]}")))
    chart = alt.layer(*layers, data=df)
    if panel is None:
        return chart.properties(title=title).interactive()
    return chart.facet(row=alt.Row(f"{panel}:N", title=None), title=title).resolve_scale(color="independent")


def gap_scatter(points: pd.DataFrame, title: str = "Cross-seed agreement against the smaller tower gap") -> alt.Chart:
    """|r| of each pair and snapshot against the smaller of its two runs' tower gaps, one colour per
    model type (`emergence.gap_points`)."""
    return alt.Chart(points, title=title, width=WIDTH, height=320).mark_circle(size=60, opacity=0.7).encode(
        x=alt.X("smaller_gap:Q", title="smaller tower gap (primary minus secondary mean p, relative)"),
        y=alt.Y("abs_r:Q", title="|r| between the two seeds"),
        color=alt.Color("model_type:N", title="model type", legend=LEGEND_BELOW),
        tooltip=["config:N", "pair:N", alt.Tooltip("tokens:Q", format=","), alt.Tooltip("r:Q", format=".3f"),
                 alt.Tooltip("smaller_gap:Q", format=".3f")],
    ).interactive()
