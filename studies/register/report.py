"""The direct register test: a profile's same-configuration pairs trained on one source of the
corpus alone, beside the same pairs on the mixed corpus. Each corpus is a pipeline run through
03_correlations in its own runs directory, e.g.

    python -m twotower_lib run 03_correlations --profile cpu -p data.corpus registry:books \\
        -p train.cases gpt:1,gpt:2,bert-large:1,bert-large:2 -p analysis.controls permutation \\
        -p analysis.reliability_models "" --runs-dir DIR

(hours of CPU per source), so the study `studies.register` collects the pairs once into
`results/register/single_source.json` (with the probe version, provenance and these commands), and
`write_book` puts what section 03 and the introduction show — the table, the finding in words and the
scorecard's verdict — into `results/register/book.json`, which the book reads.

    python -m studies.register book

Where the size ladder's register rungs (`studies.ladder`) train a pair's family at its preset on every source
alone, over seeds, the seeds decide that family's part of the verdict (the partition rule), as they do every
correlation the seed study measures: `verdict_over_seeds`, which every page showing the row applies.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from twotower_lib import paper
from twotower_lib.artifacts import read_json
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.probe.config import RELIABILITY_GOAL, measured_with
from twotower_lib.run_names import model_of

if TYPE_CHECKING:
    import pandas as pd

RESULT = PROJECT_ROOT / "results" / "register" / "single_source.json"
LADDER_SUMMARY = PROJECT_ROOT / "results" / "ladder" / "summary.csv"   # the ladder's register rungs (`studies.ladder`)
COIN_FLIP = 0.01  # Eq. 3's margin (share of the primary's mean p) below which the order is read as a coin flip
COLUMNS = ["profile", "corpus", "source", "pair", "r", "ci_low", "ci_high", "r mean log p", "shuffled labels", "text ceiling",
           "probe ceiling", "probe reliability", "order margin", "probe version", "probe precondition", "probe precision",
           "probe code", "training tokens", "validation tokens"]


def load(path: Path = RESULT) -> pd.DataFrame:
    """The committed pairs, one row per corpus and pair, with the profile they were run at (empty if none
    were collected)."""
    import pandas as pd

    if not path.exists():
        return pd.DataFrame()
    found = read_json(path)
    table = pd.DataFrame(found["pairs"]).assign(profile=found["profile"]).reindex(columns=COLUMNS)
    return table.fillna({"probe precondition": "none"})  # collected before the field: the features as they were


def holds_alone(table: pd.DataFrame) -> dict[str, dict]:
    """Per model of a same-configuration pair: its r on each single source and on the mixed corpus; the
    single sources where the pair agrees (the interval above its shuffled-label control and 0), and those
    where it splits the tokens as consistently but with the towers' roles swapped (the interval below
    minus that control: Eq. 3 named the other tower primary in one run); and, per corpus, the order
    margin, the text ceiling and the probe-seed reliability (None where the table lacks them)."""
    out: dict[str, dict] = {}
    for row in table.to_dict("records"):
        model = model_of(row["pair"].split(" vs ")[0])
        entry = out.setdefault(model, {"mixed": None, "alone": {}, "agrees": [], "swapped": [], "margin": {},
                                       "ceiling": {}, "reliability": {}})
        entry["margin"][row["corpus"]] = row.get("order margin")
        entry["ceiling"][row["corpus"]] = row.get("text ceiling")
        entry["reliability"][row["corpus"]] = row.get("probe reliability")
        if row["corpus"] == "mixed":
            entry["mixed"] = row["r"]
            continue
        entry["alone"][row["corpus"]] = row["r"]
        control = max(row["shuffled labels"] or 0.0, 0.0)
        if row["ci_low"] > control:
            entry["agrees"].append(row["corpus"])
        elif row["ci_high"] < -control:
            entry["swapped"].append(row["corpus"])
    return out


def _series(items, word: str = "and") -> str:
    """`items` as prose: "a", "a and b", "a, b and c"."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _known(x) -> bool:
    return x is not None and x == x  # neither missing nor NaN


def sentence(table: pd.DataFrame | None = None) -> str:
    """The finding in words, per model, from the committed pairs (the introduction and section 03)."""
    table = load() if table is None else table
    if table.empty:
        return "*The same pairs have not been trained on one source alone yet.*"
    from twotower_lib.book.paper_tables import MODEL_NAMES, number

    parts = []
    for model, e in holds_alone(table).items():
        rs = ", ".join(f"{corpus} {number(r)}" for corpus, r in e["alone"].items())
        mixed = "" if e["mixed"] is None else f"; mixed corpus {number(e['mixed'])}"
        ceilings = {c: v for c, v in e["ceiling"].items() if _known(v)}
        alone = [v for c, v in ceilings.items() if c != "mixed"]
        if alone:   # what each corpus's validation text allows: a single source has less of it
            mixed += (f"; text ceilings {min(alone):.2f}–{max(alone):.2f} alone"
                      + (f", {ceilings['mixed']:.2f} mixed" if "mixed" in ceilings else ""))
        unreliable = {c: v for c, v in e["reliability"].items() if _known(v) and v < RELIABILITY_GOAL}
        neither = [c for c in e["alone"] if c not in e["agrees"] + e["swapped"]]
        margins = [m for m in e["margin"].values() if _known(m)]
        if margins and len(margins) == len(e["margin"]) and max(margins) < COIN_FLIP:
            size = ", ".join(f"{c} {abs(r):.2f}" for c, r in e["alone"].items())
            mixed_size = "" if e["mixed"] is None else f" against {abs(e['mixed']):.2f} on the mixed corpus"
            verdict = (f"has towers equally good on every corpus (Eq. 3's margin at most {max(margins):.1%} of the mean "
                       f"probability, the mixed corpus included), so which tower is primary, and the sign of r, is a "
                       f"coin flip and only |r| says how consistently the tokens are split: {size}{mixed_size}")
        elif len(e["agrees"]) == len(e["alone"]):
            verdict = "still agrees on every single source: its agreement does not need a mix of registers"
        elif len(neither) == len(e["alone"]):
            verdict = (f"does not agree on {_series(neither, 'or')} alone: at this scale its agreement needs the "
                       "mixed corpus")
        else:
            said = [f"agrees on {_series(e['agrees'])} alone"] if e["agrees"] else []
            if e["swapped"]:
                swapped = [e["margin"][c] for c in e["swapped"] if e["margin"].get(c) is not None]
                close = f", by margins of at most {max(swapped):.1%} of the mean probability" if swapped else ""
                said.append(f"splits the tokens on {_series(e['swapped'])} alone but with the "
                            f"towers' roles swapped (r < 0: Eq. 3 named the other tower primary in one run{close})")
            if neither:
                said.append(f"does not agree on {_series(neither, 'or')}")
            if not e["agrees"] and e["mixed"] is not None:   # said plainly: what it had mixed, no source keeps
                strongest = max(abs(r) for r in e["alone"].values())
                said.append(f"so no single source keeps its mixed-corpus agreement (|r| at most {strongest:.2f} alone "
                            f"against {e['mixed']:.2f} mixed)")
            verdict = ", ".join(said)
        if unreliable:
            measured = [c for c, v in e["reliability"].items() if _known(v)]
            verdict += (f", and the probe-seed reliability falls below its {RELIABILITY_GOAL} goal on "
                        + _series([f"{c} ({v:.2f})" for c, v in unreliable.items()])
                        + (f", against {mixed_r:.2f} on the mixed corpus"
                           if "mixed" not in unreliable and _known(mixed_r := e["reliability"].get("mixed")) else "")
                        + (f" (measured on {_series(measured)} only)" if len(measured) < len(e["reliability"]) else ""))
        parts.append(f"the {MODEL_NAMES.get(model, model)} pair (r: {rs}{mixed}) {verdict}")
    profile = table["profile"].iloc[0]
    older = sorted({m for v, p in zip(table["probe version"], table["probe precondition"]) if (m := measured_with(v, p))}
                   if "probe version" in table else ())   # a table without them: nothing to flag
    said = "; ".join(older)
    older_note = (f" {said[:1].upper()}{said[1:]}, so these pairs are not yet comparable with the ones measured with it."
                  if older else "")
    dtypes = sorted(table["probe precision"].dropna().unique()) if "probe precision" in table else []
    if len(dtypes) > 1:   # one run probed in bf16 and in fp32 gives pairs further apart than their intervals
        older_note += (" The towers were probed in " + _series([
            f"{d} ({', '.join(sorted(set(table.loc[table['probe precision'] == d, 'corpus'])))})" for d in dtypes])
            + ", so the corpora's pairs do not compare across those dtypes.")
    return (f"Trained on one source of the corpus alone (`{profile}` profile, one seed pair per corpus), "
            + "; ".join(parts) + "." + older_note)


def verdict(table: pd.DataFrame) -> dict[str, str] | None:
    """The scorecard's register verdict from the pairs (`paper.register_verdict`): reproduced = every pair splits
    the tokens on every single source (its interval beyond its shuffled-label control, above it or, with the towers'
    roles swapped, below minus it), partly = some pair on some source; not = none. None when nothing was collected."""
    if table.empty:
        return None
    found = holds_alone(table)
    split = [len(e["agrees"]) + len(e["swapped"]) for e in found.values()]
    alone = [len(e["alone"]) for e in found.values()]
    return {"profile": str(table["profile"].iloc[0]), "ours": sentence(table),
            "verdict": paper.register_verdict(split, alone),
            "note": "reproduced = every pair splits the tokens on every single source, as it agrees or with its "
                    "towers' roles swapped (which tower Eq. 3 calls primary decides nothing); partly = some pair on "
                    "some source; not = none; one seed pair per corpus; `results/register/single_source.json`"}


def over_seeds(profile: str, path: Path = LADDER_SUMMARY) -> dict[str, dict[str, str]]:
    """Per model of `profile` whose family and preset the size ladder's register rungs train, the division's
    verdict over seeds on each source alone (`studies.ladder.report.register_verdicts`), where every source has one
    (a source short of its seeds leaves the model to its seed pair)."""
    import pandas as pd

    from studies.ladder.report import register_verdicts
    from twotower_lib.book.profiles import get_profile

    if not path.exists():
        return {}
    found = register_verdicts(pd.read_csv(path))
    out = {}
    for model, choice in get_profile(profile).models.items():
        verdicts = found.get((choice.model_type, choice.preset), {})
        if verdicts and all(v in ("holds", "unstable", "not") for v in verdicts.values()):
            out[model] = verdicts
    return out


def verdict_over_seeds(table: pd.DataFrame, path: Path = LADDER_SUMMARY) -> dict[str, str] | None:
    """The register verdict with the seeds deciding where the ladder has them (`over_seeds`: a model's division
    holds on a source alone, or not), each other model's seed pair where it does not; None where the ladder decides
    no model of the table's pairs on all of their sources. Given as a verdict over seeds
    (`scorecard.decide_over_seeds`), it is the row every page shows, a published record's too."""
    if table.empty:
        return None
    profile = str(table["profile"].iloc[0])
    seeds, found = over_seeds(profile, path), holds_alone(table)
    decided = {m: seeds[m] for m, e in found.items() if m in seeds and set(e["alone"]) <= set(seeds[m])}
    if not decided:
        return None
    from studies.ladder.report import where_it_holds
    from studies.ladder.rungs import SEEDS
    from twotower_lib.book.paper_tables import MODEL_NAMES

    split = [sum(decided[m][c] == "holds" for c in e["alone"]) if m in decided else len(e["agrees"]) + len(e["swapped"])
             for m, e in found.items()]
    names = {m: MODEL_NAMES.get(m, m) for m in found}

    pairs = [names[m] for m in found if m not in decided]
    where = {m: where_it_holds({c: decided[m][c] for c in found[m]["alone"]}) for m in decided}
    where |= {m: where_it_holds({c: "holds" if c in e["agrees"] + e["swapped"] else "not"
                                 for c in e["alone"]}) for m, e in found.items() if m not in decided}
    text = "; ".join(f"{names[m]}'s division repeats across seeds {where[m]} (the size ladder's register rungs: its "
                     f"preset, one epoch of each source, {SEEDS} seeds a source, against its untrained towers)"
                     if m in decided else f"{names[m]}'s one seed pair splits the tokens {where[m]} (section 03)"
                     for m in found)
    return {"seeds": text, "verdict": paper.register_verdict(split, [len(e["alone"]) for e in found.values()]),
            "over": "seeds on each source alone" + (f" ({_series([names[m] for m in decided])}; "
                                                     f"{_series(pairs)}: one seed pair)" if pairs else ""),
            "controls": "reproduced = every family splits the tokens on every single source; partly = some family "
                        "on some source; not = none (`paper.register_verdict`; over seeds, the division holds: "
                        "`paper.PARTITION_RULE`)",
            "spread": ", ".join(f"{names[m]}: {SEEDS} seeds a source" for m in decided)
                      + "".join(f", {n}: one pair" for n in pairs),
            "caveat": "over seeds: the ladder's one-epoch runs, not this profile's" + (
                f"; {_series(pairs)}: one seed pair per source" if pairs else ""), "this_run": False}


def table_html(table: pd.DataFrame) -> str:
    """The committed pairs as section 03 shows them: corpus, pair, r with its interval, the controls and ceilings."""
    if table.empty:
        return "<p><em>No single-source pairs are committed.</em></p>"
    from twotower_lib.book.tables import reader_html

    shown = table[["corpus", "pair", "r", "ci_low", "ci_high", "r mean log p", "shuffled labels", "text ceiling",
                   "probe ceiling", "order margin", "training tokens"]]
    return reader_html(shown.round(3))


def write_book(path: Path = RESULT) -> Path:
    """Section 03's table, the finding in words (section 03 and the introduction: `REGISTER`) and the
    scorecard's verdict into `results/register/book.json`."""
    from twotower_lib.book import study_parts

    table = load(path)
    found, seeds = verdict(table), verdict_over_seeds(table)
    verdicts = ({"register": found} if found else {}) | ({f"register@{found['profile']}": seeds} if seeds else {})
    inputs = ([path] if path.is_file() else []) + ([LADDER_SUMMARY] if LADDER_SUMMARY.is_file() else [])
    return study_parts.write(path.parent, {"REGISTER": sentence(table), "REGISTER_TABLE": table_html(table)}, {},
                             inputs, "python -m studies.register book", verdicts=verdicts)
