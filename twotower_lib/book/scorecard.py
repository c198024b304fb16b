"""The reproduction scorecard: every table and figure of the paper, its claim, ours, a verdict.

The paper's side is written once (`paper_items`: it is the paper). Our side is never typed: each analysis
section measures its items and records them with `record(ctx, ...)` in
`runs/<profile>/<section>/scorecard.json`; `build` joins the two. An item whose section is not
written, not run, or did not measure it says "not attempted", and says which of the three.
The result goes to `runs/<profile>/scorecard.json` and into the book's scorecard page.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from statistics import fmean
from typing import Any

import pandas as pd

from twotower_lib.artifacts import atomic_write_json, read_json
from twotower_lib.book import paper_tables
from twotower_lib.book.sections import load_data
from twotower_lib import paper
from twotower_lib.paper import VERDICTS, correlation_verdict
from twotower_lib.book.paper_items import ITEMS_BY_ID, PAPER_ITEMS, POINT_LABELS, SHORT_NAMES
from twotower_lib.errors import UserError
from twotower_lib.run_names import case_name, model_of

SECTION_FILE = "scorecard.json"


# ---------------------------------------------------------------------- recording (in sections)


def record(ctx, item_id: str, ours: str, verdict: str, note: str = "", points: list[dict] | None = None,
           runs: list[str] | None = None) -> Path:
    """Record our value for one paper item from inside the section that measures it; `points`
    (`paper_tables.points`: pair, paper, ours, CI) feed the scorecard's picture. `runs`, the cases the item reads
    (default: every case of the profile), must each have learned context for its verdict to count
    (`paper.CONTEXT_RULE`, `not_learned`); Table 1's sizes are a configuration, not a result, and are not gated."""
    if item_id not in ITEMS_BY_ID:
        raise UserError(f"unknown scorecard item {item_id!r}; known items: {', '.join(ITEMS_BY_ID)}")
    if ITEMS_BY_ID[item_id].section != ctx.section.name:
        raise UserError(f"scorecard item {item_id!r} belongs to section {ITEMS_BY_ID[item_id].section}, "
                        f"not {ctx.section.name}")
    if verdict not in VERDICTS:
        raise UserError(f"verdict {verdict!r} for {item_id!r} is not one of {VERDICTS}")
    flat = [] if ctx.section.name == "01_training" or verdict == "not attempted" else not_learned(ctx, runs)
    if flat:
        verdict, note = paper.NO_CONTEXT, f"towers did not learn context ({', '.join(flat)}: the context gate); {note}"
    entries = _recorded(ctx.out)
    entries[item_id] = {"ours": ours, "verdict": verdict, "note": note, **({"points": points} if points else {})}
    return atomic_write_json(ctx.out / SECTION_FILE, entries)


def not_learned(ctx, runs: list[str] | None = None) -> list[str]:
    """The cases of `runs` (default: every case of the profile) whose cooperative loss, as 02_probing measured it,
    is not `paper.CONTEXT_GATE` nats below the corpus's word-frequency loss (`paper.learned_context`)."""
    unigram, probing = load_data(ctx).unigram_loss(), ctx.input_dir("02_probing")
    names = runs if runs is not None else [case_name(m, s) for m, s in ctx.profile.case_list()]
    return [n for n in dict.fromkeys(names)
            if not paper.learned_context(read_json(probing / n / "manifest.json")["val_loss"]["cooperative"], unigram)]


def _recorded(out: Path) -> dict:
    """The items a section recorded in its output folder `out` (none where it wrote none)."""
    return read_json(out / SECTION_FILE) if (out / SECTION_FILE).exists() else {}


def _section_rows(ctx) -> list[dict]:
    """The scorecard's rows this section recorded (decided over seeds where the profile has a study)."""
    entries = _recorded(ctx.out)
    rows = [{**asdict(i), "ours": entries[i.id]["ours"], "verdict": entries[i.id]["verdict"]}
            for i in PAPER_ITEMS if i.id in entries]
    return decide_over_seeds(rows, ctx.profile.name)


def verdict_cell(profile: str, row: dict, shown: str | None = None) -> str:
    """An item's verdict as a table shows it (`shown`, by default in bold), marked as that item's verdict at
    `profile` (`tables.keyed`): every page that shows it shows one value."""
    from twotower_lib.book.tables import keyed

    return keyed(f"verdict@{profile}: {row['id']}", row["verdict"], shown or f"**{row['verdict']}**")


BOX_OURS = 160   # characters of a value in a chapter's result box (the rest folded under it)


def verdicts_box(ctx) -> str:
    """A chapter's result box, generated: every paper item this section recorded, the paper's value, ours and
    the verdict (the scorecard's rows for this section)."""
    rows = _section_rows(ctx)
    if not rows:
        return "*This section recorded no paper item.*"
    from twotower_lib.book.tables import brief, full_width, markdown_table

    box = full_width(markdown_table(["paper item", "the paper", "ours", "verdict"],   # a long value in full, folded, under it
                         ([r["item"], r["paper"], brief(r["ours"], BOX_OURS), verdict_cell(ctx.profile.name, r)]
                          for r in rows))).rstrip("\n")   # across the page's margin, as the front's table
    full = "\n".join(f"- **{r['item']}**: {r['ours']}" for r in rows if brief(r["ours"], BOX_OURS) != r["ours"])
    return box + (f"\n\n:::{{dropdown}} Each shortened value in full\n{full}\n:::" if full else "")


def chapter_summary(ctx) -> str:
    """A chapter's closing summary in two generated sentences: how many of the paper's items it checked at
    this profile, and the verdict of each."""
    rows = _section_rows(ctx)
    if not rows:
        return "This section recorded no paper item."
    counts = pd.Series([r["verdict"] for r in rows]).value_counts()
    tally = ", ".join(f"{n} {v}" for v, n in counts.items())
    each = "; ".join(f"{SHORT_NAMES.get(r['id'], r['item'].split(':')[0])} ({r['verdict']})" for r in rows)
    return (f"At profile `{ctx.profile.name}` this chapter checked {len(rows)} of the paper's items ({tally}). "
            f"{each}. The scorecard page holds them beside every other chapter's.")


def record_table1(ctx) -> None:
    """Record the model sizes trained (Table 1 is reproduced only by the paper-size presets)."""
    from twotower_lib.models.config import PAPER_PRESETS

    models = dict.fromkeys(m for m, _ in ctx.profile.case_list())
    text = "; ".join(f"{m}: {c.n_layer} layer{'s' * (c.n_layer != 1)} x {c.hidden}" for m in models for c in [ctx.profile.model_config(m)])
    paper = all(ctx.profile.models[m].preset in PAPER_PRESETS for m in models)
    record(ctx, "table1", text, "reproduced" if paper else "not attempted",
           "Table 1's sizes (paper presets)" if paper else "smaller models than Table 1 at this profile; "
           "the `paper` profile trains Table 1's sizes")


def _control_values(control: pd.DataFrame, model: str | None = None) -> dict[str, float]:
    """The highest |r| of each control (of `model`'s same-configuration pair, or of any model): a control's sign,
    like a pair's, is which tower Eq. 3 calls primary."""
    rows = control if model is None or "model" not in control else control[control["model"] == model]
    return rows["r"].abs().groupby(rows["control"]).max().to_dict() if len(rows) else {}


def _control_note(values: dict[str, float]) -> str:
    return "no control was run" if not values else "controls: " + ", ".join(f"{k} |r| = {v:.2f}" for k, v in values.items())


def _record_pairs(ctx, item_id: str, selected: pd.DataFrame, paper_r: float, what: str, control: pd.DataFrame,
                  logmean: dict, own_controls: bool = False) -> str:
    """Record one Table 2 item from its pairs: each pair's r with its interval (and the authors' variant), the
    weakest pair's verdict against the controls (its own model's for a same-configuration pair); its verdict."""
    what_note = ("; ELMo judged: bidirectional, as the paper's text says (the released code's ELMo has no backward "
                 "direction: page 'The paper, its code, and this companion')" if "elmo" in what else "")
    if selected.empty:
        record(ctx, item_id, "", "not attempted", f"this profile's cases include no {what} pair")
        return "not attempted"

    def other(a: str, b: str) -> str:
        r = logmean.get((a, b), logmean.get((b, a)))
        return "" if r is None else f" (mean of log p: {r:.2f})"

    def verdict_of(row, values: dict[str, float]) -> str:
        return correlation_verdict((row["ci_low"], row["ci_high"]), paper_r, max(values.values()) if values else None)

    text = "; ".join(f"{r.a} vs {r.b}: r = {r.r:.2f} {paper_tables.interval(r.r, r.ci_low, r.ci_high)}{other(r.a, r.b)}"
                     for r in selected.itertuples())
    if own_controls:
        verdicts = [verdict_of(row, _control_values(control, model_of(row["a"]))) for _, row in selected.iterrows()]
        note = "; ".join(f"{m} {_control_note(_control_values(control, m))}" for m in dict.fromkeys(selected["a"].map(model_of)))
    else:
        verdicts = [verdict_of(row, _control_values(control)) for _, row in selected.iterrows()]
        note = _control_note(_control_values(control))
    verdict = paper.weakest(verdicts)  # every pair must pass
    record(ctx, item_id, text, verdict, f"top {int(selected['n_tokens'].iloc[0])} tokens, 95% CI resampling "
           f"validation documents; verdict judged on |r| of Eq. 4's score (log of mean p): its sign is which tower "
           f"Eq. 3 calls primary; {note}{what_note}",
           points=paper_tables.points(selected, item_id, fallback=paper.SAME_CONFIG_R if own_controls else None),
           runs=[*selected["a"], *selected["b"]])
    return verdict


def _record_controls(ctx, same: pd.DataFrame, control: pd.DataFrame) -> None:
    """Record whether each same-configuration pair's |r| lies above every control's of its own model."""
    parts, above, complete = [], [], []
    for _, row in same.iterrows():
        values = _control_values(control, model_of(row["a"]))
        missing = [c for c in ("untrained", "independent", "permutation") if c not in values]
        above.append(bool(values) and paper.abs_interval((row["ci_low"], row["ci_high"]))[0] > max(values.values()))
        complete.append(not missing)
        parts.append(f"{row.a} vs {row.b}: r = {row.r:.2f}, CI [{row.ci_low:.2f}, {row.ci_high:.2f}], "
                     f"{'above' if above[-1] else 'not above'} its {_control_note(values)}"
                     + (f" (not run: {', '.join(missing)})" if missing else "")
                     + f"; permutation p = {row.get('p_value', float('nan')):.3g}")
    record(ctx, "controls", "; ".join(parts), paper.share_verdict(above, all(complete)),
           "reproduced = every same-configuration pair's CI of |r| lies above every control's |r| of its own model (untrained, "
           "independent and permutation run; the quality gap too where the profile runs it); partly = at least one pair's does",
           runs=[*same["a"], *same["b"]])


def record_correlations(ctx, pairs, control, same_config: list[tuple[str, str]],
                        logmean_pairs: pd.DataFrame | None = None) -> None:
    """Record the Table 2 items, Fig. 3 and the controls from 03_correlations' results.

    The verdicts judge the paper's score (Eq. 4, log of mean p: `pairs`, `control`); where
    `logmean_pairs` (the same pairs with the authors' mean of log p) is given, each pair's text
    shows that r too.

    `pairs`: pairwise correlations of the trained cases (columns a, b, n_tokens, r, ci_low, ci_high,
    p_value); `control`: `analyses.control_correlations` (columns control: untrained, independent,
    permutation; model: whose same-configuration pair it controls; r); case names are
    "<model>-s<seed>". A same-configuration pair is judged against its own model's controls; a pair
    of different models against the highest control of any model.
    """
    def rows(kind_a: str, kind_b: str):
        return pairs[((pairs["a"].map(model_of) == kind_a) & (pairs["b"].map(model_of) == kind_b))
                     | ((pairs["a"].map(model_of) == kind_b) & (pairs["b"].map(model_of) == kind_a))]

    logmean = {} if logmean_pairs is None else {(r.a, r.b): r.r for r in logmean_pairs.itertuples()}

    def put(item_id: str, selected, paper_r: float, what: str, own_controls: bool = False) -> str:
        return _record_pairs(ctx, item_id, selected, paper_r, what, control, logmean, own_controls)

    same = pairs[[(a, b) in same_config or (b, a) in same_config for a, b in zip(pairs["a"], pairs["b"])]]
    # the paper's same-configuration pair is Bert-large's; other models' pairs are an item of their own
    is_paper = same["a"].map(model_of) == "bert-large"
    same_r = paper.SAME_CONFIG_R
    fig3_verdict = put("table2.same-config", same[is_paper], same_r, "Bert-large same-configuration (two seeds)",
                       own_controls=True)
    put("same-config.other", same[~is_paper], same_r, "same-configuration pair of another model type", own_controls=True)
    t2 = paper.TABLE2   # each item held against the paper's cell, or the mean of its cells
    put("table2.base-large", rows("bert-base", "bert-large"), t2["Bert-base", "Bert-large-run1"], "bert-base / bert-large")
    put("table2.cross-type", pd.concat([rows("bert-large", "elmo"), rows("bert-large", "gpt")]),
        fmean(t2[a, b] for a in ("ELMo", "GPT") for b in ("Bert-large-run1", "Bert-large-run2")), "bert-large / elmo or gpt")
    put("table2.elmo-gpt", rows("elmo", "gpt"), t2["ELMo", "GPT"], "elmo / gpt")
    put("table2.bert-base-others", pd.concat([rows("bert-base", "elmo"), rows("bert-base", "gpt")]),
        fmean(t2[a, "Bert-base"] for a in ("ELMo", "GPT")), "bert-base / elmo or gpt")
    if same.empty:
        return
    ref = (same[is_paper] if is_paper.any() else same).iloc[-1]    # the pair section 03 plots
    record(ctx, "fig3", f"shown for the top {min(1000, int(ref['n_tokens']))} tokens; {ref.a} vs {ref.b}: r = {ref.r:.2f}",
           fig3_verdict, "same verdict as Table 2's same-configuration pair" if is_paper.any() else
           f"the paper's Fig. 3 is Bert-large's pair; this profile trains none, so section 03 plots {model_of(ref.a)}'s",
           runs=[ref.a, ref.b])
    if len(control):
        _record_controls(ctx, same, control)


def record_register(ctx) -> None:
    """The direct register test, decided by the committed register study (`studies.register.report.verdict`,
    read from results/register/book.json). Measured at one profile: others get "not attempted"."""
    from twotower_lib.book import study_parts

    found = study_parts.verdict("register")
    if found is None or found["profile"] != ctx.profile.name:
        where = "" if found is None else f" (measured at the {found['profile']} profile)"
        record(ctx, "register", "", "not attempted", f"no single-source pairs at this profile{where}")
        return
    record(ctx, "register", found["ours"], found["verdict"], found["note"], runs=[])   # the study's runs, not ours


def record_frequency(ctx, table4_pairs, frequency: str = "frequency rank") -> None:
    """Record Fig. 8 and Table 4 from 06_frequency's Spearman table (long form, with `frequency`), judged by
    `paper.fig8_verdict` and `paper.frequency_verdict`."""
    is_freq = (table4_pairs["a"] == frequency) | (table4_pairs["b"] == frequency)
    with_freq, runs = table4_pairs[is_freq], table4_pairs[~is_freq]
    if with_freq.empty or runs.empty:
        return
    names = [b if a == frequency else a for a, b in zip(with_freq["a"], with_freq["b"])]
    strongest = float(with_freq["r"].abs().max())
    weakest_pair = (min(paper.abs_interval(ci)[0] for ci in zip(runs["ci_low"], runs["ci_high"])) if "ci_low" in runs
                    else float(runs["r"].abs().min()))
    verdict = paper.frequency_verdict(strongest, weakest_pair)
    text = ("with frequency rank: " + "; ".join(f"{n}: {r:.2f}" for n, r in zip(names, with_freq["r"]))
            + "; between runs: " + "; ".join(f"{r.a} vs {r.b}: {r.r:.2f}" for r in runs.itertuples()))
    note = (f"Spearman rho, top {int(with_freq['n_tokens'].iloc[0])} tokens; strongest |rho| with frequency "
            f"{strongest:.2f}, weakest between-run lower bound of |rho| {weakest_pair:.2f}")
    record(ctx, "table4", text, verdict, note, points=paper_tables.points(table4_pairs, "table4", table="table4"), runs=names)
    record(ctx, "fig8", f"strongest |rho| of a score vector with frequency rank = {strongest:.2f}",
           paper.fig8_verdict(strongest), f"its own curves, below |rho| = {paper.WEAK_RHO:g}; whether the scores agree "
           "between runs (else noise is trendless too) is Table 4's verdict", runs=names)


def record_pos(ctx, summary: pd.DataFrame, backend: str, shuffled: dict) -> None:
    """Record Fig. 4 from 04_pos's summary (`analysis.pos.pos_summary`: run, against, upos, n, holds,
    verdict) and its tag-shuffle test (`analysis.pos.tag_shuffle_test`), judged by `paper.fig4_verdict`: each run's
    claims against its median score (where the tags sit relative to each other), read in the run's better
    orientation, since which tower Eq. 3 calls primary is a label, and their sum against the tags shuffled: "ours" is
    what the verdict reads. How many hold with Eq. 3's primary, and against zero, goes into the note.
    `backend` is the tagger used ("stanza" is the paper's). The paper makes one claim per tag and says it holds
    in every model type; a claim a run scored too few tokens of (`paper.fig4_checkable`) counts as failed there."""

    def held_per_run(rows: pd.DataFrame) -> tuple[dict[str, int], list[str]]:
        claims = rows[rows["upos"].isin(list(paper.FIG4_CLAIM))].set_index(["run", "upos"])
        held, parts = {}, []
        for run in dict.fromkeys(summary["run"]):
            checkable = [tag for tag in paper.FIG4_CLAIM
                         if (run, tag) in claims.index and paper.fig4_checkable(claims.loc[(run, tag), "n"])]
            held[run] = sum(bool(claims.loc[(run, tag), "holds"]) for tag in checkable)
            missing = [tag for tag in paper.FIG4_CLAIM if tag not in checkable]
            parts.append(f"{run}: {held[run]}/{len(paper.FIG4_CLAIM)} claims hold"
                         + (f" (too few tokens for {', '.join(missing)})" if missing else ""))
        return held, parts

    relative = summary[summary["against"] == "median"]
    held, parts = held_per_run(relative)
    held_zero, _ = held_per_run(summary[summary["against"] == "zero"])
    runs = shuffled["runs"].set_index("run")
    if list(runs.index) != list(held) or (runs["held"] != pd.Series(held)).any():
        raise UserError(f"Fig. 4's tag-shuffle test counted other runs or claims than its summary ({dict(runs['held'])} "
                        f"against {held}): build both from the same fig4_data")
    n = len(paper.FIG4_CLAIM)
    verdict = paper.fig4_verdict(list(runs["best"]), shuffled["p"])
    claims = relative[relative["upos"].isin(list(paper.FIG4_CLAIM))]
    failed = claims[~claims["holds"].astype(bool)]
    few = [part.split(" (")[0].split(":")[0] + ": " + part.split(" (")[1].rstrip(")") for part in parts if " (too few" in part]
    ours = (f"{shuffled['observed']} of {n * len(runs)} claims hold; {shuffled['null_mean']:.1f} with the tags shuffled "
            f"(p = {shuffled['p']:.2g}); in each run's better orientation: "   # the sum first: the front page's brief
            + ", ".join(f"{run} {b}/{n}" for run, b in runs["best"].items()) + "".join(f"; {f}" for f in few))
    note = ("judged in each run's better orientation (which tower Eq. 3 calls primary is a label, a coin flip where "
            "its margin is within noise): its claims' sum against the same sum with each run's tags shuffled among "
            f"its tokens ({shuffled['null_high']:.0f} at the {paper.CONTROL_QUANTILE * 100:.0f}th percentile), "
            f"over {shuffled['permutations']:,} shuffles"
            + (f" (shuffled only within {shuffled['frequency_bins']} frequency bins: p = {shuffled['frequency_p']:.2g}, "
               "reported beside)" if "frequency_p" in shuffled else "") + "; with Eq. 3's primary: " + "; ".join(parts)
            + f"; tagged with {backend}" + ("" if backend == "stanza" else " (the paper used stanza)")
            + "; each claim against the run's median s (primary: the tag's median above it, secondary: below it, "
            "spread: 25-75% of the tag's tokens above it); against zero instead, with Eq. 3's primary: "
            + ", ".join(f"{run} {h}/{n}" for run, h in held_zero.items())
            + ("; failing with Eq. 3's primary: " + "; ".join(f"{r.run} {r.upos} ({r.verdict})" for r in failed.itertuples())
               if len(failed) else ""))
    record(ctx, "fig4", ours, verdict, note, runs=list(held))


def record_ica(ctx, fig6_summary: dict, fig5_within_1: float, n_groups: int, table3_runs: pd.DataFrame | None,
               converged: bool, words: str = "the distinct tokens of the corpus sample",
               fig6_all: dict | None = None, d: int | None = None) -> None:
    """Record Figs. 5-7 and Table 3 from 05_ica's results.

    fig5_within_1: share of the Fig. 5 values in [-1, 1] (paper: about 80%; a Gaussian gives 68%,
    so "sparse" means above that). fig6_summary: `analysis.word_groups.fig6_data`'s summary over `words`
    (the judged set); fig6_all: the same over every distinct sampled token, reported in the note. table3_runs:
    the groups' mean scores, one column per run (None or one column: no agreement to measure).
    Rules: `paper.fig5_verdict`, `paper.fig6_verdict`, `paper.table3_verdict`. Fig. 7's "meaningful" groups
    are shown, not judged.
    """
    from scipy.stats import spearmanr

    conv = "" if converged else "; the ICA did not converge"
    reference = None if table3_runs is None else list(table3_runs.columns[:1])   # the run whose embedding is read
    where = f" (d = {d}: the number of groups a word can join grows with d)" if d else ""
    record(ctx, "fig5", f"{fig5_within_1:.0%} of the values within [-1, 1]", paper.fig5_verdict(fig5_within_1),
           (f"d = {d}; " if d else "")
           + f"components scaled to unit variance; a Gaussian would give {paper.GAUSSIAN_WITHIN_1:.0%}{conv}", runs=reference)
    record(ctx, "fig6", f"{fig6_summary['share_one']:.0%} in exactly one group, {fig6_summary['share_none']:.0%} in none, "
           f"{fig6_summary['mean_groups']:.2f} groups per word", paper.fig6_verdict(fig6_summary),
           f"over {fig6_summary['n_words']} words ({words}), |y| > 2.5{where}"
           + (f"; over all {fig6_all['n_words']} sampled tokens: {fig6_all['share_one']:.0%} in one, "
              f"{fig6_all['share_none']:.0%} in none, {fig6_all['mean_groups']:.2f} per word" if fig6_all else "") + conv,
           runs=reference)
    record(ctx, "fig7", f"{n_groups} non-empty groups; their members are listed in section 05_ica", "not attempted",
           "whether the groups are semantically meaningful is not judged automatically; read the lists")
    if table3_runs is None or table3_runs.shape[1] < 2:
        record(ctx, "table3", "" if table3_runs is None else f"{len(table3_runs)} groups, one run", "not attempted",
               "needs at least two runs and groups with scored members")
        return
    runs = list(table3_runs.columns)
    pairs = [(a, b, *spearmanr(table3_runs[a], table3_runs[b])) for i, a in enumerate(runs) for b in runs[i + 1:]]
    verdict = paper.table3_verdict([(r, p) for *_, r, p in pairs])
    record(ctx, "table3", f"{len(table3_runs)} groups; Spearman rho of group means: "
           + "; ".join(f"{a} vs {b}: {r:.2f} (p = {p:.2g})" for a, b, r, p in pairs), verdict,
           f"read as |rho| ({sum(r < 0 for *_, r, _ in pairs)} of {len(pairs)} pairs negative: a run's group means "
           "change sign with which tower Eq. 3 calls primary); all groups with enough scored members, not a "
           "hand-picked 22 (groups overlap, so p is optimistic); the syntactic-vs-semantic trend is not judged "
           "automatically", runs=runs)


# ---------------------------------------------------------------------- building


def build(root: Path, sections) -> dict[str, Any]:
    """The scorecard of one profile's run directory `root` (runs/<profile>/)."""
    by_name = {s.name: s for s in sections}
    rows, picture = [], []
    for item in PAPER_ITEMS:
        section = by_name[item.section]
        out = root / section.output
        row = {**asdict(item), "ours": "", "verdict": "not attempted"}
        if not (out / "section.json").exists():
            row["note"] = f"section {section.name} has not been run at this profile"
        else:
            entries = _recorded(out)
            if item.id in entries:
                e = entries[item.id]
                row.update(ours=e["ours"], verdict=e["verdict"], note=e.get("note", ""))
                picture += [{**pt, "item": POINT_LABELS.get(pt["item"], pt["item"])} for pt in e.get("points", [])]
            else:
                row["note"] = f"section {section.name} ran but did not measure this item"
        rows.append(row)
    return redecided({"profile": root.name, "rows": rows, "points": picture})


def decide_over_seeds(rows: list[dict], profile: str, results: Path | None = None) -> list[dict]:
    """Where the profile has a committed seed study (`results/seeds/book.json`'s verdicts `<item>@<profile>`),
    the correlation items' verdicts are decided by the distribution over seed pairs
    (`paper.RULE`); this run's own pair and its note stay beside it as one point of it (unless the entry says its
    text replaces the row's: `this_run` false, as where the row's own is a committed study's). An entry that `caps`
    (Table 3's) bounds the run's own verdict instead of replacing it (`paper.weakest`; the run's is kept as
    `run_verdict`). A row decided so before (a published record's) is decided anew from its run's part: what is
    shown is the committed study's verdict."""
    from twotower_lib.book import study_parts

    out = []
    for row in rows:
        e = study_parts.verdict(row["id"], profile, *([results] if results else []))
        if e is None:
            out.append(row)
            continue
        again = row.get("decided_by") == "seeds"
        ours, note = ((text.partition(THIS_RUN)[2] if again else text) for text in (row["ours"], row.get("note", "")))
        if not e.get("this_run", True):     # the row's own text is a committed study's, not this run's: replaced
            ours = note = ""
        run_verdict, over = row.get("run_verdict", row["verdict"]), e.get("over", "seed pairs")
        verdict = paper.weakest([run_verdict, e["verdict"]]) if e.get("caps") else e["verdict"]
        head = f"this run's verdict, at most what its {over} allow" if e.get("caps") else f"verdict over {over}"
        out.append({**row, "ours": e["seeds"] + (THIS_RUN + ours if ours else ""), "verdict": verdict,
                    "decided_by": "seeds", **({"run_verdict": run_verdict} if e.get("caps") else {}),
                    **{k: e[k] for k in ("spread", "caveat") if k in e},
                    "note": f"{head}; {e['controls']}" + (THIS_RUN + note if note else "")})
    return out


THIS_RUN = ". This run: "


def redecided(card: dict[str, Any]) -> dict[str, Any]:
    """A recorded scorecard (a published run's) with its verdicts over seeds decided by today's rules on the
    committed seed study (`decide_over_seeds`) and its counts made again: one verdict per item on every page."""
    rows = decide_over_seeds(card["rows"], card["profile"])
    return {**card, "rows": rows, "counts": {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}}


def write(root: Path, sections) -> dict[str, Any]:
    """Build the scorecard, write it to runs/<profile>/scorecard.json and return it."""
    card = build(root, sections)
    atomic_write_json(root / "scorecard.json", card)
    return card


def to_markdown(card: dict[str, Any]) -> str:
    """The scorecard as a MyST table for the book."""
    from twotower_lib.book.tables import markdown_table

    head = (f"Profile **{card['profile']}**: " + ", ".join(f"{n} {v}" for v, n in card["counts"].items()) + ".\n\n")
    return head + markdown_table(["Paper item", "Paper", "Ours", "Verdict", "Note"],
                                 ([r["item"], r["paper"], paper_tables.mark_outside(r["ours"]),
                                   verdict_cell(card["profile"], r),
                                   r["note"]] for r in card["rows"]))
