"""Altair chart builders for the book: one function a figure, from a tidy table to a chart. `book.render`
draws them offline."""

from __future__ import annotations

import sys

# jsonschema, altair's validator, imports rfc3987_syntax where it is installed (JupyterLab's
# jupyter-events needs it), and that module compiles a grammar on import: most of the time every
# section's kernel spent importing this module. Altair checks no string formats (the only use
# jsonschema has for it), so a kernel that draws charts goes without it.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

import altair as alt  # noqa: E402
import numpy as np
import pandas as pd

LEGEND_BELOW = alt.Legend(orient="bottom", columns=4)  # keeps wide charts inside the page column
TOOLTIP_TOKEN = [alt.Tooltip("token:N", title="token"), alt.Tooltip("frequency:Q", title="frequency", format=",")]
WIDTH = 520  # with axis labels and the actions menu, fits the content column of sphinx-book-theme
LEGEND_BELOW_LONG = alt.Legend(orient="bottom", columns=2, labelLimit=WIDTH // 2 - 20)  # labels of a paper item's length


def frequency_chart(counts: pd.DataFrame, title: str = "Token frequency by rank") -> alt.Chart:
    """Zipf plot: log count against log rank. `counts` has columns token, frequency (sorted or not)."""
    df = counts.sort_values("frequency", ascending=False).reset_index(drop=True)
    df = df[df["frequency"] > 0].assign(rank=lambda d: d.index + 1)
    return alt.Chart(df, title=title, width=WIDTH, height=320).mark_line(point=alt.OverlayMarkDef(size=12)).encode(
        x=alt.X("rank:Q", scale=alt.Scale(type="log"), title="frequency rank"),
        y=alt.Y("frequency:Q", scale=alt.Scale(type="log"), title="count in the training split"),
        tooltip=[alt.Tooltip("rank:Q"), *TOOLTIP_TOKEN],
    ).interactive()


def score_lines(scores: pd.DataFrame, reference: str, title: str = "Preference score per token") -> alt.Chart:
    """Fig. 3: each case's preference score, tokens ordered by `reference`'s score (descending).

    `scores`: long table with columns token, frequency, case, score.
    """
    ref = scores[scores["case"] == reference].sort_values("score", ascending=False)
    if ref.empty:
        raise ValueError(f"reference case {reference!r} is not among {sorted(scores['case'].unique())}")
    order = {tok: i for i, tok in enumerate(ref["token"])}
    df = scores.assign(index=scores["token"].map(order)).dropna(subset=["index"])
    return alt.Chart(df, title=title, width=WIDTH, height=340).mark_line(strokeWidth=1, opacity=0.8).encode(
        x=alt.X("index:Q", title=f"token (ordered by {reference}'s score)"),
        y=alt.Y("score:Q", title="preference score s"),
        color=alt.Color("case:N", legend=LEGEND_BELOW),
        tooltip=[*TOOLTIP_TOKEN, alt.Tooltip("case:N"), alt.Tooltip("score:Q", format=".3f")],
    ).interactive()


def correlation_heatmap(matrix: pd.DataFrame, title: str = "Pair-wise correlation of preference scores") -> alt.Chart:
    """Table 2 / Table 4 as a heatmap; `matrix` is square with case names as index and columns."""
    df = matrix.rename_axis(index="row", columns="column").stack().rename("r").reset_index()
    order = list(matrix.index)
    base = alt.Chart(df, title=title, width=60 * len(order), height=60 * len(order)).encode(
        x=alt.X("column:N", sort=order, title=None), y=alt.Y("row:N", sort=order, title=None))
    cells = base.mark_rect().encode(
        color=alt.Color("r:Q", scale=alt.Scale(domain=[-1, 1], scheme="redblue", reverse=True)),
        tooltip=["row:N", "column:N", alt.Tooltip("r:Q", format=".2f")])
    text = base.mark_text().encode(text=alt.Text("r:Q", format=".2f"))
    return cells + text


def paper_vs_ours(points: pd.DataFrame, title: str = "Every correlation: the paper's against ours") -> alt.Chart:
    """The scorecard at a glance: one dot per correlation the paper reports (x: the paper's value,
    y: ours, signed, a bar for our 95% interval), the diagonal where the two agree and its mirror where they agree
    with one run's towers' roles swapped (the verdicts read |r|: `paper.RULE`). `points`: columns item,
    pair, paper, ours, ci_low, ci_high (`scorecard.build`'s "points")."""
    df = points.assign(ci_low=points["ci_low"].fillna(points["ours"]), ci_high=points["ci_high"].fillna(points["ours"]))
    scale = alt.Scale(domain=[-1, 1])
    x = alt.X("paper:Q", title="the paper's r (or rho)", scale=scale)
    base = alt.Chart(df, title=title, width=WIDTH, height=WIDTH * 0.8)
    diagonal = alt.Chart(pd.DataFrame({"paper": [-1.0, 1.0, -1.0, 1.0], "ours": [-1.0, 1.0, 1.0, -1.0],
                                       "line": ["agree", "agree", "mirrored", "mirrored"]})).mark_line(
        color="#999", strokeDash=[4, 4]).encode(x=x, y=alt.Y("ours:Q", scale=scale), detail="line:N",
                                                opacity=alt.Opacity("line:N", legend=None,
                                                                    scale=alt.Scale(range=[1.0, 0.4])))
    zero = alt.Chart(pd.DataFrame({"ours": [0.0]})).mark_rule(color="#ccc").encode(y="ours:Q")
    color = alt.Color("item:N", title="paper item", legend=LEGEND_BELOW_LONG)
    bars = base.mark_rule(opacity=0.6).encode(x=x, y=alt.Y("ci_low:Q", scale=scale), y2="ci_high:Q", color=color)
    dots = base.mark_point(filled=True, size=70).encode(
        x=x, y=alt.Y("ours:Q", title="ours, signed (95% interval: documents resampled)", scale=scale), color=color,
        tooltip=["item:N", "pair:N", alt.Tooltip("paper:Q", format=".2f"), alt.Tooltip("ours:Q", format=".2f"),
                 alt.Tooltip("ci_low:Q", format=".2f"), alt.Tooltip("ci_high:Q", format=".2f")])
    return alt.layer(zero, diagonal, bars, dots)


def score_distributions(scores: pd.DataFrame, groups: list[str], title: str = "Preference score by group") -> alt.Chart:
    """Fig. 4: normalised histogram of scores per group (e.g. POS tag), one panel per case.

    `scores`: columns token, frequency, case, group, score; only rows whose group is in `groups`.
    """
    df = scores[scores["group"].isin(groups)]
    return alt.Chart(df, width=220, height=180).transform_density(
        "score", groupby=["case", "group"], as_=["score", "density"],
    ).mark_line().encode(
        x=alt.X("score:Q", title="preference score s"),
        y=alt.Y("density:Q", title="normalised distribution"),
        color=alt.Color("group:N", sort=groups, legend=LEGEND_BELOW),
        tooltip=["group:N", alt.Tooltip("score:Q", format=".2f"), alt.Tooltip("density:Q", format=".3f")],
    ).facet(facet=alt.Facet("case:N", title=None), columns=2, title=title)  # wraps: stays in the page column


def score_vs_rank(scores: pd.DataFrame, title: str = "Preference score against frequency rank") -> alt.Chart:
    """Fig. 8: score against the token's frequency rank, one colour per case (scatter, zoomable)."""
    df = scores.assign(rank=scores.groupby("case")["frequency"].rank(ascending=False, method="first"))
    return alt.Chart(df, title=title, width=WIDTH, height=340).mark_circle(size=10, opacity=0.5).encode(
        x=alt.X("rank:Q", title="frequency rank"),
        y=alt.Y("score:Q", title="preference score s"),
        color=alt.Color("case:N", legend=LEGEND_BELOW),
        tooltip=[*TOOLTIP_TOKEN, "case:N", alt.Tooltip("score:Q", format=".3f")],
    ).interactive()


def training_curves(log: pd.DataFrame, title: str = "Loss during cooperative training") -> alt.Chart:
    """Training loss (line) and validation loss (points) against tokens seen, one colour per case.

    `log`: columns case, tokens, loss and (on evaluation steps) val_loss, as in training log.jsonl.
    """
    base = alt.Chart(log, title=title, width=WIDTH, height=300).encode(
        x=alt.X("tokens:Q", title="tokens seen"), color=alt.Color("case:N", legend=LEGEND_BELOW))
    train = base.mark_line(opacity=0.6).encode(
        y=alt.Y("loss:Q", title="cross-entropy (nats per token)", scale=alt.Scale(zero=False)),
        tooltip=["case:N", alt.Tooltip("tokens:Q", format=","), alt.Tooltip("loss:Q", format=".3f")])
    valid = base.transform_filter("isValid(datum.val_loss)").mark_point(filled=True, size=40).encode(
        y="val_loss:Q", tooltip=["case:N", alt.Tooltip("tokens:Q", format=","), alt.Tooltip("val_loss:Q", format=".3f")])
    return (train + valid).interactive()


def probe_curves(curves: pd.DataFrame, title: str = "Probing heads: loss per epoch") -> alt.Chart:
    """Each probing head's mean training loss (dashed) and held-out loss (solid) per epoch, one panel
    per probe; `curves`: columns probe, epoch, head, split (train | heldout), loss (`probing.probe_curves`)."""
    return alt.Chart(curves, width=228, height=160).mark_line(point=True).encode(
        x=alt.X("epoch:Q", title="epoch"),
        y=alt.Y("loss:Q", title="cross-entropy (nats)", scale=alt.Scale(zero=False)),
        color=alt.Color("head:N", legend=LEGEND_BELOW),
        strokeDash=alt.StrokeDash("split:N", title="split"),
        tooltip=["probe:N", "head:N", "split:N", "epoch:Q", alt.Tooltip("loss:Q", format=".4f")],
    ).facet(facet=alt.Facet("probe:N", title=None), columns=2, title=title).resolve_scale(y="independent")


def tower_scatter(table: pd.DataFrame, title: str = "Each token's mean probability under each tower") -> alt.Chart:
    """Eq. 4 as a picture: log p̄ of the primary against the secondary tower, one point per token.

    Tokens above the diagonal prefer the primary tower (s > 0). `table`: a preference table
    (columns token, train_count, count, p1_mean, p2_mean, score); tokens never scored are dropped.
    """
    df = table[table["count"] > 0].assign(frequency=lambda d: d["train_count"],
                                          log_p1=lambda d: np.log10(d["p1_mean"]),
                                          log_p2=lambda d: np.log10(d["p2_mean"]))
    points = alt.Chart(df, title=title, width=380, height=380).mark_circle(size=14, opacity=0.5).encode(
        x=alt.X("log_p2:Q", title="log10 p̄ secondary tower", scale=alt.Scale(zero=False)),
        y=alt.Y("log_p1:Q", title="log10 p̄ primary tower", scale=alt.Scale(zero=False)),
        color=alt.Color("score:Q", scale=alt.Scale(scheme="redblue", domainMid=0), title="s"),
        tooltip=[*TOOLTIP_TOKEN, alt.Tooltip("count:Q", title="validation count"), alt.Tooltip("score:Q", format=".3f")],
    )
    lo = float(min(df["log_p1"].min(), df["log_p2"].min()))
    hi = float(max(df["log_p1"].max(), df["log_p2"].max()))
    diagonal = alt.Chart(pd.DataFrame({"x": [lo, hi], "y": [lo, hi]})).mark_line(color="gray", strokeDash=[4, 4]).encode(
        x=alt.X("x:Q", scale=alt.Scale(zero=False)), y=alt.Y("y:Q", scale=alt.Scale(zero=False)))
    return (points + diagonal).interactive()


def component_heatmap(fig5: pd.DataFrame, title: str = "Word vectors after ICA") -> alt.Chart:
    """Fig. 5: words (by frequency) x ICA components, value as colour.

    `fig5`: long table with columns word_index, token, component, value (`analysis.word_groups.fig5_data`).
    It goes into the spec as one row per word holding its values as an array, flattened in the
    browser: a fifth of the size of one row per cell (500 x 128 cells in the paper's figure).
    """
    wide = fig5.sort_values(["word_index", "component"]).groupby("word_index", sort=True)
    rows = pd.DataFrame({"word_index": list(wide.groups), "token": wide["token"].first().to_list(),
                         "component": [g.to_list() for _, g in wide["component"]],
                         "value": [g.round(2).to_list() for _, g in wide["value"]]})
    limit = float(np.ceil(fig5["value"].abs().quantile(0.99)))
    d = int(fig5["component"].max()) + 1
    return alt.Chart(rows, title=title, width=WIDTH, height=300).transform_flatten(
        ["component", "value"]).mark_rect().encode(
        x=alt.X("word_index:O", title="word (most frequent first)", axis=alt.Axis(labels=False, ticks=False)),
        y=alt.Y("component:O", title="ICA component", axis=alt.Axis(values=list(range(0, d, max(1, d // 8))))),
        color=alt.Color("value:Q", scale=alt.Scale(scheme="redblue", reverse=True, domain=[-limit, limit], clamp=True)),
        tooltip=[alt.Tooltip("token:N"), "word_index:O", "component:O", alt.Tooltip("value:Q", format=".2f")],
    )


def group_histogram(hist: pd.DataFrame, title: str = "Number of word groups per word") -> alt.Chart:
    """Fig. 6: share of words in k groups. `hist`: columns n_groups, n_words, share, and optionally
    `words` (which set of words was counted), shown as bars side by side."""
    extra = {"color": alt.Color("words:N", legend=LEGEND_BELOW), "xOffset": "words:N"} if "words" in hist else {}
    return alt.Chart(hist, title=title, width=WIDTH, height=260).mark_bar().encode(
        x=alt.X("n_groups:O", title="groups the word belongs to", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("share:Q", title="share of words", axis=alt.Axis(format="%")),
        tooltip=[*(["words:N"] if extra else []), "n_groups:O", alt.Tooltip("n_words:Q", format=","),
                 alt.Tooltip("share:Q", format=".1%")],
        **extra,
    )


def pca_spectrum(spectrum: pd.DataFrame, d: int, title: str = "Principal directions of the word vectors") -> alt.Chart:
    """Each principal direction's share of the variance (log scale) and excess kurtosis (0: Gaussian),
    with a dashed rule at the d kept. `spectrum`: `analysis.ica.pca_spectrum`."""
    base = alt.Chart(spectrum, width=WIDTH, height=160).encode(
        x=alt.X("component:Q", title="principal direction (largest variance first)"),
        tooltip=["component:Q", alt.Tooltip("share:Q", format=".2%"), alt.Tooltip("cumulative share:Q", format=".1%"),
                 alt.Tooltip("excess kurtosis:Q", format=".2f")])
    rule = alt.Chart(pd.DataFrame({"d": [d]})).mark_rule(strokeDash=[4, 4]).encode(x="d:Q")
    share = base.mark_line().encode(y=alt.Y("share:Q", scale=alt.Scale(type="log"), title="share of variance"))
    kurtosis = base.mark_line(color="darkorange").encode(y=alt.Y("excess kurtosis:Q", title="excess kurtosis"))
    return alt.vconcat(share + rule, kurtosis + rule, title=title)


def group_word_lists(members: pd.DataFrame, title: str = "Example word groups") -> alt.Chart:
    """Fig. 7 as ranked word lists: one panel per group, most typical word first, size by frequency.

    `members`: columns group (label), typicality (1 = most typical), token, count, value; the
    panels keep the order in which the groups first appear.
    """
    return alt.Chart(members, width=140, height=18 * int(members["typicality"].max())).mark_text(
        align="left").encode(
        x=alt.value(8),
        y=alt.Y("typicality:O", title="rank in the group"),
        text="token:N",
        size=alt.Size("count:Q", scale=alt.Scale(type="log", range=[8, 20]), title="frequency", legend=LEGEND_BELOW),
        tooltip=[alt.Tooltip("token:N"), alt.Tooltip("count:Q", title="frequency", format=","),
                 alt.Tooltip("value:Q", title="component value", format=".2f")],
    ).facet(facet=alt.Facet("group:N", title=None, sort=list(dict.fromkeys(members["group"]))), columns=3, title=title)


def paper_and_ours(df: pd.DataFrame, x_title: str, title: str, percent: bool = False,
                   domain: tuple[float, float] | None = None) -> alt.Chart:
    """A claim chapter's lead figure: per row (a tag, a measure, a case), the paper's value as a red
    diamond or the region its claim allows as a red band, and ours as a dot per series with its interval
    where it has one. `df`: row, series, ours, optionally ours_low and ours_high, and paper_low and
    paper_high (equal for a single value; NaN where the paper has none)."""
    order = list(dict.fromkeys(df["row"]))
    fmt = ".0%" if percent else ".2f"
    x = dict(scale=alt.Scale(domain=list(domain)) if domain else alt.Scale(zero=False),
             axis=alt.Axis(format="%") if percent else alt.Axis())
    y = alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=240))
    base = alt.Chart(df, title=title, width=WIDTH - 160, height=alt.Step(30))
    paper = df.dropna(subset=["paper_low"])
    band = alt.Chart(paper[paper["paper_low"] < paper["paper_high"]]).mark_bar(color="#e45756", opacity=0.18, height=22)
    point = alt.Chart(paper[paper["paper_low"] == paper["paper_high"]]).mark_point(shape="diamond", filled=True, size=110,
                                                                                color="#e45756")
    layers = [band.encode(x=alt.X("paper_low:Q", title=x_title, **x), x2="paper_high:Q", y=y),
              point.encode(x=alt.X("paper_low:Q", **x), y=y, tooltip=["row:N", alt.Tooltip("paper_low:Q", title="paper", format=fmt)])]
    color = alt.Color("series:N", title=None, legend=LEGEND_BELOW)
    if "ours_low" in df:
        layers.append(base.mark_rule(strokeWidth=2).encode(x=alt.X("ours_low:Q", **x), x2="ours_high:Q", y=y,
                                                           color=color))
    layers.append(base.mark_point(filled=True, size=60, opacity=0.85).encode(
        x=alt.X("ours:Q", **x), y=y, color=color,
        tooltip=["row:N", "series:N", alt.Tooltip("ours:Q", format=fmt)]))
    return alt.layer(*layers)


PAPER_AND_OURS_KEY = "Red: the paper (a diamond for its value, a band for the region its claim allows). Dots: ours."
