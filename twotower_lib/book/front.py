"""The answer first: the verdict table and the lead figure of the front page and the README.

Both are built from a scorecard (`scorecard.build`, or a published profile's in `results/profiles/`)
and, where the profile has one, its seed study's claims (`results/seeds/<profile>/claims.csv`, written by
`studies.seeds.book`); nothing in them is typed by hand.
`readme_blocks` is what `python -m twotower_lib publish --readme` writes into README.md between its
markers (the verdict table, and the paper-scale study's GPU-hours), and a test fails when the README is out
of date with the committed results.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from twotower_lib.analysis.uncertainty import corrected
from twotower_lib.artifacts import read_json
from twotower_lib.book import study_parts
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.book.paper_tables import mark_outside, number, tokens_label
from twotower_lib.book.profiles import LEARNING_BERT, get_profile
from twotower_lib.book.tables import brief, keyed, markdown_table
from twotower_lib import paper
from twotower_lib.paper import CENTRAL, CONTEXT_GATE, FIG6, FREQUENCY_RANGE, SAME_CONFIG_R, TABLE2
from twotower_lib.book.paper_items import CLAIMS, POINT_LABELS, SHORT_NAMES, Claim
from twotower_lib.book.scorecard import redecided, verdict_cell
from twotower_lib.run_names import model_of

_LOW, _HIGH = (f"{q * 100:.0f}th" for q in CENTRAL)     # the central range's ends, as the page names them

MARK = {"reproduced": "✓ reproduced", "partly": "◐ partly", "not": "✗ not",
        "no verdict": "○ no verdict: towers did not learn context", "not attempted": "— not attempted"}
PUBLISHED = PROJECT_ROOT / "results" / "profiles"
SEEDS = PROJECT_ROOT / "results" / "seeds"
HIGH = "controls' high"   # claims.csv's column: the controls' 90th percentile
OURS = "ours (median |r| over seed pairs, else this run)"   # which value the front table shows


# The one-line caveat of each item the seed study does not decide (the scorecard page has the full notes).
CAVEATS = {"table1": "the `paper` profile trains Table 1's sizes",
           "controls": "this build's pairs only: its profile has no seed study",
           "register": "one seed pair per corpus source", "fig3": "judged with Table 2's same-configuration pair",
           "fig5": "components at unit variance; no untrained control at this profile", "fig6": "the share depends on the ICA dimension d",
           "fig7": "meaning is not judged automatically: read the groups in section 05",
           "table3": "all groups with enough members, not the paper's hand-picked ones",
           "fig8": "judged with Table 4: a flat curve means something only if the runs agree"}


def _claim_cells(mine: pd.DataFrame, profile: str | None = None) -> dict[str, str]:
    """A seed-decided row's cells: "ours" (each claim's median |r|, the statistic `paper.RULE` judges), "spread"
    (its central range and pairs), the two questions a signed r mixes, each with its own statistic
    (`paper.PARTITION_RULE`, `ORIENTATION_RULE`; the signed median sits with the orientation), and the caveat:
    the controls' 90th percentile of |r| the median is judged against."""
    many = len(mine) > 1
    name = (lambda c: c["claim"].split(" (")[0] + ": ") if many else (lambda c: "")
    ours = "; ".join(f"{name(c)}{median_cell(c, profile)}" for _, c in mine.iterrows())
    counts = mine["pairs"].astype(int).astype(str) + " " + mine["unit"].str.replace("seed ", "", regex=False)
    each = " each" if many and counts.nunique() == 1 else ""
    spread = "; ".join(f"{name(c)}{c['low']:.2f} to {c['high']:.2f}{_reaching(c)}" + ("" if each else f" ({n})")
                       for (_, c), n in zip(mine.iterrows(), counts)) + (f" ({counts.iloc[0]}{each})" if each else "")
    high = mine[HIGH].max()
    caveat = "no control measured yet" if pd.isna(high) else f"controls' |r| at {_HIGH} pct. {high:.2f}"
    division = lambda c: division_cell(c, profile)
    orientation = lambda c: orientation_cell(c, profile)
    return {"ours": ours, "spread over seeds": spread, "division (a run left out)": _joined(mine, name, division),
            "orientation (Eq. 3), signed r": _joined(mine, name, orientation), "caveat": caveat}


def _reaching(c: pd.Series) -> str:
    """How many of a claim's seed pairs reach the paper's value (each of its two, where it gives two and some pairs
    reach the lower), said beside the central range: a range that holds the paper's value may rest on a few pairs.
    Nothing for runs against frequency rank, or a study that predates the count."""
    if c.get("unit") != "seed pairs" or pd.isna(c.get("reach paper")) or pd.isna(c.get("paper_low")):
        return ""
    ends = [("reach paper", "paper_low")]
    if c.get("paper_high", c["paper_low"]) != c["paper_low"] and int(c["reach paper"]) > 0:   # none the lower: none
        ends.append(("reach paper high", "paper_high"))
    said = (f"{'none' if (k := int(c[n])) == 0 else k} {'reaches' if k == 1 else 'reach'} {float(c[v]):.2f}"
            for n, v in ends)
    return ", " + ", ".join(said)


def _joined(mine: pd.DataFrame, name, cell) -> str:
    return "; ".join(f"{name(c)}{text}" for _, c in mine.iterrows() if (text := cell(c))) or "—"


def median_cell(c: pd.Series, profile: str | None = None) -> str:
    """A claim row's median |r| over seed pairs (with `profile`, marked as that profile's claim's, `tables.keyed`)."""
    median = f"{c['median']:.2f}"
    return keyed(f"median abs r@{profile}: {c['claim']}", median) if profile else median


def division_cell(c: pd.Series, profile: str | None = None) -> str:
    """The partition answer of a claim row: verdict, the median |r|'s range when one run is left out (the controls'
    threshold it is held against is the row's caveat), and (where the row has one) the text ceiling and corrected
    value; with `profile`, the verdict marked as that profile's claim's (`tables.keyed`). A claim with no division
    (runs against frequency rank) shows its text ceiling alone."""
    if pd.isna(c.get("partition verdict")):
        return "" if pd.isna(c.get("text ceiling")) else f"no division; text ceiling {c['text ceiling']:.2f}"
    verdict = c["partition verdict"]
    if profile:
        verdict = keyed(f"division verdict@{profile}: {c['claim']}", verdict)
    return (f"{verdict}: {c['partition loo low']:.2f}–{c['partition loo high']:.2f} with a run left out"
            + ceiling_note(c))


def ceiling_note(c: pd.Series) -> str:
    """A claim's text ceiling (the median over its pairs, `uncertainty.pair_ceiling`) and its median |r| divided
    by it: the division's agreement on a text that would let two identical runs agree perfectly; below
    `CEILING_FLOOR`, the ceiling alone (a corrected |r| would be noise over noise)."""
    ceiling = c.get("text ceiling")
    if pd.isna(ceiling) or pd.isna(c.get("partition median |r|")):
        return ""
    value = corrected(c["partition median |r|"], ceiling)
    return f"; text ceiling {ceiling:.2f}: too low to correct" if pd.isna(value) else \
        f"; text ceiling {ceiling:.2f}, corrected {value:.2f}"


def orientation_cell(c: pd.Series, profile: str | None = None) -> str:
    """The orientation answer of a claim row: for a same-configuration claim, its verdict and how many runs' margins
    resolve (with `profile`, the verdict marked as that profile's claim's); for any claim of pairs, the signed
    median r, whose sign is Eq. 3's orientation."""
    parts = []
    if not pd.isna(c.get("orientation verdict")):
        verdict = c["orientation verdict"]
        if profile:
            verdict = keyed(f"orientation verdict@{profile}: {c['claim']}", verdict)
        parts.append(f"{verdict}: {int(c['orientation resolved runs'])}/{int(c['orientation runs'])} resolved")
    if not pd.isna(c.get("signed median")) and c.get("unit") != "runs":
        parts.append(f"signed median {number(c['signed median'])}")
    return "; ".join(parts)


def seed_claims(profile: str, results: Path = SEEDS) -> pd.DataFrame:
    """The seed study's row per claim at `profile` (median, central range, controls' high end, verdict), or
    no rows where the profile has no study."""
    path = Path(results) / profile / "claims.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["item", "claim", "above controls"])


def short_claim(claim: str) -> str:
    """A seed-study claim as a list names it: without its table and its statistic or unit, "Bert-large, two seeds
    (Table 2)" as "Bert-large", "ELMo, GPT, Bert-large vs frequency rank, Spearman (Table 4)" as "ELMo, GPT,
    Bert-large vs frequency rank"."""
    base = claim.split(" (")[0]
    for suffix in (", Spearman", ", two seeds"):
        base = base.removesuffix(suffix)
    return base


def _verdict_parts(item: str, mine: pd.DataFrame) -> str:
    """What a verdict decided by several claims rests on, where they differ: for *pairs above their controls*
    (`paper.CONTROLS_RULE`), which families' pairs are above their controls and which are not; for any other
    item, each claim's verdict (the item takes the weakest, `paper.weakest`)."""
    name = [short_claim(c) for c in mine["claim"]]
    if item == "controls":
        above = [n for n, a in zip(name, mine["above controls"]) if a]
        below = [n for n, a in zip(name, mine["above controls"]) if not a]
        return f" (above their controls: {', '.join(above)}; not: {', '.join(below)})" if above and below else ""
    if mine["verdict"].nunique() < 2:
        return ""
    return " (the weakest: " + "; ".join(f"{n} {v}" for n, v in zip(name, mine["verdict"])) + ")"


def verdict_rows(card: dict, key: bool = False) -> pd.DataFrame:
    """One row per paper item: what the paper says, ours (each claim's median |r| over seed pairs where the
    seed study decided it), the spread over seeds (or that it rests on one run), the verdict and a
    one-line caveat; with `key`, each verdict and division marked with what it is (`tables.keyed`), for the book."""
    claims = seed_claims(card["profile"])
    rows = []
    for r in card["rows"]:
        mine = claims[claims["above controls"].notna()] if r["id"] == "controls" else claims[claims["item"] == r["id"]]
        profile = card["profile"] if key else None
        mark = verdict_cell(profile, r, MARK[r["verdict"]]) if key else MARK[r["verdict"]]
        if r.get("decided_by") == "seeds" and len(mine):
            cells = _claim_cells(mine, profile)
            mark += _verdict_parts(r["id"], mine)
        else:
            one = r["id"].startswith(("table2", "same-config", "table4", "fig3", "controls"))
            cells = {"ours": mark_outside(brief(r["ours"], 70)),
                     "spread over seeds": r.get("spread") or ("one pair" if one else "one run"),
                     "division (a run left out)": "—", "orientation (Eq. 3), signed r": "—",
                     "caveat": r.get("caveat") or CAVEATS.get(r["id"]) or brief(r.get("note", ""), 70)}
        rows.append({"claim": SHORT_NAMES.get(r["id"], r["item"]), "the paper": brief(r["paper"], 50), OURS: cells["ours"],
                     "spread over seeds": cells["spread over seeds"], "verdict": mark,
                     "division (a run left out)": cells["division (a run left out)"],
                     "orientation (Eq. 3), signed r": cells["orientation (Eq. 3), signed r"], "caveat": cells["caveat"]})
    return pd.DataFrame(rows)


def verdict_markdown(card: dict, key: bool = True) -> str:
    """The scorecard's table of every item with its audit, the counts of each verdict above it (`key`: for the book)."""
    t = verdict_rows(card, key)
    n = sum(card["counts"].values())
    counts = ", ".join(f"**{k}** {v}" for v, k in card["counts"].items() if k)
    head = f"Of the {n} items below, at profile `{card['profile']}`: {counts}. {paper_tally(card)}\n\n"
    return head + markdown_table(t.columns, t.itertuples(index=False))


def paper_tally(card: dict) -> str:
    """The counts over the items the paper itself reports (not those named "Not in the paper"), reproduced always
    said, even at none: what the companion found of the paper's own claims."""
    own = [r["verdict"] for r in card["rows"] if not r["item"].startswith("Not in the paper")]
    counts = ", ".join(f"**{sum(v == k for v in own)}** {k}" for k in MARK if k == "reproduced" or k in own)
    return f"Of the {len(own)} the paper itself reports: {counts}."


def lead_points(card: dict) -> pd.DataFrame:
    """The lead figure's rows: one per correlation claim the paper reports, with the paper's value,
    this run's pair(s) (their median, where a claim pools several), the seed pairs' central range and
    median, and the controls' high end."""
    claims = seed_claims(card["profile"])
    rows = []
    for c in CLAIMS:
        row = {"claim": c.label, "paper": c.paper[0], "paper high": c.paper[1], "this run": this_run(card, c)}
        got = claims[claims["claim"] == c.label]
        if len(got):
            g = got.iloc[0]
            row.update(median=g["median"], low=g["low"], high=g["high"], controls_high=g[HIGH], pairs=g["pairs"])
        rows.append(row)
    out = pd.DataFrame(rows)
    return out.dropna(subset=[c for c in ("median", "this run") if c in out], how="all").reset_index(drop=True)


def this_run(card: dict, claim: Claim) -> float | None:
    """The median |r| of the profile run's own pairs of `claim`'s families (the scorecard's points)."""
    label = POINT_LABELS.get(claim.item)
    wanted = {frozenset(f) for f in claim.families}
    values = [p["ours"] for p in card.get("points", []) if p["item"] == label
              and frozenset(model_of(x.strip()) for x in p["pair"].split(" vs ")) in wanted]
    return float(pd.Series(values).abs().median()) if values else None


def lead_chart(card: dict):
    """The lead figure: per claim, the paper's values (red diamonds), the spread of |r| over seed pairs (bar:
    central range; dot: median), this run's pair (open circle) and the controls' band (grey, up to
    their 90th percentile), all as |r|, the statistic `paper.RULE` judges."""
    import altair as alt

    df = lead_points(card)
    y = alt.Y("claim:N", sort=None, title=None, axis=alt.Axis(labelLimit=260))
    x = alt.Scale(domain=[0, 1])
    base = alt.Chart(df, width=420, height=alt.Step(26),
                     title="Each correlation the paper reports: the paper's value against ours")
    layers = [alt.Chart(pd.DataFrame({"v": [0.0]})).mark_rule(color="#bbb").encode(
        x=alt.X("v:Q", scale=x, title="|r| (Table 2) or |rho| (Table 4)"))]
    if "controls_high" in df:
        layers.append(base.mark_bar(color="#ddd", height=16).encode(
            x=alt.X("zero:Q", scale=x), x2="controls_high:Q", y=y).transform_calculate(zero="0"))
    if "low" in df:
        layers += [base.mark_rule(strokeWidth=3, color="#4c78a8").encode(x=alt.X("low:Q", scale=x), x2="high:Q", y=y),
                   base.mark_point(filled=True, size=60, color="#4c78a8").encode(
                       x=alt.X("median:Q", scale=x), y=y,
                       tooltip=["claim", alt.Tooltip("median:Q", format=".2f"), alt.Tooltip("low:Q", format=".2f"),
                                alt.Tooltip("high:Q", format=".2f"), "pairs:Q"])]
    if "this run" in df:
        layers.append(base.mark_point(size=60, color="#333").encode(x=alt.X("this run:Q", scale=x), y=y))
    layers += [base.mark_point(shape="diamond", filled=True, size=90, color="#e45756").encode(
        x=alt.X(f"{end}:Q", scale=x), y=y, tooltip=["claim", alt.Tooltip(f"{end}:Q", format=".2f")])
        for end in ("paper", "paper high")]
    return alt.layer(*layers)


LEAD_KEY = ("Every value is |r| (|rho| for Table 4), which no choice of primary tower changes; the paper's values are "
            "positive. Red diamond: the paper's value, two where Table 2 gives one per Bert-large run (for a pair the "
            "paper does not report, its Bert-large pair's, "
            f"r = {SAME_CONFIG_R}). Open circle: this build's own pair (the median of its pairs where a claim covers "
            f"several). Blue: the median over seed pairs, with their central range ({_LOW} to {_HIGH} percentile). "
            f"Grey: the control pairs, from 0 to their {_HIGH} percentile.")


def published_card(profile: str = "cpu", results: Path = PUBLISHED) -> dict:
    """A published profile's scorecard (`results/profiles/<profile>.json`, written by `publish`) with the
    seed study's verdicts decided by today's rules (`scorecard.redecided`)."""
    return redecided(read_json(Path(results) / f"{profile}.json")["scorecard"])


def readme_blocks(profile: str = "cpu") -> dict[str, str]:
    """What README.md holds between each pair of markers: the published default profile's headline table, as the
    front page's first screen has it (`headline_markdown`, its link to the ladder page from the README's folder),
    and the GPU-hours of the paper's runs at the measured rates (the paper-scale study's `GPU_HOURS` part)."""
    blocks = {"VERDICTS": headline_markdown(published_card(profile)).replace("](ladder.md)", "](book/ladder.md)"),
              "GPU_HOURS": study_parts.load()[0]["GPU_HOURS"]}
    return {name: f"<!-- {name}:start -->\n{text}<!-- {name}:end -->" for name, text in blocks.items()}


def update_readme(path: Path, profile: str = "cpu") -> bool:
    """Rewrite README.md's blocks between their markers; True if any changed."""
    text = new = path.read_text(encoding="utf-8")
    for name, block in readme_blocks(profile).items():
        pattern = re.compile(re.escape(f"<!-- {name}:start -->") + ".*?" + re.escape(f"<!-- {name}:end -->"), re.S)
        if not pattern.search(new):
            raise ValueError(f"{path} has no <!-- {name}:start --> ... <!-- {name}:end --> block")
        new = pattern.sub(lambda _: block, new)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def spread_sentence(profile_name: str) -> str:
    """The spread over seeds in one sentence: the profile's seed study where it has one (`SEEDS_SPREAD`),
    else the one committed configuration with four seeds (the emergence study's GPT at 2M tokens)."""
    parts, n = study_parts.load()
    if f"SEEDS_SPREAD@{profile_name}" in parts:
        return parts[f"SEEDS_SPREAD@{profile_name}"]
    if "gpt_2m_pairs" not in n:
        return f"No seed study is committed for profile `{profile_name}` yet."
    return (f"No seed study is committed for profile `{profile_name}` yet. The one configuration trained with "
            f"four seeds (gpt-cpu-v8192-2M-4seeds, emergence study): {n['gpt_2m_pairs']} pairs from {n['gpt_2m_min']} "
            f"to {n['gpt_2m_max']}, mean {n['gpt_2m_mean']}, SD {n['gpt_2m_sd']}.")


# ---------------------------------------------------------------------- the first screen
# The paper's headline claims, at most six: (scorecard item, claim, the families it compares, None: every case's;
# the paper's value, short).
_T2, _LARGE = TABLE2, ("Bert-large-run1", "Bert-large-run2")
HEADLINE = (("table2.same-config", "Two Bert-large seeds agree (Table 2)", ("bert-large",), f"r = {SAME_CONFIG_R}"),
            ("table2.base-large", "Bert-base and Bert-large agree (Table 2)", ("bert-base", "bert-large"),
             "r = " + ", ".join(f"{_T2['Bert-base', b]}" for b in _LARGE)),
            ("table2.cross-type", "Bert-large, ELMo and GPT agree (Table 2)", ("bert-large", "elmo", "gpt"),
             "r = {:.2f} to {:.2f}".format(*sorted(_T2[a, b] for a in ("ELMo", "GPT") for b in _LARGE)[::3])),
            ("table4", "Not word frequency (Table 4)", ("elmo", "gpt", "bert-large"),
             f"|ρ| with frequency {FREQUENCY_RANGE[0]} to {FREQUENCY_RANGE[1]}"),
            ("fig4", "Towers prefer parts of speech (Fig. 4)", None, "VERB, ADP, ADV, AUX to one tower"),
            ("fig6", "Embedding holds word groups (Fig. 6)", ("bert-large",), f"{FIG6['share_one']:.0%} of words in one group"))
LADDER = PROJECT_ROOT / "results" / "ladder" / "summary.csv"
TABLE1_RUNG = {"table2.same-config": (("24x512-pre", "learning recipe"), ("24x512", "post-LN recipe"), "bert")}
FAMILY_NAMES = {"elmo": "ELMo", "gpt": "GPT", "bert-base": "Bert-base", "bert-large": "Bert-large"}


def scale_cell(profile_name: str, models, study: bool = False, top: bool = True) -> str:
    """Where a claim was measured, in a reader's terms: layers x width of its models (and BERT's training recipe),
    training tokens, and the top-N of the vocabulary compared (the paper: 24 x 512 and others, ~3B words, top 5,000 of 30,522)."""
    p = get_profile(profile_name)
    models = [m for m in (models or dict.fromkeys(m for m, _ in p.case_list())) if m in p.models]
    sizes = "/".join(dict.fromkeys(f"{c.n_layer}×{c.hidden}" for c in map(p.model_config, models)))
    bert = [m for m in models if p.models[m].model_type == "bert"]
    if bert:   # which BERT recipe (`profiles.LEARNING_BERT`): the seed study's, where it decides the row
        trained = (_study_settings(profile_name).get(bert[0], {}) if study else
                   {k: getattr(p.train, k) for k in LEARNING_BERT})
        sizes += f" ({'learning' if all(trained.get(k) == v for k, v in LEARNING_BERT.items()) else 'post-LN'} recipe)"
    counts = sorted({p.tokens_for(m) for m in models})
    tokens = "–".join(tokens_label(t) for t in (counts[0], counts[-1])[:len(counts)])
    return f"{sizes}, {tokens} tokens" + (f", {top_label(p)}" if top else "")


def top_label(p) -> str:
    """The tokens a profile's correlations compare: the top N of its vocabulary (the paper: top 5,000/30,522)."""
    return f"top {p.analysis.top_n:,}/{p.data.vocab_size:,}"


def _study_settings(profile_name: str, results: Path = SEEDS) -> dict:
    """The seed study's training settings per family (`study.json`; a study written before BERT's recipe was recorded
    trained the post-LN one)."""
    path = Path(results) / profile_name / "study.json"
    return read_json(path).get("train_settings", {}) if path.exists() else {}


def _ladder(path: Path = LADDER) -> pd.DataFrame:
    return pd.read_csv(path) if Path(path).exists() else pd.DataFrame(columns=["rung", "family"])


def table1_cell(item: str, ladder: pd.DataFrame) -> str:
    """The same claim at the paper's configuration, Table 1's size: the ladder's GPU rung with the learning recipe
    where it has run, else the one with the post-LN recipe, its recipe named; else "not attempted"."""
    *rungs, family = TABLE1_RUNG.get(item, (None,))
    for rung, recipe in rungs:
        row = ladder[(ladder["rung"] == rung) & (ladder["family"] == family)]
        if len(row):
            r = row.iloc[0]
            return (f"{rung.split('-')[0].replace('x', '×')}, {recipe}: {paper.gated(r['partition: verdict'], r['learned context'])}, "
                    f"{r['beyond word frequencies']:+.2f} nats of context")
    return "not attempted"


def headline_rows(card: dict, ladder: pd.DataFrame | None = None) -> pd.DataFrame:
    """The first screen's table: per headline claim (`HEADLINE`), the paper's value, ours (the seed study's median
    |r| with its central range where it decides the item, else this run's), the scale measured at, the verdict and
    the same claim at Table 1's size (`table1_cell`)."""
    ladder = _ladder() if ladder is None else ladder
    claims, by_id, rows = seed_claims(card["profile"]), {r["id"]: r for r in card["rows"]}, []
    for item, claim, families, paper_value in HEADLINE:
        r, mine = by_id.get(item), claims[claims["item"] == item] if "item" in claims else claims.iloc[:0]
        if r is None:
            continue
        c = mine.iloc[0] if r.get("decided_by") == "seeds" and len(mine) else None
        ours = (brief(r["ours"], 30) if c is None else
                f"{c['median']:.2f} ({c['low']:.2f}–{c['high']:.2f}, {int(c['pairs'])} {c['unit'].replace('seed ', '')})")
        rows.append({"claim": claim, "the paper": paper_value, "ours (range)": ours,
                     f"measured at ({top_label(get_profile(card['profile']))})":   # every row's top-N, said once
                         scale_cell(card["profile"], families, study=c is not None, top=False),
                     "verdict": MARK[r["verdict"]].split(":")[0], "at Table 1's size": table1_cell(item, ladder)})
    return pd.DataFrame(rows)


def context_sentence(profile_name: str, results: Path = SEEDS) -> str:
    """Each family's context learned, from the seed study's runs (`paper.CONTEXT_RULE`): the least loss beyond word
    frequencies over its seeds, against the gate; empty where the study records none."""
    path = Path(results) / profile_name / "runs.csv"
    runs = pd.read_csv(path) if path.exists() else pd.DataFrame()
    if "beyond_word_frequencies" not in runs:
        return ""
    least = runs[runs["kind"] == "case"].groupby("family", sort=False)["beyond_word_frequencies"].min()
    short = [FAMILY_NAMES.get(f, f) for f, v in least.items() if v < CONTEXT_GATE]
    return (f"**Context learned** (nats of validation loss below word frequencies alone, the least over seeds; a "
            f"verdict needs {CONTEXT_GATE:g}): " + ", ".join(f"{FAMILY_NAMES.get(f, f)} {v:.2f}" for f, v in least.items())
            + "." + (f" {', '.join(short)}: no verdict, the towers did not learn context." if short else ""))


def size_sentence(results: Path = study_parts.RESULTS) -> str:
    """What changes with size, in one sentence: the size ladder's (`LADDER_TREND_SHORT`, read from the seed-bootstrap
    intervals of each family's median |r|), with a link to its page."""
    trend = study_parts.load(results)[0].get("LADDER_TREND_SHORT", "**With size:** the size ladder has no committed "
                                                                    "report yet.")
    return f"{trend} Every rung: [the ladder page](ladder.md)."


def headline_markdown(card: dict) -> str:
    """The first screen: the headline claims' table (`headline_rows`), the tally of every item's verdict, each
    family's context learned and one sentence on size; the full table with the audit is on the scorecard."""
    t = headline_rows(card)
    counts = ", ".join(f"{n} {v}" for v, n in card["counts"].items() if n)
    return (markdown_table(t.columns, t.itertuples(index=False)) + "\n\n"
            + f"**Tally** over the scorecard's {sum(card['counts'].values())} items at profile `{card['profile']}`: "
            f"{counts}. {size_sentence()}\n\n{context_sentence(card['profile'])}\n")
