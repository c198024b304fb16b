"""Section 5.3's word groups against the same towers untrained, over the seeds of the profile's ICA reference family:
Fig. 5's share of the ICA components' values within [-1, 1], Fig. 6's groups per word, and Table 3's agreement of
the groups' mean preference scores between seeds.

Section 5.3 stacks one row per token occurrence, so the rows are weighted by frequency: a few frequent tokens
dominate every component, and an untrained embedding's components come out sparse too. Each seed is measured trained
and at 0 tokens (each run's first snapshot), with the section's own ICA settings. Table 3 over seeds asks whether the
groups' ranks repeat between seeds of one family more than between the same towers untrained, each probed as the
trained ones are: where they do not, agreement across families cannot be training's. The runs are the seed study's
cases (`studies.seeds`, same configurations and seeds), trained and probed here where this machine lacks them; each
row records its towers' loss beyond word frequencies, which gates the verdicts:

    python -m studies.word_groups --profile cpu --runs runs    # results/word_groups/seeds.json, then the book's parts
    python -m studies.word_groups book                         # the book's parts alone, from the committed file
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median

import pandas as pd

from twotower_lib import paper
from twotower_lib.artifacts import atomic_write_json, provenance, read_json
from twotower_lib.book.sections import PROJECT_ROOT

RESULT = PROJECT_ROOT / "results" / "word_groups" / "seeds.json"
COMMAND = "python -m studies.word_groups --profile {profile} --runs {runs}"
FIG6_KEYS = ("share_one", "share_none", "mean_groups")


def measure(root: Path, profile, seeds: int, threads: int = 1) -> dict:
    """Figs. 5 and 6 for each seed of `profile`'s ICA reference family in the seed study's layout under `root`
    (`<runs dir>/<profile>/`), trained and untrained, and Table 3 over seeds, training and probing first what this
    machine lacks (`prepare`)."""
    import numpy as np

    from studies.seeds.runner import Layout
    from twotower_lib.analysis.word_groups import fig5_within_1, fig6_data, group_members
    from twotower_lib.artifacts import sha256_file
    from twotower_lib.book.analyses import embedding_ica, top_token_ids
    from twotower_lib.data import load_prepared
    from twotower_lib.models import load_embedding, weights_path
    from twotower_lib.run_names import case_name

    family = profile.analysis.ica_reference.split(":")[0]
    layout = Layout(profile, root)
    data = load_prepared(layout.data)        # a missing corpus is said before anything trains
    runs = prepare(layout, family, seeds, threads)
    top = top_token_ids(data, profile.analysis.top_n)
    rows, members = [], None
    for seed, run in enumerate(runs, 1):
        row = {"run": run.name, "seed": seed, "weights_sha256": sha256_file(weights_path(run))}
        for name, snapshot in (("trained", None), ("untrained", 0)):
            fitted, token_ids, components, _ = embedding_ica(load_embedding(run, snapshot), data, profile)
            row[f"fig5 {name}"] = fig5_within_1(components, token_ids, data.tokens, data.counts)
            summary = fig6_data(components[np.isin(token_ids, top)])[1]
            row[f"fig6 {name}"] = {k: summary[k] for k in (*FIG6_KEYS, "n_words")}
            row[f"{name} converged"] = bool(fitted.ica.converged)
            if members is None:                      # the groups: the reference seed's trained ones, as section 05's
                members = group_members(components, token_ids, data.tokens, data.counts)
        rows.append(row)
        print(f"{run.name}: Fig. 5 trained {row['fig5 trained']:.3f}, untrained {row['fig5 untrained']:.3f}", flush=True)
    probes = {(kind, s): layout.probe_dir(kind, case_name(family, s)) for kind in ("cases", "untrained")
              for s in range(1, seeds + 1)}
    from twotower_lib.preference import load_artifact

    arts = {key: load_artifact(path) for key, path in probes.items()}
    for row in rows:                        # the context these towers learned, for `context_learned`
        row["val_loss_cooperative"] = float(arts["cases", row["seed"]].manifest["val_loss"]["cooperative"])
        row["beyond_word_frequencies"] = data.unigram_loss() - row["val_loss_cooperative"]
    tables = {kind: {s: arts[kind, s].table for s in range(1, seeds + 1)} for kind in ("cases", "untrained")}
    primary = [arts["cases", s].manifest["ordering"]["primary_tower"] for s in range(1, seeds + 1)]
    table3 = (None if seeds < 2 else      # one seed makes no pair
              {**table3_over_seeds(members, tables["cases"], tables["untrained"]), "primary_eq3": primary})
    return {"family": family, "rows": rows, "table3": table3}


def prepare(layout, family: str, seeds: int, threads: int) -> list[Path]:
    """Train and probe, resumably, what `measure` reads and this machine lacks: each seed's two-tower case of
    `family` (its run, with the snapshot at 0 tokens) and the study's probes of it trained and at 0 tokens. On a
    fresh checkout the seed study's committed exports stand in for its runs, but the ICA needs the weights and
    Table 3 the full preference tables. The runs have the seed study's configurations and seeds; their weights
    match its bit for bit only on the machine that trained it, so each row records its own weights and loss."""
    from studies.seeds.runner import probe_job, study_probe_config, train_runs
    from twotower_lib.run_names import case_name
    from twotower_lib.workers import run_jobs

    train_runs(layout, [(family, s, 2) for s in range(1, seeds + 1)], threads)
    runs = [layout.run_dir(family, s) for s in range(1, seeds + 1)]
    cfg = study_probe_config(layout)
    jobs = [{"run_dir": str(run), "cfg": cfg, "data_dir": str(layout.data), "snapshot": snapshot,
             "out": str(layout.probe_dir(kind, case_name(family, s)))}
            for kind, snapshot in (("cases", None), ("untrained", 0)) for s, run in enumerate(runs, 1)]
    run_jobs(probe_job, jobs, threads, "word groups: probing", label=lambda j: Path(j["out"]).name)
    return runs


def table3_over_seeds(members: pd.DataFrame, trained: dict[int, pd.DataFrame], untrained: dict[int, pd.DataFrame]) -> dict:
    """Table 3's agreement between seeds of one family: the groups' mean scores (`word_groups.table3`, one group
    set for every run, trained and untrained) and Spearman rho for every pair of seeds, trained and untrained; the
    trained pairs' |rho| judged against the untrained pairs' as a division is (`seed_spread.partition`)."""
    from scipy.stats import spearmanr

    from twotower_lib.analysis import seed_spread
    from twotower_lib.analysis.word_groups import table3

    columns = {**{f"trained s{s}": t for s, t in trained.items()}, **{f"untrained s{s}": t for s, t in untrained.items()}}
    means = table3(members, columns)
    pairs = []
    for kind, by_seed in (("trained", trained), ("untrained", untrained)):
        seeds = sorted(by_seed)
        for i, a in enumerate(seeds):
            for b in seeds[i + 1:]:
                rho, p = spearmanr(means[f"{kind} s{a}"], means[f"{kind} s{b}"])
                pairs.append({"kind": kind, "a": a, "b": b, "rho": float(rho), "p": float(p)})
    t = [p for p in pairs if p["kind"] == "trained"]
    a, b, rho = ([p[k] for p in t] for k in ("a", "b", "rho"))
    division = seed_spread.partition(a, b, rho, [p["rho"] for p in pairs if p["kind"] == "untrained"])
    return {"groups": len(means), "pairs": pairs, "division": division, "triads": seed_spread.triad_share(a, b, rho)}


def load(path: Path = RESULT) -> dict:
    """The committed measurements (empty rows where none were collected)."""
    return read_json(path) if path.is_file() else {"rows": [], "table3": None}


def _fig5(found: dict) -> tuple[list[float], list[float]]:
    return [r["fig5 trained"] for r in found["rows"]], [r["fig5 untrained"] for r in found["rows"]]


def _fig6_text(summaries: list[dict]) -> str:
    m = {k: median(s[k] for s in summaries) for k in FIG6_KEYS}
    return f"{m['share_one']:.0%} in one group, {m['share_none']:.0%} in none, {m['mean_groups']:.2f} groups per word"


def context_learned(found: dict) -> tuple[bool, float]:
    """`paper.CONTEXT_RULE` for the measured runs, from the loss beyond word frequencies each row records (its case
    probe's cooperative loss against the corpus's word-frequency loss): whether every one passed, and the least (NaN
    where a row records none, as in a file measured before the rows carried it)."""
    beyond = [r.get("beyond_word_frequencies", float("nan")) for r in found["rows"]]
    least = min(beyond) if beyond and all(b == b for b in beyond) else float("nan")
    return least >= paper.CONTEXT_GATE, least


def verdicts(found: dict) -> dict[str, dict]:
    """The scorecard's Figs. 5 and 6 verdicts over seeds (`paper.fig5_seed_verdict`, `paper.fig6_seed_verdict`) and
    Table 3's cap (`paper.table3_seed_cap`, where it was measured), in the form the scorecard reads, each gated by
    `paper.CONTEXT_RULE` on the runs measured."""
    out = _verdicts(found)
    learned, least = context_learned(found) if out else (True, float("nan"))
    for v in out.values():
        v["verdict"] = paper.gated(v["verdict"], learned)
        if not learned:
            why = (f"the towers did not learn context ({least:.2f} nats beyond word frequencies at the least, the gate "
                   f"{paper.CONTEXT_GATE:g})" if least == least else "no record that the towers learned context (the "
                   "file predates its rows' loss beyond word frequencies: measure again)")
            v["caveat"] = (f"{why}; " + v.get("caveat", "")).rstrip("; ")
    return out


def _verdicts(found: dict) -> dict[str, dict]:
    rows, n = found["rows"], len(found["rows"])
    if not n:
        return {}
    control = "the control is each seed's towers at 0 tokens"
    t, u = _fig5(found)
    out = {"fig5": {"verdict": paper.fig5_seed_verdict(t, u), "over": "seeds",
                    "seeds": f"{median(t):.0%} within [-1, 1], untrained {median(u):.0%} (medians of {n} seeds)",
                    "spread": f"{min(t):.0%} to {max(t):.0%}, untrained {min(u):.0%} to {max(u):.0%}; trained above "
                              f"untrained in {sum(a > b for a, b in zip(t, u))} of {n} seeds",
                    "caveat": "judged against the same towers untrained: frequency-weighted rows are sparse untrained too",
                    "controls": f"{control}, their rows weighted by frequency as Section 5.3's are"}}
    ft, fu = [r["fig6 trained"] for r in rows], [r["fig6 untrained"] for r in rows]
    tolerance = {"share_one": paper.FIG6_SHARE_TOLERANCE, "share_none": paper.FIG6_SHARE_TOLERANCE,
                 "mean_groups": paper.FIG6_MEAN_TOLERANCE}
    near = sum(abs(median(a[k] for a in ft) - paper.FIG6[k]) <= tolerance[k] for k in FIG6_KEYS)
    nearer = {k: sum(abs(a[k] - paper.FIG6[k]) < abs(b[k] - paper.FIG6[k]) for a, b in zip(ft, fu)) for k in FIG6_KEYS}
    out["fig6"] = {"verdict": paper.fig6_seed_verdict(ft, fu), "over": "seeds",
                   "seeds": f"{_fig6_text(ft)}; untrained {_fig6_text(fu)} (medians of {n} seeds)",
                   "spread": f"trained nearer the paper's than untrained in {nearer['share_one']}, "
                             f"{nearer['share_none']} and {nearer['mean_groups']} of {n} seeds (one group, none, "
                             f"groups per word); the medians near the paper's (within {paper.FIG6_SHARE_TOLERANCE:.0%} "
                             f"of words, {paper.FIG6_MEAN_TOLERANCE:g} groups per word) in {near} of 3",
                   "controls": f"{control}, over the same {ft[0]['n_words']} most frequent words"}
    t3 = found.get("table3")
    if t3 and t3["division"]["verdict"] in paper.TABLE3_CAP:
        d = t3["division"]
        out["table3"] = {"verdict": paper.table3_seed_cap(d["verdict"]), "caps": True, "over": "seed pairs",
                         "seeds": f"between {n} seeds of {found['family']}, median |rho| {d['median |r|']:.2f} over "
                                  f"{d['pairs']} pairs (leave one seed out {d['loo low']:.2f} to {d['loo high']:.2f}) "
                                  f"against its untrained towers' {d['controls |r| threshold']:.2f}: {d['verdict']}, "
                                  f"which allows at most {paper.table3_seed_cap(d['verdict'])}",
                         "spread": f"seed pairs' |rho| {d['min |r|']:.2f} to {d['max |r|']:.2f}, untrained up to "
                                   f"{d['controls max |r|']:.2f}; the signs of {t3['triads']:.0%} of seed triads are "
                                   "those a choice of primary tower per seed gives" + _same_primary(t3),
                         "caveat": f"{d['controls']} untrained pairs set the threshold, and the groups overlap: the "
                                   "pairs' rho are associations, not independent tests",
                         "controls": f"{control}, probed as the trained ones, over the same {t3['groups']} groups"}
    return out


def _same_primary(t3: dict) -> str:
    """Which tower Eq. 3 calls primary in the trained seeds, where the file records it."""
    primary = t3.get("primary_eq3")
    if not primary:
        return ""
    top = max(set(primary), key=primary.count)
    return (f", while Eq. 3 calls tower {top} primary in {primary.count(top)} of {len(primary)} seeds: a seed whose "
            "means come out negated under the same label is read as differing in which tower plays which role, not in "
            "how the groups rank")


def sentences(found: dict, profile: str) -> dict[str, str]:
    """What section 05 says of each control, every number from the committed file."""
    where = f"{len(found['rows'])} seeds of the `{profile}` profile's ICA reference family, `results/word_groups/`"
    if not found["rows"]:
        missing = "*Not committed yet (`python -m studies.word_groups`).*"
        return {"FIG5": missing, "FIG6": missing, "TABLE3": missing}
    v = verdicts(found)
    out = {"FIG5": f"**Against the untrained towers** ({where}): {v['fig5']['seeds']}; {v['fig5']['spread']}. A share "
                   f"above a Gaussian's ({paper.GAUSSIAN_WITHIN_1:.0%}) says nothing alone: with one row per token "
                   "occurrence, a few frequent tokens weigh on every component, trained or not. Only a trained share "
                   "above its own untrained one is sparsity that training made, so the verdict over seeds is "
                   f"**{v['fig5']['verdict']}** (`paper.fig5_seed_verdict`).",
           "FIG6": f"**Against the untrained towers** ({where}): {v['fig6']['seeds']}; the paper's "
                   f"{paper.FIG6['share_one']:.0%}, {paper.FIG6['share_none']:.0%} and {paper.FIG6['mean_groups']:.2f}. "
                   f"{v['fig6']['spread'][0].upper()}{v['fig6']['spread'][1:]}, so the verdict over seeds is "
                   f"**{v['fig6']['verdict']}** (`paper.fig6_seed_verdict`)."}
    if "table3" in v:
        out["TABLE3"] = (f"**Between seeds, against the untrained towers** ({where}): the groups' mean scores agree "
                         f"{v['table3']['seeds']}; {v['table3']['spread']}. Ranks that do not repeat between seeds of "
                         "one family beyond what untrained towers give cannot agree across families by training "
                         f"(`paper.table3_seed_cap`). {v['table3']['caveat'][0].upper()}{v['table3']['caveat'][1:]}.")
    else:
        out["TABLE3"] = "*Table 3 over seeds is not measured at this profile: its seeds' probes are not committed.*"
    return out


def write_book(path: Path = RESULT) -> Path:
    """Section 05's sentences and the scorecard's verdicts over seeds at the study's profile into
    `results/word_groups/book.json`."""
    from twotower_lib.book import study_parts

    found = load(path)
    profile = found.get("profile", "cpu")
    return study_parts.write(path.parent, {f"WORD_GROUPS_{k}@{profile}": v for k, v in sentences(found, profile).items()},
                             {}, [path], "python -m studies.word_groups book",
                             verdicts={f"{k}@{profile}": {"profile": profile, **e} for k, e in verdicts(found).items()})


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else list(argv))[:1] == ["book"]:
        print(f"book parts -> {write_book()}")
        return 0
    from twotower_lib.book.profiles import get_profile

    ap = argparse.ArgumentParser(description="Figs. 5 and 6 and Table 3 against the untrained towers, over seeds")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--runs", type=Path, required=True, help="the runs directory the seed study trained and probed in")
    ap.add_argument("--seeds", type=int, default=4, help="seeds of the ICA reference family")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads per training run or probe, as many side by side as the cores allow")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    found = measure(args.runs.expanduser() / args.profile, get_profile(args.profile), args.seeds, args.threads)
    atomic_write_json(args.out, {"profile": args.profile, **found, "provenance": provenance(),
                                 "command": COMMAND.format(profile=args.profile, runs=args.runs)})
    print(f"wrote {args.out}: {len(found['rows'])} seeds")
    if args.out == RESULT:
        print(f"book parts -> {write_book()}")
    return 0
