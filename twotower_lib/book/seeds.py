"""The seed study as the book shows it: every correlation the paper reports as a distribution over
seed pairs, beside its controls' pairs and the paper's value, and the verdicts those decide.

Reads `results/seeds/<profile>/` (`pairs.csv`, `runs.csv`, `study.json`), written by the study's
runner (`python -m studies.seeds --profile <profile>`); nothing here trains or probes. The rule that
turns a distribution into a verdict is `analysis.seed_spread.RULE`, written once and applied to
every row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from twotower_lib.analysis import seed_spread
from twotower_lib.artifacts import read_json
from twotower_lib.book.sections import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "results" / "seeds"
CONTROL_KINDS = ("untrained", "independent", "shuffled")
HIGH = "controls' high"
NAMES = {"elmo": "ELMo", "gpt": "GPT", "bert-base": "Bert-base", "bert-large": "Bert-large"}


@dataclass(frozen=True)
class Claim:
    """One correlation the paper reports, as pairs of families: Table 2 (Pearson r) or Table 4 (Spearman)."""

    item: str                                # the scorecard item it decides
    label: str                               # what a reader sees
    families: tuple[tuple[str, str], ...]    # the family pairs whose seed pairs it pools
    paper: tuple[float, float]               # the paper's value, or the range of its cells (Bert-large's two runs)
    statistic: str = "r"                     # "r" (Pearson, Eq. 4's score) or "rho" (Spearman, Table 4)


CLAIMS: tuple[Claim, ...] = (
    Claim("table2.same-config", "Bert-large, two seeds (Table 2)", (("bert-large", "bert-large"),), (0.94, 0.94)),
    Claim("same-config.other", "GPT, two seeds (not in the paper)", (("gpt", "gpt"),), (0.94, 0.94)),
    Claim("same-config.other", "ELMo, two seeds (not in the paper)", (("elmo", "elmo"),), (0.94, 0.94)),
    Claim("same-config.other", "Bert-base, two seeds (not in the paper)", (("bert-base", "bert-base"),), (0.94, 0.94)),
    Claim("table2.base-large", "Bert-base vs Bert-large (Table 2)", (("bert-base", "bert-large"),), (0.62, 0.72)),
    Claim("table2.cross-type", "Bert-large vs ELMo (Table 2)", (("bert-large", "elmo"),), (0.57, 0.61)),
    Claim("table2.cross-type", "Bert-large vs GPT (Table 2)", (("bert-large", "gpt"),), (0.57, 0.63)),
    Claim("table2.elmo-gpt", "ELMo vs GPT (Table 2)", (("elmo", "gpt"),), (0.91, 0.91)),
    Claim("table2.bert-base-others", "Bert-base vs ELMo (Table 2)", (("bert-base", "elmo"),), (0.27, 0.27)),
    Claim("table2.bert-base-others", "Bert-base vs GPT (Table 2)", (("bert-base", "gpt"),), (0.26, 0.26)),
    Claim("table4", "ELMo vs GPT, Spearman (Table 4)", (("elmo", "gpt"),), (0.93, 0.93), "rho"),
    Claim("table4", "GPT vs Bert-large, Spearman (Table 4)", (("gpt", "bert-large"),), (0.65, 0.65), "rho"),
    Claim("table4", "ELMo vs Bert-large, Spearman (Table 4)", (("elmo", "bert-large"),), (0.56, 0.56), "rho"),
)


@dataclass(frozen=True)
class SeedStudy:
    """A profile's committed seed study."""

    pairs: pd.DataFrame
    runs: pd.DataFrame
    study: dict
    single_tower: pd.DataFrame | None = None   # the independent control's single-tower probes (shortfall)


def load(profile: str, results: Path = RESULTS) -> SeedStudy | None:
    """The committed study of `profile`, or None where none was run."""
    d = Path(results) / profile
    if not (d / "pairs.csv").exists():
        return None
    single = pd.read_csv(d / "single_tower.csv") if (d / "single_tower.csv").exists() else None
    return SeedStudy(pd.read_csv(d / "pairs.csv"), pd.read_csv(d / "runs.csv"), read_json(d / "study.json"), single)


def _of(pairs: pd.DataFrame, kinds: tuple[str, ...], families: tuple[tuple[str, str], ...]) -> pd.DataFrame:
    match = pd.Series(False, index=pairs.index)
    for a, b in families:
        match |= ((pairs["family_a"] == a) & (pairs["family_b"] == b)) | ((pairs["family_a"] == b) & (pairs["family_b"] == a))
    return pairs[match & pairs["kind"].isin(kinds)]


def controls_for(pairs: pd.DataFrame, claim: Claim) -> pd.DataFrame:
    """The control pairs a claim is held against: those of every family it involves, pooled."""
    families = {f for pair in claim.families for f in pair}
    return pairs[pairs["kind"].isin(CONTROL_KINDS) & pairs["family_a"].isin(families)]


def claim_rows(s: SeedStudy) -> pd.DataFrame:
    """One row per claim with pairs in the study: paper value, our median and central range over seed
    pairs, the controls' median and high end, and the verdict by `seed_spread.RULE`."""
    rows = []
    for c in CLAIMS:
        kind = "same" if c.families[0][0] == c.families[0][1] else "cross"
        ours = _of(s.pairs, (kind,), c.families)[c.statistic]
        if ours.empty:
            continue
        ctrl = controls_for(s.pairs, c)[c.statistic]
        o, n = seed_spread.summarize(ours), seed_spread.summarize(ctrl)
        rows.append({"item": c.item, "claim": c.label, "paper": c.paper[0] if c.paper[0] == c.paper[1] else c.paper,
                     "statistic": "Pearson r" if c.statistic == "r" else "Spearman rho", "unit": "seed pairs",
                     "pairs": o["n"], "median": o["median"], "low": o["low"], "high": o["high"],
                     "median |r|": float(ours.abs().median()), "control pairs": n["n"], "controls' median": n["median"], HIGH: n["high"],
                     "verdict": seed_spread.verdict(ours, ctrl, c.paper),
                     "above controls": seed_spread.above_controls(ours, ctrl) if kind == "same" else None})
    freq = s.runs[s.runs["family"].isin(FREQUENCY_FAMILIES)] if "rho_frequency_rank" in s.runs else s.runs.iloc[:0]
    if len(freq):
        ours = freq[freq["kind"] == "case"]["rho_frequency_rank"]
        ctrl = freq[freq["kind"] == "untrained"]["rho_frequency_rank"]
        o, n = seed_spread.summarize(ours), seed_spread.summarize(ctrl)
        rows.append({"item": "table4", "claim": FREQUENCY_CLAIM, "paper": FREQUENCY_PAPER, "statistic": "Spearman rho",
                     "unit": "runs",
                     "pairs": o["n"], "median": o["median"], "low": o["low"], "high": o["high"], "control pairs": n["n"],
                     "controls' median": n["median"], HIGH: n["high"],
                     "verdict": _frequency_verdict(ours, ctrl)})
    return pd.DataFrame(rows)


# Table 4's last column: each run's scores against frequency rank (one value per run, not per pair).
FREQUENCY_FAMILIES = ("elmo", "gpt", "bert-large")
FREQUENCY_CLAIM = "ELMo, GPT, Bert-large vs frequency rank, Spearman (Table 4)"
FREQUENCY_PAPER = (0.16, 0.22)


def _frequency_verdict(ours: pd.Series, untrained: pd.Series) -> str:
    """The paper's claim is a weak positive rho with frequency rank: `seed_spread.RULE` with the untrained
    towers' runs as the null, over runs instead of pairs."""
    return seed_spread.verdict(ours, untrained, FREQUENCY_PAPER)


def strip_points(s: SeedStudy) -> pd.DataFrame:
    """Every pair as one point of a strip plot: claim, group (seed pairs or a control), value, paper."""
    pts = []
    for c in CLAIMS:
        kind = "same" if c.families[0][0] == c.families[0][1] else "cross"
        for _, r in _of(s.pairs, (kind,), c.families).iterrows():
            pts.append({"claim": c.label, "group": "seed pairs", "value": r[c.statistic], "pair": f"{r['a']} / {r['b']}",
                        "paper": c.paper[0]})
        if kind == "same":
            for _, r in controls_for(s.pairs, c).iterrows():
                pts.append({"claim": c.label, "group": f"control: {r['kind']}", "value": r[c.statistic],
                            "pair": f"{r['a']} / {r['b']}", "paper": c.paper[0]})
    return pd.DataFrame(pts)


def _fmt(row) -> str:
    unit = row.get("unit", "seed pairs")
    return f"median {row['median']:.2f} ({row['low']:.2f} to {row['high']:.2f}) over {row['pairs']} {unit}"


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
        note = "; ".join(f"{r['claim']}: the controls' {r['control pairs']} pairs reach {r[HIGH]:.2f} at their "
                         "90th percentile" for _, r in group.iterrows())
        missing = [c.label for c in CLAIMS if c.item == item and c.label not in set(group["claim"])]
        if missing:
            text += f"; not yet in the seed study: {', '.join(missing)}"
        out[item] = {"seeds": text, "verdict": max(decided["verdict"], key=seed_spread.VERDICTS.index),
                     "controls": note}
    same = same_config_rows(rows)
    if len(same):  # the item "pairs above their controls": every family's same-configuration pairs
        out["controls"] = {"seeds": "; ".join(f"{r['claim'].split(' (')[0]}: median {r['median']:.2f}, "
                                             f"{'above' if r['above controls'] else 'not above'} its controls' "
                                             f"{r['control pairs']} pairs (90th percentile {r[HIGH]:.2f})"
                                             for _, r in same.iterrows()),
                           "verdict": seed_spread.controls_verdict(list(same["above controls"])),
                           "controls": "each family against its own untrained, independent and shuffled-label pairs"}
    return out


def same_config_rows(claims: pd.DataFrame) -> pd.DataFrame:
    """The rows of `claim_rows` that hold a family's same-configuration pairs (each with `above controls`)."""
    return claims[claims["above controls"].notna()] if "above controls" in claims else claims.iloc[:0]


def shortfall_table(s: SeedStudy | None) -> pd.DataFrame:
    """Per family, the probe shortfall of the study's single-tower probes (the head's validation loss minus
    the model's): how many, their median and their largest (empty without them)."""
    if s is None or s.single_tower is None or s.single_tower.empty:
        return pd.DataFrame()
    g = s.single_tower.groupby("family", sort=False)["shortfall"]
    t = pd.DataFrame({"single-tower probes": g.size(), "median shortfall": g.median(), "largest shortfall": g.max()})
    t.index = t.index.map(lambda f: NAMES.get(f, f))
    return t.round(3)


def family_table(s: SeedStudy | None) -> pd.DataFrame:
    """`seed_spread.family_summary` with the families named as the paper names them, rounded for reading
    (empty without a study)."""
    if s is None:
        return pd.DataFrame()
    t = seed_spread.family_summary(s.pairs, s.runs)
    t["family"] = t["family"].map(lambda f: NAMES.get(f, f))
    return t.set_index("family").round(2)


def section_markdown(s: SeedStudy | None, profile: str) -> str:
    """The result box of section 03: per claim, the paper's value, ours over seed pairs and the verdict;
    or, where no seed study is committed, the command that makes one."""
    if s is None:
        return (f"No seed study is committed for profile `{profile}`: every r in this section is one draw. "
                f"Make one with `python -m studies.seeds --profile {profile}` (hours on 2 cores, resumable).")
    t = claim_rows(s)
    lines = [f"Seed study of profile `{profile}`: {s.study['seeds']} seeds per family "
             f"({', '.join(NAMES.get(f, f) for f in s.study['families'] if f in set(s.pairs['family_a']))} probed so far). "
             "Median and central range (10th to 90th percentile) over seed pairs:", "",
             "| claim | paper | ours over seed pairs | controls' 90th percentile | verdict |", "|---|---|---|---|---|"]
    for _, r in t.iterrows():
        paper = r["paper"] if isinstance(r["paper"], float) else f"{r['paper'][0]:.2f}–{r['paper'][1]:.2f}"
        lines.append(f"| {r['claim']} | {paper} | {_fmt(r)} | {r[HIGH]:.2f} ({r['control pairs']} pairs) | **{r['verdict']}** |")
    return "\n".join(lines) + "\n"


def strip_chart(s: SeedStudy | None):
    """The strip plot of every claim (`charts.seed_strips`), or a line saying there is no study."""
    from IPython.display import Markdown

    from twotower_lib.book import charts

    return Markdown("*(no seed study)*") if s is None else charts.seed_strips(strip_points(s))


def sign_flip_table(s: SeedStudy | None) -> pd.DataFrame:
    """Every negative same-configuration pair and its reading (`seed_spread.sign_flips`)."""
    if s is None:
        return pd.DataFrame()
    return seed_spread.sign_flips(s.pairs[s.pairs["kind"] == "same"], s.runs[s.runs["kind"] == "case"]).round(3)
