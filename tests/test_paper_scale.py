"""The paper-size GPU results: packing probed runs, Table 2 from the packed files, the book's page, and the
page's statements checked against the committed measurements (results/gpu/)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from studies.paper_scale import runner as paper_study
from studies.paper_scale import report as paper_scale
from twotower_lib.artifacts import read_json
from twotower_lib.errors import UserError
from twotower_lib.probe.run import ProbeConfig, probe_run
from twotower_lib.train.loop import TrainConfig, train


def test_pack_then_table_gives_table2_in_both_variants(tiny_data, tmp_path):
    runs = tmp_path / "runs"
    for model, seed in (("gpt", 1), ("gpt", 2), ("bert", 1)):
        out = runs / f"{model}-s{seed}"
        train(TrainConfig(model=model, preset="tiny", seed=seed, max_steps=20, micro_batch=8, grad_accum=1,
                          precision="fp32", eval_blocks=8), tiny_data, out, show_progress=False)
        probe_run(out, ProbeConfig(train_blocks=64, max_epochs=3, replicate=True), show=False)
    (runs / "unfinished").mkdir()                                   # a run without weights or probe is skipped
    assert paper_study.pack(runs, tmp_path / "packed") == ["bert-s1", "gpt-s1", "gpt-s2"]
    packed = tmp_path / "packed" / "gpt-s1"
    assert not list(packed.rglob("*.safetensors")) and (packed / "probe" / "replicate.parquet").is_file()

    found = paper_study.table(tmp_path / "packed", n=40, n_boot=20)
    assert len(found["pairs"]) == 6 and {p["score"] for p in found["pairs"]} == {"score", "score_logmean"}
    for p in found["pairs"]:
        assert -1 <= p["r"] <= 1 and p["ci_low"] <= p["ci_high"]
    for case in found["cases"].values():
        assert case["tokens_seen"] == 20 * 8 * tiny_data.seq_len and -1 <= case["reliability_score"] <= 1
    with pytest.raises(UserError, match="no finished, probed run"):
        paper_study.pack(tmp_path / "empty", tmp_path / "x")


def test_the_page_tables_come_from_the_committed_results():
    assert "Not measured" not in paper_scale.bench_markdown() + paper_scale.table2_markdown()
    bench = paper_scale.bench_markdown()
    assert all(f"| {m} | bf16 |" in bench for m in ("elmo", "gpt", "bert-base", "bert-large"))
    assert "| gpt-s1 | paper-gpt (12 × 768) |" in paper_scale.table2_markdown()
    assert "Crashed in" in paper_scale.tests_markdown()


def test_the_page_statements_hold_on_the_committed_results():
    """book/paper_scale.md describes these numbers in words: re-measured results that contradict it fail here."""
    rows = json.loads((paper_scale.RESULTS / "bench_gpu.json").read_text())["rows"]
    small = {(r["model"], r["precision"]): r["mfu"] for r in
             json.loads((paper_scale.RESULTS / "bench_gpu_micro64.json").read_text())["rows"]}
    transformers = [r for r in rows if r["model"] != "elmo"]
    assert max(r["mfu"] for r in transformers) < 0.40                       # the 40% goal is not met
    gains = [r["mfu"] / small[r["model"], r["precision"]] for r in transformers]
    assert 1.5 < min(gains) and max(gains) < 4.4                             # "a factor of 1.6 to 4.3"
    bert_base_gain = max(g for g, r in zip(gains, transformers) if r["model"] == "bert-base")
    assert bert_base_gain == max(gains)                                       # the most for the narrowest
    elmo = [r for r in rows if r["model"] == "elmo"]
    assert min(r["mfu"] for r in elmo) > max(r["mfu"] for r in transformers)  # ELMo highest utilisation ...
    assert max(r["tokens_per_s"] for r in elmo) < min(r["tokens_per_s"] for r in transformers)  # ... yet slowest
    assert all(0.9 <= r["two_vs_two_single"] <= 1.1 for r in rows)

    found = json.loads((paper_scale.RESULTS / "paper_cases.json").read_text())
    assert set(found["cases"]) == {"elmo-s1", "gpt-s1", "bert-base-s1"}      # "three of the paper's five"
    assert all(c["reliability_score"] >= 0.98 and 1 <= c["epochs"] < 3 for c in found["cases"].values())
    ceilings = [p["text_ceiling"] for p in found["pairs"]]
    assert 0.55 <= min(ceilings) and max(ceilings) <= 0.86
    assert all(np.isfinite(p["r"]) and p["r"] < 0.4 for p in found["pairs"])  # "small or negative"


def test_the_gpu_hours_take_each_case_at_its_default_and_fastest_measured_rate(tmp_path):
    """GPU_HOURS (the README's and the page's table): per paper case DeepSpeed's hours and the fastest row with
    what it changed; the total counts Bert-large's two runs; a case without a row says so."""
    def row(model, engine, hours, micro=256, **kw):
        return {"model": model, "engine": engine, "paper_hours_1gpu": hours, "micro_batch": micro, "model_options": {},
                "paper_tokens": 2e10, "sequences_per_step": 3840, **kw}

    rows = [row("elmo", "deepspeed", 80.0, 128), row("elmo", "torch", 60.0, 512), row("gpt", "deepspeed", 30.0),
            row("gpt", "torch-compile", 20.0, label_bucket=1024, model_options={"vocab_multiple": 64},
                casts="once a step"),
            row("bert-base", "deepspeed", 10.0), row("bert-large", "deepspeed", 40.0), row("gpt", "torch", 1.0, error="x")]
    (tmp_path / "bench_a.json").write_text(json.dumps({"device": "GPU X", "rows": rows}))
    table = paper_scale.hours_markdown((tmp_path,))
    assert "| elmo | 1 | 80 | 60 (torch, micro-batch 512) |" in table
    assert "| gpt | 1 | 30 | 20 (torch-compile, vocab_multiple=64, label_bucket=1024, casts once a step) |" in table
    assert "| bert-large | 2 | 40 | 40 (deepspeed) |" in table and "GPU X" in table
    assert f"at the fastest rates: {60 + 20 + 10 + 2 * 40} GPU-hours" in table
    users = row("gpt", "torch-compile", 25.0, path="train", timed_steps=3)   # slower than the bench's, but a user's
    (tmp_path / "train.json").write_text(json.dumps({"device": "GPU X", "rows": [users]}))
    table = paper_scale.hours_markdown((tmp_path,))
    assert "| gpt | 1 | 30 | 25 (torch-compile, through `train`) |" in table
    assert f"at the fastest rates: {60 + 25 + 10 + 2 * 40} GPU-hours" in table
    assert paper_scale.path(users, {}) == "`train`, 3 steps"
    assert paper_scale.path(rows[0], {"argv": ["--steps", "1"]}) == "bench, 1 step"
    assert paper_scale.path(rows[0], {"argv": []}) == f"bench, {paper_scale.BENCH_STEPS} steps"
    (tmp_path / "train.json").unlink()
    (tmp_path / "bench_a.json").write_text(json.dumps({"device": "GPU X", "rows": rows[:4]}))
    assert "missing" in paper_scale.hours_markdown((tmp_path,))


def test_the_committed_book_parts_are_what_the_reports_write_now(tmp_path, monkeypatch):
    """Each study's results/<study>/book.json holds what its report computes from the committed results today
    (the book refuses a stale one: `study_parts.stale`)."""
    from studies.released import report as released
    from twotower_lib.book import study_parts
    from twotower_lib.book.tables import full_width

    assert study_parts.stale() == []
    parts, numbers = study_parts.load()
    assert parts["GPU_BENCH"] == full_width(paper_scale.bench_markdown()) and parts["GPU_TABLE2"] == paper_scale.table2_markdown()
    assert parts["GPU_TESTS"] == paper_scale.tests_markdown() and parts["GPU_HOURS"] == paper_scale.hours_markdown()
    assert {k: v for k, v in numbers.items() if k.startswith("gpu_")} == paper_scale.numbers()
    assert parts["RELEASED"] == released.to_markdown(released.load("cpu"), released.load_recipes())
    assert parts["RELEASED_ELMO"] == released.elmo_sentence(released.load("cpu"))
    from studies.register import report as register

    table = register.load()
    assert parts["REGISTER"] == register.sentence(table) and parts["REGISTER_TABLE"] == register.table_html(table)
    assert study_parts.verdict("register") == register.verdict(table)
    assert study_parts.verdict("register", "cpu") == register.verdict_over_seeds(table)   # the ladder's seeds decide
    from studies.emergence import report as emergence

    from studies.decisions import report as decisions

    decided = decisions.numbers()
    assert {k: numbers[k] for k in decided} == decided
    curves = emergence.load_curves()
    assert {k: v for k, v in numbers.items() if not k.startswith("gpu_") and k not in decided} == emergence.numbers(curves)
    assert {k: v for k, v in parts.items() if k.startswith("EMERGENCE_")} == emergence.book_parts(curves)
    from studies.probe import report as probe

    assert {k: v for k, v in parts.items() if k.startswith("PROBE_")} == probe.book_parts()
    from studies.ladder import report as ladder

    assert {k: v for k, v in parts.items() if k.startswith("LADDER_")} == ladder.current_parts(ladder.RESULTS)
    from studies.bert_controls import report as bert_controls

    assert {k: v for k, v in parts.items() if k.startswith("BERT_CONTROLS_")} == bert_controls.book_parts(
        read_json(bert_controls.RESULTS / "cpu.json"))
    from studies.seeds import book as seeds

    study = seeds.load("cpu")
    assert {k: v for k, v in parts.items() if k.startswith("SEEDS_") and k.endswith("@cpu")} == seeds.book_parts(study, "cpu")
    assert study_parts.verdict("table4", "cpu") == {**seeds.scorecard_entries(study)["table4"], "profile": "cpu"}
    from studies.word_groups import report as word_groups

    found = word_groups.load()
    assert {k: v for k, v in parts.items() if k.startswith("WORD_GROUPS_")} == {
        f"WORD_GROUPS_{k}@cpu": v for k, v in word_groups.sentences(found, "cpu").items()}
    for item, entry in word_groups.verdicts(found).items():
        assert study_parts.verdict(item, "cpu") == {"profile": "cpu", **entry}


def test_a_published_row_a_study_decides_differently_is_stale(tmp_path):
    """A published profile's scorecard row must say what the study that decides it says now: the README's table
    and the book's other-profile pages read the published record, the book's own run reads the study. A row
    decided over seeds is decided anew where the record is shown, so it cannot fall behind."""
    from twotower_lib.book import study_parts

    source = tmp_path / "study" / "result.json"
    source.parent.mkdir()
    source.write_text("{}")
    entry = {"profile": "cpu", "ours": "one source: partly", "verdict": "partly", "note": ""}
    seeds = {"seeds": "median 0.15 over 6 seed pairs", "verdict": "partly", "controls": ""}
    study_parts.write(source.parent, {}, {}, [source], "python -m studies.x book",
                      verdicts={"register": entry, "table2.same-config@cpu": seeds})
    (tmp_path / "profiles").mkdir()

    def publish(name, rows):
        (tmp_path / "profiles" / f"{name}.json").write_text(json.dumps({"scorecard": {"rows": rows}}))

    publish("cpu", [{"id": "register", "ours": "one source: partly", "verdict": "partly"},
                    {"id": "table2.same-config", "ours": "median 0.15 over 6 seed pairs. This run: r = 0.67",
                     "verdict": "partly"}, {"id": "fig5", "ours": "81%", "verdict": "reproduced"}])
    publish("cpu-long", [{"id": "register", "ours": "", "verdict": "not attempted"},    # measured at cpu only
                         {"id": "table2.same-config", "ours": "r = -0.46", "verdict": "not"}])
    assert study_parts.stale(tmp_path) == []
    publish("cpu", [{"id": "register", "ours": "one source, as measured before", "verdict": "partly"},
                    {"id": "table2.same-config", "ours": "median 0.15 over 6 seed pairs", "verdict": "not"}])
    behind = study_parts.stale(tmp_path)
    assert len(behind) == 1 and behind[0].startswith(f"{tmp_path.name}/profiles/cpu.json: its 'register' row is not ")
    assert "publish --profile cpu" in behind[0]


def test_a_verdict_decided_by_other_rules_is_refused(tmp_path):
    """A study's verdicts carry the rules' edition that decided them; one decided by another edition is refused
    with the command that decides it again, not shown as today's judgement."""
    from twotower_lib import paper
    from twotower_lib.book import study_parts

    source = tmp_path / "study" / "result.json"
    source.parent.mkdir()
    source.write_text("{}")
    book = study_parts.write(source.parent, {}, {}, [source], "python -m studies.x book",
                             verdicts={"table2.same-config@cpu": {"seeds": "median 0.15", "verdict": "partly"}})
    assert study_parts.verdict("table2.same-config", "cpu", tmp_path)["verdict"] == "partly"
    assert study_parts.verdict("fig5", "cpu", tmp_path) is None
    book.write_text(json.dumps({**json.loads(book.read_text()), "rules": paper.RULES_EDITION - 1}))
    with pytest.raises(UserError, match=rf"edition {paper.RULES_EDITION - 1}, today's is {paper.RULES_EDITION}: "
                                        r"run `python -m studies.x book`"):
        study_parts.verdict("table2.same-config", "cpu", tmp_path)


def test_a_book_part_whose_results_changed_is_stale(tmp_path):
    from twotower_lib.book import study_parts

    (tmp_path / "study").mkdir()
    source = tmp_path / "study" / "result.json"
    source.write_text("{}")
    study_parts.write(tmp_path / "study", {"PART": "text"}, {"n": "1"}, [source], "python -m studies.x book")
    assert study_parts.load(tmp_path) == ({"PART": "text"}, {"n": "1"}) and study_parts.stale(tmp_path) == []
    source.write_text('{"changed": true}')
    assert study_parts.stale(tmp_path) == [f"{tmp_path.name}/study/book.json (from {source}): run `python -m studies.x book`"]
    study_parts.write(tmp_path / "study", {"PART": "text"}, {}, [tmp_path / "study" / "*.json"], "python -m studies.x")
    assert study_parts.stale(tmp_path) == []
    (tmp_path / "study" / "new.json").write_text("{}")              # a file the pattern now matches: stale
    assert study_parts.stale(tmp_path) == [f"{tmp_path.name}/study/book.json (from {tmp_path}/study/*.json): "
                                           "run `python -m studies.x`"]
    with pytest.raises(UserError, match="do not exist"):
        study_parts.write(tmp_path / "study", {}, {}, [tmp_path / "none" / "*.json"], "python -m studies.x")
    (tmp_path / "other").mkdir()
    study_parts.write(tmp_path / "other", {"PART": "again"}, {}, [source], "python -m studies.y book")
    with pytest.raises(UserError, match="both give the book's 'PART'"):
        study_parts.load(tmp_path)


def _bench_gpu_on_the_cpu(monkeypatch):
    """`benchmarks/bench_gpu.py` with torch's CUDA calls faked on the CPU and every preset tiny: its Python
    (accumulation, the step's split, levers, JSON) is checked here before a GPU session spends time on it."""
    import importlib.util
    import sys
    import time
    from pathlib import Path

    import torch

    import twotower_lib.models as models
    import twotower_lib.train.torch_engine as torch_engine
    from twotower_lib.train.deepspeed_setup import init_distributed

    root = Path(__file__).resolve().parent.parent
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    init_distributed()  # gloo, while torch still says there is no GPU

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = time.perf_counter()

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    for name, value in dict(is_available=lambda: True, Event=Event, synchronize=lambda *a: None,
                            empty_cache=lambda: None, reset_peak_memory_stats=lambda *a: None,
                            max_memory_allocated=lambda *a: 0, get_device_name=lambda *a: "NVIDIA H100 (faked)").items():
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, *a, **k: self)
    real_preset, real_init = models.preset, torch_engine.TorchEngine.__init__
    monkeypatch.setattr(models, "preset", lambda name, model_type, seq_len=None, **kw: real_preset("tiny", model_type, **kw))
    monkeypatch.setattr(torch_engine.TorchEngine, "__init__",
                        lambda self, model, groups, ds, device, **options: real_init(self, model, groups, ds,
                                                                                      torch.device("cpu"), **options))
    spec = importlib.util.spec_from_file_location("bench_gpu", root / "benchmarks" / "bench_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    real_batch = bench.random_batch
    monkeypatch.setattr(bench, "random_batch", lambda cfg, micro, seed, device="cpu", label_bucket=1:
                        real_batch(cfg, micro, seed, "cpu", label_bucket))
    monkeypatch.setattr(sys.modules["model_flops"], "random_batch", bench.random_batch)
    return bench


def test_the_gpu_bench_times_steps_of_accumulated_micro_batches(monkeypatch, tmp_path):
    bench = _bench_gpu_on_the_cpu(monkeypatch)
    out = tmp_path / "bench.json"
    assert bench.main(["--families", "gpt", "bert-base", "--engines", "deepspeed", "torch", "--precisions", "fp32",
                       "--steps", "2", "--micro-batch", "4", "--sequences-per-step", "12",
                       "--model-option", "vocab_multiple=64", "--label-bucket", "64", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["engine"]) for r in rows] == [("gpt", "deepspeed"), ("bert-base", "deepspeed"),
                                                         ("gpt", "torch"), ("bert-base", "torch")]
    for r in rows:
        assert "error" not in r, r.get("error")
        assert r["accum"] == 3 and r["sequences_per_step"] == 12 and r["model_options"] == {"vocab_multiple": 64}
        assert r["label_bucket"] == 64 and r["casts"] == "once a step"
        assert r["tokens_per_s"] == pytest.approx(12 * 32 / r["step_s"])  # the tiny preset's 32-token blocks
        assert 0 < r["micro_step_s"] < r["step_s"] and r["mfu"] > 0 and r["warmup_step_s"] > 0
    assert bench.main(["--families", "bert-base", "--engines", "torch", "--precisions", "fp32", "--steps", "1",
                       "--micro-batch", "4", "--sequences-per-step", "8", "--cast-each-micro-batch",
                       "--profile-dir", str(tmp_path / "profiles"), "--out", str(out)]) == 0
    row, = json.loads(out.read_text())["rows"]
    assert row["casts"] == "each micro-batch" and row["accum"] == 2 and "error" not in row["profile"], row
    assert (tmp_path / "profiles" / "bert-base_torch_fp32.txt").is_file()
    with pytest.raises(SystemExit, match="FIELD=VALUE"):
        bench.model_options(["vocab_multipl=64"])
    assert bench.model_options(["fuse_towers=true", "vocab_multiple=8"]) == {"fuse_towers": True, "vocab_multiple": 8}


def test_the_gpu_bench_compares_the_engines_losses_step_by_step(monkeypatch, tmp_path):
    """In fp32 on the CPU the torch engine steps as DeepSpeed's (tests/test_train.py), so the bench's
    comparison of their first losses from the same weights and batches must read near zero."""
    bench = _bench_gpu_on_the_cpu(monkeypatch)
    monkeypatch.setattr(bench, "loss_curves", _in_fp32(bench.loss_curves))
    out = tmp_path / "losses.json"
    assert bench.main(["--families", "elmo", "bert-base", "--compare-steps", "6", "--engines", "torch",
                       "--micro-batch", "4", "--elmo-micro-batch", "4", "--label-bucket", "64", "--out", str(out)]) == 0
    compared = json.loads(out.read_text())["compared"]
    for family in ("elmo", "bert-base"):
        c = compared[family]
        assert len(c["curves"]["deepspeed"]) == len(c["curves"]["torch"]) == 6
        assert c["max_abs_diff"]["torch"] < 1e-4, family


def _in_fp32(loss_curves):
    return lambda cfg, precision, *rest: loss_curves(cfg, "fp32", *rest)


def test_the_gpu_bench_hands_every_option_to_the_trainers_config(monkeypatch):
    """Each engine the bench can name, with each option it takes, builds the trainer's `TrainConfig` as `train`
    would (the 28 Nov round lost `--label-bucket` on its way, and the trainer refused `torch-graphs` for BERT)."""
    from twotower_lib.errors import UserError
    from twotower_lib.models.config import preset
    from twotower_lib.train.config import ENGINES

    bench = _bench_gpu_on_the_cpu(monkeypatch)
    for family in bench.FAMILIES:
        cfg = preset("tiny", bench.FAMILIES[family])
        for engine in ENGINES:
            for bucket in (1, 1024):
                try:
                    tcfg = bench.train_config(cfg, "bf16", 8, engine, accum=3, label_bucket=bucket)
                except UserError as e:   # refused: only for a reason `train` gives too (BERT graphs need a bucket)
                    assert engine == "torch-graphs" and bucket == 1 and cfg.model_type == "bert", (family, engine, e)
                    continue
                assert (tcfg.engine, tcfg.label_bucket, tcfg.grad_accum, tcfg.micro_batch) == (engine, bucket, 3, 8)


def test_the_users_path_bench_times_the_train_commands_own_steps(tiny_data, tmp_path, monkeypatch):
    """`benchmarks/bench_train_path.py` on the CPU (`--cpu`, tiny presets): each family's row comes from a real
    `python -m twotower_lib train` run with the paper profile's levers, timed by the steps in its log after the
    warm-up step; a family whose `train` fails becomes a row with the trainer's own error and the others go on."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_train_path", root / "benchmarks" / "bench_train_path.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out, runs = tmp_path / "train.json", tmp_path / "runs"
    assert bench.main(["--cpu", "--data", str(tiny_data.path), "--families", "gpt", "bert-base", "elmo",
                       "--preset", "tiny", "--precision", "fp32", "--steps", "2", "--micro-batch", "4",
                       "--elmo-micro-batch", "4", "--sequences-per-step", "8", "--engine", "gpt=torch",
                       "--engine", "bert-base=torch", "--engine", "elmo=torch-graphs", "--peak-tflops", "1",
                       "--runs", str(runs), "--keep-runs", "--out", str(out)]) == 0
    gpt, bert, elmo = json.loads(out.read_text())["rows"]
    for row in (gpt, bert):
        assert "error" not in row, row.get("error")
        train = json.loads((runs / row["model"] / "config.json").read_text())["train"]
        assert (train["engine"], train["label_bucket"], train["vocab_multiple"]) == ("torch", 1024, 64)
        assert (train["micro_batch"], train["grad_accum"], train["max_steps"]) == (4, 2, 3) == (4, row["accum"], 3)
        log = [json.loads(x) for x in (runs / row["model"] / "log.jsonl").read_text().splitlines()]
        assert [r["step_s"] for r in log] == [row["warmup_step_s"], *row["step_s_each"]]
        assert row["timed_steps"] == 2 and row["step_s"] == pytest.approx(sum(row["step_s_each"]) / 2)
        assert row["tokens_per_s"] == pytest.approx(8 * tiny_data.seq_len / row["step_s"])
        assert row["mfu"] == pytest.approx(row["flops_per_step"] / row["step_s"] / 1e12) and row["flops_per_step"] > 0
        assert row["path"] == "train" and row["command"][:3] == ["-m", "twotower_lib", "train"]
    assert "CUDA" in elmo["error"] and elmo["engine"] == "torch-graphs"   # the trainer's own refusal, as its row
    assert bench.main(["--cpu", "--data", str(tiny_data.path), "--families", "gpt", "--preset", "tiny",
                       "--family-timeout", "0.5", "--runs", str(runs), "--out", str(out)]) == 0
    late, = json.loads(out.read_text())["rows"]           # stopped with its process group, its folder removed
    assert late["error"] == "timed out after 0.5 s" and not (runs / "gpt").exists()


def test_every_bench_command_of_the_gpu_call_parses(tmp_path, monkeypatch):
    """Each `part` of `benchmarks/gpu_throughput.sh` that runs a bench gives it options its parser takes (on the
    CPU each bench stops after parsing, saying there is no GPU), so a lent GPU's minutes are not lost to a typo."""
    import importlib.util
    import re
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    script = (root / "benchmarks" / "gpu_throughput.sh").read_text().replace("\\\n", " ")
    body = script[script.index("main() {"):script.index("\n}\n", script.index("main() {"))]
    values = {"out": str(tmp_path), **dict(re.findall(r'^\s*(\w+)="?([^"\n]*?)"?\s*$', body, re.M))}
    commands = re.findall(r"^\s*part \d+ python3 benchmarks/(\w+)\.py (.*)$", body, re.M)
    commands += [(m, rest) for b, rest in re.findall(r"^\s*part \d+ \$(bench) (.*)$", body, re.M)
                 for m in [values[b].split()[1].split("/")[1].removesuffix(".py")]
                 for rest in [" ".join(values[b].split()[2:]) + " " + rest]]
    assert {name for name, _ in commands} == {"bench_train_path", "bench_gpu"} and len(commands) >= 6
    for name, rest in commands:
        argv = shlex.split(re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], rest).split("2>&1")[0])
        spec = importlib.util.spec_from_file_location(name, root / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.main(argv) == 0, (name, argv)
