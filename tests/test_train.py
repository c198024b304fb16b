"""DeepSpeed training: run directory, resume, divergence, snapshots, multi-process equivalence."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import interrupt_training_at
from twotower_lib.errors import UserError
from twotower_lib.models import TwoTowerLM, list_snapshots, load_model
from twotower_lib.train.deepspeed_setup import _free_port as free_port, deepspeed_config, params_sha256
from twotower_lib.models.config import released_options
from twotower_lib.train.loop import TrainConfig, TrainingDiverged, train
from twotower_lib.train.config import lr_at, parse_duration
from twotower_lib.train.batches import evaluate

REPO = Path(__file__).resolve().parent.parent


def tcfg(model="gpt", **kw) -> TrainConfig:
    base = dict(model=model, preset="tiny", seed=1, max_steps=12, micro_batch=4, grad_accum=2, precision="fp32",
                log_every_steps=4, eval_every_steps=4, eval_blocks=8, snapshot_every_tokens=2048)
    return TrainConfig(**{**base, **kw})


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(path)


def assert_same_weights(a: dict, b: dict, atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0.0 if atol == 0 else 1e-5, msg=k)


@pytest.mark.parametrize("model", ["gpt", "elmo", "bert"])
def test_run_directory(tiny_data, tmp_path, model):
    out = tmp_path / model
    summary = train(tcfg(model, max_steps=24, grad_accum=1, micro_batch=8, eval_every_steps=8), tiny_data, out,
                    show_progress=False)
    assert summary["steps"] == 24 and summary["tokens_seen"] == 24 * 8 * tiny_data.seq_len
    for name in ("model.safetensors", "config.json", "manifest.json", "log.jsonl"):
        assert (out / name).is_file(), name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["data_hash"] == tiny_data.data_hash
    assert manifest["seed"] == 1 and manifest["code_version"] and manifest["packages"]["torch"] == torch.__version__
    assert manifest["config"]["model"]["model_type"] == model
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [4, 8, 12, 16, 20, 24]
    assert all(r["tokens_per_s"] > 0 for r in log)
    val = [r["val_loss"] for r in log if "val_loss" in r]
    assert len(val) == 3
    # Learning happened: the final weights beat the initial snapshot on validation data.
    model_final, cfg = load_model(out)
    model_init, _ = load_model(out, snapshot=0)
    t = tcfg(model)
    assert evaluate(model_final, tiny_data, t, 8, False) < evaluate(model_init, tiny_data, t, 8, False) - 0.1
    assert val[-1] == pytest.approx(evaluate(model_final, tiny_data, t, 8, False), rel=1e-5)
    snaps = [tokens for tokens, _ in list_snapshots(out)]
    assert snaps[0] == 0 and snaps[-1] == summary["tokens_seen"] and snaps == sorted(snaps) and len(snaps) >= 3
    assert 12 * 8 * tiny_data.seq_len in snaps                       # half way, for the quality-gap control
    from twotower_lib.book.probing import half_way_snapshot

    assert half_way_snapshot(out) == 12 * 8 * tiny_data.seq_len
    assert manifest["param_sha256_by_rank"] == [params_sha256(model_final)]
    by_name, _ = load_model(out, snapshot=list_snapshots(out)[-1][1].stem)  # the last snapshot is the final model
    assert params_sha256(by_name) == params_sha256(model_final)
    with pytest.raises(UserError, match="snapshots available"):
        load_model(out, snapshot="tokens-999")


@pytest.mark.parametrize("engine", ["deepspeed", "torch"])
def test_resume_equals_uninterrupted(tiny_data, tmp_path, monkeypatch, engine):
    import twotower_lib.train.loop as train_mod

    full = tmp_path / "full"
    train(tcfg("bert", checkpoint_every_steps=5, engine=engine), tiny_data, full, show_progress=False)

    # Interrupt the second run during step 7 (after the step-5 checkpoint).
    part = tmp_path / "part"
    real = interrupt_training_at(monkeypatch, 7)
    with pytest.raises(KeyboardInterrupt):
        train(tcfg("bert", checkpoint_every_steps=5, engine=engine), tiny_data, part, show_progress=False)
    assert not (part / "model.safetensors").exists()
    monkeypatch.setattr(train_mod, "micro_batch", real)
    with pytest.raises(UserError, match="--resume"):
        train(tcfg("bert", checkpoint_every_steps=5, engine=engine), tiny_data, part, show_progress=False)
    steps_run = []

    def recording(data, order, cfg, step, *args):
        steps_run.append(step)
        return real(data, order, cfg, step, *args)

    monkeypatch.setattr(train_mod, "micro_batch", recording)
    train(tcfg("bert", checkpoint_every_steps=5, engine=engine), tiny_data, part, resume=True, show_progress=False)
    assert min(steps_run) == 5  # continued from the step-5 checkpoint, not from scratch

    assert_same_weights(weights(full / "model.safetensors"), weights(part / "model.safetensors"))
    log_full = [json.loads(x) for x in (full / "log.jsonl").read_text().splitlines()]
    log_part = [json.loads(x) for x in (part / "log.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in log_full] == [(r["step"], r["loss"]) for r in log_part]

    # A different setup cannot resume into that directory.
    with pytest.raises(UserError, match="different run setup"):
        train(tcfg("bert", checkpoint_every_steps=5, seed=2, max_steps=20), tiny_data, part, resume=True,
              show_progress=False)


@pytest.mark.parametrize("stop_at", ["before the config", "after the config", "mid-checkpoint", "after a checkpoint",
                                     "finished"])
def test_pipeline_run_folder_restarts_from_any_moment(tiny_data, tmp_path, monkeypatch, stop_at):
    """`train_job` (the pipeline's and the studies' entry) turns a folder killed at any moment into the same run:
    before its first complete checkpoint it starts over, after it resumes, finished it is kept."""
    import twotower_lib.train.loop as train_mod
    from twotower_lib.train.checkpoints import latest_checkpoint

    data_path = str(tiny_data.path)
    cfg = tcfg("gpt", checkpoint_every_steps=5)
    full = tmp_path / "full"
    train_mod.train_job(cfg, data_path, str(full))
    out = tmp_path / "killed"
    if stop_at == "before the config":
        out.mkdir()
    elif stop_at in ("after the config", "mid-checkpoint"):
        real = interrupt_training_at(monkeypatch, 3)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, tiny_data, out, show_progress=False)
        monkeypatch.setattr(train_mod, "micro_batch", real)
        # the moment before the first checkpoint (step 0's) is complete: none, or one without its state.json
        step0 = latest_checkpoint(out)
        if stop_at == "after the config":
            shutil.rmtree(out / "checkpoints")
        else:
            (step0 / "state.json").unlink()
        assert (out / "config.json").exists() and latest_checkpoint(out) is None
    elif stop_at == "after a checkpoint":
        real = interrupt_training_at(monkeypatch, 7)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, tiny_data, out, show_progress=False)
        monkeypatch.setattr(train_mod, "micro_batch", real)
    else:
        train_mod.train_job(cfg, data_path, str(out))
    train_mod.train_job(cfg, data_path, str(out))
    assert_same_weights(weights(full / "model.safetensors"), weights(out / "model.safetensors"))
    log = lambda p: [(r["step"], r["loss"]) for r in map(json.loads, (p / "log.jsonl").read_text().splitlines())]
    assert log(full) == log(out)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tiny_data, tmp_path, monkeypatch):
    calls = {"n": 0}
    real_forward = TwoTowerLM.forward

    def poisoned(self, *args, **kw):
        loss, logits = real_forward(self, *args, **kw)
        if self.training:
            calls["n"] += 1
            if calls["n"] > 2 * 6:  # micro-batches of steps 0..5 are fine, step 6 diverges
                loss = loss * float("nan")
        return loss, logits

    monkeypatch.setattr(TwoTowerLM, "forward", poisoned)
    out = tmp_path / "nan"
    # Steps 0..5 complete (checkpoint step-000000006 = state after 6 good steps); step 6 diverges.
    with pytest.raises(TrainingDiverged, match=r"nan at step 6.*step-000000006"):
        train(tcfg(checkpoint_every_steps=2), tiny_data, out, show_progress=False)
    assert not (out / "model.safetensors").exists()
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["step-000000004", "step-000000006"]
    state = json.loads((out / "checkpoints" / "step-000000006" / "state.json").read_text())
    assert state["step"] == 6
    for tensor in load_file(out / "checkpoints" / "step-000000006" / "model.safetensors").values():
        assert torch.isfinite(tensor).all()


def test_wall_clock_budget(tiny_data, tmp_path, monkeypatch):
    # The training loop's clock is faked (0.1 s per reading), so the test does not depend on how
    # busy the machine is: the run must stop at the first step that ends past its 4 s budget.
    import types

    from twotower_lib.train import loop as train_module

    ticks = iter(range(10**6))
    monkeypatch.setattr(train_module, "time", types.SimpleNamespace(monotonic=lambda: next(ticks) / 10))
    summary = train(tcfg(max_steps=None, budget_s=4.0, checkpoint_every_s=1.0, log_every_steps=1), tiny_data,
                    tmp_path / "b", show_progress=False)
    assert 4.0 <= summary["wall_time_s"] < 4.6 and 3 <= summary["steps"] < 40
    log = [json.loads(x) for x in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == summary["steps"]
    lrs = [r["lr"] for r in log]
    top = lrs.index(max(lrs))
    assert lrs[top:] == sorted(lrs[top:], reverse=True) and lrs[-1] < lrs[top]  # decays over the budget


def test_the_log_times_each_step_alone(tiny_data, tmp_path, monkeypatch):
    """`step_s` in log.jsonl is the optimizer steps' own seconds, without the evaluations, snapshots and
    checkpoints between them (the run's elapsed time holds those); the users'-path bench
    (benchmarks/bench_train_path.py) reads it."""
    import types

    from twotower_lib.train import loop as train_module

    clock = {"t": 0.0}

    def monotonic():  # every reading of the loop's clock advances it by 0.1 s
        clock["t"] += 0.1
        return clock["t"]

    def slow_evaluate(*args, **kwargs):
        clock["t"] += 5.0
        return real_evaluate(*args, **kwargs)

    real_evaluate = train_module.evaluate
    monkeypatch.setattr(train_module, "time", types.SimpleNamespace(monotonic=monotonic))
    monkeypatch.setattr(train_module, "evaluate", slow_evaluate)
    train(tcfg(max_steps=4, log_every_steps=1, eval_every_steps=2), tiny_data, tmp_path / "r", show_progress=False)
    log = [json.loads(x) for x in (tmp_path / "r" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4] and [r["step_s"] for r in log] == [0.1] * 4
    assert log[2]["elapsed_s"] - log[1]["elapsed_s"] > 5     # step 3's interval holds step 2's evaluation
    assert "peak_memory_gib" not in log[0]                  # a CPU run logs no GPU memory


def test_schedule_and_durations():
    assert parse_duration("10m") == 600 and parse_duration("1h30m") == 5400 and parse_duration("45") == 45
    with pytest.raises(UserError, match="duration"):
        parse_duration("ten minutes")
    assert lr_at(0.0, 1e-3, 0.1) == 0.0
    assert lr_at(0.1, 1e-3, 0.1) == pytest.approx(1e-3)
    assert lr_at(0.55, 1e-3, 0.1) == pytest.approx(0.5e-3)
    assert lr_at(1.0, 1e-3, 0.1) == 0.0
    # the decay can end above 0: at 1.0 the rate stays at the peak after warm-up
    assert lr_at(1.0, 1e-3, 0.1, final=0.2) == pytest.approx(0.2e-3)
    assert lr_at(0.55, 1e-3, 0.1, final=0.2) == pytest.approx(0.6e-3)
    assert lr_at(0.05, 1e-3, 0.1, final=1.0) == pytest.approx(0.5e-3)
    assert lr_at(0.7, 1e-3, 0.1, final=1.0) == pytest.approx(1e-3)


def test_learning_rate_knobs(tiny_data, tmp_path):
    """--lr replaces the DeepSpeed config's peak; --final-lr-fraction 1 keeps it after warm-up; both are
    part of what --resume checks, and bad values are refused."""
    summary = train(tcfg(max_steps=12, lr=4e-3, final_lr_fraction=1.0, warmup_fraction=0.25, log_every_steps=1),
                    tiny_data, tmp_path / "c", show_progress=False)
    log = [json.loads(x) for x in (tmp_path / "c" / "log.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in log[3:]] == pytest.approx([4e-3] * (summary["steps"] - 3))
    assert summary["config"]["train"]["lr"] == 4e-3
    assert deepspeed_config(tcfg(lr=4e-3))["optimizer"]["params"]["lr"] == 4e-3
    with pytest.raises(UserError, match="different run setup"):
        train(tcfg(max_steps=14, lr=2e-3, final_lr_fraction=1.0, warmup_fraction=0.25), tiny_data,
              tmp_path / "c", resume=True, show_progress=False)
    for bad, match in (({"lr": 0.0}, "--lr"), ({"lr": 3.0}, "--lr"), ({"final_lr_fraction": 1.5}, "final-lr")):
        with pytest.raises(UserError, match=match):
            tcfg(**bad).validate()


def test_bert_recipe_knobs_train_pre_ln_towers_with_the_asked_masking_and_are_part_of_the_run(tiny_data, tmp_path):
    """--norm-scheme pre trains pre-LN BERT towers, --mask-rate/--mask-style decide the training masks (the
    validation loss stays on 15% all-[MASK], the probe's events), --grad-clip sets DeepSpeed's clipping; each is
    recorded in the run and checked by --resume, and bad values are refused."""
    from twotower_lib.train.batches import BlockOrder, micro_batch

    cfg = tcfg("bert", norm_scheme="pre", mask_rate=0.4, mask_style="mask", grad_clip=0.5, max_steps=4)
    summary = train(cfg, tiny_data, tmp_path / "b", show_progress=False)
    model, _ = load_model(tmp_path / "b")
    assert model.cfg.norm_scheme == "pre" and isinstance(model.towers[0].ln_f, torch.nn.LayerNorm)
    assert {k: summary["config"]["train"][k] for k in ("mask_rate", "mask_style", "grad_clip")} == \
        {"mask_rate": 0.4, "mask_style": "mask", "grad_clip": 0.5}
    assert deepspeed_config(cfg)["gradient_clipping"] == 0.5
    order = BlockOrder(len(tiny_data.train), cfg.seed)
    inputs, labels = micro_batch(tiny_data, order, cfg, step=0, micro=0, rank=0, world=1, micro_size=4, accum=1)
    chosen = labels != -100
    assert (inputs[chosen] == tiny_data.special_ids["mask"]).all()          # every chosen position reads [MASK]
    assert 0.3 < chosen.float().mean().item() < 0.5                          # about 40% of them
    with pytest.raises(UserError, match="different run setup"):
        train(tcfg("bert", norm_scheme="pre", max_steps=6), tiny_data, tmp_path / "b", resume=True, show_progress=False)
    for bad, match in (({"mask_rate": 0.0}, "--mask-rate"), ({"mask_rate": 1.0}, "--mask-rate"),
                       ({"mask_style": "blank"}, "--mask-style"), ({"grad_clip": -1.0}, "--grad-clip")):
        with pytest.raises(UserError, match=match):
            tcfg("bert", **bad).validate()
    with pytest.raises(UserError, match="--norm-scheme is where BERT's layers normalise"):
        tcfg("gpt", norm_scheme="pre").validate()


def test_bad_inputs(tiny_data, tmp_path, monkeypatch):
    with pytest.raises(UserError, match="budget"):
        train(tcfg(max_steps=None), tiny_data, tmp_path / "x", show_progress=False)
    monkeypatch.setenv("TWOTOWER_DATA", str(tmp_path / "empty-cache"))  # no default prepared data there
    with pytest.raises(UserError, match="data prepare"):
        subprocess_cli(["train", "--model", "gpt", "--preset", "tiny", "--max-steps", "1",
                        "--out", str(tmp_path / "y")], check_error=True)
    with pytest.raises(UserError, match="no config.json"):
        load_model(tmp_path)


def subprocess_cli(argv: list[str], check_error: bool = False) -> None:
    from twotower_lib.__main__ import main

    os.environ["TWOTOWER_DEBUG"] = "1"  # let UserError propagate instead of printing it
    try:
        main(argv)
    finally:
        del os.environ["TWOTOWER_DEBUG"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["deepspeed", "torch", "torch-compile-layers"])
def test_two_processes_match_one(tiny_data, tmp_path, engine):
    """2 gloo processes x 1 micro-batch == 1 process x 2 accumulated micro-batches, same global batch: DeepSpeed's
    engine, and the torch engines under PyTorch's DistributedDataParallel (`torchrun`, the same variables)."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    common = ["-m", "twotower_lib", "train", "--model", "gpt", "--preset", "tiny", "--max-steps", "6",
              "--precision", "fp32", "--data", str(tiny_data.path), "--micro-batch", "4", "--engine", engine]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          f"--master_port={free_port()}", *common, "--grad-accum", "1", "--out", str(tmp_path / "two")],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    one = subprocess.run([sys.executable, *common, "--grad-accum", "2", "--out", str(tmp_path / "one")],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]

    manifest = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["engine"] == engine
    log = lambda name: [(r["step"], r["loss"]) for r in map(json.loads, (tmp_path / name / "log.jsonl").read_text().splitlines())]
    assert [s for s, _ in log("two")] == [s for s, _ in log("one")]
    assert all(abs(a - b) < 1e-5 for (_, a), (_, b) in zip(log("two"), log("one")))   # the same losses, to rounding
    hashes = manifest["param_sha256_by_rank"]
    assert len(hashes) == 2 and hashes[0] == hashes[1]
    w_two, w_one = weights(tmp_path / "two" / "model.safetensors"), weights(tmp_path / "one" / "model.safetensors")
    assert_same_weights(w_two, w_one, atol=1e-5)
    # ... and training moved the weights well beyond that tolerance.
    w_init = weights(tmp_path / "one" / "snapshots" / "tokens-000000000000.safetensors")
    assert max((w_one[k] - w_init[k]).abs().max().item() for k in w_one) > 1e-3


def test_precision_picks_the_deepspeed_config(monkeypatch):
    """On a GPU the precision chooses the mixed-precision config (the paper profile's fp16 gets the
    paper's loss-scaled fp16); on a CPU fp16 is refused with what to use instead."""
    from twotower_lib.train.deepspeed_setup import ds_precision

    assert ds_precision(deepspeed_config(tcfg(precision="auto"))) == "fp32"        # CPU: fp32 weights
    # CPU autocast only when asked for: `auto` is fp32 even with native bf16 and AMX tiles
    from twotower_lib.train.deepspeed_setup import use_bf16_autocast

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert not use_bf16_autocast(tcfg(model="gpt", precision="auto"))
    assert use_bf16_autocast(tcfg(model="gpt", precision="bf16"))
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    with pytest.raises(UserError, match="no native bf16"):
        use_bf16_autocast(tcfg(model="gpt", precision="bf16"))
    with pytest.raises(UserError, match="fp16 needs a GPU"):
        deepspeed_config(tcfg(precision="fp16"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    picked = {p: deepspeed_config(tcfg(precision=p)) for p in ("auto", "bf16", "fp16", "fp32")}
    assert {p: ds_precision(ds) for p, ds in picked.items()} == {"auto": "bf16", "bf16": "bf16", "fp16": "fp16",
                                                                  "fp32": "fp32"}
    assert picked["fp16"]["_source"].endswith("deepspeed_gpu_fp16.json")
    assert picked["fp16"]["fp16"]["loss_scale"] == 0                               # dynamic loss scaling
    with pytest.raises(UserError, match="--precision must be one of"):
        tcfg(precision="fp8").validate()


def test_a_port_taken_between_picking_and_binding_is_replaced(monkeypatch):
    """`init_distributed` picks a free port for a run without a launcher; if another process takes it
    before the store binds (seen in CI: EADDRINUSE), it picks another instead of failing the run."""
    import deepspeed
    import torch

    from twotower_lib.train import deepspeed_setup as setup

    ports, fail = [], [True]

    def fake_init(**_kw):
        ports.append(os.environ["MASTER_PORT"])
        if fail and fail.pop():
            raise torch.distributed.DistNetworkError("EADDRINUSE: address already in use")

    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", setup.OWN_PORT_ENV):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(deepspeed, "init_distributed", fake_init)
    monkeypatch.setattr(setup.atexit, "register", lambda f: None)
    setup.init_distributed()
    assert len(ports) == 2 and os.environ[setup.OWN_PORT_ENV] == ports[1]
    # a child of that process (a notebook kernel) inherits its rank and port: the port is the parent's, in use
    ports.clear()
    setup.init_distributed()
    assert len(ports) == 1 and os.environ["MASTER_PORT"] == ports[0]
    monkeypatch.setenv("RANK", "0")                   # under a launcher the port is not ours to change
    monkeypatch.setenv("MASTER_PORT", "29500")
    ports.clear()
    fail.append(True)
    with pytest.raises(torch.distributed.DistNetworkError):
        setup.init_distributed()
    assert len(ports) == 1


def test_one_recipe_turns_a_token_budget_into_steps():
    cfg = TrainConfig.for_tokens("gpt", "tiny", 3, tokens=10_000, micro_batch=8, seq_len=32, lr=2e-3)
    assert cfg.max_steps == 40 and cfg.grad_accum == 1 and cfg.seed == 3 and cfg.lr == 2e-3  # ceil(10000 / 256)
    assert cfg.eval_every_steps == 10 and cfg.max_steps * cfg.micro_batch * 32 >= 10_000
    assert TrainConfig.for_tokens("gpt", "tiny", 1, 1, 8, 32).max_steps == 1
    assert TrainConfig.for_tokens("gpt", "tiny", 1, 10_000, 8, 32, eval_every_steps=7).eval_every_steps == 7
    with pytest.raises(UserError, match="--model"):
        TrainConfig.for_tokens("lstm", "tiny", 1, 10_000, 8, 32)
    six = TrainConfig.for_tokens("gpt", "tiny", 1, 10_000, 8, 32, grad_accum=2, world_size=6)
    assert six.max_steps == 4 and six.world_size == 6  # ceil(10000 / (8 x 2 x 6 x 32))


def test_a_run_on_another_number_of_processes_than_its_steps_were_computed_for_stops(tiny_data, tmp_path):
    cfg = TrainConfig.for_tokens("gpt", "tiny", 1, 10_000, 8, 32, world_size=2, precision="fp32")
    with pytest.raises(UserError, match="computed for 2 process"):
        train(cfg, tiny_data, tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run").exists()


def test_as_released_builds_the_released_models_and_loads_them_back(tiny_data, tmp_path):
    summary = train(tcfg("elmo", max_steps=2, as_released=True), tiny_data, tmp_path / "elmo", show_progress=False)
    assert summary["config"]["model"]["elmo_backward_zeroed"] is True
    model, cfg = load_model(tmp_path / "elmo")
    assert cfg.elmo_backward_zeroed and model.towers[0].backward_zeroed and model.emb_ln_backward is not None
    for family in ("gpt", "bert"):
        train(tcfg(family, max_steps=2, as_released=True), tiny_data, tmp_path / family, show_progress=False)
        _, cfg = load_model(tmp_path / family)
        assert cfg.layout == "released"
    with pytest.raises(UserError, match="no as-released variant of model type 'lstm'"):
        released_options("lstm")


@pytest.mark.parametrize("given, fixed", [("9.0a", "9.0"), ("8.0;9.0a+PTX", "8.0;9.0+PTX"), ("9.0 10.0f", "9.0 10.0"),
                                          ("7.5;8.6", "7.5;8.6")])
def test_arch_specific_cuda_targets_are_dropped_for_deepspeeds_op_builder(monkeypatch, given, fixed):
    """The reference H100's image sets TORCH_CUDA_ARCH_LIST=9.0a, which DeepSpeed 0.19.8 cannot parse."""
    from twotower_lib.cuda_arch import cuda_arch_list_for_deepspeed

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", given)
    cuda_arch_list_for_deepspeed()
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == fixed


def test_a_process_group_builds_no_op_that_training_never_calls(tmp_path):
    """DeepSpeed's torch backend would JIT-build its shared-memory all-reduce (inference only) for every new
    environment's first run, about 30 s of a newcomer's first minute; the process group starts without it."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}
    code = ("import torch; from twotower_lib.train.deepspeed_setup import init_distributed; init_distributed(); "
            "print('world', torch.distributed.get_world_size())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=300, env=env | {"TORCH_EXTENSIONS_DIR": str(tmp_path), "DS_ACCELERATOR": "cpu"})
    assert out.returncode == 0, out.stderr
    assert "world 1" in out.stdout and not any(tmp_path.rglob("*shm*"))


def test_a_lock_left_by_an_interrupted_op_build_is_removed_and_a_fresh_one_kept(tmp_path, monkeypatch, capsys):
    """A run killed while DeepSpeed JIT-built its fused Adam leaves torch's lock file; without this, every later
    run waits on it forever. A lock younger than the limit may be a build in progress."""
    from twotower_lib.train.deepspeed_setup import STALE_BUILD_LOCK_S, clear_stale_build_lock

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = tmp_path / "fused_adam" / "lock"
    assert clear_stale_build_lock() is None            # no lock: nothing to do
    lock.touch()
    assert clear_stale_build_lock() is None and lock.exists()
    old = lock.stat().st_mtime - STALE_BUILD_LOCK_S - 1
    os.utime(lock, (old, old))
    assert clear_stale_build_lock() == lock and not lock.exists()
    assert "interrupted build" in capsys.readouterr().err


ENGINE_LOSS_TOL = 1e-5  # nats per step; measured on the CPU of 27 Nov: GPT equal, Bert and ELMo within 5e-7


@pytest.mark.parametrize("model", ["gpt", "bert", "elmo"])
def test_the_torch_engine_trains_as_deepspeed_does(tiny_data, tmp_path, model):
    """`--engine torch` (plain AdamW, no DeepSpeed wrapper) against DeepSpeed on the same seed and data, with
    accumulation and clipping: every step's loss within ENGINE_LOSS_TOL over 200 steps, and the final weights
    within float rounding (fp32 on CPU; only the clipping's norm is summed in another order)."""
    runs = {}
    for engine in ("deepspeed", "torch"):
        out = tmp_path / engine
        train(tcfg(model, engine=engine, max_steps=200, micro_batch=8, log_every_steps=1, eval_every_steps=100),
              tiny_data, out, show_progress=False)
        log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
        runs[engine] = ([r["loss"] for r in log if "loss" in r], weights(out / "model.safetensors"),
                        json.loads((out / "manifest.json").read_text()))
    (ds_loss, ds_w, _), (t_loss, t_w, t_manifest) = runs["deepspeed"], runs["torch"]
    assert len(ds_loss) == len(t_loss) == 200 and ds_loss[-1] < ds_loss[0] - 0.5
    assert max(abs(a - b) for a, b in zip(ds_loss, t_loss)) < ENGINE_LOSS_TOL
    assert max(float((ds_w[k] - t_w[k]).abs().max()) for k in ds_w) < 1e-5
    assert t_manifest["engine"] == "torch" and t_manifest["precision"] == "fp32"


def test_the_torch_engine_runs_one_process_and_no_fp16():
    with pytest.raises(UserError, match="fp16 with loss scaling"):
        tcfg(engine="torch", precision="fp16").validate()
    with pytest.raises(UserError, match="--engine must be one of"):
        tcfg(engine="jax").validate()


def test_every_artifact_says_which_kind_of_cpu_made_it():
    """Kernels (and the `auto` precisions) are chosen by the CPU's vector units: provenance names them."""
    from twotower_lib.artifacts import provenance

    cpu = provenance()["cpu"]
    if Path("/proc/cpuinfo").exists():
        assert cpu["model"] and set(cpu["flags"]) <= {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
    else:
        assert cpu == {}


@pytest.mark.parametrize("engine, graphs", [("torch-compile", 1), ("torch-compile-layers", 6)])
def test_the_compiled_torch_engine_trains_as_the_eager_one(tiny_data, tmp_path, engine, graphs):
    """`--engine torch-compile` (the forward pass through torch.compile as one graph: a different kernel for the
    same maths) and `torch-compile-layers` (region by region, in the model itself: the embedding, the tiny
    preset's one layer, the decoder with the loss, each again for the validation passes without gradients)
    against the eager torch engine on the same seed and data, BERT with its predicted positions padded
    (`label_bucket`), the eager run without: every step's loss within ENGINE_LOSS_TOL, the same graphs for every
    micro-batch (no break, no recompilation: the shapes repeat), the same weights' file layout, the engine in
    the manifest."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    runs = {}
    for name, settings in (("eager", dict(engine="torch")), ("compiled", dict(engine=engine, label_bucket=256))):
        out = tmp_path / name
        train(tcfg("bert", max_steps=12, micro_batch=8, log_every_steps=1, eval_every_steps=100, **settings),
              tiny_data, out, show_progress=False)
        log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
        runs[name] = ([r["loss"] for r in log if "loss" in r], weights(out / "model.safetensors"),
                      json.loads((out / "manifest.json").read_text()))
    (e_loss, e_w, _), (c_loss, c_w, c_manifest) = runs["eager"], runs["compiled"]
    assert len(e_loss) == len(c_loss) == 12 and counters["stats"]["unique_graphs"] == graphs
    assert not counters["graph_break"]
    assert max(abs(a - b) for a, b in zip(e_loss, c_loss)) < ENGINE_LOSS_TOL
    assert sorted(e_w) == sorted(c_w) and max(float((e_w[k] - c_w[k]).abs().max()) for k in e_w) < 1e-4
    assert c_manifest["engine"] == engine and c_manifest["precision"] == "fp32"
    with pytest.raises(UserError, match="fp16 with loss scaling"):
        tcfg(engine=engine, precision="fp16").validate()
    with pytest.raises(UserError, match="--label-bucket must be a positive integer"):
        tcfg(engine=engine, label_bucket=0).validate()


def test_cuda_graphs_keep_each_gradient_in_its_own_buffer_and_train_the_same(tiny_data, tmp_path):
    """`--engine torch-graphs` keeps every gradient in one buffer, zeroed instead of freed after a step, so that a
    CUDA graph's output (overwritten by its next replay) is never taken as `.grad`: on the CPU, with the graphs'
    mode skipped there, three accumulated micro-batches a step give the losses and weights of the engine that
    frees its gradients, bit for bit without compiling and within ENGINE_LOSS_TOL compiled region by region;
    each gradient's storage never changes. The command line refuses it without CUDA, and for BERT without
    `--label-bucket` (graphs replay fixed shapes)."""
    from twotower_lib.models import build_model, labeled_positions, make_batch, preset
    from twotower_lib.train.torch_engine import TorchEngine

    cfg = preset("tiny", "bert", vocab_size=tiny_data.vocab_size)
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(6):
        inputs, labels = make_batch("bert", torch.randint(5, cfg.vocab_size, (4, 32), generator=g), g,
                                    tiny_data.special_ids, cfg.vocab_size)
        labels, positions = labeled_positions(labels, 64)
        batches.append((inputs, labels, positions))
    ds = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "gradient_clipping": 1.0,
          "gradient_accumulation_steps": 3}

    def run(**engine_options):
        torch.manual_seed(0)
        model = build_model(cfg)
        engine = TorchEngine(model, [{"params": list(model.parameters())}], ds, torch.device("cpu"), **engine_options)
        buffers = {name: p.grad.data_ptr() for name, p in model.named_parameters() if p.grad is not None}
        losses = []
        for batch in batches:
            loss, _ = engine(*batch)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
            if buffers:
                assert {name: p.grad.data_ptr() for name, p in model.named_parameters()} == buffers
        if buffers:
            assert all(not p.grad.any() for p in model.parameters())
        return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}, len(buffers)

    freed, kept = run(), run(cuda_graphs=True)
    assert freed[2] == 0 and kept[2] == len(list(build_model(cfg).parameters()))
    assert freed[0] == kept[0] and freed[0][-1] != freed[0][0]
    assert_same_weights(freed[1], kept[1])
    torch._dynamo.reset()
    compiled = run(compile="layers", cuda_graphs=True)
    assert max(abs(a - b) for a, b in zip(freed[0], compiled[0])) < ENGINE_LOSS_TOL
    assert_same_weights(freed[1], compiled[1], atol=1e-5)
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        train(tcfg("gpt", engine="torch-graphs", max_steps=1), tiny_data, tmp_path, show_progress=False)
    with pytest.raises(UserError, match="add --label-bucket"):
        tcfg("bert", engine="torch-graphs").validate()
    tcfg("bert", engine="torch-graphs", label_bucket=64).validate()


class _ParameterCasts(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the casts of each parameter to bf16 (autocast's weight casts) while active."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16
                and isinstance(args[0], torch.nn.Parameter)):
            self.count[id(args[0])] += 1
        return func(*args, **kwargs)


@pytest.mark.parametrize("model", ["gpt", "elmo"])
def test_a_step_casts_each_weight_once_and_trains_as_a_cast_every_micro_batch(tiny_data, tmp_path, monkeypatch,
                                                                              model):
    """Under bf16 autocast one region a step (`train.step_region`) casts each weight once a step, not once a
    micro-batch (autocast's cache), and trains to the same weights, bit for bit, as a region per micro-batch,
    the loop it replaced. (Evaluation casts the same in both.)"""
    import twotower_lib.train.loop as trainer

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    config = tcfg(model, engine="torch", precision="bf16", max_steps=3, grad_accum=3, eval_every_steps=100)
    casts = {}
    with _ParameterCasts() as counted:
        train(config, tiny_data, tmp_path / "once", show_progress=False)
    casts["once"] = sorted(counted.count.values())

    def each_micro_batch(engine, batch):
        with torch.autocast(engine.device.type, dtype=torch.bfloat16):
            loss, _ = engine(*batch)
        engine.backward(loss)
        engine.step()
        return loss

    monkeypatch.setattr(trainer, "step_region", lambda engine, autocast: contextlib.nullcontext())
    monkeypatch.setattr(trainer, "micro_step", each_micro_batch)
    with _ParameterCasts() as counted:
        train(config, tiny_data, tmp_path / "each", show_progress=False)
    casts["each"] = sorted(counted.count.values())
    steps, accum = config.max_steps, config.grad_accum
    assert casts["once"] and casts["each"] == [n + steps * (accum - 1) for n in casts["once"]], casts
    assert_same_weights(weights(tmp_path / "once" / "model.safetensors"), weights(tmp_path / "each" / "model.safetensors"))
