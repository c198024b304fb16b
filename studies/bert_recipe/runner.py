"""Pilot BERT training recipes on one seed and measure what each buys in context learned.

`python -m studies.bert_recipe` trains the profile's Bert-large (the `cpu` profile: 2 x 128, its token
budget and data) once per recipe of `RECIPES`, each a set of `TrainConfig` changes from the profile's own
training, and measures every finished run the same way: the cooperative validation loss over every
validation block with 15% of the positions [MASK] (the events the probe scores), against the loss of the
corpus's word frequencies (`PreparedData.unigram_loss`). The difference, "beyond word frequencies", is what
the run learned from context; `paper.CONTEXT_GATE` is the least a run needs for a verdict.

Runs resume (one thread each, `--threads`), land under `runs/<profile>/bert_recipe/<recipe>/`, and the
report goes to `results/bert_recipe/<profile>.csv` with `<profile>.json` (each recipe's full training
configuration, the data hash and the code and package versions).
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd

from twotower_lib.artifacts import atomic_write_json, provenance, read_json
from twotower_lib.book.profiles import Profile, get_profile, profile_dir
from twotower_lib.errors import UserError

RESULTS = Path(__file__).resolve().parents[2] / "results" / "bert_recipe"

# Where every recipe starts: the profile's training as it was before the pilots chose `LEARNING_BERT` (post-LN
# layers, the position table, BERT's 15% with 80/10/10, the profile's 32 sequences a step), so a recipe reads the same
# whatever the profile trains now.
START = {"norm_scheme": "post", "position": "absolute", "mask_rate": 0.15, "mask_style": "corrupt", "micro_batch": 32}
# Each recipe changes that training one lever at a time from the one before it, so the table reads which lever
# bought what. Token budgets stay the profile's unless a recipe names its own.
RECIPES: dict[str, dict] = {
    "baseline": {},                                                         # START: post-LN, 15%, 80/10/10
    "pre-ln": {"norm_scheme": "pre"},
    "pre-ln+mask40": {"norm_scheme": "pre", "mask_rate": 0.4, "mask_style": "mask"},
    "pre-ln+mask40+steps": {"norm_scheme": "pre", "mask_rate": 0.4, "mask_style": "mask", "micro_batch": 8},
    "pre-ln+mask40+steps+clip": {"norm_scheme": "pre", "mask_rate": 0.4, "mask_style": "mask", "micro_batch": 8,
                                 "grad_clip": 0.5, "warmup_fraction": 0.1},
    "post-ln+mask40+steps": {"mask_rate": 0.4, "mask_style": "mask", "micro_batch": 8},
    "pre-ln+mask40+steps+lr3e-3": {"norm_scheme": "pre", "mask_rate": 0.4, "mask_style": "mask", "micro_batch": 8,
                                   "lr": 0.003},
    "pre-ln+mask40+steps+lr3e-4": {"norm_scheme": "pre", "mask_rate": 0.4, "mask_style": "mask", "micro_batch": 8,
                                   "lr": 0.0003},
    "pre-ln+mask40+steps+lr5e-4": {"norm_scheme": "pre", "mask_rate": 0.4, "mask_style": "mask", "micro_batch": 8,
                                   "lr": 0.0005},
    "pre-ln+mask40+steps+6M": {"norm_scheme": "pre", "mask_rate": 0.4, "mask_style": "mask", "micro_batch": 8,
                               "tokens": 6_000_000},
    # Where attention learns word order: with no position at all (a bag of words) the towers learn as much as with
    # the learned table, so they use no order; a learned bias per head and distance, begun local, gives them order.
    "pre-ln+mask40+steps+no-position": {"norm_scheme": "pre", "mask_rate": 0.4, "mask_style": "mask", "micro_batch": 8,
                                        "position": "none"},
    "pre-ln+mask40+steps+relative": {"norm_scheme": "pre", "mask_rate": 0.4, "mask_style": "mask", "micro_batch": 8,
                                     "position": "relative"},
}


def recipe_config(profile: Profile, model: str, seed: int, data: Path, changes: dict):
    """The profile's training configuration of `model` from `START` with a recipe's `changes`; a changed micro-batch
    keeps the token budget (more, smaller steps), and `tokens` sets another budget."""
    from twotower_lib.train.config import TrainConfig

    base = profile.train_config(model, seed, data)
    changes = {**START, **changes}
    tokens = changes.pop("tokens", profile.tokens_for(model))
    micro = changes.get("micro_batch", base.micro_batch)
    steps = TrainConfig.steps_for(tokens, micro, profile.data.seq_len, base.grad_accum, base.world_size)
    return replace(base, max_steps=steps, eval_every_steps=10 * max(1, steps // 100), **changes).validate()


def context_learned(run_dir: Path, data) -> dict:
    """The run's cooperative loss with 15% of every validation block [MASK] (fixed masks), the word-frequency loss
    of the same text, and their difference in nats: the ladder's measurement (`studies.ladder.runner`)."""
    from studies.ladder.runner import context_learned as measured

    found = measured(run_dir, data)
    return {k: found[k] for k in ("cooperative_loss", "word_frequency_loss", "beyond_word_frequencies")}


def run_pilots(profile: Profile, recipes: list[str], model: str, seed: int, threads: int) -> list[dict]:
    """Train every recipe not yet finished (resuming), then measure each; one row per recipe."""
    from twotower_lib.data import load_prepared
    from twotower_lib.data.prepare import prepare_data
    from twotower_lib.train.loop import train_job
    from twotower_lib.workers import run_jobs

    root = profile_dir(profile.name)
    data_dir = root / "data" / "prepared"
    prepare_data(profile.data_config(), out=data_dir)
    configs = {r: recipe_config(profile, model, seed, data_dir, RECIPES[r]) for r in recipes}
    out = {r: root / "bert_recipe" / f"{model}-{r}-s{seed}" for r in recipes}
    jobs = [{"tcfg": configs[r], "data_path": str(data_dir), "out": str(out[r])} for r in recipes
            if not (out[r] / "model.safetensors").exists()]
    run_jobs(train_job, jobs, threads, "BERT recipe pilots", label=lambda j: Path(j["out"]).name)
    data = load_prepared(data_dir)
    rows = []
    for r in recipes:
        manifest = read_json(out[r] / "manifest.json")
        rows.append({"recipe": r, "model": model, "preset": configs[r].preset, "seed": seed,
                     "norm_scheme": configs[r].norm_scheme, "position": configs[r].position,
                     "mask_rate": configs[r].mask_rate,
                     "mask_style": configs[r].mask_style, "micro_batch": configs[r].micro_batch,
                     "steps": configs[r].max_steps, "tokens": manifest.get("tokens_seen"),
                     "warmup_fraction": configs[r].warmup_fraction, "grad_clip": configs[r].grad_clip,
                     "lr": configs[r].lr, "train_minutes": round(manifest["wall_time_s"] / 60, 2),
                     "threads": manifest.get("torch_threads"),
                     **context_learned(out[r], data)})
    return rows


def write_report(profile: Profile, rows: list[dict], seconds: float, command: str, results: Path = RESULTS) -> Path:
    """`<profile>.csv` (one row per recipe), merged with the rows already there; `<profile>.json` the provenance."""
    from twotower_lib.data import load_prepared

    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{profile.name}.csv"
    # rows written before the `position` field were of the position table
    old = {r["recipe"]: {"position": "absolute", **r} for r in csv.DictReader(path.open())} if path.exists() else {}
    merged = old | {r["recipe"]: r for r in rows}
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(merged[r] for r in [*RECIPES, *sorted(set(merged) - set(RECIPES))] if r in merged)
    data = load_prepared(profile_dir(profile.name) / "data" / "prepared")
    atomic_write_json(results / f"{profile.name}.json", provenance(
        command=command, profile=profile.name, data_hash=data.data_hash, seconds=round(seconds, 1),
        start=START, recipes={r: RECIPES[r] for r in merged if r in RECIPES},
        base_train=asdict(profile.train_config(rows[0]["model"], int(rows[0]["seed"]),   # a path of no machine
                                               Path("runs") / profile.name / "data" / "prepared"))))
    return path


def cli(argv: list[str] | None = None) -> int:
    import sys

    p = argparse.ArgumentParser(prog="python -m studies.bert_recipe", description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="cpu")
    p.add_argument("--model", default="bert-large", help="the profile's BERT model the recipes train")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--recipes", default=",".join(RECIPES), help=f"any of {', '.join(RECIPES)}")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per run, as many side by side as the cores allow")
    p.add_argument("--report-only", action="store_true", help="write the book's parts from the committed pilots")
    args = p.parse_args(argv)
    try:
        profile = get_profile(args.profile)
        recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
        unknown = sorted(set(recipes) - set(RECIPES))
        if unknown or not recipes:
            raise UserError(f"--recipes: unknown {unknown}; choose among {', '.join(RECIPES)}")
        if profile.models.get(args.model) is None or profile.models[args.model].model_type != "bert":
            raise UserError(f"--model {args.model!r} is not a BERT model of profile {profile.name!r}")
        if args.report_only:
            print(f"BERT recipe book parts -> {write_book(profile=profile.name)}")
            return 0
        t0 = time.time()
        rows = run_pilots(profile, recipes, args.model, args.seed, args.threads)
        path = write_report(profile, rows, time.time() - t0, "python -m studies.bert_recipe " + " ".join(argv or sys.argv[1:]))
        for r in rows:
            print(f"{r['recipe']:28s} {r['beyond_word_frequencies']:+.3f} nats beyond word frequencies "
                  f"({r['cooperative_loss']:.3f} against {r['word_frequency_loss']:.3f}; {r['train_minutes']} min)")
        print(f"BERT recipe pilots -> {path}; book parts -> {write_book(profile=profile.name)}")
        return 0
    except UserError as e:
        print(f"error: {e}")
        return 1


# ---------------------------------------------------------------------- what the book reads
COLUMNS = {"recipe": "recipe", "norm_scheme": "layers", "position": "word order", "mask_rate": "mask rate",
           "mask_style": "masking",
           "micro_batch": "micro-batch", "steps": "steps", "tokens": "tokens", "lr": "peak lr",
           "grad_clip": "clip", "beyond_word_frequencies": "beyond word frequencies (nats)",
           "train_minutes": "minutes (threads)"}


def book_parts(pilots: pd.DataFrame, profile: str) -> dict[str, str]:
    """`BERT_RECIPE`: every pilot of `profile` (`<profile>.csv`) as a table with its gain over `baseline` (post-LN,
    BERT's masking, the position table), and a generated sentence: the pilots against `paper.CONTEXT_GATE`."""
    from twotower_lib import paper
    from twotower_lib.book.paper_tables import tokens_label
    from twotower_lib.book.tables import breakable, full_width, markdown_table

    base = float(pilots.loc[pilots["recipe"] == "baseline", "beyond_word_frequencies"].iloc[0])
    t = pilots[list(COLUMNS)].rename(columns=COLUMNS).assign(**{"gain over baseline (nats)": (
        pilots["beyond_word_frequencies"] - base).round(3)})
    t["recipe"], t["tokens"] = t["recipe"].map(breakable), t["tokens"].map(tokens_label)   # a narrow table: no scrolling
    t["minutes (threads)"] = [f"{m:g} ({n})" for m, n in zip(pilots["train_minutes"], pilots["threads"])]
    for column in ("peak lr", "clip"):    # none given: the DeepSpeed config's
        t[column] = [("—" if pd.isna(v) else f"{v:g}") for v in t[column]]
    best = pilots.loc[pilots["beyond_word_frequencies"].idxmax()]
    passed = pilots[pilots["beyond_word_frequencies"] >= paper.CONTEXT_GATE]
    sentence = (f"At profile `{profile}` (one seed of its Bert-large), `baseline` (post-LN layers, BERT's masking, the "
                "position table) learns "
                f"{base:.2f} nats beyond word frequencies; the best pilot, `{best['recipe']}`, "
                f"{best['beyond_word_frequencies']:.2f} in {best['train_minutes']:.1f} minutes. "
                + (f"{len(passed)} of {len(pilots)} pilots pass the context gate ({paper.CONTEXT_GATE:g} nats): "
                   + ", ".join(f"`{r}`" for r in passed["recipe"]) + "."
                   if len(passed) else f"None of the {len(pilots)} pilots reaches the context gate "
                   f"({paper.CONTEXT_GATE:g} nats): at this size and budget no BERT verdict can be given, and the "
                   "profile keeps its recipe."))
    return {f"BERT_RECIPE@{profile}": full_width(markdown_table(t.columns, t.itertuples(index=False)))   # 13 columns
            + "\nA peak lr or clip of — is the DeepSpeed config's. " + sentence + "\n"}


def write_book(results: Path = RESULTS, profile: str = "cpu") -> Path:
    """`results/bert_recipe/book.json` from the committed pilots of `profile`."""
    from twotower_lib.book import study_parts

    path = results / f"{profile}.csv"
    return study_parts.write(results, book_parts(pd.read_csv(path), profile), {}, [path],
                             "python -m studies.bert_recipe --report-only")
