"""The seed study's report: every pair of probed runs and every control pair as rows of one table.

Writes `results/seeds/<profile>/`:

- `runs.csv`: one row per probe (cases, untrained towers, independent pseudo-models): which tower
  each order rule calls primary (Eq. 3's mean p, the authors' mean log p), the towers' relative
  margin in mean p, the Spearman correlation of the run's scores with frequency rank (Table 4's
  last column), the worst tower head's validation loss (`head_loss`), and the precision and threads
  the probe ran with (its scores depend on the thread count through float rounding only);
- `pairs.csv`: one row per pair: kind (`same`, `cross`, `untrained`, `independent`, `shuffled`),
  the two families and runs, Pearson r of Eq. 4's score and of the mean of log p, Spearman's rho
  (Table 4), r with both towers ordered by the other rule, whether the sign of r depends on the
  rule, and whether both runs' probes count (`valid probes`, `with_validity`);
- `single_tower.csv`: one row per single-tower probe of the independent control: the model's and the
  head's validation loss, and their difference, the probe shortfall;
- `study.json`: what ran (profile, seeds, probe configuration, data hash, code and package
  versions, training and probing minutes, the command).

Every table is made from the probes' exports in `<profile>/probes/` (`studies.seeds.exports`), not from `runs/`.
`write_reliability` adds, from the exported case probes, `reliability.csv` (each case run's
split-half text reliability, which puts the ceiling sqrt(rel_a * rel_b) on a pair's r) and `reliability.json`
(what it was measured from, and how far the exports reproduce the committed pairs' r).

Then `studies.seeds.book` turns them into what the book reads (`claims.csv` and `results/seeds/book.json`);
nothing here is imported by the library.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd

from twotower_lib.analysis.correlation import correlate, scored_top_tokens
from twotower_lib.artifacts import atomic_write_bytes, atomic_write_json, provenance, read_json
from twotower_lib.book.profiles import LEARNING_BERT
from twotower_lib.preference import frequency_rank
from twotower_lib.run_names import case_name, control_name
from studies.seeds.exports import EXPORTS, export_path, load_export

RESULTS = Path(__file__).resolve().parents[2] / "results" / "seeds"
SHUFFLE_SEED = 0


def _exports(out: Path, seeds: int, families: tuple[str, ...]) -> dict[tuple[str, str, int], Path]:
    """(kind, family, seed or pseudo-model index) -> export, for every probe exported to `out` (`exports`)."""
    found = {}
    for m in families:
        for s in range(1, seeds + 1):
            for kind, name in (("cases", case_name(m, s)), ("untrained", case_name(m, s)), ("pairs", f"{m}-pair-{s}")):
                path = export_path(out, kind, name)
                if path.exists():
                    found[("independent" if kind == "pairs" else kind, m, s)] = path
    return found


def load_exports(out: Path, seeds: int, families: tuple[str, ...], kinds=("cases", "untrained", "independent")) -> dict:
    arts = {k: load_export(p) for k, p in _exports(out, seeds, families).items() if k[0] in kinds}
    if not arts:
        raise SystemExit(f"error: no exported probe of the seed study under {out / EXPORTS}; run it first")
    return arts


def _rule_sign(manifest: dict) -> int:
    """+1 when the mean-log-p rule names the same primary tower as Eq. 3's mean-p rule, else -1."""
    o = manifest.get("ordering")
    if o is None:  # a pairing of single-tower runs records its order in its own manifest
        return 1
    logp = o["mean_logp"]
    return 1 if int(np.argmax(logp)) == o["primary_tower"] else -1


def run_rows(arts: dict, counts: np.ndarray, top_n: int, word_frequency_loss: float = np.nan) -> pd.DataFrame:
    """One row per probe; `beyond_word_frequencies` is `word_frequency_loss` less the run's cooperative loss (nats of
    context learned, `paper.CONTEXT_RULE`)."""
    rank = frequency_rank(counts)
    rows = []
    for (kind, model, seed), art in arts.items():
        o = art.manifest.get("ordering", {})
        mean_p = o.get("mean_p")
        ids = scored_top_tokens({"x": art.table}, counts, top_n, "score")
        rows.append({"kind": kind if kind != "cases" else "case", "family": model, "seed": seed,
                     "run": art.path.name, "primary_eq3": o.get("primary_tower"),
                     "rules_agree": _rule_sign(art.manifest) == 1,
                     "margin": abs(mean_p[0] - mean_p[1]) / max(mean_p) if mean_p else np.nan,
                     "rho_frequency_rank": correlate(art.table["score"].to_numpy()[ids], rank[ids], "spearman"),
                     "val_loss_cooperative": art.manifest["val_loss"].get("cooperative", np.nan),
                     "head_loss": max((v for k, v in art.manifest["val_loss"].items() if k.endswith("_head")),
                                      default=np.nan),
                     "beyond_word_frequencies": word_frequency_loss - art.manifest["val_loss"].get("cooperative", np.nan),
                     "precision": "/".join(art.manifest.get("resolved_precision", {}).values()) or "not recorded",
                     "probe_threads": art.manifest.get("provenance", {}).get("torch_threads"),
                     "probe_minutes": round(art.manifest.get("seconds", {}).get("total", np.nan) / 60, 2)})
    return pd.DataFrame(rows)


def pair_row(kind: str, a: tuple, b: tuple, art_a, art_b, counts: np.ndarray, top_n: int,
             shuffle: np.random.Generator | None = None) -> dict:
    """One pair's statistics over the top-N tokens both runs scored."""
    ids = scored_top_tokens({"a": art_a.table, "b": art_b.table}, counts, top_n, "score")
    x = {c: art_a.table[c].to_numpy()[ids] for c in ("score", "score_logmean")}
    y = {c: art_b.table[c].to_numpy()[ids] for c in ("score", "score_logmean")}
    if shuffle is not None:  # token labels of b permuted: the same statistics with no shared division
        perm = shuffle.permutation(len(ids))
        y = {c: v[perm] for c, v in y.items()}
    r = correlate(x["score"], y["score"])
    flip = _rule_sign(art_a.manifest) * _rule_sign(art_b.manifest)
    return {"kind": kind, "family_a": a[1], "family_b": b[1], "a": art_a.path.name, "b": art_b.path.name,
            "seed_a": a[2], "seed_b": b[2], "n_tokens": len(ids), "r": r,
            "r_logmean": correlate(x["score_logmean"], y["score_logmean"]),
            "rho": correlate(x["score"], y["score"], "spearman"),
            "r_other_rule": r * flip, "sign_depends_on_rule": flip == -1}


def pair_rows(arts: dict, counts: np.ndarray, top_n: int) -> pd.DataFrame:
    rng = np.random.default_rng(SHUFFLE_SEED)
    rows = []
    cases = sorted(k for k in arts if k[0] == "cases")
    for a, b in itertools.combinations(cases, 2):
        kind = "same" if a[1] == b[1] else "cross"
        rows.append(pair_row(kind, a, b, arts[a], arts[b], counts, top_n))
        if kind == "same":
            rows.append(pair_row("shuffled", a, b, arts[a], arts[b], counts, top_n, shuffle=rng))
    for kind in ("untrained", "independent"):
        keys = sorted(k for k in arts if k[0] == kind)
        for a, b in itertools.combinations(keys, 2):
            if a[1] == b[1]:
                rows.append(pair_row(kind, a, b, arts[a], arts[b], counts, top_n))
    return pd.DataFrame(rows)


def with_validity(pairs: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """`pairs` with a column `valid probes`: whether both runs of a pair of trained runs have probes that count
    (`VALID_PROBE_RULE`, the ladder's: the worst tower head's validation loss below the same seed's untrained heads'), so
    that a failed probe's pairs are marked, not mixed in; a control's pairs are the null and count as they are."""
    loss = runs.pivot_table(index=["family", "seed"], columns="kind", values="head_loss").reindex(
        columns=["case", "untrained"])
    # a seed whose untrained towers are not probed yet is not judged (NaN compares False)
    counts = {case_name(m, s) for (m, s), row in loss.iterrows() if not row["case"] >= row["untrained"]}
    trained = pairs["kind"].isin(("same", "cross", "shuffled"))
    return pairs.assign(**{"valid probes": ~trained | (pairs["a"].isin(counts) & pairs["b"].isin(counts))})


def single_tower_rows(out: Path, seeds: int, families: tuple[str, ...]) -> pd.DataFrame:
    """One row per single-tower probe of the independent control: the model's own validation loss, its head's,
    and the probe shortfall (head minus model: what the head fails to read of a tower that carries
    everything its decoder used)."""
    rows = []
    for m in families:
        for s in range(1, 2 * seeds + 1):
            path = export_path(out, "independent", control_name(m, s))
            if not path.exists():
                continue
            manifest = read_json(path)["manifest"]
            loss = manifest["val_loss"]
            head = min(v for k, v in loss.items() if k.endswith("_head"))
            rows.append({"family": m, "seed": s, "run": control_name(m, s), "val_loss_model": loss["cooperative"],
                         "val_loss_head": head, "shortfall": head - loss["cooperative"],
                         "epochs": manifest["heads"]["epochs"]})
    return pd.DataFrame(rows, columns=["family", "seed", "run", "val_loss_model", "val_loss_head", "shortfall", "epochs"])


def _train_minutes(out: Path, families, seeds) -> dict[str, float]:
    """Minutes each case and single-tower run trained, as its export records them."""
    found = {}
    for m in families:
        for s in range(1, 2 * seeds + 1):
            for kind, name in (("cases", case_name(m, s)), ("independent", control_name(m, s))):
                path = export_path(out, kind, name)
                if path.exists() and read_json(path).get("train_minutes") is not None:
                    found[name] = read_json(path)["train_minutes"]
    return found


def check_data(arts: dict, data, layout) -> None:
    """Every export must have been probed on the profile's prepared data as it is on this machine."""
    other = sorted(a.path.name for a in arts.values() if a.manifest.get("data_hash") != data.data_hash)
    if other:
        raise SystemExit(f"error: the exports of {', '.join(other)} were probed on other data than {layout.data} "
                         f"({data.data_hash[:12]}); prepare the profile's corpus again, or run the study to re-probe them")


def write_report(layout, seeds: int, families: tuple[str, ...], controls: tuple[str, ...], out: Path,
                 study_seconds: float | None, command: str) -> Path:
    """Write runs.csv, pairs.csv and study.json from every exported probe in `out`; return `out`. `study_seconds`: the
    wall time of the call that did the work (None for a call that only reports)."""
    from twotower_lib.data import load_prepared

    data = load_prepared(layout.data)
    arts = load_exports(out, seeds, families)
    check_data(arts, data, layout)
    top_n = layout.profile.analysis.top_n
    runs = run_rows(arts, data.counts, top_n, data.unigram_loss())
    pairs = with_validity(pair_rows(arts, data.counts, top_n), runs)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "runs.csv", runs.to_csv(index=False, float_format="%.6g").encode())
    atomic_write_bytes(out / "pairs.csv", pairs.to_csv(index=False, float_format="%.6g").encode())
    single = single_tower_rows(out, seeds, families)
    atomic_write_bytes(out / "single_tower.csv", single.to_csv(index=False, float_format="%.6g").encode())
    previous = read_json(out / "study.json") if (out / "study.json").exists() else {}
    threads = sorted({a.manifest.get("provenance", {}).get("torch_threads") for a in arts.values()} - {None})
    atomic_write_json(out / "study.json", {
        "profile": layout.profile.name, "seeds": seeds, "families": list(families), "controls": list(controls),
        "top_n": top_n, "probe_config": next(iter(arts.values())).manifest.get("probe_config"), "probe_threads": threads,
        "data_hash": data.data_hash, "word_frequency_loss": data.unigram_loss(),
        "train_settings": {m: {"preset": layout.profile.models[m].preset, "tokens": layout.profile.tokens_for(m),
                               **({k: getattr(layout.profile.train, k) for k in LEARNING_BERT}     # BERT's recipe
                                  if layout.profile.models[m].model_type == "bert" else {})} for m in families},
        "train_minutes": _train_minutes(out, families, seeds),
        "probe_minutes": {f"{k[0]}/{a.path.name}": round(a.manifest.get("seconds", {}).get("total", 0) / 60, 2)
                          for k, a in arts.items()},
        # minutes of each call that trained or probed (a call that only reports adds none)
        "wall_minutes_calls": [m for m in previous.get("wall_minutes_calls", []) if m > 0]
                              + ([round(study_seconds / 60, 1)] if study_seconds is not None else []),
        "command": command, "provenance": provenance()})
    from studies.seeds.book import write_book

    write_book(out.parent)
    return out


def write_context(layout, out: Path, command: str) -> Path:
    """Add what a committed report written before the context gate (`paper.CONTEXT_RULE`) lacks, from the profile's
    prepared data, which must be the study's: `word_frequency_loss` in study.json and `beyond_word_frequencies` in
    runs.csv. Nothing is trained or probed; the book's parts are written again."""
    from twotower_lib.data import load_prepared

    data = load_prepared(layout.data)
    committed = read_json(out / "study.json")
    if committed["data_hash"] != data.data_hash:
        raise SystemExit(f"error: {layout.data} holds other data ({data.data_hash[:12]}) than the study's "
                         f"({committed['data_hash'][:12]}); prepare the profile's corpus again")
    runs = pd.read_csv(out / "runs.csv")
    loss = data.unigram_loss()
    runs["beyond_word_frequencies"] = loss - runs["val_loss_cooperative"]
    order = [c for c in runs if c != "beyond_word_frequencies"]
    order.insert(order.index("val_loss_cooperative") + 1, "beyond_word_frequencies")   # as `run_rows` writes it
    runs = runs[order]
    atomic_write_bytes(out / "runs.csv", runs.to_csv(index=False, float_format="%.6g").encode())
    atomic_write_json(out / "study.json", committed | {"word_frequency_loss": loss, "context_command": command})
    from studies.seeds.book import write_book

    write_book(out.parent)
    return out


def write_reliability(layout, seeds: int, families: tuple[str, ...], out: Path, command: str) -> Path:
    """Write `reliability.csv` and `reliability.json` into `out` from the exported case probes: per run, the
    split-half reliability of its scores over the study's top-N tokens (`uncertainty.split_half_or_nan` of the
    probe's per-document sums, measured when it was exported; of their values for the Pearson claims, of their ranks
    for the Spearman ones), and beside it how far the exports reproduce the committed report (cooperative loss,
    Eq. 3's primary tower and margin; per case pair, |r| and whether r's sign flipped), so that reliabilities of
    re-made probes say which probes they describe. The committed report is left as it is."""
    from twotower_lib.analysis.uncertainty import RELIABILITY_SPLITS
    from twotower_lib.data import load_prepared

    if not (out / "study.json").exists():
        raise SystemExit(f"error: no committed report of the seed study in {out}; write it first (--report-only)")
    data = load_prepared(layout.data)
    committed = read_json(out / "study.json")
    if committed["data_hash"] != data.data_hash:
        raise SystemExit(f"error: {layout.data} holds other data ({data.data_hash[:12]}) than the study's "
                         f"({committed['data_hash'][:12]}); prepare the profile's corpus again")
    arts = load_exports(out, seeds, families, kinds=("cases",))
    check_data(arts, data, layout)
    top_n = layout.profile.analysis.top_n
    here = run_rows(arts, data.counts, top_n).set_index("run")
    then = pd.read_csv(out / "runs.csv").query("kind == 'case'").set_index("run")
    rows = []
    for (_, model, seed), art in sorted(arts.items()):
        run = art.path.name
        rows.append({"family": model, "seed": seed, "run": run,
                     "text_reliability": art.text_reliability["pearson"],
                     "text_reliability_spearman": art.text_reliability["spearman"], "tokens": top_n}
                    | {f"{k}{suffix}": t[k].get(run) for k in ("val_loss_cooperative", "primary_eq3", "margin")
                       for suffix, t in (("", here), ("_committed", then))})
    cases = lambda t: t[t["kind"].isin(("same", "cross"))].set_index(["a", "b"])["r"]
    mine, theirs = cases(pair_rows(arts, data.counts, top_n)), cases(pd.read_csv(out / "pairs.csv"))
    theirs = theirs.reindex(mine.index)
    delta = (mine.abs() - theirs.abs()).abs()
    atomic_write_bytes(out / "reliability.csv", pd.DataFrame(rows).to_csv(index=False, float_format="%.6g").encode())
    atomic_write_json(out / "reliability.json", {
        "top_n": top_n, "splits": RELIABILITY_SPLITS, "data_hash": data.data_hash, "runs": len(rows),
        "reproduced_pairs": {"pairs": int(delta.notna().sum()), "median |delta |r||": float(delta.median()),
                             "max |delta |r||": float(delta.max()),
                             "sign flips": int((np.sign(mine) != np.sign(theirs))[theirs.notna()].sum())},
        "probe_config": next(iter(arts.values())).manifest.get("probe_config"), "command": command,
        "provenance": provenance()})
    from studies.seeds.book import write_book

    write_book(out.parent)
    return out
