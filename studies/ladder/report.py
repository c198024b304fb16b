"""The size ladder's report: does the division of tokens repeat across seeds, does its orientation, and does
either grow with tower size?

Reads the committed exports (`results/ladder/probes/<rung>/*.json`, written by `runner`) and writes
`results/ladder/`: `runs.csv` (one row per probe: Eq. 3's margin and its document-bootstrap SE), `pairs.csv`
(every seed pair of one rung and family, trained and untrained, and each trained pair with one run's token
labels shuffled), `summary.csv` (per rung and family: the partition and orientation statistics and verdicts
of `twotower_lib.analysis.seed_spread`), `study.json` (what the exports were made from), and `book.json`
(section 07's ladder parts). Nothing here trains or probes.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from twotower_lib.analysis import seed_spread as spread
from twotower_lib.analysis.correlation import correlate
from twotower_lib.analysis.uncertainty import corrected, pair_ceiling
from twotower_lib.artifacts import atomic_write_bytes, atomic_write_json, provenance, read_json
from twotower_lib import paper
from twotower_lib.paper import SAME_CONFIG_R
from twotower_lib.probe.config import settled
from studies.ladder.rungs import (CORPUS, FAMILIES, MIXED, RUNGS, SEEDS, THINNED, corpus_of, is_source, on_size_axis,
                                  passes, probe_config, size_rungs)

RESULTS = Path(__file__).resolve().parents[2] / "results" / "ladder"
EXPORTS = "probes"   # results/ladder/probes/<rung>/: one committed file a probe (not "runs/", which git ignores)
TOP_N = 1000          # the most frequent tokens both runs scored: the seed study's N at the cpu profile
SHUFFLE_SEED = 0
PROBE_FAILED = "probe failed"
NOT_YET = "not attempted"      # fewer than two seeds probed with their untrained control yet
REFERENCE = "reference.json"   # the corpus's word-frequency loss (`PreparedData.unigram_loss`), written by `runner`
VALID_PROBE_RULE = (
    "**A probe counts** only where each of its tower heads predicts the validation text better than the same "
    "seed's untrained towers' heads do (a lower validation loss): a head above that learned nothing from the "
    "trained towers, or diverged, and its scores are not a preference. A rung and family with fewer than two "
    f"probes that count gets no verdict (*{PROBE_FAILED}*).")


def load_exports(results: Path) -> list[dict]:
    return [read_json(p) | {"file": p.relative_to(results).as_posix()}
            for p in sorted((results / EXPORTS).glob("*/*.json"))]


def run_rows(exports: list[dict]) -> pd.DataFrame:
    rows = []
    for e in exports:
        margin, se = spread.margin_and_se(e["doc_sums"]["n"], e["doc_sums"]["sum_p1"], e["doc_sums"]["sum_p2"])
        rows.append({"rung": e["rung"], "family": e["family"], "corpus": e.get("corpus", corpus_of(e["rung"])),
                     "seed": e["seed"], "kind": e["kind"],
                     "tower_parameters": e["tower_parameters"], "passes": e.get("train", {}).get("passes", 1),
                     "primary_eq3": e["ordering"]["primary_tower"],
                     "margin": margin, "margin_se": se,
                     "val_loss": e["val_loss"].get("cooperative", np.nan),
                     "head_loss": max((v for k, v in e["val_loss"].items() if k.endswith("_head")), default=np.nan),
                     "probe_precision": e["probe_config"].get("precision"), "current_probe": is_current(e),
                     "feature_cache": settled(e["probe_config"]).get("feature_dtype"),
                     "probe_minutes": e["probe_minutes"]})
    return pd.DataFrame(rows)


def is_current(export: dict) -> bool:
    """Whether an export was probed as the ladder probes its rung today (`rungs.probe_config`; an export of a rung
    the ladder does not name is taken as it is)."""
    return export["rung"] not in RUNGS or settled(export["probe_config"]) == asdict(probe_config(export["rung"]))


def valid_seeds(runs: pd.DataFrame) -> list[int]:
    """The seeds of one rung and family whose probe counts (`VALID_PROBE_RULE`): every tower head's validation
    loss below the same seed's untrained heads'."""
    loss = runs.pivot_table(index="seed", columns="kind", values="head_loss")
    if "case" not in loss or "untrained" not in loss:
        return []
    return [int(s) for s, row in loss.iterrows() if row["case"] < row["untrained"]]


def _common(a: dict, b: dict, n: int = TOP_N) -> tuple[np.ndarray, np.ndarray]:
    """Positions in a's and b's score lists of the `n` most frequent tokens both scored (a's order is the
    frequency order)."""
    where_b = {t: i for i, t in enumerate(b["token_ids"])}
    ia = [i for i, t in enumerate(a["token_ids"]) if t in where_b][:n]
    return np.asarray(ia), np.asarray([where_b[a["token_ids"][i]] for i in ia])


def text_ceiling(a: dict, b: dict) -> float:
    """The validation text's ceiling on two runs' r, sqrt(rel_a * rel_b) of their split-half reliabilities
    (`runner.text_reliability`); NaN where an export has none (its probe's artifact was not kept)."""
    rel = [e.get("text_reliability", {}).get("value") for e in (a, b)]
    return pair_ceiling(*(np.nan if v is None else v for v in rel))


def pair_rows(exports: list[dict]) -> pd.DataFrame:
    """Every pair of seeds of a (rung, family, kind): its r, and for trained runs the r with one run's token labels
    shuffled (the null beside the partition). Each pair's shuffle is seeded by the pair itself, so a rung added to
    the ladder changes no other rung's null."""
    groups: dict[tuple, list[dict]] = {}
    for e in exports:
        groups.setdefault((e["rung"], e["family"], e["kind"]), []).append(e)
    rows = []
    for (rung, family, kind), runs in sorted(groups.items()):
        for a, b in itertools.combinations(sorted(runs, key=lambda e: e["seed"]), 2):
            ia, ib = _common(a, b)
            x = {c: np.asarray(a[c])[ia] for c in ("score", "score_logmean")}
            y = {c: np.asarray(b[c])[ib] for c in ("score", "score_logmean")}
            base = {"rung": rung, "family": family, "seed_a": a["seed"], "seed_b": b["seed"], "n_tokens": len(ia),
                    "text ceiling": text_ceiling(a, b)}
            rows.append(base | {"kind": "same" if kind == "case" else kind, "r": correlate(x["score"], y["score"]),
                                "r_logmean": correlate(x["score_logmean"], y["score_logmean"])})
            if kind == "case":
                pair = zlib.crc32(f"{rung}/{family}/{a['seed']}/{b['seed']}".encode())
                perm = np.random.default_rng([SHUFFLE_SEED, pair]).permutation(len(ia))
                rows.append(base | {"kind": "shuffled", "r": correlate(x["score"], y["score"][perm]),
                                    "r_logmean": correlate(x["score_logmean"], y["score_logmean"][perm])})
    return pd.DataFrame(rows)


def with_validity(pairs: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """`pairs` with a column `valid probes`: whether both of a pair's seeds have probes that count
    (`VALID_PROBE_RULE`), so that a failed probe's pairs are marked, not mixed in with the rest."""
    if pairs.empty:
        return pairs.assign(**{"valid probes": pd.Series(dtype=bool)})
    valid = {key: set(valid_seeds(group)) for key, group in runs.groupby(["rung", "family"], sort=False)}
    ok = [a in valid.get((r, f), ()) and b in valid.get((r, f), ())
          for r, f, a, b in zip(pairs["rung"], pairs["family"], pairs["seed_a"], pairs["seed_b"])]
    return pairs.assign(**{"valid probes": ok})


def summary_rows(runs: pd.DataFrame, pairs: pd.DataFrame, unigram: float | dict[str, float] = np.nan) -> pd.DataFrame:
    """Per rung and family (seeds with a trained and an untrained probe): the partition and orientation answers,
    and whether the cooperative model learned more than word frequencies (its loss below `unigram`, or below its
    corpus's where `unigram` maps each corpus to its loss)."""
    rows = []
    for (rung, family), same in pairs[pairs["kind"] == "same"].groupby(["rung", "family"], sort=False):
        of = (pairs["rung"] == rung) & (pairs["family"] == family)
        untrained, shuffled = pairs[of & (pairs["kind"] == "untrained")], pairs[of & (pairs["kind"] == "shuffled")]
        r_of = runs[(runs["rung"] == rung) & (runs["family"] == family)]
        cases, ctrl = r_of[r_of["kind"] == "case"], r_of[r_of["kind"] == "untrained"]
        valid = valid_seeds(r_of)
        corpus = cases["corpus"].iloc[0] if "corpus" in cases else CORPUS
        u = unigram.get(corpus, np.nan) if isinstance(unigram, dict) else unigram
        base = {"rung": rung, "family": family, "corpus": corpus,
                "tower parameters": int(cases["tower_parameters"].iloc[0]),
                "passes over the epoch": int(cases["passes"].iloc[0]),
                "seeds": len(cases), "valid probes": len(valid),
                "cooperative loss": float(cases["val_loss"].median()), "word frequencies' loss": u,
                # nats of context of the rung's worst seed, and `paper.CONTEXT_RULE` over every seed
                "beyond word frequencies": float(u - cases["val_loss"].max()),
                "learned context": all(paper.learned_context(loss, u) for loss in cases["val_loss"]),
                "heads' loss": float(cases["head_loss"].median()),
                "probed as the ladder probes": bool(r_of["current_probe"].all()),
                "probe precision": ", ".join(sorted({str(p) for p in r_of["probe_precision"]})),
                "feature cache": ", ".join(sorted({str(p) for p in r_of["feature_cache"]})),
                "untrained heads' loss": float(ctrl["head_loss"].median())}
        complete = set(cases["seed"]) & set(ctrl["seed"])          # seeds with the trained and the untrained probe
        if len(valid) < 2:
            verdict = PROBE_FAILED if len(complete) > len(valid) else NOT_YET
            rows.append(base | {"partition: verdict": verdict, "orientation: verdict": verdict})
            continue
        gate = lambda verdict: paper.gated(verdict, base["learned context"])
        same, shuffled = (df[df["seed_a"].isin(valid) & df["seed_b"].isin(valid)] for df in (same, shuffled))
        cases = cases[cases["seed"].isin(valid)]
        part = spread.partition(same["seed_a"], same["seed_b"], same["r"], untrained["r"], shuffled["r"])
        orient = spread.orientation(cases[["seed", "margin", "margin_se"]], same["seed_a"], same["seed_b"], same["r"],
                                    ctrl["margin"], shared=part["controls |r| threshold"])
        ceiling = float(same["text ceiling"].median()) if same["text ceiling"].notna().all() else np.nan
        rows.append(base | {"median r": float(np.median(same["r"])), "text ceiling (median)": ceiling,
                            "median |r| / ceiling": corrected(part["median |r|"], ceiling)}
                    | {f"partition: {k}": gate(v) if k == "verdict" else v for k, v in part.items()}
                    | {f"orientation: {k}": gate(v) if k == "verdict" else v for k, v in orient.items()})
    return in_reading_order(pd.DataFrame(rows))


def in_reading_order(summary: pd.DataFrame) -> pd.DataFrame:
    """`summary`'s rows as every view of the ladder reads them: per family (`FAMILIES`' order), Brown's rungs
    before the other sources', by tower size, then by passes over the epoch."""
    if summary.empty:
        return summary
    family = summary["family"].map({f: i for i, f in enumerate(FAMILIES)}).fillna(len(FAMILIES))
    other = summary["rung"].map(corpus_of) != CORPUS
    return (summary.assign(family_order=family, other_source=other)
            .sort_values(["family_order", "other_source", "tower parameters", "passes over the epoch"], kind="stable")
            .drop(columns=["family_order", "other_source"]).reset_index(drop=True))


def chart(summary: pd.DataFrame, intervals: pd.DataFrame | None = None):
    """The ladder's lead chart: the median |r| over seed pairs (bar: its seed-bootstrap interval from `intervals`,
    `size_table`'s, else the leave-one-seed-out range) against the tower's parameters, one line per family, each
    family's untrained-tower threshold dashed, the paper's r. Only rungs with a verdict probed as the ladder probes
    today: a rung whose towers learned no context, whose probes failed or that was measured with another probe is in
    the table and the text, not on the line."""
    from twotower_lib.book.charts import LEGEND_BELOW, WIDTH, alt

    if intervals is not None and not intervals.empty:
        bounds = intervals.set_index(["rung", "family"])[["interval low", "interval high"]]
        summary = summary.join(bounds, on=["rung", "family"])
        summary = summary.assign(**{"partition: loo low": summary["interval low"],
                                    "partition: loo high": summary["interval high"]})
    summary = summary[~summary["partition: verdict"].isin([paper.NO_CONTEXT, PROBE_FAILED, NOT_YET])]
    df = summary.rename(columns={"partition: median |r|": "median_abs_r", "partition: loo low": "loo_low",
                                 "partition: loo high": "loo_high", "tower parameters": "params",
                                 "partition: controls |r| threshold": "control",
                                 "orientation: positive pairs": "positive"})
    df = df[[on_size_axis(r, f) for r, f in zip(df["rung"], df["family"])]]   # the size axis (`rungs.on_size_axis`)
    if "probed as the ladder probes" in df:
        df = df[df["probed as the ladder probes"].astype(bool)]
    df = df[["rung", "family", "params", "median_abs_r", "loo_low", "loo_high", "control", "positive"]]
    x = alt.X("params:Q", scale=alt.Scale(type="log"), title="parameters of one tower (log scale)")
    color = alt.Color("family:N", legend=LEGEND_BELOW)
    base = alt.Chart(df, width=WIDTH, height=300)
    layers = [
        base.mark_line(point=True).encode(x=x, y=alt.Y("median_abs_r:Q", title="median |r| over seed pairs",
                                                      scale=alt.Scale(domain=[0, 1])), color=color,
                                          tooltip=["rung:N", "family:N", alt.Tooltip("median_abs_r:Q", format=".2f"),
                                                   alt.Tooltip("loo_low:Q", format=".2f"),
                                                   alt.Tooltip("loo_high:Q", format=".2f"),
                                                   alt.Tooltip("control:Q", format=".2f"),
                                                   alt.Tooltip("positive:Q", format=".2f")]),
        base.mark_rule().encode(x=x, y="loo_low:Q", y2="loo_high:Q", color=color),
        base.mark_line(strokeDash=[3, 3], opacity=0.6).encode(x=x, y="control:Q", color=color),
        base.mark_rule(strokeDash=[6, 4], color="black").encode(y=alt.datum(SAME_CONFIG_R)),
    ]
    return alt.layer(*layers).properties(   # two title lines: one would run past the page column
        title=["Does the division repeat across seeds, and does it grow with size?",
               "(dashed: untrained towers; black: the paper's Bert-large pair)"])


def _f(x: float, digits: int = 2) -> str:
    return "—" if not np.isfinite(x) else f"{x:.{digits}f}"


def answer(summary: pd.DataFrame) -> str:
    """The ladder's answer in a sentence per family, generated from `summary` (its rungs in size order), and one
    per family and number of passes (the token axis)."""
    if summary.empty:
        return "No rung of the ladder is finished yet."
    lines = []
    summary = in_reading_order(summary)
    summary = summary.assign(passes=summary["rung"].map(passes))
    repeated, other = summary["passes"] > 1, summary["rung"].map(corpus_of) != CORPUS
    for family, rows in summary[~repeated & ~other].groupby("family", sort=False):
        lines.append(f"- **{family}** — {'. '.join(_step(r) for _, r in rows.iterrows())}.{_trend(rows)}")
    for (family, n), rows in summary[repeated & ~other].groupby(["family", "passes"], sort=False):
        lines.append(f"- **{family}, {n:.0f} passes over the epoch** — "
                     f"{'. '.join(_step(r) for _, r in rows.iterrows())}.{_trend(rows)}")
    for family, rows in _by_corpus(summary):
        lines.append(f"- **{family}, by corpus** (the direct register test over seeds) — "
                     + ". ".join(_step(r, _source_name(r["rung"])) for _, r in rows.iterrows()) + ".")
    return "\n".join(lines)


def _by_corpus(summary: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Per family with register rungs, those rungs' rows after the Brown rungs they are the same runs of."""
    if summary.empty:
        return []
    other = summary[summary["rung"].map(corpus_of) != CORPUS]
    return [(family, _with_brown(summary, rows)) for family, rows in other.groupby("family", sort=False)]


def register_verdicts(summary: pd.DataFrame) -> dict[tuple[str, str], dict[str, str]]:
    """The register test over seeds: per (family, preset) of a register rung, the division's verdict on each source
    alone over one epoch (Brown's from its size rung of the same preset), {(family, preset): {source: verdict}}."""
    return {(family, RUNGS[rows["rung"].iloc[-1]].preset):
            {corpus_of(r): v for r, v in zip(rows["rung"], rows["partition: verdict"])
             if is_source(corpus_of(r)) and passes(r) == 1}
            for family, rows in _by_corpus(summary)}


def where_it_holds(verdicts: dict[str, str]) -> str:
    """On which sources alone a division holds, from its verdict per source: "on every source alone", or "on books
    and brown alone, not on wiki" (a verdict other than "not" said: "not on wiki (unstable)")."""
    holds = [c for c, v in verdicts.items() if v == "holds"]
    rest = [c if v == "not" else f"{c} ({v})" for c, v in verdicts.items() if v != "holds"]
    return ("on every source alone" if not rest else
            f"on {' and '.join(holds) if holds else 'no source'} alone, not on {', '.join(rest)}")


def register_sentence(summary: pd.DataFrame) -> str:
    """The direct register test over seeds in a sentence (`LADDER_REGISTER`, shown in section 03 beside the one-pair
    register test): per family with register rungs, on which sources alone its division of tokens repeats over one
    epoch (the partition verdict), Brown's size rung of the same preset first; then the mixed corpus, each number of
    passes over the sources alone (Brown's passes rungs among them) and the thinned mixture, each in a clause of its
    own."""
    said = []
    for family, rows in _by_corpus(summary):
        brown_passes = _brown_passes(summary, family, RUNGS[rows["rung"].iloc[-1]].preset)
        verdict = dict(zip(rows["rung"], rows["partition: verdict"]))
        once = {corpus_of(r): v for r, v in verdict.items() if is_source(corpus_of(r)) and passes(r) == 1}
        clauses = [f"with the same recipe on the mixed corpus (every source together) it {_repeats(v)}"
                   for r, v in verdict.items() if corpus_of(r) == MIXED]
        by_passes: dict[int, dict[str, str]] = {}
        for r, v in list(zip(brown_passes["rung"], brown_passes["partition: verdict"])) + list(verdict.items()):
            if is_source(corpus_of(r)) and passes(r) > 1:
                by_passes.setdefault(passes(r), {})[corpus_of(r)] = v
        clauses += [f"over {n} passes of {next(iter(v))} alone it {_repeats(next(iter(v.values())))}" if len(v) == 1
                    else f"over {n} passes of each source alone it repeats {where_it_holds(v)}"
                    for n, v in sorted(by_passes.items())]
        clauses += [f"on the mixed corpus thinned to Brown's number of training tokens and trained {passes(r)} passes "
                    f"(as many steps as {passes(r)} passes of Brown) it {_repeats(v)}"
                    for r, v in verdict.items() if corpus_of(r) == THINNED]
        each = "; ".join(f"{_number_label(r['rung'])} {_f(r.get('partition: median |r|', np.nan))} against "
                         f"{_f(r.get('partition: controls |r| threshold', np.nan))}, ceiling "
                         f"{_f(r.get('text ceiling (median)', np.nan))}"
                         for _, r in _in_clause_order(pd.concat([rows, brown_passes]).drop_duplicates("rung"))
                         .iterrows())
        missing = [_number_label(n) for n, r in RUNGS.items() if r.corpus != CORPUS and r.family == family
                   and n not in verdict]
        said.append(f"{family}'s division repeats across seeds {where_it_holds(once)}"
                    + "".join(f"; {c}" for c in clauses)
                    + f" (median |r| over seed pairs against the untrained towers' threshold, with the text ceiling, "
                      f"the |r| of runs with identical scores on the validation text: {each}; "
                      f"{rows['rung'].iloc[0].split('-')[0]}, one epoch of a source unless xN names its passes, "
                      f"{SEEDS} seeds a source)"
                    + (f"; not yet measured on {', '.join(missing)}" if missing else ""))
    if not said:
        return "*No register rung of the size ladder has run yet.*"
    return ("**Over seeds** (the size ladder's register rungs, the ladder page): " + "; ".join(said) + ".")


def _repeats(verdict: str) -> str:
    return {"holds": "repeats", "not": "does not repeat",
            "unstable": "repeats, but not with every seed (leaving one seed out takes the median below the "
                        "untrained towers' threshold)"}.get(verdict, f"has no verdict ({verdict})")


def _in_clause_order(rows: pd.DataFrame) -> pd.DataFrame:
    """Register rows in the order the register sentence's clauses name them: the sources over one epoch, the mixed
    corpus, the sources over each number of passes (Brown first), the thinned mixture."""
    def key(rung: str) -> tuple:
        corpus, n = corpus_of(rung), passes(rung)
        group = 1 if corpus == MIXED else 3 if corpus == THINNED else 0 if n == 1 else 2
        return group, n, corpus != CORPUS
    return rows.iloc[sorted(range(len(rows)), key=lambda i: key(rows["rung"].iloc[i]))]


def _brown_passes(summary: pd.DataFrame, family: str, preset: str) -> pd.DataFrame:
    """Brown's passes rungs of a family at a preset, fewest passes first: the sources-alone clauses read them beside
    the other sources' passes rungs."""
    rows = summary[(summary["rung"].map(corpus_of) == CORPUS) & (summary["rung"].map(passes) > 1)
                   & (summary["family"] == family)
                   & (summary["rung"].map(lambda n: RUNGS[n].preset if n in RUNGS else None) == preset)]
    return rows.iloc[np.argsort(rows["rung"].map(passes).to_numpy(), kind="stable")]


def _number_label(rung: str) -> str:
    """A rung in the register sentence's list of numbers: its corpus, a source with its passes where it has several
    ("brown x8")."""
    return source_label(corpus_of(rung)) + (f" x{passes(rung)}" if is_source(corpus_of(rung)) and passes(rung) > 1
                                            else "")


def source_label(corpus: str, alone: bool = False) -> str:
    """A rung's corpus as the text names it: a source ("wiki"; with `alone`, "wiki alone"), "the mixed corpus" or
    "the thinned mixed corpus"."""
    if not is_source(corpus):
        return {MIXED: "the mixed corpus", THINNED: "the thinned mixed corpus"}[corpus]
    return f"{corpus} alone" if alone else corpus


def _source_name(rung: str) -> str:
    """A rung as the register test's sentences begin with it: its corpus source, then its size ("Wiki (2x128)")."""
    label = source_label(corpus_of(rung))
    return f"{label[:1].upper()}{label[1:]} ({rung.split('-')[0]})"


def _with_brown(summary: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """A family's register rungs (`rows`) after the Brown rungs they are the same runs of (preset, passes, CPU),
    where the ladder has them: Brown's one epoch beside the mixed corpus's, its three passes beside the sources'."""
    same = {n for n, s in RUNGS.items() for r in rows["rung"] if s.corpus == CORPUS
            and (s.preset, s.gpu, s.passes) in {(RUNGS[r].preset, RUNGS[r].gpu, p) for p in (1, RUNGS[r].passes)}}
    brown = summary[summary["rung"].isin(same) & (summary["family"] == rows["family"].iloc[0])]
    return pd.concat([brown, rows])


def _trend(rows: pd.DataFrame) -> str:
    """The median |r| from the smallest to the largest of `rows` (one family's rungs in size order) measured with
    the ladder's probe and judged (a rung still short of its seeds is not an end of the trend), where two or more
    are."""
    rows = rows[rows.get("partition: median |r|", pd.Series(np.nan, index=rows.index)).notna()
                & rows.get("probed as the ladder probes", pd.Series(True, index=rows.index)).astype(bool)
                & (rows.get("partition: verdict", pd.Series("", index=rows.index)) != NOT_YET)]
    if len(rows) < 2:
        return ""
    first, last = rows.iloc[0]["partition: median |r|"], rows.iloc[-1]["partition: median |r|"]
    return (f" From the smallest to the largest rung measured with this probe the median |r| goes {_f(first)} → "
            f"{_f(last)} (the paper's Bert-large pair: {SAME_CONFIG_R}).")


NO_RUNG = ("The size ladder (the ladder page) has no rung with four seeds yet, so whether either grows with size "
           "is open.")


def brief(summary: pd.DataFrame) -> str:
    """The ladder in one list item per family, for the front page's answer (`LADDER_BRIEF`): per rung in size order
    (Brown's, then the register rungs', named by their source),
    its median |r|, the division's verdict and seeds, where its towers learned no context beyond word frequencies,
    and where it was probed as another measurement."""
    if summary.empty:
        return NO_RUNG

    def rung(r: pd.Series) -> str:
        name = r["rung"] if corpus_of(r["rung"]) == CORPUS else \
            f"{r['rung'].split('-')[0]} on {source_label(corpus_of(r['rung']), alone=True)}"
        name += f" ({passes(r['rung'])} passes)" if passes(r["rung"]) > 1 else ""
        median = r.get("partition: median |r|", np.nan)
        other = "" if r.get("probed as the ladder probes", True) else "; another probe"
        if _no_context(r):
            other = f"; {_f(r['beyond word frequencies'])} nats beyond word frequencies" + other
        counted = r.get("valid probes", r["seeds"])
        seeds = f"{r['seeds']} seeds" if counted == r["seeds"] else f"{counted} of {r['seeds']} seeds' probes count"
        return (f"{name} {'no verdict' if not np.isfinite(median) else f'{median:.2f}'} "
                f"({r['partition: verdict']}, {seeds}{other})")

    per_family = "".join(f"\n  - {family} " + ", ".join(rung(r) for _, r in rows.iterrows())
                         for family, rows in in_reading_order(summary).groupby("family", sort=False))
    return (f"**Along the size ladder** (the ladder page; median |r| and the division's verdict per rung of layers x "
            f"width, as far as it has run):{per_family}")


def _step(r: pd.Series, name: str | None = None) -> str:
    """One rung's answer for one family (the rung called `name`, by default its own)."""
    name = name or r["rung"]
    if r["partition: verdict"] == PROBE_FAILED:
        return _failed(r)
    if pd.isna(r.get("partition: median |r|")):
        return f"{name}: fewer than two seeds probed with their untrained control yet"
    loo = (f"leave one seed out {_f(r['partition: loo low'])}–{_f(r['partition: loo high'])}"
           if pd.notna(r["partition: loo low"]) else f"{int(r['seeds'])} seeds: too few to leave one out")
    return (f"{name}: median |r| {_f(r['partition: median |r|'])} ({loo}, untrained "
            f"{_f(r['partition: controls |r| threshold'])}{_ceiling(r)}), partition {r['partition: verdict']}, "
            f"orientation {r['orientation: verdict']} ({int(r['orientation: resolved runs'])}/"
            f"{int(r['orientation: runs'])} margins resolved)" + _context(r) + _other_probe(r))


def _ceiling(r: pd.Series) -> str:
    """The rung's text ceiling, where every pair has one, and its median |r| over it (`uncertainty.corrected`)."""
    ceiling = r.get("text ceiling (median)", np.nan)
    if pd.isna(ceiling):
        return ""
    value = corrected(r["partition: median |r|"], ceiling)
    if pd.isna(value):
        return f"; text ceiling {_f(ceiling)}: the scores barely reproduce on another text, too little to correct"
    return f"; text ceiling {_f(ceiling)}, corrected {_f(value)}"


def _no_context(r: pd.Series) -> bool:
    """Whether some seed of the rung falls short of `paper.CONTEXT_RULE` (a rung measured before the word-frequency
    loss was recorded is not known to)."""
    return not pd.isna(r.get("beyond word frequencies")) and not bool(r.get("learned context", True))


def _context(r: pd.Series) -> str:
    """A note where some seed of the rung falls short of `paper.CONTEXT_RULE`."""
    if not _no_context(r):
        return ""
    frequencies = _f(r["word frequencies' loss"])
    return (f"; its towers did not learn context: {_f(r['beyond word frequencies'])} nats beyond word frequencies' "
            f"{frequencies} at its worst seed, where a verdict needs {paper.CONTEXT_GATE:g}")


def _failed(r: pd.Series) -> str:
    heads, untrained = _f(r["heads' loss"]), _f(r["untrained heads' loss"])
    return (f"{r['rung']}: no verdict, {PROBE_FAILED} ({r['valid probes']} of {r['seeds']} probes count: the heads' "
            f"validation loss {heads} nats against {untrained} for the untrained towers')" + _context(r)
            + _other_probe(r))


def _other_probe(r: pd.Series) -> str:
    """A note where the rung's probes are not the ladder's measurement today (made with another probe)."""
    if r.get("probed as the ladder probes", True):
        return ""
    wanted = probe_config(r["rung"]).feature_dtype
    if RUNGS[r["rung"]].gpu and r["probe precision"] == "auto":
        how = f'precision "{r["probe precision"]}" (bf16 heads and scoring on a GPU)'
    elif r.get("feature cache", wanted) != wanted:
        how = f"its heads' training features cached in {r['feature cache']} (the rung's probe caches them in {wanted})"
    else:
        how = "another probe configuration"
    return (f"; probed with {how}, not as the ladder probes this rung today: another measurement, made again when the "
            "rung runs again")


# The summary's columns as the book shows them: one table per question, each with the rung and family, so that no
# table is wider than the page (a heading's prefix is the table's own name, dropped from its columns).
LADDER_TABLES = {
    "What each rung learned, and whether its probe counts": [
        "tower parameters", "passes over the epoch", "seeds", "valid probes", "cooperative loss",
        "word frequencies' loss", "heads' loss", "untrained heads' loss"],
    "The division of tokens (|r|)": [
        "partition: median |r|", "text ceiling (median)", "median |r| / ceiling", "partition: loo low",
        "partition: loo high", "partition: controls |r| threshold", "partition: shuffled max |r|",
        "partition: verdict"],
    "Which tower takes which role (Eq. 3's orientation, signed r)": [
        "median r", "orientation: median margin", "orientation: median margin SE",
        "orientation: untrained margin threshold", "orientation: resolved runs", "orientation: positive pairs",
        "orientation: consistent triads", "orientation: verdict"],
}


def ladder_tables(summary: pd.DataFrame) -> str:
    """Every statistic behind the ladder's answer, as three tables (what each rung learned; the division; the
    orientation), each row a rung and family."""
    from twotower_lib.book.tables import reader_html

    if summary.empty:
        return reader_html(summary)
    out = []
    for title, columns in LADDER_TABLES.items():
        t = summary[["rung", "family", *columns]]
        t = t.rename(columns=lambda c: c.split(": ", 1)[1] if c.startswith(("partition: ", "orientation: ")) else c)
        out.append(f"<p><strong>{title}</strong></p>" + reader_html(t))
    return "".join(out)


BOOTSTRAP_DRAWS = 2000       # seed resamples for the median |r|'s interval
INTERVAL = (0.025, 0.975)    # its ends


def seed_bootstrap(same: pd.DataFrame, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> tuple[float, float]:
    """The interval of a rung's median |r| over seed pairs when its seeds are resampled: each draw takes as many
    seeds as trained, with replacement, and the median |r| over the pairs of two different seeds drawn (every such
    pair as often as the draw holds it); the `INTERVAL` quantiles of the draws. NaN where fewer than two seeds."""
    r = {}
    for a, b, v in zip(same["seed_a"], same["seed_b"], same["r"]):
        r[(a, b)] = r[(b, a)] = abs(v)
    seeds = sorted({a for a, _ in r})
    if len(seeds) < 2:
        return np.nan, np.nan
    rng = np.random.default_rng(seed)
    medians = []
    for _ in range(draws):
        drawn = rng.choice(seeds, size=len(seeds), replace=True)
        values = [r[(x, y)] for x, y in itertools.combinations(drawn, 2) if x != y]
        if values:
            medians.append(np.median(values))
    lo, hi = np.quantile(medians, INTERVAL)
    return float(lo), float(hi)


SIZE_COLUMNS = ["family", "rung", "tower parameters", "median |r|", "interval low", "interval high",
                "beyond word frequencies", "text ceiling", "verdict", "current probe"]


def size_table(summary: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """The ladder's opening table: per family and rung of its size axis (`rungs.on_size_axis`: one epoch of Brown;
    BERT's learning-recipe rungs), the median |r| over seed pairs with its seed-bootstrap interval (`seed_bootstrap`),
    the worst seed's loss beyond word frequencies, the text ceiling, the division's verdict and whether its probes are
    the ladder's today (a rung measured with another probe is shown, labelled, and read in no trend)."""
    rows, axis = [], [on_size_axis(r, f) for r, f in zip(summary["rung"], summary["family"])] if "rung" in summary else []
    for _, r in (summary[axis] if "rung" in summary else summary).iterrows():
        same = pairs[(pairs["rung"] == r["rung"]) & (pairs["family"] == r["family"]) & (pairs["kind"] == "same")]
        if "valid probes" in same:
            same = same[same["valid probes"].astype(bool)]
        lo, hi = seed_bootstrap(same)
        rows.append({"family": r["family"], "rung": r["rung"], "tower parameters": int(r["tower parameters"]),
                     "median |r|": r.get("partition: median |r|", np.nan), "interval low": lo, "interval high": hi,
                     "beyond word frequencies": r["beyond word frequencies"],
                     "text ceiling": r.get("text ceiling (median)", np.nan), "verdict": r["partition: verdict"],
                     "current probe": bool(r.get("probed as the ladder probes", True))})
    return pd.DataFrame(rows, columns=SIZE_COLUMNS)


def trend_sentence(table: pd.DataFrame, short: bool = False) -> str:
    """What changes with size, per family, read from the seed-bootstrap intervals of its smallest and largest rungs
    with a verdict (towers that learned context and probes that count): the median |r| grows where the largest
    rung's interval lies above the smallest's, falls where below, and no trend is resolved where they overlap.
    `short`: the front page's clause a family, the same reading without its numbers (`LADDER_TREND_SHORT`)."""
    clauses = []
    for family in dict.fromkeys([*table["family"], *FAMILIES]) if len(table) else []:
        rows = table[table["family"] == family]
        current = rows["current probe"].astype(bool) if "current probe" in rows else True   # as the chart reads them
        judged = rows[~rows["verdict"].isin([paper.NO_CONTEXT, PROBE_FAILED, NOT_YET]) & current].sort_values("tower parameters")
        if rows.empty:
            clauses.append(f"{family}: no rung of its size axis measured yet" if not short else f"{family}: no rung measured yet")
            continue
        if len(judged) < 2:
            clauses.append(f"{family}: fewer than two rungs with a verdict" + ("" if short else
                           f" ({len(rows) - len(judged)} of {len(rows)} without: towers that learned no context, "
                           "probes that failed or another probe's), no trend to read"))
            continue
        a, b = judged.iloc[0], judged.iloc[-1]
        trend = ("grows" if b["interval low"] > a["interval high"] else "falls" if b["interval high"] < a["interval low"]
                 else "shows no trend that the intervals resolve")
        span = lambda r: f" ({r['median |r|']:.2f}, {r['interval low']:.2f}–{r['interval high']:.2f})"
        if short:
            clauses.append(f"{family} {trend.replace('shows no trend that the intervals resolve', 'no resolved trend')} "
                           f"({_rung_label(a['rung'])} to {_rung_label(b['rung'])})")
            continue
        clauses.append(f"{family}'s median |r| {trend} from {_rung_label(a['rung'])}{span(a)} to "
                       f"{_rung_label(b['rung'])}{span(b)}")
    if not clauses:
        return "**With size:** no size rung is measured yet."
    return ("**With size** (seed-bootstrap intervals of the median |r|" + ("" if short else
            ", smallest against largest rung with a verdict") + "): " + "; ".join(clauses) + ".")


def recipe_note(summary: pd.DataFrame) -> str:
    """The BERT size rungs of the ladder's post-LN recipe (one pass of Brown at 32 sequences a step), off the size
    axis: how far below the context gate they stayed; the table of every rung holds them."""
    old = summary[(summary["family"] == "bert") & summary["rung"].isin([*size_rungs(False), *size_rungs(True)])] \
        if "rung" in summary else summary.iloc[:0]
    if old.empty:
        return ""
    beyond = old["beyond word frequencies"]
    return (f"**Recipe note.** BERT's rungs with the ladder's post-LN recipe ({', '.join(_rung_label(r) for r in old['rung'])}) "
            f"are off the axis: {_f(beyond.min())} to {_f(beyond.max())} nats beyond word frequencies, where a verdict "
            f"needs {paper.CONTEXT_GATE:g}; BERT's points are its learning recipe's rungs (every rung's table below).")


def _rung_label(rung: str) -> str:
    """A rung as the page names it: 2×128, or 2×128 (learning recipe)."""
    return rung.replace("x", "×").replace("-pre", " (learning recipe)")


def head_markdown(table: pd.DataFrame, note: str = "") -> str:
    """`LADDER_HEAD`: the opening table, one number per cell, the trend sentence and the recipe note."""
    from twotower_lib.book.tables import markdown_table

    if table.empty:
        return trend_sentence(table) + "\n" + (f"\n{note}\n" if note else "")
    other = ~table["current probe"].astype(bool) if "current probe" in table else pd.Series(False, index=table.index)
    t = pd.DataFrame({"family": table["family"], "layers × width": [_rung_label(r) + (" (another probe)" if o else "")
                                                                    for r, o in zip(table["rung"], other)],
                      "median |r|": table["median |r|"].map(lambda v: _f(v)),
                      "seed-bootstrap interval": [f"{_f(lo)}–{_f(hi)}" if lo == lo else "—"
                                                  for lo, hi in zip(table["interval low"], table["interval high"])],
                      "nats beyond word frequencies": table["beyond word frequencies"].map(lambda v: f"{v:+.2f}"),
                      "text ceiling": table["text ceiling"].map(lambda v: _f(v)), "verdict": table["verdict"]})
    return (markdown_table(t.columns, t.itertuples(index=False)) + "\n\n" + trend_sentence(table) + "\n"
            + (f"\n{note}\n" if note else ""))


def book_parts(summary: pd.DataFrame, pairs: pd.DataFrame, runs: pd.DataFrame) -> dict[str, str]:
    table = size_table(summary, pairs)
    return {"LADDER_HEAD": head_markdown(table, recipe_note(summary)), "LADDER_TREND": trend_sentence(table),
            "LADDER_TREND_SHORT": trend_sentence(table, short=True), "LADDER_ANSWER": answer(summary),
            "LADDER_BRIEF": brief(summary),
            "LADDER_CHART": chart(summary, table).to_json() if not summary.empty else "*No rung has two seeds probed yet.*",
            "LADDER_TABLE": ladder_tables(summary), "LADDER_REGISTER": register_sentence(summary),
            "LADDER_RULES": VALID_PROBE_RULE + "\n\n" + paper.PARTITION_RULE + "\n\n" + paper.ORIENTATION_RULE,
            "LADDER_PROGRESS": progress(runs)}


def progress(runs: pd.DataFrame) -> str:
    done = runs[runs["kind"] == "case"].groupby("rung")["seed"].count() if not runs.empty else pd.Series(dtype=int)
    cells = ", ".join(f"{rung}: {int(done.get(rung, 0))} of {SEEDS * len(FAMILIES)} runs" for rung in size_rungs(False))
    gpu = ", ".join(f"{rung}: {int(done[rung])} of {SEEDS}" for rung in size_rungs(True) if rung in done)
    token_axis = ", ".join(f"{name} ({r.family}, {r.passes} passes{', GPU' if r.gpu else ''}): "
                           f"{int(done.get(name, 0))} of {SEEDS} runs" for name, r in RUNGS.items()
                           if r.passes > 1 and r.corpus == CORPUS and not r.recipe)
    recipe = ", ".join(f"{name} ({r.family}, {', '.join(f'{k} {v}' for k, v in r.recipe)}, GPU): "
                       f"{int(done.get(name, 0))} runs probed" for name, r in RUNGS.items() if r.recipe)
    register = ", ".join(f"{name} ({r.family}, {source_label(r.corpus, alone=True)}): "
                         f"{int(done.get(name, 0))} of {SEEDS} runs"
                         for name, r in RUNGS.items() if r.corpus != CORPUS)
    return (f"Probed so far, on the CPU: {cells}" + (f"; on a GPU: {gpu}" if gpu else "; the GPU rungs not yet run")
            + f"; the token axis: {token_axis}; the register axis: {register}; the learning recipe: {recipe}. Each "
              f"size rung's run is one epoch of "
              f"the Brown corpus, {SEEDS} seeds a family.")


def write_report(results: Path) -> Path:
    from twotower_lib.book import study_parts

    exports = load_exports(results)
    if not exports:
        raise SystemExit(f"error: no ladder export under {results / EXPORTS}; run `python -m studies.ladder` first")
    runs, pairs, summary = report_tables(exports, results)
    for name, df in (("runs", runs), ("pairs", pairs), ("summary", summary)):
        atomic_write_bytes(results / f"{name}.csv", df.to_csv(index=False, float_format="%.6g").encode())
    first = exports[0]
    hashes = {c: e["data_hash"] for e in exports for c in [e.get("corpus", corpus_of(e["rung"]))]}
    atomic_write_json(results / "study.json", {
        "exports": len(exports), "data_hash": hashes.get(CORPUS, first["data_hash"]),
        "data_hashes": dict(sorted(hashes.items())), "probe_config": first["probe_config"],
        "top_n": TOP_N, "code_versions": sorted({e["provenance"].get("code_version", "?") for e in exports}),
        "command": "python -m studies.ladder --report-only", "provenance": provenance()})
    inputs = [results / EXPORTS / rung / "*.json" for rung in sorted({e["rung"] for e in exports})]
    inputs += sorted(results.glob("reference*.json"))
    return study_parts.write(results, book_parts(summary, pairs, runs), {}, inputs,
                             "python -m studies.ladder --report-only")


def current_parts(results: Path) -> dict[str, str]:
    """The book parts the report writes from the exports in `results` today."""
    runs, pairs, summary = report_tables(load_exports(results), results)
    return book_parts(summary, pairs, runs)


def report_tables(exports: list[dict], results: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The report's runs, pairs and summary from `exports` (the summary against the word-frequency loss recorded
    in `results`)."""
    runs, pairs = run_rows(exports), pair_rows(exports)
    pairs = with_validity(pairs, runs)
    losses = {c: unigram_loss(results, c) for c in {CORPUS, *runs.get("corpus", [])}}
    return runs, pairs, summary_rows(runs, pairs, losses) if not pairs.empty else pd.DataFrame()


def reference_name(corpus: str = CORPUS) -> str:
    """The file in which the runner records a corpus source's hash and word-frequency loss."""
    return REFERENCE if corpus == CORPUS else f"reference-{corpus}.json"


def unigram_loss(results: Path, corpus: str = CORPUS) -> float:
    """A corpus source's word-frequency loss the runner recorded (`reference_name`), or NaN before it has."""
    path = results / reference_name(corpus)
    return float(read_json(path)["unigram_loss"]) if path.exists() else np.nan
