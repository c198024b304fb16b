"""The probe's error budget: how far each source of error moves one same-configuration pair's r.

Four sources, each read from committed measurements of the default profile's GPT pair:

- *seeds*: the standard deviation of r over same-configuration GPT seed pairs (the seed study at
  the profile, or the emergence study's four GPT seeds where no seed study is committed);
- *probe data*: the change in r from the default number of probe training positions to the most
  measured (`results/probe/positions_cases.json`);
- *validation text*: half the width of the pair's 95% document-bootstrap interval (same file);
- *probe optimiser*: the change in r from the default heads to the head taken to its defined
  optimum (`results/probe/defined_cases.json`).

All are in units of r, so a reader can see which one dominates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from twotower_lib.artifacts import read_json
from twotower_lib.book.sections import PROJECT_ROOT

PROBE = PROJECT_ROOT / "results" / "probe"
PAIR = ("gpt-s1", "gpt-s2")
DEFAULT_PROBING = "cpu-198k"


def _pair_r(row: dict) -> dict:
    return next(p["r_score"] for p in row["pairs"] if (p["a"], p["b"]) == PAIR)


def budget(profile: str = "cpu", probe_dir: Path = PROBE) -> pd.DataFrame:
    """One row per source: its size in units of r, how it was measured, and the file it comes from."""
    from twotower_lib.book import seeds

    rows = []
    study = seeds.load(profile)
    if study is not None and len(gpt := study.pairs[(study.pairs["kind"] == "same") & (study.pairs["family_a"] == "gpt")]):
        rows.append(("seeds", float(np.std(gpt["r"], ddof=1)), f"SD of r over {len(gpt)} GPT seed pairs",
                     f"results/seeds/{profile}/pairs.csv"))
    else:
        from twotower_lib.book import study_parts

        n = study_parts.load()[1]   # the emergence study's four GPT seeds at 2M tokens
        rows.append(("seeds", float(n["gpt_2m_sd"].replace("−", "-")), f"SD of r over {n['gpt_2m_pairs']} GPT seed "
                     "pairs (2M tokens)", "results/emergence/book.json"))
    positions = read_json(probe_dir / "positions_cases.json")
    by = {row["probing"]: _pair_r(row) for row in positions["rows"]}
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


def markdown(profile: str = "cpu") -> str:
    """The budget as a table and one generated sentence naming the largest source."""
    t = budget(profile)
    top = t.loc[t["size (units of r)"].idxmax()]
    lines = ["| source | size (units of r) | how it is measured | from |", "|---|---|---|---|"]
    lines += [f"| {r['source']} | {r['size (units of r)']:.2f} | {r['how it is measured']} | `{r['from']}` |"
              for _, r in t.iterrows()]
    share = top["size (units of r)"] / t["size (units of r)"].sum()
    verdict = ("the spread over seeds, not the instrument, limits what one pair can say" if top["source"] == "seeds"
               else "the instrument, more than the seeds, limits what one pair can say")
    return ("\n".join(lines) + f"\n\nThe largest source is **{top['source']}** ({top['size (units of r)']:.2f}, "
            f"{share:.0%} of the four summed): {verdict}.\n")
