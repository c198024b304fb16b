"""Train and probe the size ladder, one run at a time, and export each probe to `results/ladder/probes/`.

`python -m studies.ladder` trains four seeds (`--seeds`) of each tower family (GPT, BERT, ELMo) at
each rung of `RUNGS` for exactly one epoch of one corpus (the Brown corpus: no text is seen twice; a register
rung, another source of the default corpus alone),
probes each run with the default profile's probe, and probes its towers at 0 tokens (the untrained
control of that rung). Work goes rung by rung from the smallest, family by family, seed by seed, so
an interrupted ladder leaves whole rungs behind it. A passes rung (`--rungs 1x96x8`) trains one family
at a size rung's preset for several passes over the same epoch: the token axis for a family that learns
no context in one.

Each finished probe is exported at once as a small JSON file (`export`): the scores of the
`EXPORT_TOKENS` most frequent tokens, the towers' mean probabilities and the per-document sums behind
them (for the margin's document bootstrap), the run's configuration, seed, data hash, code and
package versions. Those files are what the report reads, and they are committed: a later session on a
new checkout skips every (rung, family, seed) whose exports exist and were probed with today's probe
(`report.is_current`), so the ladder resumes across sessions, not only within one (the training folders under
`runs/ladder/` resume within one).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

from twotower_lib.artifacts import atomic_write_json, atomic_write_text, provenance, read_json
from twotower_lib.book.profiles import profile_dir
from twotower_lib.data.config import DataConfig
from twotower_lib.errors import UserError
from twotower_lib.run_names import case_name
from studies.ladder.report import EXPORTS, RESULTS, TOP_N, is_current, reference_name, write_report
from studies.ladder.rungs import CORPUS, FAMILIES, MIXED, RUNGS, SEEDS, THINNED, corpus_of, passes, probe_config, size_rung, size_rungs

KINDS = ("case", "untrained")
MICRO_BATCH = 32
EXPORT_TOKENS = 1200                    # scores exported per probe: the most frequent tokens scored in every run


def data_dir(root: Path, corpus: str = CORPUS) -> Path:
    """The prepared data of one corpus source (a registry part; its training split is one epoch)."""
    return root / "data" / ("prepared" if corpus == CORPUS else f"prepared-{corpus}")


def run_dir(root: Path, rung: str, family: str, seed: int) -> Path:
    return root / rung / "training" / case_name(family, seed)


def export_path(rung: str, family: str, seed: int, kind: str, results: Path = RESULTS) -> Path:
    return results / EXPORTS / rung / f"{case_name(family, seed)}{'' if kind == 'case' else '-' + kind}.json"


def epoch_tokens(data) -> int:
    """Tokens of one epoch in whole micro-batches: the training split's blocks, rounded down to a micro-batch,
    so that no block is read twice."""
    per_batch = MICRO_BATCH * data.seq_len
    return (data.train.size // per_batch) * per_batch


def preset_of(rung: str) -> str:
    return RUNGS[rung].preset


def rung_families(rung: str, families: list[str]) -> list[str]:
    """The families a rung trains: the one of a rung that has one, else every one asked for."""
    own = RUNGS[rung].family
    return [f for f in families if f == own] if own else families


def train_config(rung: str, family: str, seed: int, data_path: Path, data):
    """One epoch at `MICRO_BATCH`: on the CPU rungs fp32 through the default engine; on the GPU rungs bf16
    through the torch engine (eager: a run of a few hundred steps is over before whole-model compilation,
    about a minute at Table 1 sizes (results/gpu/levers/whole.json), would pay for itself)."""
    from twotower_lib.train.config import TrainConfig

    r = RUNGS[rung]
    micro, tokens = micro_batch(rung), epoch_tokens(data) * passes(rung)
    steps = TrainConfig.steps_for(tokens, micro, data.seq_len)
    device = {"precision": "bf16", "engine": "torch"} if r.gpu else {"precision": "fp32"}
    return TrainConfig.for_tokens(family, preset_of(rung), seed, tokens, micro, data.seq_len,
                                  eval_every_steps=10 * max(1, steps // 100), data=str(data_path), budget_s=r.budget_s,
                                  **device, **dict(r.recipe))


def micro_batch(rung: str) -> int:
    return RUNGS[rung].micro_batch or MICRO_BATCH if rung in RUNGS else MICRO_BATCH


def context_learned(run: Path, data) -> dict:
    """`paper.CONTEXT_RULE` for one trained run, before anything is probed: its cooperative loss over every validation
    block with 15% of the positions [MASK] (fp32, on the GPU where there is one), against the word-frequency loss."""
    import torch

    from twotower_lib.models import load_model
    from twotower_lib.paper import learned_context
    from twotower_lib.train.batches import evaluate
    from twotower_lib.train.config import TrainConfig

    model, _ = load_model(run)
    model = model.to("cuda" if torch.cuda.is_available() else "cpu")
    tcfg = TrainConfig(**{**read_json(run / "config.json")["train"], "eval_blocks": len(data.valid)})
    loss, unigram = evaluate(model, data, tcfg, batch_size=64, autocast=False), data.unigram_loss()
    manifest = read_json(run / "manifest.json")
    return {"cooperative_loss": round(loss, 4), "word_frequency_loss": round(unigram, 4),
            "beyond_word_frequencies": round(unigram - loss, 4), "learned_context": learned_context(loss, unigram),
            "tokens": manifest.get("tokens_seen"), "steps": manifest.get("steps"),
            "train_minutes": round(manifest.get("wall_time_s", 0) / 60, 2)}


def export(probe_path: Path, out: Path, rung: str, family: str, seed: int, kind: str, data, tcfg,
           tokens: int | None = None) -> None:
    """Write one probe's export: the scores of its `EXPORT_TOKENS` most frequent scored tokens (the report
    compares two runs on the most frequent tokens both scored), the towers' mean p, per-document sums, provenance."""
    from twotower_lib.analysis.correlation import scored_top_tokens
    from twotower_lib.preference import load_artifact

    art = load_artifact(probe_path)
    table = art.table                                   # row i is token i
    top_ids = scored_top_tokens({"run": table}, data.counts, EXPORT_TOKENS, "score")
    docs = art.doc_stats.groupby("doc_id")[["n", "sum_p1", "sum_p2"]].sum()
    o = art.manifest["ordering"]
    write_export(out, {
        "rung": rung, "family": family, "seed": seed, "kind": kind, "preset": preset_of(rung), "corpus": corpus_of(rung),
        "tower_parameters": tower_parameters(rung, family, data),
        "train": {"tokens": tokens or epoch_tokens(data) * passes(rung), "passes": passes(rung), "steps": tcfg.max_steps,
                  "micro_batch": micro_batch(rung), "snapshot": 0 if kind == "untrained" else "final",
                  **({"recipe": dict(RUNGS[rung].recipe), "budget_s": RUNGS[rung].budget_s} if RUNGS[rung].recipe else {})},
        "val_loss": art.manifest.get("val_loss", {}),
        "ordering": {"primary_tower": o["primary_tower"], "mean_p": o["mean_p"], "mean_logp": o["mean_logp"]},
        "doc_sums": {"n": docs["n"].astype(int).tolist(), "sum_p1": [float(f"{v:.7g}") for v in docs["sum_p1"]],
                     "sum_p2": [float(f"{v:.7g}") for v in docs["sum_p2"]]},
        "token_ids": top_ids.tolist(),
        "score": [float(f"{v:.5g}") for v in table["score"].to_numpy()[top_ids]],
        "score_logmean": [float(f"{v:.5g}") for v in table["score_logmean"].to_numpy()[top_ids]],
        "text_reliability": text_reliability(art, top_ids),
        "data_hash": data.data_hash, "probe_config": asdict(probe_config(rung)),
        "probe_minutes": round(art.manifest.get("seconds", {}).get("total", 0) / 60, 2),
        "provenance": provenance()})


def text_reliability(art, token_ids) -> dict:
    """The run's split-half reliability over the report's `TOP_N` most frequent of its exported tokens
    (`uncertainty.split_half_reliability`): a pair's validation-text ceiling is sqrt(rel_a * rel_b)."""
    import numpy as np

    from twotower_lib.analysis.uncertainty import RELIABILITY_SPLITS, split_half_or_nan

    ids = np.asarray(token_ids)[:TOP_N]
    value = split_half_or_nan(art.doc_stats, ids)                # NaN: too few documents to split, not measured
    if np.isnan(value):
        return {"value": None, "tokens": len(ids), "splits": 0}
    return {"value": round(value, 4), "tokens": len(ids), "splits": RELIABILITY_SPLITS}


def add_reliability(root: Path, results: Path) -> int:
    """Give each export made before exports carried their text reliability that reliability, computed from its
    probe's artifact where this machine still has it (`runs/ladder/<rung>/probing/`); returns how many."""
    from twotower_lib.preference import load_artifact

    done = 0
    for path in sorted((results / EXPORTS).glob("*/*.json")):
        e = read_json(path)
        probe = root / e["rung"] / "probing" / e["kind"] / case_name(e["family"], e["seed"])
        if "text_reliability" in e or not (probe / "manifest.json").exists():
            continue
        write_export(path, e | {"text_reliability": text_reliability(load_artifact(probe), e["token_ids"])})
        done += 1
    return done


def copy_untrained(rung: str, family: str, seed: int, results: Path, data, tcfg) -> bool:
    """Give a passes rung its size rung's untrained export, when that one was probed as both rungs probe today: the
    towers are the same (`rungs.size_rung`), so probing them again measures nothing new. The copy names its source
    (`same_towers_as`) and keeps its provenance; its run record is this rung's. Returns whether it copied."""
    base = size_rung(rung)
    source = export_path(base, family, seed, "untrained", results)
    if base == rung or probe_config(base) != probe_config(rung) or not source.exists():
        return False
    e = read_json(source)
    if not is_current(e) or e["data_hash"] != data.data_hash:
        return False
    train = e["train"] | {"tokens": epoch_tokens(data) * passes(rung), "passes": passes(rung), "steps": tcfg.max_steps}
    write_export(export_path(rung, family, seed, "untrained", results),
                 e | {"rung": rung, "train": train, "same_towers_as": f"{base}/{source.name}"})
    print(f"ladder: {rung} {case_name(family, seed)}'s untrained towers are {base}'s: export copied", flush=True)
    return True


def write_export(path: Path, record: dict) -> None:
    """One export as compact JSON (its lists on one line each: about 25 kB a probe)."""
    import json

    atomic_write_text(path, json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")


def tower_parameters(rung: str, family: str, data) -> int:
    """Parameters of one tower at this rung (the shared embedding and decoder excluded)."""
    from twotower_lib.models import build_model
    from twotower_lib.models.config import preset

    model = build_model(preset(preset_of(rung), family, towers=1, vocab_size=data.vocab_size, seq_len=data.seq_len))
    return int(sum(p.numel() for p in model.towers[0].parameters()))


def context_path(rung: str, family: str, seed: int, results: Path = RESULTS) -> Path:
    return results / "context" / rung / f"{case_name(family, seed)}.json"


def run_one(root: Path, rung: str, family: str, seed: int, results: Path, data, report: bool = True) -> bool:
    """Train (or resume) one run, probe it and its untrained towers, and export both; with `report`, rewrite the
    report after each export (a GPU call leaves that to the machine its exports are copied to). A rung with a recipe
    first measures the trained run's context (`context_learned`, written to `results/ladder/context/`): below the
    gate nothing is probed, and it returns False (the ladder then starts no further seed of that rung)."""
    from twotower_lib.probe.run import probe_run
    from twotower_lib.train.loop import train_job

    outs = {k: export_path(rung, family, seed, k, results) for k in KINDS}
    done = {k: p.exists() and is_current(read_json(p)) for k, p in outs.items()}   # another probe's: made again
    prepared = data_dir(root, corpus_of(rung))
    tcfg = train_config(rung, family, seed, prepared, data)
    if not done["untrained"]:
        done["untrained"] = copy_untrained(rung, family, seed, results, data, tcfg)
    if all(done.values()):
        return True
    run = run_dir(root, rung, family, seed)
    t0 = time.time()
    train_job(tcfg, str(prepared), str(run))
    print(f"ladder: trained {rung} {case_name(family, seed)} in {(time.time() - t0) / 60:.1f} min", flush=True)
    context = {}
    if RUNGS[rung].recipe:
        context = context_learned(run, data) | {"rung": rung, "family": family, "seed": seed, "data_hash": data.data_hash,
                                                "recipe": dict(RUNGS[rung].recipe), "provenance": provenance()}
        write_export(context_path(rung, family, seed, results), context)
        print(f"ladder: {rung} {case_name(family, seed)}: {context['beyond_word_frequencies']:+.3f} nats beyond word "
              f"frequencies after {context['tokens']:,} tokens ({context['steps']} steps): "
              + ("context learned, probing" if context["learned_context"] else "below the context gate, not probed"),
              flush=True)
        if not context["learned_context"]:
            return False
    for kind in KINDS:       # the size rung, run beside this one, may have probed the untrained towers meanwhile
        if done[kind] or (kind == "untrained" and copy_untrained(rung, family, seed, results, data, tcfg)):
            continue
        t0 = time.time()
        probe = probe_run(run, probe_config(rung), snapshot=0 if kind == "untrained" else None, data_dir=prepared,
                          out=root / rung / "probing" / kind / case_name(family, seed), show=False)
        export(probe, outs[kind], rung, family, seed, kind, data, tcfg,    # a budget's run: the tokens it read
               tokens=context["tokens"] if RUNGS[rung].budget_s and kind == "case" else None)
        if report:
            write_all(results)         # the committed report, book parts and README never lag the exports
        print(f"ladder: probed {rung} {case_name(family, seed)} ({kind}) in {(time.time() - t0) / 60:.1f} min",
              flush=True)
    if RUNGS[rung].gpu:     # a Table 1-size run's snapshots fill several GB; the device's disk holds 64 GB
        shutil.rmtree(run)
        shutil.rmtree(root / rung / "probing", ignore_errors=True)
    return True


def write_all(results: Path) -> None:
    """The ladder's report and, where it is the committed one, what reads it: the register study's verdict over
    seeds (`studies.register.report.write_book`) and the README's blocks."""
    write_report(results)
    if results == RESULTS:
        from studies.register.report import write_book
        from twotower_lib.book import front
        from twotower_lib.book.sections import PROJECT_ROOT

        write_book()
        front.update_readme(PROJECT_ROOT / "README.md")


def run_ladder(seeds: list[int], rungs: list[str], families: list[str], root: Path, results: Path,
               deadline: float | None = None, report: bool = True) -> None:
    """Every (rung, family, seed) in order, each resumed or skipped where its exports exist; with `deadline` (a
    `time.time()`), no run starts after it (a GPU call returns what finished)."""
    datasets = {corpus: prepared_corpus(root, results, corpus)
                for corpus in dict.fromkeys([CORPUS, *map(corpus_of, rungs)])}
    for rung in rungs:
        data = datasets[corpus_of(rung)]
        for family in rung_families(rung, families):
            for seed in seeds:
                if deadline is not None and time.time() > deadline:
                    print(f"ladder: deadline reached before {rung} {case_name(family, seed)}", flush=True)
                    return
                check_data(rung, family, seed, data, results)
                if not run_one(root, rung, family, seed, results, data, report):
                    print(f"ladder: {rung} {case_name(family, seed)} did not learn context: no further seed of "
                          f"{rung} {family}", flush=True)
                    break


def prepared_corpus(root: Path, results: Path, corpus: str):
    """One corpus source prepared (once) and loaded, its hash and word-frequency loss recorded in the results
    (`report.reference_name`; rewritten only when they change: no churn)."""
    from twotower_lib.data import load_prepared
    from twotower_lib.data.prepare import prepare_data

    if corpus == THINNED:
        thin(prepared_corpus(root, results, MIXED), data_dir(root, THINNED), prepared_corpus(root, results, CORPUS))
    else:
        prepare_data(DataConfig(corpus="registry" if corpus == MIXED else f"registry:{corpus}"),
                     out=data_dir(root, corpus))
    data = load_prepared(data_dir(root, corpus))
    reference = {"data_hash": data.data_hash, "unigram_loss": data.unigram_loss()}
    path = results / reference_name(corpus)
    if not path.exists() or {k: read_json(path).get(k) for k in reference} != reference:
        atomic_write_json(path, reference | {"provenance": provenance()})
    return data


def thin(mixed, out: Path, brown) -> None:
    """The mixed corpus's prepared data with its training split thinned to Brown's number of training blocks: block
    i kept where floor((i + 1) f) > floor(i f), f = Brown's blocks / the mixture's, so every source keeps its share
    of the tokens and each kept block is a whole training sequence. The tokenizer, the validation split and the
    documents are the mixture's; the token counts are the kept blocks'. Written once (atomically); its manifest
    names its source and the rule (`thinned`)."""
    import numpy as np

    from twotower_lib.artifacts import atomic_directory, manifest_has, sha256_file, sha256_json
    from twotower_lib.data.blocks import MANIFEST

    m = mixed.manifest
    n, target = len(mixed.train), len(brown.train)
    done = read_json(out / MANIFEST).get("thinned", {}) if (out / MANIFEST).exists() else {}
    if (done.get("from"), done.get("blocks")) == (mixed.data_hash, target):
        return
    if target >= n:
        raise UserError(f"cannot thin the mixed corpus ({n} training blocks) to Brown's {target}: it is not larger")
    i = np.arange(n)
    keep = np.floor((i + 1) * target / n) > np.floor(i * target / n)
    with atomic_directory(out, manifest_has("thinned"), "thinned prepared data") as tmp:
        for name in ("tokenizer", "valid_ids.npy", "valid_docs.npy", "documents.jsonl.gz"):
            src = mixed.path / name
            (shutil.copytree if src.is_dir() else shutil.copyfile)(src, tmp / name)
        train = np.ascontiguousarray(mixed.train[keep])
        np.save(tmp / "train_ids.npy", train, allow_pickle=False)
        np.save(tmp / "train_docs.npy", np.ascontiguousarray(mixed.train_doc_ids[keep]), allow_pickle=False)
        np.save(tmp / "counts.npy", np.bincount(train.ravel(), minlength=len(mixed.counts)).astype(np.int64),
                allow_pickle=False)
        files = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*"))
                 if p.is_file() and not p.name.startswith(".")}
        thinned = {"from": mixed.data_hash, "blocks": int(keep.sum()), "of": n, "to_match": brown.data_hash,
                   "rule": "block i kept where floor((i + 1) * blocks / of) > floor(i * blocks / of)"}
        atomic_write_json(tmp / MANIFEST, m | {
            "blocks": m["blocks"] | {"train": int(keep.sum())},
            "block_tokens": m["block_tokens"] | {"train": int(keep.sum()) * mixed.seq_len},
            "files": files, "thinned": thinned, "provenance": provenance(),
            "content_hash": sha256_json({"config": m["config"], "files": files, "thinned": thinned})})


def check_data(rung: str, family: str, seed: int, data, results: Path) -> None:
    """Every export of a rung comes from one prepared corpus: refuse to mix in another."""
    for kind in KINDS:
        p = export_path(rung, family, seed, kind, results)
        if p.exists() and read_json(p)["data_hash"] != data.data_hash:
            raise UserError(f"{p} was made from prepared data {read_json(p)['data_hash'][:12]}, but this corpus "
                            f"prepares to {data.data_hash[:12]}: the ladder compares runs of one corpus")


def seed_list(text: str) -> list[int]:
    """'4' -> [1, 2, 3, 4]; '3,4' -> [3, 4]."""
    try:
        numbers = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot read seeds {text!r}: write a count (4) or a list (3,4)") from None
    return list(range(1, numbers[0] + 1)) if "," not in text and numbers else numbers


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.ladder", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=seed_list, default=seed_list(str(SEEDS)),
                   help=f"N for seeds 1..N (default {SEEDS}), or a list such as 3,4 (to share a rung among processes)")
    p.add_argument("--rungs", default=None, help=f"in the order they are run, any of {', '.join(size_rungs(False))} "
                                                 f"(default: these) or a passes rung; with --gpu any of "
                                                 f"{', '.join(size_rungs(True))} (default: these) or a GPU passes rung "
                                                 f"(all: {', '.join(RUNGS)})")
    p.add_argument("--families", default=",".join(FAMILIES), help=f"any of {', '.join(FAMILIES)}")
    p.add_argument("--gpu", action="store_true",
                   help=f"the GPU rungs ({', '.join(size_rungs(True))}: Table 1's sizes) instead of the CPU ones; "
                        "needs CUDA")
    p.add_argument("--deadline", default=None, help="start no run after this long, e.g. 8m (a GPU call's limit)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (one: the ladder runs beside other work)")
    p.add_argument("--report-only", action="store_true", help="write the report from the committed exports")
    p.add_argument("--add-reliability", action="store_true",
                   help="give older exports their text reliability from this machine's probes, then the report")
    p.add_argument("--results", default=str(RESULTS))
    args = p.parse_args(argv)
    known = [name for name, r in RUNGS.items() if r.gpu == args.gpu]
    rungs = [r for r in (args.rungs or ",".join(size_rungs(args.gpu))).split(",") if r]
    families = [f for f in args.families.split(",") if f]
    try:
        bad = [r for r in rungs if r not in known] + [f for f in families if f not in FAMILIES]
        if bad:
            raise UserError(f"unknown rung or family {bad}; rungs {list(known)}, families {list(FAMILIES)}")
        if args.add_reliability:
            print(f"ladder: text reliability added to {add_reliability(profile_dir('ladder'), Path(args.results))} "
                  "exports", flush=True)
        elif not args.report_only:
            import torch

            from twotower_lib.train.config import parse_duration

            if args.gpu and not torch.cuda.is_available():
                raise UserError("--gpu: no CUDA device here; the GPU rungs train Table 1's sizes")
            torch.set_num_threads(args.threads)
            deadline = time.time() + parse_duration(args.deadline) if args.deadline else None
            run_ladder(args.seeds, rungs, families, profile_dir("ladder"), Path(args.results), deadline,
                       report=not args.gpu)
        if not args.gpu:              # the GPU machine has no charting library: the report is written where its
            write_all(Path(args.results))     # exports are copied to (`--report-only`)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
