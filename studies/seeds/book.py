"""The seed study as the book shows it, written as files the book reads: every correlation the paper
reports as a distribution over seed pairs, beside its controls' pairs and the paper's value, the verdicts
those decide, and the probe's error budget.

Reads `results/seeds/<profile>/` (`pairs.csv`, `runs.csv`, `single_tower.csv`, `study.json`, written by
`studies.seeds.report`) and writes, for every profile with a study, `claims.csv` beside them and the book's
parts into `results/seeds/book.json` (`write_book`): a part `NAME@<profile>` is shown where the book is
built at that profile, the verdicts `<item>@<profile>` decide that profile's scorecard. The rule that turns
a distribution into a verdict is `paper.RULE`, written once and applied to every row.

    python -m studies.seeds.book
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from twotower_lib.analysis import seed_spread
from twotower_lib.analysis.uncertainty import CEILING_FLOOR, pair_ceiling
from twotower_lib.artifacts import read_json
from twotower_lib.book import charts, front, study_parts
from twotower_lib.book.charts import alt
from twotower_lib.book.paper_items import CLAIMS, Claim
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.book.tables import full_width, markdown_row, reader_html
from twotower_lib import paper
from twotower_lib.paper import FREQUENCY_RANGE
from studies.ladder.report import VALID_PROBE_RULE

RESULTS = PROJECT_ROOT / "results" / "seeds"
PROBE = PROJECT_ROOT / "results" / "probe"
CONTROL_KINDS = ("untrained", "independent", "shuffled")
NULL_KINDS = ("untrained", "independent")   # the controls a verdict is held against; the shuffled labels beside
HIGH = "controls' high"
NAMES = {"elmo": "ELMo", "gpt": "GPT", "bert-base": "Bert-base", "bert-large": "Bert-large"}
CEILING_NOTE = (
    "**Text ceiling** (beside a division, where every run of the claim has a measured reliability, "
    "`reliability.csv`): the median over the claim's pairs of sqrt(rel_a · rel_b), each run's split-half "
    "reliability on the validation text (of the scores' ranks for a Spearman claim); two runs with identical "
    "preferences would correlate at about this ceiling, so median |r| / ceiling (*corrected*) is the division's "
    f"agreement on an unlimited text. It decides no verdict; below {CEILING_FLOOR} no corrected value is shown "
    "(noise over noise). A run against frequency rank has the median over its runs of sqrt(rel) of the scores' "
    "ranks: the rank comes from the training text's counts, which the validation text does not resample.")


@dataclass(frozen=True)
class SeedStudy:
    """A profile's committed seed study."""

    pairs: pd.DataFrame
    runs: pd.DataFrame
    study: dict
    single_tower: pd.DataFrame | None = None   # the independent control's single-tower probes (shortfall)
    reliability: pd.DataFrame | None = None    # each case run's split-half text reliabilities, by run name


def load(profile: str, results: Path = RESULTS) -> SeedStudy | None:
    """The committed study of `profile`, or None where none was run."""
    d = Path(results) / profile
    if not (d / "pairs.csv").exists():
        return None
    single = pd.read_csv(d / "single_tower.csv") if (d / "single_tower.csv").exists() else None
    rel = pd.read_csv(d / "reliability.csv").set_index("run") if (d / "reliability.csv").exists() else None
    pairs, study = pd.read_csv(d / "pairs.csv"), read_json(d / "study.json")
    if "valid probes" in pairs:     # a failed probe's pairs are left out of every claim, and counted
        study = study | {"failed probe pairs": int((~pairs["valid probes"]).sum())}
        pairs = pairs[pairs["valid probes"]].reset_index(drop=True)
    return SeedStudy(pairs, pd.read_csv(d / "runs.csv"), study, single, rel)


def _of(pairs: pd.DataFrame, kinds: tuple[str, ...], families: tuple[tuple[str, str], ...]) -> pd.DataFrame:
    match = pd.Series(False, index=pairs.index)
    for a, b in families:
        match |= ((pairs["family_a"] == a) & (pairs["family_b"] == b)) | ((pairs["family_a"] == b) & (pairs["family_b"] == a))
    return pairs[match & pairs["kind"].isin(kinds)]


def controls_for(pairs: pd.DataFrame, claim: Claim, kinds: tuple[str, ...] = NULL_KINDS) -> pd.DataFrame:
    """The control pairs of `kinds` a claim is held against: those of every family it involves, pooled (by
    default the untrained and independent towers; the shuffled-label null is a permutation null of a
    different kind, reported beside them)."""
    families = {f for pair in claim.families for f in pair}
    return pairs[pairs["kind"].isin(kinds) & pairs["family_a"].isin(families)]


def two_questions(s: SeedStudy, claim: Claim, ours: pd.DataFrame) -> dict:
    """The partition and orientation answers (`paper.PARTITION_RULE`, `ORIENTATION_RULE`) for one claim's
    pairs: |r| against the untrained and independent pairs, leaving one run out at a time, the shuffled labels
    beside; for a same-configuration claim, its runs' Eq. 3 margins against the untrained towers' (the study
    keeps no per-document sums, so no bootstrap SE) and the signs of its pairs."""
    stat = claim.statistic
    part = seed_spread.partition(ours["a"], ours["b"], ours[stat], controls_for(s.pairs, claim)[stat],
                                 controls_for(s.pairs, claim, ("shuffled",))[stat])
    out = {"partition " + k: v for k, v in part.items()}
    family_a, family_b = claim.families[0]
    if family_a == family_b:
        runs = s.runs[s.runs["family"] == family_a]
        cases = runs[runs["kind"] == "case"].assign(margin_se=np.nan)[["seed", "margin", "margin_se"]]
        o = seed_spread.orientation(cases, ours["seed_a"], ours["seed_b"], ours["r"],
                                    runs[runs["kind"] == "untrained"]["margin"], shared=part["controls |r| threshold"])
        out |= {"orientation " + k: v for k, v in o.items()}
    return out


RELIABILITY_OF = {"r": "text_reliability", "rho": "text_reliability_spearman"}  # reliability.csv's column per statistic


def claim_ceiling(s: SeedStudy, pairs: pd.DataFrame, statistic: str) -> float:
    """The validation text's ceiling on a claim's `statistic` (r or rho): the median over its pairs of
    sqrt(rel_a * rel_b) (`uncertainty.pair_ceiling`), each run's split-half reliability of that statistic;
    NaN unless every pair's runs have one measured."""
    column = RELIABILITY_OF[statistic]
    if s.reliability is None or column not in s.reliability or pairs.empty:
        return np.nan
    rel = lambda runs: s.reliability[column].reindex(runs).to_numpy(float)
    return _median_ceiling(rel(pairs["a"]), rel(pairs["b"]))


def _median_ceiling(rel_a: np.ndarray, rel_b: np.ndarray) -> float:
    """The median of sqrt(rel_a * rel_b) over paired reliabilities; NaN unless every one is measured."""
    ceilings = [pair_ceiling(a, b) for a, b in zip(rel_a, rel_b)]
    return float(np.median(ceilings)) if np.isfinite(ceilings).all() else np.nan


def frequency_ceiling(s: SeedStudy, runs: pd.Series) -> float:
    """The validation text's ceiling on the runs' Spearman rho with frequency rank: the median over `runs` of
    sqrt(rel * 1) (`uncertainty.pair_ceiling`), rel the reliability of a run's ranks; the frequency rank, counted
    on the training text, has no validation noise. NaN unless every run has one measured."""
    column = RELIABILITY_OF["rho"]
    if s.reliability is None or column not in s.reliability or runs.empty:
        return np.nan
    rel = s.reliability[column].reindex(runs).to_numpy(float)
    return _median_ceiling(rel, np.ones_like(rel))


def context_learned(s: SeedStudy, families) -> dict:
    """`paper.CONTEXT_RULE` for the case runs of `families`: the least loss beyond word frequencies among them (nats;
    NaN where the study records no word-frequency loss) and whether every one passed the gate."""
    cases = s.runs[(s.runs["kind"] == "case") & s.runs["family"].isin(set(families))]
    beyond = (cases["beyond_word_frequencies"] if "beyond_word_frequencies" in cases
              else pd.Series(np.nan, index=cases.index)).astype(float)
    least = float(beyond.min()) if len(beyond) and beyond.notna().all() else np.nan
    return {"beyond word frequencies": least,
            "learned context": bool(len(beyond)) and all(paper.learned_context(-b, 0.0) for b in beyond)}


def _gate(row: dict, families) -> dict:
    """A claim's row with `context_learned` beside it and its verdicts gated by it (`paper.gated`)."""
    ctx = context_learned(row["_study"], families)
    row = {k: v for k, v in row.items() if k != "_study"} | ctx
    for key in ("verdict", "partition verdict"):
        if key in row:
            row[key] = paper.gated(row[key], ctx["learned context"])
    return row


def claim_rows(s: SeedStudy) -> pd.DataFrame:
    """One row per claim with pairs in the study: paper value, our median |r| and its central range over seed
    pairs (the statistic `paper.RULE` judges), the signed r's beside (the paper's statistic, whose sign is Eq. 3's
    orientation), the controls' median and high end of |r|, the least loss beyond word frequencies of its runs, and
    the verdict by `paper.RULE`, gated by `paper.CONTEXT_RULE`."""
    rows = []
    for c in CLAIMS:
        kind = "same" if c.families[0][0] == c.families[0][1] else "cross"
        pairs = _of(s.pairs, (kind,), c.families)
        ours = pairs[c.statistic]
        if ours.empty:
            continue
        ctrl = controls_for(s.pairs, c)[c.statistic]
        shuffled = controls_for(s.pairs, c, ("shuffled",))[c.statistic].abs()
        rows.append(_gate({"item": c.item, "claim": c.label, "paper": c.paper[0] if c.paper[0] == c.paper[1] else c.paper,
                           "statistic": "Pearson r" if c.statistic == "r" else "Spearman rho", "unit": "seed pairs"}
                          | _judged(pairs["a"], pairs["b"], ours, ctrl, c.paper)
                          | {"shuffled max |r|": float(shuffled.max()) if len(shuffled) else np.nan,
                             "above controls": seed_spread.above_controls(ours, ctrl) if kind == "same" else None,
                             "text ceiling": claim_ceiling(s, pairs, c.statistic)}
                          | two_questions(s, c, pairs) | {"_study": s}, {f for pair in c.families for f in pair}))
    freq = s.runs[s.runs["family"].isin(FREQUENCY_FAMILIES)] if "rho_frequency_rank" in s.runs else s.runs.iloc[:0]
    if len(freq):
        cases, untrained = freq[freq["kind"] == "case"], freq[freq["kind"] == "untrained"]
        rows.append(_gate({"item": "table4", "claim": FREQUENCY_CLAIM, "paper": FREQUENCY_PAPER,
                           "statistic": "Spearman rho", "unit": "runs"}
                          | _judged(cases["run"], cases["run"], cases["rho_frequency_rank"], untrained["rho_frequency_rank"],
                                    FREQUENCY_PAPER)
                          | {"text ceiling": frequency_ceiling(s, cases["run"]), "_study": s}, FREQUENCY_FAMILIES))
    return pd.DataFrame(rows)


def _judged(a: pd.Series, b: pd.Series, ours: pd.Series, ctrl: pd.Series, paper_value) -> dict:
    """A claim's statistics and verdict by `paper.RULE`: the median and central range of |r| over its pairs (of
    runs `a`, `b`; a run against frequency rank names itself twice), how many of them reach the paper's value (each
    end where it gives two), the signed r's beside, the controls' |r|."""
    o, signed, n = (seed_spread.summarize(v) for v in (ours.abs(), ours, ctrl.abs()))
    return {"pairs": o["n"], "median": o["median"], "low": o["low"], "high": o["high"],
            "reach paper": int((ours.abs() >= _ends(paper_value)[0]).sum()),
            "reach paper high": int((ours.abs() >= _ends(paper_value)[1]).sum()),
            "signed median": signed["median"], "signed low": signed["low"], "signed high": signed["high"],
            "control pairs": n["n"], "controls' median": n["median"], HIGH: n["high"],
            "verdict": seed_spread.verdict(a, b, ours, ctrl, paper_value)}


def _ends(paper_value) -> tuple[float, float]:
    """The paper's lowest and highest value of a claim (one where it gives one; two for Bert-large's runs)."""
    return (min(paper_value), max(paper_value)) if isinstance(paper_value, tuple) else (paper_value, paper_value)


# Table 4's last column: each run's scores against frequency rank (one value per run, not per pair; |rho|, since
# its sign is which tower Eq. 3 calls primary, against the untrained towers' runs).
FREQUENCY_FAMILIES = ("elmo", "gpt", "bert-large")
FREQUENCY_CLAIM = "ELMo, GPT, Bert-large vs frequency rank, Spearman (Table 4)"
FREQUENCY_PAPER = FREQUENCY_RANGE


def strip_points(s: SeedStudy) -> pd.DataFrame:
    """Every pair as one point of a strip plot: claim, group (seed pairs or a control), value (|r|, the statistic
    `paper.RULE` judges), its sign (Eq. 3's orientation), paper."""
    pts = []
    for c in CLAIMS:
        kind = "same" if c.families[0][0] == c.families[0][1] else "cross"
        for _, r in _of(s.pairs, (kind,), c.families).iterrows():
            pts.append({"claim": c.label, "group": "seed pairs", "value": abs(r[c.statistic]), "sign": _sign(r[c.statistic]),
                        "pair": f"{r['a']} / {r['b']}", "paper": c.paper[0]})
        if kind == "same":
            for _, r in controls_for(s.pairs, c).iterrows():
                pts.append({"claim": c.label, "group": f"control: {r['kind']}", "value": abs(r[c.statistic]),
                            "sign": _sign(r[c.statistic]), "pair": f"{r['a']} / {r['b']}", "paper": c.paper[0]})
    return pd.DataFrame(pts)


def _sign(v: float) -> str:
    return "negative" if v < 0 else "positive"


def _reaching(row) -> list[tuple[str, float]]:
    """How many seed pairs reach each of the paper's values (its two ends where it gives a range, the second only
    where some reach the first): [("3", 0.62), ("none", 0.72)]; empty for a claim over runs."""
    if row.get("unit", "seed pairs") != "seed pairs" or "reach paper" not in row:
        return []
    low, high = _ends(row["paper"])
    ends = [(row["reach paper"], low)] + ([(row["reach paper high"], high)] if high != low and row["reach paper"] else [])
    return [(f"{n or 'none'}", v) for n, v in ends]


def _reach(row) -> str:
    """The table's column beside the paper's value: "none", "3", "2 (0.62), 1 (0.72)"; "—" for runs."""
    ends = _reaching(row)
    if not ends:
        return "—"
    return ends[0][0] if len(ends) == 1 else ", ".join(f"{n} ({v:.2f})" for n, v in ends)


def _fmt(row) -> str:
    unit = row.get("unit", "seed pairs")
    stat = "|rho|" if row.get("statistic") == "Spearman rho" else "|r|"
    reach = "".join(f", {n} reaching the paper's {v:.2f}" if i == 0 else f", {n} its {v:.2f}"
                    for i, (n, v) in enumerate(_reaching(row)))
    return f"median {stat} {row['median']:.2f} ({row['low']:.2f} to {row['high']:.2f}) over {row['pairs']} {unit}{reach}"


def scorecard_entries(s: SeedStudy) -> dict[str, dict]:
    """The verdicts this study decides, per scorecard item: what to show, the verdict (the weakest of the
    item's claims) and a note naming the controls. The run's own pair stays in the text beside it."""
    out: dict[str, dict] = {}
    rows = claim_rows(s)
    for item, group in rows.groupby("item", sort=False):
        decided = group[group["verdict"] != "not attempted"]
        if decided.empty:  # the study cannot decide this item yet: the build's own verdict stands
            continue
        text = "; ".join(f"{r['claim']}: {_fmt(r)}" for _, r in group.iterrows())
        note = "; ".join(f"{r['claim']}: the controls' {r['control pairs']} pairs reach |r| {r[HIGH]:.2f} at their "
                         "90th percentile" for _, r in group.iterrows())
        missing = [c.label for c in CLAIMS if c.item == item and c.label not in set(group["claim"])]
        if missing:
            text += f"; not yet in the seed study: {', '.join(missing)}"
        out[item] = {"seeds": text, "verdict": paper.weakest(decided["verdict"]),
                     "controls": note}
    bert = context_learned(s, ("bert-large",))
    if bert["beyond word frequencies"] == bert["beyond word frequencies"] and not bert["learned context"]:
        # Fig. 3 plots the profile's own Bert-large pair, runs of this study: below the gate it is no verdict
        out["fig3"] = {"verdict": paper.NO_CONTEXT, "caps": True, "over": "seed runs", "this_run": True,
                       "seeds": f"Bert-large's runs did not learn context ({bert['beyond word frequencies']:.2f} nats "
                                f"beyond word frequencies at the least, the gate {paper.CONTEXT_GATE:g})",
                       "controls": "`paper.CONTEXT_RULE` on the seed study's Bert-large runs"}
    same = same_config_rows(rows)
    if len(same):  # the item "pairs above their controls": every family's same-configuration pairs
        out["controls"] = {"seeds": "; ".join(f"{r['claim'].split(' (')[0]}: median |r| {r['median']:.2f}, "
                                             f"{'above' if r['above controls'] else 'not above'} its controls' "
                                             f"{r['control pairs']} pairs (90th percentile {r[HIGH]:.2f})"
                                             for _, r in same.iterrows()),
                           "verdict": paper.gated(paper.controls_verdict(list(same["above controls"])),
                                                  bool(same["learned context"].all())),
                           "controls": "each family against its own untrained, independent and shuffled-label pairs"}
    return out


def same_config_rows(claims: pd.DataFrame) -> pd.DataFrame:
    """The rows of `claim_rows` that hold a family's same-configuration pairs (each with `above controls`)."""
    return claims[claims["above controls"].notna()] if "above controls" in claims else claims.iloc[:0]


def shortfall_table(s: SeedStudy) -> pd.DataFrame:
    """Per family, the probe shortfall of the study's single-tower probes (the head's validation loss minus
    the model's): how many, their median and their largest (empty without them)."""
    if s.single_tower is None or s.single_tower.empty:
        return pd.DataFrame()
    g = s.single_tower.groupby("family", sort=False)["shortfall"]
    t = pd.DataFrame({"single-tower probes": g.size(), "median shortfall": g.median(), "largest shortfall": g.max()})
    t.index = t.index.map(lambda f: NAMES.get(f, f))
    return t.round(3)


def family_table(s: SeedStudy) -> pd.DataFrame:
    """`seed_spread.family_summary` with the families named as the paper names them, rounded for reading."""
    t = seed_spread.family_summary(s.pairs, s.runs)
    t["family"] = t["family"].map(lambda f: NAMES.get(f, f))
    return t.set_index("family").round(2)


HELD_TO_BERT_LARGE = "*"   # marks the paper's Bert-large value in the row of a claim the paper does not make


def section_markdown(s: SeedStudy, profile: str) -> str:
    """The result box of section 03: per claim, the paper's value, ours over seed pairs and the verdict."""
    t = claim_rows(s)
    low, high = paper.CENTRAL
    probed = [NAMES.get(f, f) for f in s.study["families"] if f in set(s.pairs["family_a"])]
    lines = [f"Seed study of profile `{profile}`, {s.study['seeds']} seeds per family "
             + (f"({', '.join(probed)} probed so far)" if len(probed) < len(s.study["families"]) else
                f"({', '.join(probed)})")
             + (f"; {s.study['failed probe pairs']} pairs of a run whose probe failed are left out"
                if s.study.get("failed probe pairs") else "") + ": "
             "one pair of seeds is one draw, so each claim is |r| over seed pairs, held against control pairs measured "
             "the same way (`paper.RULE`; the signed r is folded under the table).",
             ""] + ([VALID_PROBE_RULE, ""] if s.study.get("failed probe pairs") else [])
    table = [f"| claim | paper | median \\|r\\| | {low * 100:.0f}th–{high * 100:.0f}th percentile | seed pairs | reaching the paper "
             f"| controls' {high * 100:.0f}th pct. (pairs) | verdict |", "|---|---|---|---|---|---|---|---|"]
    audit = ["| claim | division (leaving one run out) | orientation (signed median) |", "|---|---|---|"]
    reported = {c.label: c.reported for c in CLAIMS}
    for _, r in t.iterrows():
        value = r["paper"] if isinstance(r["paper"], float) else f"{r['paper'][0]:.2f}–{r['paper'][1]:.2f}"
        if not reported.get(r["claim"], True):
            value = f"{value}{HELD_TO_BERT_LARGE}"   # the claim says "(not in the paper)"; the verdict holds it to this
        table.append(markdown_row([r["claim"], value, f"{r['median']:.2f}", f"{r['low']:.2f}–{r['high']:.2f}",
                                   f"{r['pairs']}" + ("" if r["unit"] == "seed pairs" else f" {r['unit']}"), _reach(r),
                                   f"{r[HIGH]:.2f} ({r['control pairs']})", f"**{r['verdict']}**"]))
        audit.append(markdown_row([r["claim"], front.division_cell(r, profile) or "—", front.orientation_cell(r, profile) or "—"]))
    note = (f"\n\n\\{HELD_TO_BERT_LARGE} The paper's Bert-large pair: a family the paper trained once is held to it.\n"
            if not all(reported.get(c, True) for c in t["claim"]) else "\n")
    return ("\n".join(lines) + "\n" + full_width("\n".join(table) + note)   # the division and orientation one click away
            + "\n:::{dropdown} Each claim's division and orientation, and their rules\n" + "\n".join(audit) + "\n\n"
            + paper.PARTITION_RULE + "\n\n" + paper.ORIENTATION_RULE + "\n\n" + CEILING_NOTE + "\n:::\n")


def sign_flip_table(s: SeedStudy) -> pd.DataFrame:
    """Every negative same-configuration pair and its reading (`seed_spread.sign_flips`)."""
    return seed_spread.sign_flips(s.pairs[s.pairs["kind"] == "same"], s.runs[s.runs["kind"] == "case"]).round(3)


def spread_sentence(s: SeedStudy) -> str:
    """The spread over seeds in one sentence, for the front page: each family's median same-configuration |r|
    and central range (`claim_rows`), and how high the controls' |r| reaches."""
    same = {c.label for c in CLAIMS if c.families[0][0] == c.families[0][1]}
    t = claim_rows(s).pipe(lambda t: t[t["claim"].isin(same)])
    fams = "; ".join(f"{r['claim'].split(',')[0]} {r['median']:.2f} ({r['low']:.2f} to {r['high']:.2f})"
                     for _, r in t.iterrows())
    null = s.pairs[s.pairs["kind"].isin(NULL_KINDS)]["r"].abs()
    shuffled = s.pairs[s.pairs["kind"] == "shuffled"]["r"].abs()
    low, high = paper.CENTRAL
    return (f"**Spread over seeds.** Two runs of one configuration with different seeds agree, as a median of the "
            f"|r| over {int(t['pairs'].max())} seed pairs (in parentheses: their {low:.0%}–{high:.0%} percentile "
            f"range): {fams}. The untrained and independent towers' pairs reach |r| of {null.max():.2f} at most, the "
            f"shuffled labels' {shuffled.max():.2f}; the paper's Bert-large pair reads {CLAIMS[0].paper[0]:.2f}.")


def strip_chart(points: pd.DataFrame, title: str = "Every seed pair, its controls' pairs, and the paper's value") -> alt.Chart:
    """Small multiples, one per claim (`strip_points`): each seed pair's |r| a mark in the top lane (a circle where
    r is positive, a cross where negative: the sign is Eq. 3's orientation), each control's pairs in a lane of
    their own, the paper's value a red line."""
    order = list(dict.fromkeys(points["claim"]))
    scale = alt.Scale(domain=[0, 1])
    base = alt.Chart(width=280, height=alt.Step(12))
    dots = base.mark_point(size=50, opacity=0.8, filled=True).encode(
        x=alt.X("value:Q", scale=scale, title="|r| (Pearson) or |rho| (Spearman)"),
        y=alt.Y("group:N", title=None, sort=["seed pairs"]), color=alt.Color("group:N", legend=None),
        shape=alt.Shape("sign:N", scale=alt.Scale(domain=["positive", "negative"], range=["circle", "cross"]),
                        title="sign of r", legend=alt.Legend(orient="bottom")),
        tooltip=["claim:N", "group:N", "pair:N", "sign:N", alt.Tooltip("value:Q", format=".2f")])
    paper = base.mark_rule(color="#e45756", strokeWidth=2).encode(x=alt.X("paper:Q", scale=scale))
    zero = base.mark_rule(color="#ccc").encode(x=alt.X("zero:Q", scale=scale))
    return alt.layer(zero, dots, paper, data=points.assign(zero=0.0)).facet(
        row=alt.Row("claim:N", sort=order, title=None, header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=200)),
        spacing=6, title=title).resolve_scale(y="independent")   # close rows: a claim's lanes read as one block


# ---------------------------------------------------------------- the probe's error budget
# How far each source of error moves the default profile's GPT same-configuration pair, in units of r:
# *seeds* (the SD of |r| over the seed study's GPT seed pairs), *probe data* (r at the default number of probe
# training positions against the most measured, `results/probe/positions_cases.json`), *validation text*
# (half the width of the pair's 95% document-bootstrap interval, same file) and *probe optimiser* (the
# default heads against the head at its defined optimum, `results/probe/defined_cases.json`).
PAIR = ("gpt-s1", "gpt-s2")
DEFAULT_PROBING = "cpu-198k"
BUDGET_FILES = ("positions_cases.json", "defined_cases.json")


def error_budget(s: SeedStudy, profile: str, probe_dir: Path = PROBE) -> pd.DataFrame:
    """One row per source: its size in units of r, how it was measured, and the file it comes from."""
    gpt = s.pairs[(s.pairs["kind"] == "same") & (s.pairs["family_a"] == "gpt")]
    rows = [("seeds", float(np.std(gpt["r"].abs(), ddof=1)), f"SD of |r| over {len(gpt)} GPT seed pairs",
             f"results/seeds/{profile}/pairs.csv")]
    positions = read_json(probe_dir / "positions_cases.json")
    by = {row["probing"]: next(p["r_score"] for p in row["pairs"] if (p["a"], p["b"]) == PAIR)
          for row in positions["rows"]}
    most = max(by, key=lambda k: next(r["runs"][PAIR[0]]["train_positions"] for r in positions["rows"] if r["probing"] == k))
    default = by[DEFAULT_PROBING]
    rows.append(("probe data", abs(by[most]["r"] - default["r"]), f"r at {DEFAULT_PROBING} against {most} training positions",
                 "results/probe/positions_cases.json"))
    rows.append(("validation text", (default["ci_high"] - default["ci_low"]) / 2,
                 "half-width of the 95% document-bootstrap interval", "results/probe/positions_cases.json"))
    defined = read_json(probe_dir / "defined_cases.json")
    pair = next(p for p in defined["pairs"] if {p["a"], p["b"]} == set(PAIR))
    rows.append(("probe optimiser", abs(pair["old_r"]["score"] - pair["new_r"]["score"]),
                 "r with the default heads against the head at its defined optimum", "results/probe/defined_cases.json"))
    return pd.DataFrame(rows, columns=["source", "size (units of r)", "how it is measured", "from"])


def error_budget_markdown(t: pd.DataFrame) -> str:
    """The budget as a table and one generated sentence naming the largest source."""
    top = t.loc[t["size (units of r)"].idxmax()]
    lines = ["| source | size (units of r) | how it is measured | from |", "|---|---|---|---|"]
    lines += [markdown_row([r["source"], f"{r['size (units of r)']:.2f}", r["how it is measured"], f"`{r['from']}`"])
              for _, r in t.iterrows()]
    share = top["size (units of r)"] / t["size (units of r)"].sum()
    verdict = ("the spread over seeds, not the instrument, limits what one pair can say" if top["source"] == "seeds"
               else "the instrument, more than the seeds, limits what one pair can say")
    return ("\n".join(lines) + f"\n\nThe largest source is **{top['source']}** ({top['size (units of r)']:.2f}, "
            f"{share:.0%} of the four summed): {verdict}.\n")


def error_budget_chart(t: pd.DataFrame, title: str = "How far each source of error moves one pair's r") -> alt.Chart:
    """The error budget, one bar per source, in units of r."""
    return alt.Chart(t, title=title, width=charts.WIDTH * 0.7, height=alt.Step(28)).mark_bar().encode(
        x=alt.X("size (units of r):Q", title="units of r"), y=alt.Y("source:N", sort="-x", title=None),
        tooltip=["source:N", alt.Tooltip("size (units of r):Q", format=".2f"), "how it is measured:N", "from:N"])


# ---------------------------------------------------------------- what the book reads
BUDGET_PROFILE = "cpu"   # the profile whose GPT pair the probe studies measured


def claims_table(s: SeedStudy) -> pd.DataFrame:
    """`claim_rows` as `claims.csv` holds it: the paper's value as two columns (a cell or a range)."""
    t = claim_rows(s)
    paper = t["paper"].map(lambda v: v if isinstance(v, tuple) else (v, v))
    return t.drop(columns="paper").assign(paper_low=paper.str[0], paper_high=paper.str[1])


def book_parts(s: SeedStudy, profile: str) -> dict[str, str]:
    """One profile's parts, by name: Markdown, reader tables as HTML (`*_TABLE`), charts as Vega-Lite JSON
    (`*_CHART`), each `NAME@<profile>`."""
    parts = {"SEEDS_SECTION": section_markdown(s, profile), "SEEDS_STRIPS_CHART": strip_chart(strip_points(s)).to_json(),
             "SEEDS_FAMILY_TABLE": reader_html(family_table(s)), "SEEDS_SIGN_FLIP_TABLE": reader_html(sign_flip_table(s)),
             "SEEDS_SHORTFALL_TABLE": reader_html(shortfall_table(s)), "SEEDS_SPREAD": spread_sentence(s)}
    return {f"{name}@{profile}": text for name, text in parts.items()}


def write_book(results: Path = RESULTS, probe_dir: Path = PROBE) -> Path:
    """Every committed profile's parts, verdicts and `claims.csv`, and the default profile's error budget
    (`ERROR_BUDGET`, `ERROR_BUDGET_CHART`), into `results/seeds/book.json`."""
    parts: dict[str, str] = {}
    verdicts: dict[str, dict] = {}
    inputs: list[Path] = []
    for d in sorted(p.parent for p in Path(results).glob("*/pairs.csv")):
        s = load(d.name, results)
        claims_table(s).to_csv(d / "claims.csv", index=False)
        parts.update(book_parts(s, d.name))
        verdicts.update({f"{item}@{d.name}": {**e, "profile": d.name} for item, e in scorecard_entries(s).items()})
        inputs += [f for f in d.iterdir() if f.suffix in (".csv", ".json") and f.name != "claims.csv"]
        if d.name == BUDGET_PROFILE:
            budget = error_budget(s, d.name, probe_dir)
            parts.update({"ERROR_BUDGET": error_budget_markdown(budget), "ERROR_BUDGET_CHART": error_budget_chart(budget).to_json()})
            inputs += [probe_dir / f for f in BUDGET_FILES]
    return study_parts.write(Path(results), parts, {}, inputs, "python -m studies.seeds.book", verdicts)


if __name__ == "__main__":
    print(f"seed study's book parts -> {write_book()}")
