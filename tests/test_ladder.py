"""The size ladder (`studies.ladder`): a run trained for one epoch, probed with its untrained towers, exported
as the small committed file the report reads; and the report's two answers on exports whose answer is known."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from studies.ladder import report, rungs, runner
from studies.ladder.rungs import RUNGS, Rung, on_size_axis, size_rungs
from twotower_lib.analysis.uncertainty import CEILING_FLOOR
from twotower_lib.probe.config import ProbeConfig


@pytest.fixture
def tiny_ladder(tiny_data, tmp_path, monkeypatch):
    """A ladder rooted in `tmp_path` on the tiny corpus, with a rung `tiny` and a quick probe: (runs, results)."""
    monkeypatch.setitem(runner.RUNGS, "tiny", Rung("tiny"))
    monkeypatch.setattr(rungs, "PROBE", ProbeConfig(train_blocks=20, max_epochs=1, eval_blocks=10, precision="fp32",
                                                     train_positions=2000))
    monkeypatch.setattr(runner, "EXPORT_TOKENS", 40)
    root, results = tmp_path / "runs", tmp_path / "results"
    (root / "data").mkdir(parents=True)
    (root / "data" / "prepared").symlink_to(tiny_data.path)
    return root, results


def test_one_run_is_trained_for_one_epoch_probed_twice_and_exported(tiny_data, tiny_ladder, tmp_path):
    root, results = tiny_ladder
    runner.run_one(root, "tiny", "gpt", 1, results, tiny_data)
    case, untrained = (json.loads(runner.export_path("tiny", "gpt", 1, k, results).read_text()) for k in runner.KINDS)
    tcfg = runner.train_config("tiny", "gpt", 1, root / "data" / "prepared", tiny_data)
    assert case["train"]["tokens"] == tcfg.max_steps * runner.MICRO_BATCH * tiny_data.seq_len <= tiny_data.train.size
    assert tiny_data.train.size - case["train"]["tokens"] < runner.MICRO_BATCH * tiny_data.seq_len  # one epoch, whole
    assert len(case["score"]) == len(case["token_ids"]) == 40 and case["data_hash"] == tiny_data.data_hash
    assert untrained["train"]["snapshot"] == 0 and case["score"] != untrained["score"]
    assert sum(case["doc_sums"]["n"]) > 0 and case["provenance"]["packages"]
    assert case["text_reliability"]["value"] is None    # one validation document: too few to split, not a number
    for kind in runner.KINDS:                            # an export from before reliabilities: given its own again
        path = runner.export_path("tiny", "gpt", 1, kind, results)
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "text_reliability"}))
    assert runner.add_reliability(tmp_path / "elsewhere", results) == 0   # no probe on this machine: left as it is
    assert runner.add_reliability(root, results) == 2 and runner.add_reliability(root, results) == 0
    assert json.loads(runner.export_path("tiny", "gpt", 1, "case", results).read_text())["text_reliability"] == \
        case["text_reliability"]
    before = runner.export_path("tiny", "gpt", 1, "case", results).stat().st_mtime_ns
    runner.run_one(root, "tiny", "gpt", 1, results, tiny_data)           # exported: nothing is redone
    assert runner.export_path("tiny", "gpt", 1, "case", results).stat().st_mtime_ns == before
    path = runner.export_path("tiny", "gpt", 1, "untrained", results)  # an export made with another probe ...
    path.write_text(json.dumps(json.loads(path.read_text()) | {"probe_config": {"precision": "auto"}}))
    assert not report.is_current(json.loads(path.read_text()))
    runner.run_one(root, "tiny", "gpt", 1, results, tiny_data)           # ... is made again, the other one not
    assert report.is_current(json.loads(path.read_text()))
    assert runner.export_path("tiny", "gpt", 1, "case", results).stat().st_mtime_ns == before
    import dataclasses

    other = dataclasses.replace(tiny_data, manifest=tiny_data.manifest | {"content_hash": "0" * 64})
    with pytest.raises(Exception, match="one corpus"):
        runner.check_data("tiny", "gpt", 1, other, results)


UNIGRAM = 6.0   # word frequencies' loss of the synthetic exports' corpus: their cooperative loss (5) is 1 nat below


def _export(rung, family, seed, kind, scores, margin, params, head_loss=None, reliability=None):
    """A synthetic export: `scores` over token ids 0..n-1, 50 documents whose towers' mean p differ by `margin`;
    its tower heads' validation loss `head_loss` (by default 5 nats trained, 6 untrained)."""
    head_loss = head_loss or (6.0 if kind == "untrained" else 5.0)
    rng = np.random.default_rng(seed + 100 * (kind == "untrained"))
    n = np.full(50, 100)
    p1 = 0.05 * (1 + 0.02 * rng.standard_normal(50))
    return {"rung": rung, "family": family, "seed": seed, "kind": kind, "tower_parameters": params,
            "ordering": {"primary_tower": 0, "mean_p": [0.05, 0.05 * (1 - margin)], "mean_logp": [-3, -3.1]},
            "doc_sums": {"n": n.tolist(), "sum_p1": (n * p1).tolist(), "sum_p2": (n * p1 * (1 - margin)).tolist()},
            "token_ids": list(range(len(scores))), "score": list(scores), "score_logmean": list(scores),
            "val_loss": {"cooperative": 5.0, "tower0_head": head_loss, "tower1_head": head_loss - 0.1}, "probe_minutes": 1.0, "data_hash": "h",
            "probe_config": asdict(runner.probe_config(rung)) if rung in runner.RUNGS else {},
            "provenance": {"code_version": "x"}} | ({"text_reliability": {"value": reliability}} if reliability else {})


def test_the_report_answers_partition_and_orientation_per_rung(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "TOP_N", 300)
    rng = np.random.default_rng(0)
    shared, frequency = rng.standard_normal(300), rng.standard_normal(300)
    exports = []
    for seed, flip in zip(range(1, 5), (1, -1, 1, 1)):
        # the small rung: seeds share a division, seed 2 mirrored; the big rung: nothing shared
        exports.append(_export("small", "gpt", seed, "case", flip * shared + 0.5 * rng.standard_normal(300), 0.05, 10,
                               reliability=0.81))
        exports.append(_export("big", "gpt", seed, "case", rng.standard_normal(300), 0.05, 1000))
        for rung, params in (("small", 10), ("big", 1000)):
            # untrained towers share a little (r about 0.2), as frequency effects make them do
            exports.append(_export(rung, "gpt", seed, "untrained", 0.5 * frequency + rng.standard_normal(300), 0.0005,
                                   params))
    runs, pairs = report.run_rows(exports), report.pair_rows(exports)
    assert len(pairs[pairs["kind"] == "same"]) == 12 and set(pairs["kind"]) == {"same", "untrained", "shuffled"}
    summary = report.summary_rows(runs, pairs, UNIGRAM).set_index("rung")
    assert list(summary.index) == ["small", "big"]          # by size, as the answer reads, not by the rung's name
    small, big = summary.loc["small"], summary.loc["big"]
    assert small["partition: verdict"] == "holds" and small["partition: median |r|"] > 0.7
    assert small["orientation: verdict"] == "not" and small["orientation: positive pairs"] == pytest.approx(0.5)
    assert small["orientation: consistent triads"] == 1.0
    # every small pair's text ceiling is sqrt(0.81 * 0.81); the big rung's exports carry no reliability
    assert small["text ceiling (median)"] == pytest.approx(0.81)
    assert small["median |r| / ceiling"] == pytest.approx(np.median(np.abs(
        pairs.query("rung == 'small' and kind == 'same'")["r"]) / 0.81))
    assert np.isnan(big["text ceiling (median)"])
    assert big["partition: verdict"] == "not" and big["orientation: verdict"] == "unresolved", {k: v for k, v in big.items() if "orientation" in k or "threshold" in k}
    text = report.answer(summary.reset_index())
    assert "**gpt**" in text and "small: median |r|" in text and "→" in text
    assert "text ceiling 0.81, corrected" in text and text.count("text ceiling") == 1
    low = summary.reset_index().assign(**{"text ceiling (median)": CEILING_FLOOR / 2})
    assert "too little to correct" in report.answer(low) and "corrected" not in report.answer(low).replace("to correct", "")
    for e in exports:
        path = tmp_path / report.EXPORTS / e["rung"] / f"{e['family']}-s{e['seed']}{'' if e['kind'] == 'case' else '-untrained'}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(e))
    (tmp_path / report.REFERENCE).write_text(json.dumps({"unigram_loss": UNIGRAM}))   # as the runner records it
    report.write_report(tmp_path)
    book = json.loads((tmp_path / "book.json").read_text())
    assert book["parts"]["LADDER_CHART"].startswith("{") and "holds" in book["parts"]["LADDER_TABLE"]
    # every statistic of the summary in one of three tables, each row named by rung and family
    tables = re.findall(r"<table.*?</table>", book["parts"]["LADDER_TABLE"])
    heads = [re.findall(r"<th>(.*?)</th>", t) for t in tables]
    assert len(tables) == 3 and all(h[:2] == ["rung", "family"] and len(h) <= 10 for h in heads)
    shown = {c for columns in report.LADDER_TABLES.values() for c in columns}
    assert len(shown) == sum(len(c) for c in report.LADDER_TABLES.values()) and shown <= set(summary.columns)
    assert book["parts"]["LADDER_ANSWER"] == text
    # the big rung probed otherwise (a GPU rung whose probe took bf16): said so, and no trend across the two probes
    monkeypatch.setitem(report.RUNGS, "big", Rung("paper-gpt", "gpt", gpu=True))
    other = [e | {"probe_config": {"precision": "auto"}} if e["rung"] == "big" else e for e in exports]
    summary = report.summary_rows(report.run_rows(other), report.pair_rows(other), UNIGRAM)
    assert summary.set_index("rung")["probed as the ladder probes"].to_dict() == {"small": True, "big": False}
    text = report.answer(summary)
    assert "big: median |r|" in text and "→" not in text
    assert 'precision "auto" (bf16 heads and scoring on a GPU)' in text


def test_the_gpu_rungs_train_table_1_sizes_on_the_same_epoch(tiny_data, tmp_path):
    """The GPU call (`benchmarks/gpu_ladder.sh`) trains each GPU rung's one family at Table 1's preset with the CPU
    rungs' steps, bf16 through the torch engine; on a machine without CUDA the runner refuses at once."""
    cpu = runner.train_config("2x128", "bert", 1, tmp_path, tiny_data)
    for rung in size_rungs(gpu=True):
        family = runner.RUNGS[rung].family
        tcfg = runner.train_config(rung, family, 1, tmp_path, tiny_data)
        assert (tcfg.model, tcfg.preset, tcfg.engine, tcfg.precision) == (family, runner.RUNGS[rung].preset, "torch", "bf16")
        assert (tcfg.max_steps, tcfg.micro_batch) == (cpu.max_steps, cpu.micro_batch)
        assert runner.probe_config(rung).precision == "fp32"        # the CPU rungs' probe, as they resolve it
        assert runner.probe_config(rung).feature_dtype == "fp32"    # Table 1's towers vary below bf16's resolution
    assert runner.probe_config("2x128") is rungs.PROBE and rungs.PROBE.feature_dtype == "bf16"
    assert runner.probe_config("4x256").feature_dtype == "fp32" and "4x256" in rungs.FP32_FEATURES
    import torch

    if not torch.cuda.is_available():
        assert runner.cli(["--gpu", "--seeds", "1"]) == 2
    script = (runner.Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_ladder.sh").read_text()
    assert "python3 -m studies.ladder --gpu --rungs" in script and "--deadline" in script
    assert runner.seed_list("4") == [1, 2, 3, 4] and runner.seed_list("3,4") == [3, 4] and runner.seed_list("2,") == [2]


def test_a_recipe_rung_checks_the_context_gate_before_it_probes_and_stops_its_seeds_below_it(tiny_data, tiny_ladder,
                                                                                            monkeypatch, capsys):
    """A rung with a recipe (the GPU call `benchmarks/gpu_bert_recipe.sh`, rung `24x512-pre`) trains with its levers,
    measures the run's context learned and writes it down; below the gate it probes nothing and trains no further seed;
    past it both probes are made and the exports carry the recipe."""
    from twotower_lib import paper

    root, results = tiny_ladder
    recipe = (("norm_scheme", "pre"), ("mask_rate", 0.4), ("mask_style", "mask"))
    monkeypatch.setitem(runner.RUNGS, "tiny-pre", Rung("tiny", "bert", recipe=recipe, micro_batch=4))
    tcfg = runner.train_config("tiny-pre", "bert", 1, root / "data" / "prepared", tiny_data)
    assert (tcfg.norm_scheme, tcfg.mask_rate, tcfg.mask_style, tcfg.micro_batch) == ("pre", 0.4, "mask", 4)
    assert rungs.size_rung("tiny-pre") == "tiny-pre"        # other towers than `tiny`'s: its own untrained probe
    monkeypatch.setattr(paper, "CONTEXT_GATE", 50.0)        # no run learns 50 nats
    monkeypatch.setattr(runner, "prepared_corpus", lambda root, results, corpus: tiny_data)
    runner.run_ladder([1, 2], ["tiny-pre"], ["bert"], root, results, report=False)
    context = json.loads(runner.context_path("tiny-pre", "bert", 1, results).read_text())
    assert not context["learned_context"] and context["recipe"] == dict(recipe) and context["data_hash"] == tiny_data.data_hash
    assert context["beyond_word_frequencies"] == pytest.approx(context["word_frequency_loss"] - context["cooperative_loss"],
                                                                abs=1e-3)
    assert context["tokens"] == tcfg.max_steps * 4 * tiny_data.seq_len
    assert not runner.context_path("tiny-pre", "bert", 2, results).exists()    # seed 2 never started
    assert not any(runner.export_path("tiny-pre", "bert", 1, k, results).exists() for k in runner.KINDS)
    assert "below the context gate, not probed" in capsys.readouterr().out
    monkeypatch.setattr(paper, "CONTEXT_GATE", -50.0)
    assert runner.run_one(root, "tiny-pre", "bert", 1, results, tiny_data, report=False)
    case = json.loads(runner.export_path("tiny-pre", "bert", 1, "case", results).read_text())
    assert case["train"]["recipe"] == dict(recipe) and case["train"]["micro_batch"] == 4
    assert runner.export_path("tiny-pre", "bert", 1, "untrained", results).exists()


def test_the_gpu_recipe_rung_is_table_1s_bert_large_with_the_piloted_levers_filling_the_gpu(tiny_data, tmp_path):
    tcfg = runner.train_config("24x512-pre", "bert", 1, tmp_path, tiny_data)
    assert (tcfg.preset, tcfg.norm_scheme, tcfg.mask_rate, tcfg.mask_style) == ("paper-bert-large", "pre", 0.4, "mask")
    assert tcfg.micro_batch >= 256 and tcfg.budget_s and (tcfg.engine, tcfg.precision) == ("torch", "bf16")
    assert runner.probe_config("24x512-pre").precision == "fp32" and "24x512-pre" not in size_rungs(gpu=True)
    script = (runner.Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_bert_recipe.sh").read_text()
    assert "--rungs \"$rung\"" in script and 'RUNG:-24x512-pre' in script and "--deadline" in script


def test_a_passes_rung_takes_its_size_rungs_untrained_export(tiny_data, tiny_ladder, monkeypatch):
    """A passes rung's towers at 0 tokens are its size rung's (one preset, one seed, one initialisation), so their
    probes agree; once the size rung's untrained export exists, the passes rung copies it (naming it) instead of
    probing again, unless it was probed otherwise or from other data."""
    root, results = tiny_ladder
    monkeypatch.setitem(runner.RUNGS, "tinyx3", Rung("tiny", "gpt", passes=3))
    assert runner.size_rung("tinyx3") == runner.size_rung("tiny") == "tiny"
    untrained = {r: runner.export_path(r, "gpt", 1, "untrained", results) for r in ("tiny", "tinyx3")}
    runner.run_one(root, "tinyx3", "gpt", 1, results, tiny_data)      # no size rung's export yet: probed here
    runner.run_one(root, "tiny", "gpt", 1, results, tiny_data)
    own, base = (json.loads(untrained[r].read_text()) for r in ("tinyx3", "tiny"))
    assert "same_towers_as" not in own and own["score"] == base["score"] and own["doc_sums"] == base["doc_sums"]
    untrained["tinyx3"].unlink()
    probed = root / "tinyx3" / "probing" / "untrained"
    import shutil

    shutil.rmtree(probed)
    runner.run_one(root, "tinyx3", "gpt", 1, results, tiny_data)      # copied: nothing trained or probed
    copy = json.loads(untrained["tinyx3"].read_text())
    tcfg = runner.train_config("tinyx3", "gpt", 1, root / "data" / "prepared", tiny_data)
    assert not probed.exists() and copy["same_towers_as"] == "tiny/gpt-s1-untrained.json"
    assert (copy["rung"], copy["train"]["passes"], copy["train"]["steps"]) == ("tinyx3", 3, tcfg.max_steps)
    assert copy["train"]["tokens"] == own["train"]["tokens"] and report.is_current(copy)
    assert {k: v for k, v in copy.items() if k not in ("rung", "train", "same_towers_as")} == \
        {k: v for k, v in base.items() if k not in ("rung", "train")}
    untrained["tinyx3"].unlink()
    for changed in ({"probe_config": {"precision": "auto"}}, {"data_hash": "0" * 64}):
        untrained["tiny"].write_text(json.dumps(base | changed))
        assert not runner.copy_untrained("tinyx3", "gpt", 1, results, tiny_data, tcfg)
    assert not runner.copy_untrained("tiny", "gpt", 1, results, tiny_data, tcfg) and not untrained["tinyx3"].exists()

def test_a_passes_rung_trains_its_family_for_several_epochs_and_stays_off_the_size_axis(tiny_data, tmp_path,
                                                                                      monkeypatch):
    """A passes rung (the token axis) trains its one family at a size rung's preset for its passes over the same
    epoch; the report gives it its own line and keeps it off the size chart and the size trend."""
    rung, size = "1x96x8", "1x96"
    passes = runner.RUNGS[rung].passes
    one, many = (runner.train_config(r, "bert", 1, tmp_path, tiny_data) for r in (size, rung))
    assert many.preset == one.preset and many.max_steps == passes * one.max_steps and passes > 1
    assert runner.rung_families(rung, list(runner.FAMILIES)) == [runner.RUNGS[rung].family]
    gpu = runner.train_config("12x384x4", "bert", 1, tmp_path, tiny_data)    # the GPU token axis: Bert-base's size
    assert (gpu.preset, gpu.engine, gpu.max_steps) == ("paper-bert-base", "torch", runner.RUNGS["12x384x4"].passes
                                                       * runner.train_config("12x384", "bert", 1, tmp_path, tiny_data).max_steps)
    assert runner.probe_config("12x384x4").precision == "fp32" and size_rungs(False) == ["1x96", "2x128", "4x256"]
    assert runner.rung_families(rung, ["gpt"]) == [] and runner.rung_families("1x96", ["gpt", "elmo"]) == ["gpt", "elmo"]
    rng = np.random.default_rng(2)
    shared = rng.standard_normal(200)
    exports = [_export(r, "bert", seed, kind, (shared if kind == "case" else 0) + rng.standard_normal(200), 0.05, 10)
               for r in ("1x96", rung) for seed in range(1, 5) for kind in ("case", "untrained")]
    summary = report.summary_rows(report.run_rows(exports), report.pair_rows(exports), UNIGRAM)
    text = report.answer(summary)
    assert f"**bert, {passes} passes over the epoch** — {rung}: median |r|" in text
    assert "→" not in text                                  # one size rung: no trend, the passes rung not in one
    # a second passes rung of the family with as many passes: one line, its rungs in size order, their trend
    bigger = "2x128x8"
    assert runner.RUNGS[bigger].passes == passes and runner.RUNGS[bigger].family == "bert"
    exports += [_export(bigger, "bert", seed, kind, (shared if kind == "case" else 0) + rng.standard_normal(200),
                        0.05, 40) for seed in range(1, 5) for kind in ("case", "untrained")]
    summary = report.summary_rows(report.run_rows(exports), report.pair_rows(exports), UNIGRAM)
    line = next(t for t in report.answer(summary).splitlines() if "passes over the epoch" in t)
    assert line.index(f"{rung}: median |r|") < line.index(f"{bigger}: median |r|") and "median |r| goes" in line
    assert report.answer(summary).count("passes over the epoch**") == 1
    assert report.brief(summary).index(f"{rung} ({passes} passes)") < report.brief(summary).index("2x128x8 (8 passes)")
    # a third one still short of its seeds: on the line with its count, not an end of the trend
    ends = [summary.set_index("rung").loc[r, "partition: median |r|"] for r in (rung, bigger)]
    exports += [_export("4x256x8", "bert", seed, kind, (shared if kind == "case" else 0) + rng.standard_normal(200),
                        0.05, 160) for seed in (1, 2) for kind in ("case", "untrained")]
    summary = report.summary_rows(report.run_rows(exports), report.pair_rows(exports), UNIGRAM)
    line = next(t for t in report.answer(summary).splitlines() if "passes over the epoch" in t)
    assert "4x256x8: median |r|" in line and "2 seeds" in line and report.NOT_YET in line
    assert f"goes {report._f(ends[0])} → {report._f(ends[1])} " in line
    chart = json.loads(report.chart(summary).to_json())
    # off the chart: the passes rungs, and BERT's post-LN size rung too (its size axis is its learning recipe's rungs)
    assert {row["rung"] for rows in chart["datasets"].values() for row in rows} == set()
    pre = summary.assign(rung=summary["rung"].replace({"1x96": "1x96-pre"}))
    assert {row["rung"] for rows in json.loads(report.chart(pre).to_json())["datasets"].values() for row in rows} \
        <= {"1x96-pre"}


def test_a_rung_whose_probe_heads_learned_nothing_gets_no_verdict():
    """Heads whose validation loss is above the untrained towers' heads' (as BERT's at Table 1 size after one epoch
    in bf16) do not count; with fewer than two probes that count the rung says so instead of a verdict."""
    rng = np.random.default_rng(1)
    shared = rng.standard_normal(200)
    exports = []
    for seed in range(1, 5):
        exports.append(_export("big", "bert", seed, "case", shared + 0.3 * rng.standard_normal(200), 0.05, 1000,
                               head_loss=40.0 if seed != 3 else 5.0))
        exports.append(_export("big", "bert", seed, "untrained", rng.standard_normal(200), 0.0005, 1000, head_loss=7.0))
    runs = report.run_rows(exports)
    assert report.valid_seeds(runs) == [3]
    row = report.summary_rows(runs, report.pair_rows(exports)).iloc[0]
    assert row["partition: verdict"] == row["orientation: verdict"] == report.PROBE_FAILED and row["valid probes"] == 1
    assert "no verdict, probe failed (1 of 4 probes count" in report.answer(report.summary_rows(runs, report.pair_rows(exports)))
    # the synthetic cooperative loss (5 nats) against word frequencies at 4.5, 5.4 and 6 nats: the gate needs 0.5
    below, short, above = (report.summary_rows(runs, report.pair_rows(exports), u).iloc[0] for u in (4.5, 5.4, 6.0))
    assert [r["beyond word frequencies"] for r in (below, short, above)] == pytest.approx([-0.5, 0.4, 1.0])
    assert not below["learned context"] and not short["learned context"] and above["learned context"]
    assert "did not learn context: 0.40 nats" in report.answer(short.to_frame().T)
    assert "did not learn context" not in report.answer(above.to_frame().T)
    # untrained controls not probed yet for three seeds: not a failure, not yet a rung
    partial = [e for e in exports if e["kind"] == "case" or e["seed"] == 3]
    row = report.summary_rows(report.run_rows(partial), report.pair_rows(partial)).iloc[0]
    assert row["partition: verdict"] == report.NOT_YET
    assert "fewer than two seeds probed" in report.answer(row.to_frame().T)


def test_the_brief_gives_each_family_its_rungs_in_size_order():
    """The front page's clause per family (`LADDER_BRIEF`): median |r| and verdict per rung, passes, towers that
    learned no context and other probes named."""
    assert report.brief(pd.DataFrame()) == report.NO_RUNG
    rows = pd.DataFrame({"rung": ["2x128", "1x96", "1x96x8", "12x768"], "family": ["gpt", "gpt", "bert", "gpt"],
                         "tower parameters": [100, 10, 10, 1000], "seeds": [2, 4, 4, 4],
                         "passes over the epoch": [1, 1, 8, 1], "partition: median |r|": [0.4, 0.2, 0.3, np.nan],
                         "partition: verdict": ["not attempted", "holds", "holds", "probe failed"],
                         "probed as the ladder probes": [True, True, True, False], "valid probes": [2, 4, 4, 0],
                         "beyond word frequencies": [1.0, 1.0, 1.0, -1.0], "learned context": [True, True, True, False],
                         "cooperative loss": [5, 5, 5, 7],
                         "word frequencies' loss": [6, 6, 6, 6]})
    text = report.brief(rows)
    # the families in the order of the ladder page's answer and table (`rungs.FAMILIES`), not alphabetical
    assert text.startswith("**Along the size ladder**") and "\n  - gpt 1x96" in text and text.index("bert 1x96x8 (8 passes) 0.30 (holds, 4 seeds)") \
        > text.index("gpt 1x96 0.20 (holds, 4 seeds), 2x128 0.40 (not attempted, 2 seeds), "
                     "12x768 no verdict (probe failed, 0 of 4 seeds' probes count; -1.00 nats beyond word frequencies; another probe)")
    assert list(report.in_reading_order(rows)["rung"]) == ["1x96", "2x128", "12x768", "1x96x8"]


def test_the_exports_are_not_ignored_by_git():
    """The committed exports are what later sessions resume from: git must not ignore their folder."""
    import subprocess

    path = runner.export_path("1x96", "gpt", 1, "case")
    ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=runner.RESULTS.parents[1])
    assert ignored.returncode == 1, f"{path} is ignored by .gitignore"


def test_the_corpus_reference_is_written_once(tiny_data, tmp_path, monkeypatch):
    """`reference.json` (the corpus's hash and word-frequency loss) is rewritten only when its numbers change, so a
    resumed ladder leaves no provenance-only change behind it (and the report reading it stays up to date)."""
    import twotower_lib.data as data_mod
    import twotower_lib.data.prepare as prepare_mod

    monkeypatch.setattr(prepare_mod, "prepare_data", lambda *a, **k: None)
    monkeypatch.setattr(data_mod, "load_prepared", lambda path: tiny_data)
    results = tmp_path / "results"
    results.mkdir()
    runner.run_ladder([], [], [], tmp_path / "runs", results)
    path = results / report.REFERENCE
    first, written = path.read_text(), path.stat().st_mtime_ns
    assert json.loads(first)["data_hash"] == tiny_data.data_hash
    runner.run_ladder([], [], [], tmp_path / "runs", results)
    assert path.read_text() == first and path.stat().st_mtime_ns == written
    path.write_text(json.dumps(json.loads(first) | {"unigram_loss": 1.0}))
    runner.run_ladder([], [], [], tmp_path / "runs", results)
    assert json.loads(path.read_text())["unigram_loss"] == json.loads(first)["unigram_loss"]


def test_a_register_rung_trains_its_family_on_one_source_and_answers_beside_brown(tiny_data, tmp_path, monkeypatch):
    """A register rung (the direct register test over seeds) is its size rung's run on another source of the default
    corpus alone: its own prepared data and word-frequency reference, the same steps per epoch of its text; the
    report answers it beside Brown's rung of the same preset, off the size axis, its chart and its trend."""
    books = "2x128-books"
    assert rungs.corpus_of(books) == "books" and rungs.corpus_of("2x128") == rungs.corpus_of("small") == "brown"
    assert books not in size_rungs(False) and runner.size_rung(books) == books
    root = tmp_path / "runs"
    assert runner.data_dir(root) == root / "data" / "prepared" and runner.data_dir(root, "books") != runner.data_dir(root)
    one, alone = (runner.train_config(r, "gpt", 1, tmp_path, tiny_data) for r in ("2x128", books))
    assert (alone.preset, alone.max_steps, alone.micro_batch) == (one.preset, one.max_steps, one.micro_batch)
    rng = np.random.default_rng(3)
    shared = rng.standard_normal(200)
    make = lambda rung, share: [_export(rung, "gpt", seed, kind, (share * shared if kind == "case" else 0)
                                        + rng.standard_normal(200), 0.05, 40) | {"corpus": rungs.corpus_of(rung)}
                                for seed in range(1, 5) for kind in ("case", "untrained")]
    exports = make("1x96", 1.0) + make("2x128", 1.0) + make(books, 1.0) + make("2x128-wiki", 0.0)
    runs = report.run_rows(exports)
    summary = report.summary_rows(runs, report.pair_rows(exports), {"brown": 6.0, "books": 5.6, "wiki": 6.0})
    by_rung = summary.set_index("rung")
    assert by_rung.loc[books, "corpus"] == "books" and by_rung.loc["2x128-wiki", "word frequencies' loss"] == 6.0
    assert by_rung.loc["2x128", "beyond word frequencies"] == pytest.approx(1.0)     # each against its own corpus
    assert by_rung.loc[books, "beyond word frequencies"] == pytest.approx(0.6)
    assert list(summary["rung"]) == ["1x96", "2x128", books, "2x128-wiki"]   # Brown's rungs first, by size
    text = report.answer(summary)
    size_line, register_line = (next(t for t in text.splitlines() if t.startswith(f"- **{k}")) for k in
                                ("gpt**", "gpt, by corpus"))
    assert books not in size_line and "median |r| goes" in size_line
    assert register_line.index("Brown (2x128): median |r|") < register_line.index("Books (2x128): median |r|") \
        < register_line.index("Wiki (2x128): median |r|") and "→" not in register_line
    sentence = report.register_sentence(summary)
    assert "gpt's division repeats across seeds on brown and books alone, not on wiki" in sentence
    said = lambda name, rung: (f"{name} {report._f(by_rung.loc[rung, 'partition: median |r|'])} against "
                               f"{report._f(by_rung.loc[rung, 'partition: controls |r| threshold'])}, ceiling "
                               f"{report._f(by_rung.loc[rung, 'text ceiling (median)'])}")
    assert report.register_sentence(summary[summary["rung"] != "2x128-wiki"]).endswith(
        "on every source alone (median |r| over seed pairs against the untrained towers' threshold, with the text "
        f"ceiling, the |r| of runs with identical scores on the validation text: {said('brown', '2x128')}; "
        f"{said('books', books)}; 2x128, one epoch of a source unless xN names its passes, {rungs.SEEDS} seeds a "
        "source); not yet measured on wiki.")
    assert report.register_sentence(summary.iloc[:2]).startswith("*No register rung")
    # BERT: no division on Brown, once or over three or eight passes, nor on Wikipedia over three; one on the mixed
    # corpus, thinned or not, and on the books
    bert = make("2x128", 0.0) + make("2x128-mixed", 1.0) + make("2x128x3-thinned", 1.0) + make("2x128x8", 0.0) \
        + make("2x128x3-books", 1.0) + make("2x128x3-wiki", 0.0) + make("2x128x3", 0.0)
    bert = [e | {"family": "bert"} for e in bert]
    both = report.summary_rows(report.run_rows(exports + bert), report.pair_rows(exports + bert), UNIGRAM)
    assert "bert's division repeats across seeds on no source alone, not on brown; with the same recipe on the mixed " \
           "corpus (every source together) it repeats; over 3 passes of each source alone it repeats on books alone, " \
           "not on brown, wiki; over 8 passes of brown alone it does not repeat; on the mixed corpus thinned to " \
           "Brown's number of training tokens and trained 3 passes (as many steps as 3 passes of Brown) it repeats " \
           "(median |r|" \
           in report.register_sentence(both)
    number = r" [0-9.]+ against [0-9.]+, ceiling [0-9.—]+; "
    assert re.search(f": brown{number}the mixed corpus{number}brown x3{number}books x3{number}wiki x3{number}brown x8"
                     f"{number}the thinned mixed corpus{number}" r"2x128, one epoch of a source unless xN names its "
                     r"passes, 4 seeds a source\)",
                     report.register_sentence(both))
    without = both[~both["rung"].isin(["2x128x3", "2x128x3-wiki"])]   # one source over three passes: named alone
    assert "; over 3 passes of books alone it repeats; over 8 passes" in report.register_sentence(without)
    assert report.register_sentence(without).endswith("; not yet measured on wiki x3.")
    assert "The mixed corpus (2x128): median |r|" in report.answer(both) and "2x128 on the mixed corpus " in report.brief(both)
    bert_line = next(t for t in report.answer(both).splitlines() if t.startswith("- **bert, by corpus"))
    assert bert_line.index("Brown (2x128): median |r|") < bert_line.index("Brown (2x128x3): median |r|") \
        < bert_line.index("The thinned mixed corpus (2x128x3): median |r|") and "2x128x8" not in bert_line
    assert "2x128x3-thinned" not in report.progress(report.run_rows(exports + bert)).split("the register axis")[0]
    assert "2x128x3 on the thinned mixed corpus (3 passes) " in report.brief(both)
    assert report.register_verdicts(both)[("bert", "cpu")] == {"brown": "not"}    # sources alone, not the mixtures
    chart = json.loads(report.chart(summary).to_json())
    assert {row["rung"] for rows in chart["datasets"].values() for row in rows} == {"1x96", "2x128"}
    assert f"{books} (gpt, books alone): 4 of {rungs.SEEDS} runs" in report.progress(runs)
    brief = report.brief(summary)
    assert brief.index("gpt 1x96") < brief.index(", 2x128 ") < brief.index("2x128 on books alone") \
        < brief.index("2x128 on wiki alone")


def test_each_corpus_source_is_prepared_and_referenced_on_its_own(tiny_data, tmp_path, monkeypatch):
    """The runner prepares Brown and every register rung's source into folders of their own and records each
    source's hash and word-frequency loss in its own reference file, which the report reads back."""
    import twotower_lib.data as data_mod
    import twotower_lib.data.prepare as prepare_mod

    prepared = []
    monkeypatch.setattr(prepare_mod, "prepare_data", lambda cfg, out: prepared.append((cfg.corpus, out)))
    monkeypatch.setattr(data_mod, "load_prepared", lambda path: tiny_data)
    results = tmp_path / "results"
    results.mkdir()
    runner.run_ladder([], ["2x128-books"], ["gpt"], tmp_path / "runs", results)
    assert prepared == [("registry:brown", runner.data_dir(tmp_path / "runs")),
                        ("registry:books", runner.data_dir(tmp_path / "runs", "books"))]
    assert {p.name for p in results.iterdir()} == {report.REFERENCE, report.reference_name("books")}
    assert report.unigram_loss(results, "books") == pytest.approx(tiny_data.unigram_loss())
    assert np.isnan(report.unigram_loss(results, "wiki"))


def test_a_rung_added_to_the_ladder_changes_no_other_rungs_pairs():
    """The shuffled-label null is seeded per pair: the report's rows for one rung are the same whether or not another
    rung (sorting before it) has been measured."""
    rng = np.random.default_rng(5)
    make = lambda rung: [_export(rung, "bert", seed, kind, rng.standard_normal(200), 0.05, 40)
                         for seed in range(1, 4) for kind in ("case", "untrained")]
    late, early = make("4x256"), make("2x128")
    alone, both = report.pair_rows(late), report.pair_rows(early + late)
    pd.testing.assert_frame_equal(alone, both[both["rung"] == "4x256"].reset_index(drop=True))
    assert (alone["kind"] == "shuffled").sum() == 3


def test_the_thinned_corpus_keeps_the_mixture_and_its_validation_text_at_browns_size(tiny_data, tmp_path):
    """`runner.thin` keeps Brown's number of the mixture's training blocks, evenly spread over its stream (so every
    source keeps its share), each block whole, with the mixture's tokenizer, validation text and documents and the
    kept blocks' own counts; it is written once, and refuses a "Brown" no smaller than the mixture."""
    from types import SimpleNamespace

    from twotower_lib.data import load_prepared

    n = len(tiny_data.train)
    brown = SimpleNamespace(train=np.zeros((n // 3, tiny_data.seq_len)), data_hash="brown")
    out = tmp_path / "thinned"
    runner.thin(tiny_data, out, brown)
    thinned = load_prepared(out)
    assert len(thinned.train) == n // 3 and thinned.data_hash not in (tiny_data.data_hash, "brown")
    rows = [next(i for i in range(n) if np.array_equal(tiny_data.train[i], row)) for row in thinned.train]
    assert rows == sorted(rows) and max(np.diff([-1, *rows, n])) <= -(-n // (n // 3))   # no gap over n / kept
    assert np.array_equal(thinned.train_doc_ids, tiny_data.train_doc_ids[rows])
    assert np.array_equal(thinned.valid, tiny_data.valid) and thinned.tokens == tiny_data.tokens
    assert np.array_equal(thinned.counts, np.bincount(np.asarray(thinned.train).ravel(), minlength=len(tiny_data.counts)))
    assert thinned.manifest["thinned"]["from"] == tiny_data.data_hash
    written = (out / "manifest.json").stat().st_mtime_ns
    runner.thin(tiny_data, out, brown)
    assert (out / "manifest.json").stat().st_mtime_ns == written
    with pytest.raises(runner.UserError, match="not larger"):
        runner.thin(tiny_data, tmp_path / "other", SimpleNamespace(train=tiny_data.train, data_hash="brown"))


def test_the_register_rungs_decide_their_familys_part_of_the_register_verdict(tmp_path):
    """Where the ladder's register rungs train a family of the register study's pairs at its preset on every source
    alone, the seeds decide that family's part of the register verdict (the others keep their seed pair); a source
    still short of its seeds leaves the verdict to the pairs."""
    from studies.register import report as register
    from twotower_lib import paper

    table = register.load()
    pairs = register.holds_alone(table)
    summary = pd.DataFrame({"rung": ["2x128", "2x128-books", "2x128-wiki", "2x128"], "family": ["gpt"] * 3 + ["bert"],
                            "partition: verdict": ["holds", "holds", "not", "holds"]})
    path = tmp_path / "summary.csv"
    summary.to_csv(path, index=False)
    seeds = register.over_seeds("cpu", path)
    assert seeds["gpt"] == {"brown": "holds", "books": "holds", "wiki": "not"} and "bert-large" not in seeds
    found = register.verdict_over_seeds(table, path)
    bert = len(pairs["bert-large"]["agrees"]) + len(pairs["bert-large"]["swapped"])
    assert found["verdict"] == paper.register_verdict([2, bert], [3, 3])
    assert "GPT's division repeats across seeds on books and brown alone, not on wiki (the size ladder's" in found["seeds"]
    assert "Bert-large's one seed pair splits the tokens on " in found["seeds"] and "seeds" in found["over"]
    assert not found["this_run"]          # the row's own text is the one-pair study's, not a run's: replaced
    from twotower_lib.book import study_parts
    from twotower_lib.book.scorecard import decide_over_seeds

    study_parts.write(tmp_path / "register", {}, {}, [], "test", verdicts={"register@cpu": found})
    row = {"id": "register", "ours": register.sentence(table), "verdict": "partly", "note": "one seed pair per corpus"}
    decided = decide_over_seeds([row], "cpu", tmp_path)[0]
    assert (decided["ours"], decided["verdict"], decided["caveat"]) == (found["seeds"], found["verdict"], found["caveat"])
    assert decided["note"].startswith("verdict over seeds on each source alone") and "This run" not in decided["note"]
    assert decide_over_seeds([decided], "cpu", tmp_path)[0] == decided      # decided anew, not twice
    summary["partition: verdict"] = "holds"
    summary.to_csv(path, index=False)
    assert "GPT's division repeats across seeds on every source alone" in register.verdict_over_seeds(table, path)["seeds"]
    summary.loc[1, "partition: verdict"] = "unstable"
    summary.to_csv(path, index=False)
    assert "on wiki and brown alone, not on books (unstable)" in register.verdict_over_seeds(table, path)["seeds"]
    summary.loc[2, "partition: verdict"] = "not attempted"
    summary.to_csv(path, index=False)
    assert register.verdict_over_seeds(table, path) is None
    assert register.verdict_over_seeds(table, tmp_path / "none.csv") is None


def test_the_opening_table_reads_the_size_trend_from_seed_bootstrap_intervals():
    """The ladder page opens with a table of the size rungs and one sentence on the trend, read from the seed-bootstrap
    intervals of the median |r| (not from labels); a family with no two rungs with a verdict has no trend to read."""
    pairs = pd.DataFrame([(a, b, 0.5) for a, b in itertools.combinations(range(1, 5), 2)], columns=["seed_a", "seed_b", "r"])
    assert report.seed_bootstrap(pairs) == (0.5, 0.5)
    assert np.isnan(report.seed_bootstrap(pairs.iloc[:0])[0])
    spread_r = pairs.assign(r=[0.1, -0.2, 0.3, 0.4, -0.5, 0.6])
    lo, hi = report.seed_bootstrap(spread_r)
    assert 0.1 <= lo < np.median(np.abs(spread_r["r"])) < hi <= 0.6
    assert report.seed_bootstrap(spread_r) == (lo, hi)                     # one seed, one interval
    row = lambda family, rung, p, m, lo, hi, verdict: {"family": family, "rung": rung, "tower parameters": p,
                                                        "median |r|": m, "interval low": lo, "interval high": hi,
                                                        "beyond word frequencies": 1.0, "text ceiling": 0.8,
                                                        "verdict": verdict}
    table = pd.DataFrame([row("gpt", "1x96", 1, 0.15, 0.1, 0.2, "holds"), row("gpt", "4x256", 3, 0.35, 0.3, 0.4, "holds"),
                          row("elmo", "1x96", 1, 0.15, 0.1, 0.3, "unstable"), row("elmo", "4x256", 3, 0.2, 0.15, 0.4, "holds"),
                          row("bert", "1x96", 1, 0.1, 0.0, 0.2, "no verdict"), row("bert", "4x256", 3, 0.5, 0.4, 0.6, "no verdict")])
    text = report.trend_sentence(table)
    assert "gpt's median |r| grows from 1×96 (0.15, 0.10–0.20) to 4×256 (0.35, 0.30–0.40)" in text
    assert "elmo's median |r| shows no trend that the intervals resolve" in text
    assert "bert: fewer than two rungs with a verdict (2 of 2 without" in text
    assert "falls" in report.trend_sentence(table.assign(**{"interval low": [0.3, 0.1, 0, 0, 0, 0],
                                                            "interval high": [0.4, 0.2, 1, 1, 1, 1]}))
    head = report.head_markdown(table)
    assert "| gpt | 1×96 | 0.15 | 0.10–0.20 | +1.00 | 0.80 | holds |" in head and head.endswith(text + "\n")
    # a rung measured with another probe than the ladder's today is shown, labelled, and read in no trend (as the chart)
    older = table.assign(**{"current probe": [True, False, True, True, True, True]})
    assert "gpt: fewer than two rungs with a verdict" in report.trend_sentence(older)
    assert "| gpt | 4×256 (another probe) | 0.35 |" in report.head_markdown(older)
    # BERT's size axis is its learning recipe's rungs; its post-LN size rungs are named in a note, off the axis
    summary = pd.DataFrame({"rung": ["2x128", "2x128-pre", "2x128", "2x128x8"], "family": ["bert", "bert", "gpt", "bert"],
                            "beyond word frequencies": [-0.05, 1.1, 1.0, 0.1]})
    assert [on_size_axis(r, f) for r, f in zip(summary["rung"], summary["family"])] == [False, True, True, False]
    note = report.recipe_note(summary)
    assert note.startswith("**Recipe note.** BERT's rungs with the ladder's post-LN recipe (2×128) are off the axis: "
                           "-0.05 to -0.05 nats") and report.head_markdown(table, note).endswith(note + "\n")
    assert report.recipe_note(summary[summary["family"] == "gpt"]) == ""
    assert RUNGS["4x256-pre"].recipe == RUNGS["24x512-pre"].recipe and RUNGS["4x256-pre"].preset == RUNGS["4x256"].preset
