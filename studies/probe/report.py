"""The probe's validation studies as the book shows them (the appendix notebook `08_probe_validation`):
readers of the committed measurements in `results/probe/` (recipes, whitening, the defined head, the
probe's training positions, the optimum), each made by a script in `benchmarks/` whose command the
file records, and `write_book`, which puts the appendix's tables into `results/probe/book.json`.
Nothing here probes; `book.probing` is the section-02 stage that does.

    python -m studies.probe book
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from twotower_lib.book.paper_tables import interval
from twotower_lib.artifacts import read_json
from twotower_lib.book.probe_outputs import VARIANTS  # the two score variants, named once
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

RESULTS = PROJECT_ROOT / "results" / "probe"  # committed measurements of the instrument
RECIPES = RESULTS / "recipes.json"             # the committed probe-recipe comparison
DEFAULT_RECIPE = "linear, cool-down, average (default)"          # the profile's own probe, by its name there


def recipe_comparison(path: Path | None = None) -> dict[str, pd.DataFrame]:
    """The committed comparison of probe recipes on the same frozen runs (`studies/probe/compare_recipes.py`):
    per run and recipe (`runs`), the runs' correlation per recipe (`pairs`) and each run's agreement
    between recipes (`across_recipes`). Empty when it was not measured."""
    import pandas as pd

    path = path or RECIPES
    if not path.exists():
        return {}
    found = read_json(path)
    return {"runs": pd.DataFrame(found["runs"]).set_index(["run", "recipe"]),
            "pairs": pd.DataFrame(found["pairs"]).set_index(["recipe", "a", "b"]),
            "across_recipes": pd.DataFrame(found["across_recipes"]).set_index(["run", "a", "b"])}


def reliability_benchmark(path: Path | None = None) -> pd.DataFrame | str:
    """A committed comparison of head recipes (`studies/probe/reliability.py`): per run and
    recipe, epochs, each tower head's validation loss, the reliability in both score variants and,
    where measured, the agreement with a reference recipe; or how to produce it."""
    import pandas as pd

    path = path or RESULTS / "reliability.json"
    if not path.exists():
        return f"not measured yet: python -m studies.probe.reliability --out {path.relative_to(PROJECT_ROOT)}"
    rows = read_json(path)["rows"]
    return pd.DataFrame([{"run": r["run"], "recipe": r["variant"], "epochs": r["epochs"], "minutes": r["minutes"],
                          **{f"val loss, tower {j}": v for j, v in enumerate(r["val_loss"])},
                          **{f"reliability ({VARIANTS[c]})": v for c, v in r["reliability"].items()},
                          **{f"agreement with {r['reference']} ({VARIANTS[c]})": v
                             for c, v in r.get("agreement_with_reference", {}).items()}}
                         for r in rows]).set_index(["run", "recipe"])


OWN_SCHEDULE_SINCE = "2026-11-30T15:16:32+00:00"   # the commit from which each head set trains on its own schedule


def shared_schedule_studies(results: Path | None = None) -> list[str]:
    """The committed probe studies that trained replicate heads before `OWN_SCHEDULE_SINCE` (on the first set's
    schedule): their probe-seed reliabilities are the shared schedule's."""
    found = []
    for path in sorted((results or RESULTS).glob("*.json")):
        text = path.read_text()
        if '"replicate": true' in text and json.loads(text).get("provenance", {}).get("created", "") < OWN_SCHEDULE_SINCE:
            found.append(path.name)
    return found


def replicate_schedule(path: Path | None = None) -> str:
    """The probe-seed reliability with the replicate heads on the first set's schedule and on their own
    (`studies/probe/replicate_schedule.py`): what sharing did, in a sentence, then per run; or how to produce it."""
    import pandas as pd

    from studies.register.report import RELIABILITY_GOAL

    path = path or RESULTS / "replicate_schedule.json"
    if not path.exists():
        return "<p><em>not measured yet: python -m studies.probe.replicate_schedule --probes LABEL=SHARED:OWN</em></p>"
    found = read_json(path)
    rows = pd.DataFrame(found["rows"])
    shared, own = rows["reliability shared (score)"], rows["reliability own (score)"]
    moved = rows["first set, shared vs own (score)"]
    changed = int((rows["epochs shared"] != rows["epochs own"]).sum())
    older = shared_schedule_studies()
    text = (f"With the replicate heads on the first set's schedule, the probe-seed reliability (Eq. 4, the {found['top_n']} "
            f"most frequent tokens) of {len(rows)} runs ({', '.join(dict.fromkeys(rows['corpus']))}) has median "
            f"{shared.median():.3f} (lowest {shared.min():.3f}); each set on its own schedule, {own.median():.3f} "
            f"(lowest {own.min():.3f}; the goal is {RELIABILITY_GOAL}); the two differ in {int((shared != own).sum())} "
            f"of {len(rows)} runs, by at most {(shared - own).abs().max():.3f}. Sharing also moved the first set: its epochs "
            f"changed in {changed} of {len(rows)} runs, and its scores with and without sharing agree at r "
            f"{moved.min():.3f} to {moved.max():.3f}. Every probe since trains each set on its own schedule."
            + (f" Measured with shared schedules: {', '.join(f'<code>results/probe/{n}</code>' for n in older)}." if older else ""))
    table = rows.set_index(["corpus", "run"])
    return f"<p>{text}</p>" + _html(table)


def probe_change(path: Path | None = None, between_runs: bool = False) -> pd.DataFrame | str:
    """A committed comparison of two probings of the same frozen runs (`studies/probe/compare_versions.py`):
    per case, each probing's validation loss per tower head, its probe-seed reliability, and how far
    the two probings' scores agree; with `between_runs`, every two of those cases correlated under each
    probing; or how to produce it."""
    import pandas as pd

    path = path or RESULTS / "whitening_cases.json"
    if not path.exists():
        return f"not measured yet: python -m studies.probe.compare_versions OLD NEW --out {path.relative_to(PROJECT_ROOT)}"
    found = read_json(path)
    if between_runs:
        return pd.DataFrame([{"a": p["a"], "b": p["b"], **{f"{name}: r ({VARIANTS[c]})": r for name in ("old", "new")
                                                           for c, r in p[f"{name}_r"].items()}}
                             for p in found.get("pairs", [])]).set_index(["a", "b"])
    out = []
    for r in found["rows"]:
        row = {"case": r["case"], "probe versions": f"{r['old_version']} -> {r['new_version']}"}
        for name in ("old", "new"):
            row.update({f"{name}: val loss, tower {j}": v for j, v in enumerate(r[f"{name}_val_loss"])})
            row.update({f"{name}: reliability ({VARIANTS[c]})": v for c, v in r.get(f"{name}_reliability", {}).items()})
        row.update({f"agreement ({VARIANTS[c]})": v for c, v in r.get("agreement", {}).items()})
        out.append(row)
    return pd.DataFrame(out).set_index("case")


def training_positions(path: Path | None = None) -> dict[str, pd.DataFrame] | str:
    """A committed study of runs probed at several training sizes (`studies/probe/positions.py`):
    `runs`, per probing and run, the training positions, epochs, head-training seconds, validation loss
    per tower head and the agreement of its scores with the largest probing's; `pairs`, per probing and
    pair, r in both score variants (with the document-bootstrap interval where measured); `agreement`,
    per run, every two probings' agreement (Eq. 4; two draws of one size show the probe data's own
    noise); or how to produce it."""
    import pandas as pd

    path = path or RESULTS / "positions_cases.json"
    if not path.exists():
        return f"not measured yet: python -m studies.probe.positions LABEL=DIR ... --out {path.relative_to(PROJECT_ROOT)}"
    found = read_json(path)
    last = found["rows"][-1]["probing"]
    runs, pairs, agreement = [], [], []
    for row in found["rows"]:
        for run, v in row["runs"].items():
            agreement.append({"run": run, "probing": row["probing"], row["probing"]: 1.0,
                              **{other: a["score"] for other, a in v.get("agreement", {}).items()}})
            runs.append({"probing": row["probing"], "run": run, "training positions": v["train_positions"],
                         "epochs": v["epochs"], "head-training s": v["head_seconds"],
                         **{f"val loss, tower {j}": x for j, x in enumerate(v["val_loss"])},
                         **{f"agreement with {last} ({VARIANTS[c]})": x for c, x in v["agreement_with_last"].items()}})
        for p in row["pairs"]:
            out = {"probing": row["probing"], "pair": f"{p['a']} vs {p['b']}"}
            for c in VARIANTS:
                out[f"r ({VARIANTS[c]})"] = p[f"r_{c}"]["r"]
                if "ci_low" in p[f"r_{c}"]:
                    v = p[f"r_{c}"]
                    out[f"95% CI ({VARIANTS[c]})"] = interval(v["r"], v["ci_low"], v["ci_high"])
            pairs.append(out)
    order = list(dict.fromkeys(p["pair"] for p in pairs))          # each pair's probings together, in the file's order
    pairs.sort(key=lambda p: order.index(p["pair"]))
    labels = [row["probing"] for row in found["rows"]]
    agreement.sort(key=lambda a: a["run"])                        # stable: each run's probings in the file's order
    return {"runs": pd.DataFrame(runs).set_index(["probing", "run"]), "pairs": pd.DataFrame(pairs).set_index(["pair", "probing"]),
            "agreement": pd.DataFrame(agreement, columns=["run", "probing", *labels]).set_index(["run", "probing"])}


def probe_data_noise(path: Path | None = None, draws: tuple[str, str] = ("cpu-99k-a", "cpu-99k-b"),
                     full: str = "cpu-198k") -> dict[str, pd.DataFrame]:
    """Noise or bias? From a committed study with two independent draws of one size (`draws`: other blocks,
    another head start) and larger probings (`studies/probe/positions.py`), in the Eq. 4 variant.

    `runs`, per run: the two draws' agreement r (the reliability of a probe of their size, if they differ
    only by noise); the agreement each would have with an exact probe if that were so, sqrt(r); what
    each draw's agreement with the largest probing is; the same for `full`, its reliability stepped up
    (Spearman-Brown) from the draws' size. Draws that agree with each other about as
    well as with the largest share a departure from it: a bias of small probes, which comparing probes
    of one size cannot see. `pairs`, per pair: r at `full`, the noise ceiling sqrt(rel_a rel_b) at its
    size, r corrected for that noise alone, and r at the largest probing."""
    import numpy as np
    import pandas as pd

    from twotower_lib.analysis.uncertainty import spearman_brown

    path = path or RESULTS / "positions_cases.json"
    rows = {row["probing"]: row for row in read_json(path)["rows"]}
    missing = [label for label in (*draws, full) if label not in rows]
    if missing:
        raise UserError(f"{path} has no probing {missing}; it holds {list(rows)}")
    largest = list(rows)[-1]
    runs, reliability = [], {}
    for run, first in rows[draws[0]]["runs"].items():
        r = first["agreement"][draws[1]]["score"]
        k = rows[full]["runs"][run]["train_positions"] / np.mean([rows[d]["runs"][run]["train_positions"] for d in draws])
        reliability[run] = spearman_brown(r, k)
        runs.append({"run": run, "draws agree": r, "with an exact probe, if noise only": np.sqrt(r),
                     f"draws with {largest}": np.mean([rows[d]["runs"][run]["agreement"][largest]["score"] for d in draws]),
                     f"reliability at {full} (stepped up x{k:.2f})": reliability[run],
                     f"{full} with an exact probe, if noise only": np.sqrt(reliability[run]),
                     f"{full} with {largest}": rows[full]["runs"][run]["agreement"][largest]["score"]})
    pairs = []
    for p, big in zip(rows[full]["pairs"], rows[largest]["pairs"]):
        ceiling = np.sqrt(reliability[p["a"]] * reliability[p["b"]])
        pairs.append({"pair": f"{p['a']} vs {p['b']}", f"r at {full}": p["r_score"]["r"], "noise ceiling": ceiling,
                      "r corrected for noise": p["r_score"]["r"] / ceiling, f"r at {largest}": big["r_score"]["r"]})
    return {"runs": pd.DataFrame(runs).set_index("run"), "pairs": pd.DataFrame(pairs).set_index("pair")}


def optimum_benchmark(folder: Path | None = None) -> dict[str, pd.DataFrame]:
    """The committed measurements of `studies/probe/optimum_experiments.py` (one file per experiment in `folder`):
    per experiment and recipe (`recipes`): the run, its training positions, minutes, held-out loss per tower head and the certificate
    (each token's predicted count against its count on the training positions: median and largest
    relative gap; the preconditioned gradient's norm); and the agreement of every two recipes' scores
    (`agreement`); empty when nothing was measured (`python -m studies.probe.optimum_experiments --out
    results/probe/optimum/NAME.json` measures)."""
    import pandas as pd

    folder = folder or RESULTS / "optimum"
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        return {}
    recipes, agreement, shown = [], [], set()
    for path in files:
        found = read_json(path)
        for r in found["rows"]:
            row = {"experiment": path.stem, "recipe": r["recipe"], "run": found["run"],
                   "training positions": found.get("train_positions", "the profile's"), "minutes": r["minutes"]}
            for j, (held, cert) in enumerate(zip(r["heldout_loss"], r["certificate"])):   # a row per tower: ten columns
                recipes.append(row | {"tower": j, "held-out loss": held, "count gap median": cert["bias_residual_median"],
                                      "count gap largest": cert["bias_residual_max"],
                                      "gradient norm": round(cert["grad_norm"], 3)})
            for other, rs in r["agreement"].items():
                if (path.stem, frozenset((r["recipe"], other))) not in shown:      # each pair once
                    shown.add((path.stem, frozenset((r["recipe"], other))))
                    agreement.append({"experiment": path.stem, "a": r["recipe"], "b": other,
                                      **{f"r ({VARIANTS[c]})": v for c, v in rs.items()}})
    agreement = pd.DataFrame(agreement).set_index(["experiment", "a", "b"])
    return {"recipes": pd.DataFrame(recipes).set_index(["experiment", "recipe", "tower"]), "agreement": agreement,
            "counterparts": agreement[[_counterparts(a, b) for _, a, b in agreement.index]]}


def _counterparts(a: str, b: str) -> bool:
    """Whether recipes `a` and `b` differ in one thing only: where they start (AdamW on the features as
    they are or whitened: `adam...` / `adam-whiten...`, after the same further steps) or which half of
    the positions they train on (`half1:` / `half2:`): the pairs whose agreement says whether the start,
    or the data, decide the scores."""
    (pa, _, ra), (pb, _, rb) = a.rpartition(":"), b.rpartition(":")
    if pa != pb:
        return bool(pa and pb) and ra == rb
    return ra != rb and ra.replace("adam-whiten", "adam", 1) == rb.replace("adam-whiten", "adam", 1)


def probe_precision(path: Path | None = None) -> dict[str, pd.DataFrame] | str:
    """The committed comparison of the probe's dtypes on the same runs (`studies/probe/precision.py`): the
    runs' pair r per dtype with its interval (`pairs`), and per run the agreement of each two dtypes' scores
    (`agreement`); or how to produce it."""
    import pandas as pd

    path = path or RESULTS / "precision.json"
    if not path.exists():
        return "not measured yet: python -m studies.probe.precision --runs-dir DIR"
    found = read_json(path)
    a, b = found["runs"]
    pairs = pd.DataFrame([{"dtype": name, "a": a, "b": b, "r": p["r"], "95% CI low": p["ci"][0], "95% CI high": p["ci"][1]}
                          for name, p in found["pair"].items()]).set_index("dtype")
    agreement = pd.DataFrame([{"run": run, "dtypes": k, f"r over the top {found['top_n']} tokens": v}
                              for run, rec in found["per_run"].items() for k, v in rec["agreement"].items()])
    return {"pairs": pairs, "agreement": agreement.set_index(["run", "dtypes"])}


def probe_benchmark(path: Path | None = None) -> str:
    """The committed output of `benchmarks/bench_probe.py` (the earlier and the current probe timed
    side by side on the same runs), or how to produce it."""
    path = path or RESULTS / "bench_probe.log"
    return path.read_text() if path.exists() else "not measured yet: python benchmarks/bench_probe.py > results/probe/bench_probe.log"


def _html(table) -> str:
    """A table as the appendix shows it, or the sentence that stands where a study was not measured."""
    from twotower_lib.book.tables import reader_html

    return f"<p><em>{table}</em></p>" if isinstance(table, str) else reader_html(table)


def book_parts() -> dict[str, str]:
    """The appendix notebook's tables, by name (`PROBE_*`), as reader HTML."""
    optimum, recipes = optimum_benchmark(), recipe_comparison()
    positions, noise, dtypes = training_positions(), probe_data_noise(), probe_precision()
    absent = {"recipes": "not measured yet: python -m studies.probe.optimum_experiments --out results/probe/optimum/NAME.json",
              "runs": "not measured yet: python -m studies.probe.compare_recipes"}
    return {
        "PROBE_RELIABILITY": _html(reliability_benchmark()),
        "PROBE_REPLICATE_SCHEDULE": replicate_schedule(),
        "PROBE_CHANGE": _html(probe_change()),
        "PROBE_WHITENING": _html(reliability_benchmark(RESULTS / "whitening.json")),
        "PROBE_OPTIMUM_RECIPES": _html(optimum.get("recipes", absent["recipes"])),
        "PROBE_OPTIMUM_COUNTERPARTS": _html(optimum.get("counterparts", "")),
        "PROBE_OPTIMUM_AGREEMENT": _html(optimum.get("agreement", "")),
        "PROBE_DEFINED": _html(probe_change(RESULTS / "defined_cases.json")),
        "PROBE_DEFINED_PAIRS": _html(probe_change(RESULTS / "defined_cases.json", between_runs=True)),
        "PROBE_800K_PAIRS": _html(probe_change(RESULTS / "positions_800k_cases.json", between_runs=True)),
        "PROBE_POSITIONS_PAIRS": _html(positions["pairs"] if isinstance(positions, dict) else positions),
        "PROBE_POSITIONS_RUNS": _html(positions["runs"] if isinstance(positions, dict) else positions),
        "PROBE_POSITIONS_AGREEMENT": _html(positions["agreement"] if isinstance(positions, dict) else positions),
        "PROBE_NOISE_RUNS": _html(noise["runs"]),
        "PROBE_NOISE_PAIRS": _html(noise["pairs"]),
        "PROBE_LARGEST_PAIRS": _html(training_positions(RESULTS / "positions_largest.json")["pairs"]),
        "PROBE_RECIPES_RUNS": _html(recipes.get("runs", absent["runs"])),
        "PROBE_RECIPES_PAIRS": _html(recipes.get("pairs", "")),
        "PROBE_RECIPES_ACROSS": _html(recipes.get("across_recipes", "")),
        "PROBE_PRECISION_PAIRS": _html(dtypes["pairs"] if isinstance(dtypes, dict) else dtypes),
        "PROBE_PRECISION_RUNS": _html(dtypes["agreement"] if isinstance(dtypes, dict) else ""),
        "PROBE_BENCHMARK": "<pre>" + __import__("html").escape(probe_benchmark()) + "</pre>"}


def write_book(results: Path = RESULTS) -> Path:
    """The appendix's tables into `results/probe/book.json`, from every committed measurement under `results`."""
    from twotower_lib.book import study_parts

    inputs = [p for p in sorted(results.rglob("*")) if p.is_file() and p.name not in (study_parts.FILE, "README.md")]
    return study_parts.write(results, book_parts(), {}, inputs, "python -m studies.probe book")
