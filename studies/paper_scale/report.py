"""The paper-scale page's parts (`book/paper_scale.md`): the GPU tests' committed logs, the throughput
bench and Table 2 at Table 1 sizes, read from `results/gpu/`, and the page's numbers (`numbers`);
`write_book` puts them in `results/gpu/book.json`, which the book reads.

    python -m studies.paper_scale book
"""

from __future__ import annotations

import re
from pathlib import Path

from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.probe.config import probe_label
from twotower_lib.artifacts import read_json
from twotower_lib.book.paper_tables import interval, number
from twotower_lib.book.tables import breakable, full_width

RESULTS = Path(__file__).resolve().parents[2] / "results" / "gpu"
INPUTS = ("bench_gpu.json", "bench_gpu_micro64.json", "paper_cases.json")
COMPILE_CPU = Path("compile") / "cpu.json"  # benchmarks/bench_compile.py on 2 CPU cores, beside results/gpu/


def tests_markdown(results: Path = RESULTS) -> str:
    """Per committed log of `pytest -m gpu`: tests passed, failed, and whether the session crashed."""
    rows = []
    for log in sorted(results.glob("gpu_tests_run*.log")):
        text = log.read_text()
        outcome = {w: len(re.findall(rf"::\S+ {w}", text)) for w in ("PASSED", "FAILED", "XFAIL")}
        crash = f"yes: {breakable(m.group(1))}" if (m := re.search(r"::(\S+) Fatal Python error: (?:.*)", text)) else "no"
        rows.append(f"| `{log.name}` | {outcome['PASSED']} | {outcome['FAILED']} | {outcome['XFAIL']} | {crash} |")
    if not rows:
        return "*No run of the GPU tests is committed.*\n"
    return "| Log | Passed | Failed | Expected failures | Crashed in |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n"


def gpu_name(device: str) -> str:
    """A device as a column label names it: "NVIDIA H100 80GB HBM3" as H100 (the whole name where no model is in it);
    the GPU-hours of one device are not another's."""
    found = re.search(r"\b[A-Z]\d{2,4}\b", device)
    return found.group(0) if found else device


def bench_markdown(path: Path = RESULTS / "bench_gpu.json", baseline: Path | None = RESULTS / "bench_gpu_micro64.json") -> str:
    """The throughput table of `benchmarks/bench_gpu.py`, with the utilisation at micro-batch 64 beside it."""
    if not path.is_file():
        return "*Not measured: run `python benchmarks/bench_gpu.py --out results/gpu/bench_gpu.json` on a GPU.*\n"
    bench = read_json(path)
    small = {}
    if baseline and baseline.is_file():
        small = {(r["model"], r["precision"]): r.get("mfu") for r in read_json(baseline)["rows"]}
    head = ("| Model | Precision | Parameters (M) | Sequences per step | Tokens/s | Model FLOPs utilisation | "
            "at 64 sequences | Peak memory (GiB) | Two-tower step ÷ two one-tower steps | "
            f"Paper budget, one {gpu_name(bench['device'])} (h) | six (h) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    rows = []
    for r in bench["rows"]:
        if "error" in r:
            rows.append(f"| {r['model']} | {r['precision']} | failed: {r['error']} |" + " |" * 8)
            continue
        at_64 = small.get((r["model"], r["precision"]))
        rows.append(f"| {r['model']} | {r['precision']} | {r['params_m']:.0f} | {r['micro_batch']} | "
                    f"{r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f}% | "
                    f"{'—' if at_64 is None else f'{100 * at_64:.1f}%'} | "
                    f"{r['peak_memory_gib']:.1f} | {r['two_vs_two_single']:.2f} | {r['paper_hours_1gpu']:.0f} | "
                    f"{r['paper_hours_6gpu']:.1f} |")
    tokens = bench["rows"][0].get("paper_tokens", 0)
    return (head + "\n".join(rows) + f"\n\n*{bench['device']}, driver {bench['driver']}, CUDA {bench['cuda']}, "
            f"torch {bench['packages'].get('torch')}, DeepSpeed {bench['packages'].get('deepspeed')}; dense peak "
            f"{bench['peak_flops'] / 1e12:.0f} TFLOP/s; paper budget {tokens / 1e9:.0f}B tokens per case (the `paper` "
            f"profile's); measured {bench['created'][:10]}.*\n")


# The throughput issue's goals: model FLOPs utilisation on one GPU at the paper's batch, bf16, through `train`.
MFU_GOALS = {"gpt": 0.45, "bert-large": 0.35, "bert-base": 0.25, "elmo": 0.50}


# benchmarks/gpu_throughput.sh's rounds, unpacked: the bench's (engines, levers) and the users' path (`train`)
ENGINE_FOLDERS = ("engines", "levers", "users-path")
ENGINE_DIRS = tuple(RESULTS / name for name in ENGINE_FOLDERS)


def bench_files(folders: tuple[Path, ...], kind: str = "rows") -> list[Path]:
    """The JSON files of `bench_gpu.py` in `folders`, in order: its timing rows (`kind="rows"`), or its loss
    comparisons (`kind="compared"`)."""
    return [f for folder in folders for f in sorted(folder.glob("*.json")) if kind in read_json(f)]


def engines_markdown(folders: tuple[Path, ...] = ENGINE_DIRS) -> str:
    """Every row of the engine benches in `folders` (`benchmarks/gpu_throughput.sh`: the paper's 3,840 sequences
    a step, each engine and its levers), the utilisation each model is to reach under them."""
    files = bench_files(folders)
    if not files:
        return "*Not measured: run `benchmarks/gpu_throughput.sh` on a GPU.*\n"
    head = ("| Model | Engine | Lever | Path | Tokens/s | Model FLOPs utilisation | Optimizer step | GPU busy | "
            f"Peak memory (GiB) | Paper budget, one {'/'.join(sorted({gpu_name(read_json(f)['device']) for f in files}))} "
            "(h) | File |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    names = [f.name for f in files]      # a file by its name, its folder too where two folders hold that name
    shown = {f: f.name if names.count(f.name) == 1 else f"{f.parent.name}/{f.name}" for f in files}
    rows = []
    for f in files:
        found = read_json(f)
        for r in found["rows"]:
            if "error" in r:
                rows.append(f"| {r['model']} | {r['engine']} | failed: {breakable(r['error'])} |" + " |" * 8)
                continue
            lever = breakable(", ".join(levers(r))) or "—"
            busy = r.get("profile", {}).get("device_busy")
            share = r.get("optimizer_step_s")           # None through `train`: the log times whole steps
            optimizer = "—" if share is None else f"{100 * share / r['step_s']:.1f}%"
            rows.append(f"| {r['model']} | {r['engine']} | {lever} | {path(r, found)} | {r['tokens_per_s']:,.0f} | "
                        f"{100 * r['mfu']:.1f}% | {optimizer} | "
                        f"{'—' if busy is None else f'{100 * busy:.0f}%'} | {r['peak_memory_gib']:.1f} | "
                        f"{r['paper_hours_1gpu']:.0f} | {breakable(shown[f])} |")
    first = read_json(files[0])
    days = sorted({read_json(f)["created"][:10] for f in files})
    goals = ", ".join(f"{model} {100 * goal:.0f}%" for model, goal in MFU_GOALS.items())
    return (head + "\n".join(rows) + f"\n\n*{first['device']}, driver {first['driver']}, CUDA {first['cuda']}, torch "
            f"{first['packages'].get('torch')}, DeepSpeed {first['packages'].get('deepspeed')}; "
            f"{first['rows'][0]['sequences_per_step']:,} sequences a step; dense peak {first['peak_flops'] / 1e12:.0f} "
            f"TFLOP/s; measured {' to '.join(dict.fromkeys((days[0], days[-1])))}; files in "
            f"{', '.join(sorted({f'`results/gpu/{f.parent.name}/`' for f in files}))}. The utilisation each model is "
            f"to reach: {goals}.*\n")


DEFAULT_MICRO_BATCH = {"elmo": 128}  # bench_gpu.py's micro-batches (others: 256)
BENCH_STEPS = 10                     # bench_gpu.py's timed steps where its command line names none


def path(row: dict, found: dict) -> str:
    """How a row was measured: through `train` (`benchmarks/bench_train_path.py`, its steps read from the run's
    log) or by the engine bench stepping the trainer's functions, and over how many timed steps."""
    if row.get("path") == "train":
        return f"`train`, {row['timed_steps']} steps"
    argv = found.get("argv") or []
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else BENCH_STEPS
    return f"bench, {steps} step{'s' * (steps != 1)}"


def levers(row: dict) -> list[str]:
    """What a bench row changed from the engine's defaults: model options, padded positions, a torch engine's
    weights cast once a step (rows without `casts` predate it: once a micro-batch), micro-batch."""
    out = [f"{k}={v}" for k, v in row["model_options"].items()]
    out += [f"label_bucket={row['label_bucket']}"] if row.get("label_bucket", 1) > 1 else []
    out += ["casts once a step"] if row.get("casts") == "once a step" and row["engine"] != "deepspeed" else []
    out += [f"micro-batch {row['micro_batch']}"] if row["micro_batch"] != DEFAULT_MICRO_BATCH.get(row["model"], 256) else []
    return out


def hours_markdown(folders: tuple[Path, ...] = ENGINE_DIRS) -> str:
    """GPU-hours of the paper profile's cases on one GPU at the rates of the engine benches in `folders`: per case
    the default engine's (DeepSpeed) and the fastest engine and lever measured (a projection from a few timed
    steps, not a run), and the sum over the profile's cases. A case measured through `train` (the users' path)
    takes its fastest rate from those rows: what a user's command gets."""
    from twotower_lib.book.profiles import get_profile

    files = bench_files(folders)
    rows = [r for f in files for r in read_json(f)["rows"] if "error" not in r]
    if not rows:
        return "*Not measured: run `benchmarks/gpu_throughput.sh` on a GPU.*\n"
    cases = [m for m, _ in get_profile("paper").case_list()]
    by_model = {m: [r for r in rows if r["model"] == m] for m in dict.fromkeys(cases)}
    users = {m: [r for r in v if r.get("path") == "train"] for m, v in by_model.items()}
    if any(not v for v in by_model.values()):
        return f"*Not every paper case was measured: {sorted(m for m, v in by_model.items() if not v)} missing.*\n"
    default = {m: min((r["paper_hours_1gpu"] for r in v if r["engine"] == "deepspeed"), default=None)
               for m, v in by_model.items()}
    fastest = {m: min(users[m] or v, key=lambda r: r["paper_hours_1gpu"]) for m, v in by_model.items()}

    lines = [f"| {m} | {cases.count(m)} | {'—' if default[m] is None else f'{default[m]:.0f}'} | "
             f"{fastest[m]['paper_hours_1gpu']:.0f} ({', '.join([fastest[m]['engine'], *levers(fastest[m])])}"
             f"{', through `train`' if users[m] else ''}) |"
             for m in by_model]
    total = sum(cases.count(m) * fastest[m]["paper_hours_1gpu"] for m in by_model)
    device = read_json(files[0])["device"]
    return (f"| Case | Runs | DeepSpeed, one {gpu_name(device)} (h) | Fastest measured, one {gpu_name(device)} (h) |\n"
            "|---|---|---|---|\n" + "\n".join(lines)
            + f"\n\n*One {device}, bf16, the paper profile's {rows[0]['paper_tokens'] / 1e9:.0f}B tokens a run, "
              f"{rows[0]['sequences_per_step']:,} sequences a step; all the paper's runs at the fastest rates: "
              f"{total:.0f} GPU-hours.*\n")


def engine_losses_markdown(folders: tuple[Path, ...] = ENGINE_DIRS) -> str:
    """The torch engine's training losses against DeepSpeed's from the same weights and batches, per model."""
    rows = []
    for f in bench_files(folders, "compared"):
        for model, c in read_json(f)["compared"].items():
            for engine, worst in c["max_abs_diff"].items():
                final = c["curves"]["deepspeed"][-1]
                rows.append(f"| {model} | {engine} | {c['steps']} | {worst:.4f} | "
                            f"{c['mean_abs_diff_last_50'][engine]:.4f} | {final:.2f} |")
    if not rows:
        return "*Not measured: run `benchmarks/gpu_throughput.sh` on a GPU.*\n"
    return ("| Model | Engine | Steps | Largest difference (nats) | Mean difference, last 50 steps | DeepSpeed's last "
            "loss |\n|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


def numbers(results: Path = RESULTS) -> dict[str, str]:
    """The `{{ gpu_... }}` numbers of the paper-scale page's prose, from the committed bench and cases:
    how much the transformer families' utilisation rose from 64 sequences a step to the bench's, a
    two-tower step against two one-tower steps, what the cases' training and probes measured, and (the
    `{{ gpu_compile_... }}` numbers) how much sooner the forward pass compiles region by region on the CPU."""
    out: dict[str, str] = {}
    bench, small = results / "bench_gpu.json", results / "bench_gpu_micro64.json"
    if bench.is_file():
        rows = [r for r in read_json(bench)["rows"] if "error" not in r]
        ratio = [r["two_vs_two_single"] for r in rows]
        out.update(gpu_two_vs_one_min=f"{min(ratio):.1f}", gpu_two_vs_one_max=f"{max(ratio):.1f}")
        if small.is_file():
            at_64 = {(r["model"], r["precision"]): r.get("mfu") for r in read_json(small)["rows"]}
            rise = [r["mfu"] / at_64[(r["model"], r["precision"])] for r in rows
                    if r["model"] != "elmo" and at_64.get((r["model"], r["precision"]))]
            if rise:
                out.update(gpu_rise_min=f"{min(rise):.1f}", gpu_rise_max=f"{max(rise):.1f}")
    compiled = results.parent / COMPILE_CPU
    if compiled.is_file():
        rows = read_json(compiled)["rows"]
        ratio = [r["first_step_over_layers"] for r in rows if "first_step_over_layers" in r]
        by = {(r["family"], r["engine"]): r["first_step_s"] for r in rows}
        if ratio and ("bert-large", "torch-compile-layers") in by:
            out.update(gpu_compile_ratio_min=f"{min(ratio):.1f}", gpu_compile_ratio_max=f"{max(ratio):.1f}",
                       gpu_compile_whole_large_s=f"{by[('bert-large', 'torch-compile')]:.0f}",
                       gpu_compile_layers_large_s=f"{by[('bert-large', 'torch-compile-layers')]:.0f}")
    cases = results / "paper_cases.json"
    if cases.is_file():
        found = read_json(cases)
        c = found["cases"].values()
        reliability = [min(v["reliability_score"], v["reliability_score_logmean"]) for v in c]
        ceilings = [p["text_ceiling"] for p in found["pairs"]]
        seconds = [v["wall_time_s"] for v in c]
        out.update(gpu_corpus_tokens=f"{min(v['tokens_seen'] / v['epochs'] for v in c) / 1e6:.1f}M",
                   gpu_epochs_min=f"{min(v['epochs'] for v in c):.0f}", gpu_epochs_max=f"{max(v['epochs'] for v in c):.0f}",
                   gpu_seconds_min=f"{min(seconds):.0f}", gpu_seconds_max=f"{max(seconds):.0f}",
                   gpu_reliability_min=f"{min(reliability):.2f}",
                   gpu_ceiling_min=f"{min(ceilings):.2f}", gpu_ceiling_max=f"{max(ceilings):.2f}")
    return out


def _shape(case: dict) -> str:
    """Layers x width as Table 1 gives it: for ELMo the LSTM cells' width (its projections beside it)."""
    if case.get("model_type") == "elmo":
        return f"{case['layers']} × {case['intermediate']} LSTM cells, {case['hidden']}-wide projections"
    return f"{case['layers']} × {case['hidden']}"


def published_r(profile: str = "cpu") -> tuple[dict[frozenset, float], str]:
    """Each Table 2 pair's r (Eq. 4) in a published profile's run (`results/profiles/<profile>.json`), by its two
    runs, and the label of that run's probe: the one value the book shows for that run's pair."""
    path = PROJECT_ROOT / "results" / "profiles" / f"{profile}.json"
    if not path.is_file():
        return {}, ""
    found = read_json(path)
    values = {frozenset(p["pair"].split(" vs ")): p["ours"] for p in found["scorecard"]["points"]
              if not p["item"].startswith("Table 4")}
    return values, probe_label(found["probe"]["version"], found["probe"]["config"].get("precondition"))


def table2_markdown(path: Path = RESULTS / "paper_cases.json") -> str:
    """What each case's GPU time bought, then Table 2 at Table 1 sizes beside the published `cpu` run's pair (read
    from `results/profiles/cpu.json`, the value section 03 shows) and the paper."""
    if not path.is_file():
        return "*Not measured yet: `benchmarks/gpu_paper_cases.sh` on a GPU, then `pack` and `table`.*\n"
    found = read_json(path)
    cases = ("| Case | Preset (layers × width) | Tokens seen | Epochs | Training time (s) | Validation loss | "
             "Probe-seed reliability (Eq. 4 / mean log p) |\n|---|---|---|---|---|---|---|\n")
    cases += "\n".join(
        f"| {c} | {v['preset']} ({_shape(v)}) | {v['tokens_seen'] / 1e6:.1f}M | {v['epochs']:.1f} | "
        f"{v['wall_time_s']:.0f} | {v['val_loss']:.2f} | {v['reliability_score']:.2f} / {v['reliability_score_logmean']:.2f} |"
        for c, v in found["cases"].items())
    cpu, cpu_probe = published_r("cpu")
    pairs = (f"| Pair | Score | r [95% interval] | Text ceiling | `cpu` profile's published run (probe {cpu_probe}) "
             "| Paper |\n|---|---|---|---|---|---|\n")
    pairs += "\n".join(
        f"| {p['pair']} | {'Eq. 4' if p['score'] == 'score' else 'mean log p'} | {number(p['r'])} "
        f"{interval(p['r'], p['ci_low'], p['ci_high'], number)} | {p['text_ceiling']:.2f} | "
        f"{number(cpu.get(frozenset(p['pair'].split(' vs '))) if p['score'] == 'score' else None)} | "
        f"{number(p['paper'])} |" for p in found["pairs"])
    return (cases + "\n\n" + pairs + f"\n\n*The {found['n_tokens']} most frequent tokens; intervals from "
            f"{found['bootstrap']} resamples of the {found['interval_unit']}; measured {found['created'][:10]}.*\n")


def write_book(results: Path = RESULTS) -> Path:
    """The page's parts and numbers into `results/book.json`, from the committed logs and results."""
    from twotower_lib.book import study_parts

    inputs = (sorted(results.glob("gpu_tests_run*.log")) + [results / n for n in INPUTS if (results / n).is_file()]
              + [f for f in [results.parent / COMPILE_CPU] if f.is_file()]
              + [f for name in ENGINE_FOLDERS for f in sorted((results / name).glob("*.json"))])
    engines = tuple(results / name for name in ENGINE_FOLDERS)
    # the two wide tables take the page's margin
    parts = {"GPU_TESTS": tests_markdown(results),
             "GPU_BENCH": full_width(bench_markdown(results / "bench_gpu.json", results / "bench_gpu_micro64.json")),
             "GPU_ENGINES": full_width(engines_markdown(engines)),
             "GPU_ENGINE_LOSSES": engine_losses_markdown(engines),
             "GPU_HOURS": hours_markdown(engines),
             "GPU_TABLE2": table2_markdown(results / "paper_cases.json")}
    return study_parts.write(results, parts, numbers(results), inputs, "python -m studies.paper_scale book")
