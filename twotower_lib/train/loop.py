"""Train a two-tower language model with DeepSpeed, on a CPU laptop or on GPU clusters.

    python -m twotower_lib train --model gpt --preset cpu --seed 1 --budget 10m --out runs/gpt-s1

Like the paper (which followed 24hBERT), a run is bounded by wall-clock time and/or a step count,
and the learning rate warms up and then decays linearly over that budget. Everything random in a
step (which blocks, BERT's masks, dropout) is derived from (seed, step, micro-batch), so a run
resumed from a checkpoint continues exactly as the uninterrupted run would have, and a 2-process
run sees the same global batch as a 1-process run with twice the gradient accumulation.

Several processes: `torchrun --nproc_per_node N -m twotower_lib train ...`, or
`deepspeed --num_gpus N --no_local_rank --module twotower_lib train ...`. DeepSpeed configs:
configs/deepspeed_cpu.json (default on CPU), deepspeed_gpu.json (bf16, default on GPU),
deepspeed_gpu_fp16.json (the paper's fp16 with dynamic loss scaling); --deepspeed-config overrides.
One process may instead step without DeepSpeed's wrapper (`--engine torch`, `torch_engine`), from the
same config.

Run directory:
    config.json            ModelConfig + TrainConfig + data reference
    manifest.json          provenance: code version, packages, seed, data hash, tokens, wall time
    log.jsonl              one JSON object per log interval (loss, val_loss, lr, tokens/s, step_s: the steps' own
                           seconds; on a GPU the peak memory)
    model.safetensors      final weights (written last: its presence means the run finished)
    snapshots/tokens-N.safetensors   weights along the run (for "when does the preference emerge")
    checkpoints/step-N/    weights + optimizer state + counters, for --resume
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from twotower_lib.artifacts import atomic_write_json, provenance, read_json
from twotower_lib.config_cli import add_config_arguments, config_from_args
from twotower_lib.train.checkpoints import (append_log, latest_checkpoint, load_checkpoint, resume_or_clear,
                                           save_checkpoint, save_weights, truncate_log)
from twotower_lib.train.deepspeed_setup import (any_rank, deepspeed_config, ds_precision, init_distributed, rank_checksums,
                                         use_bf16_autocast)
from twotower_lib.errors import UserError
from twotower_lib.models import MODEL_TYPES, PRESETS, ModelConfig, build_model, preset, snapshot_name
from twotower_lib.models.config import released_options
from twotower_lib.train.batches import BlockOrder, evaluate, micro_batch, seed_of, to_device
from twotower_lib.train.torch_engine import TorchEngine
from twotower_lib.train.config import COMPILE_SCOPE, ENGINES, PRECISIONS, TrainConfig, lr_at, next_snapshot, parse_duration


class TrainingDiverged(UserError):
    """The loss became NaN or infinite; the run stopped without saving the bad state."""


# ----------------------------------------------------------------------------- the loop

def _run_identity(cfg: ModelConfig, tcfg: TrainConfig, data, micro: int, accum: int, world: int) -> dict:
    """What must match for --resume to continue the same run (budget and step limit may change)."""
    identity = {"model": cfg.to_dict(), "seed": tcfg.seed, "micro_batch": micro, "grad_accum": accum,
                "world_size": world, "data_hash": data.data_hash, "precision": tcfg.precision}
    # the schedule only when it is not the default, so runs saved before these knobs existed still resume
    if tcfg.lr is not None:
        identity["lr"] = tcfg.lr
    if tcfg.final_lr_fraction:
        identity["final_lr_fraction"] = tcfg.final_lr_fraction
    if tcfg.engine != "deepspeed":
        identity["engine"] = tcfg.engine
    for name, default in (("mask_rate", 0.15), ("mask_style", "corrupt"), ("grad_clip", None),
                          ("warmup_fraction", 0.06)):
        if getattr(tcfg, name) != default:
            identity[name] = getattr(tcfg, name)
    return identity


@dataclass
class _Run:
    """One training run in progress: its settings, its engine (DeepSpeed's or `TorchEngine`), and the state a
    checkpoint saves."""

    tcfg: TrainConfig
    data: Any
    out: Path
    cfg: ModelConfig
    ds: dict
    engine: Any
    state: dict
    rank: int
    world: int
    micro: int
    accum: int
    autocast: bool
    resumed: bool

    @property
    def tokens_per_step(self) -> int:
        return self.micro * self.accum * self.world * self.cfg.seq_len

    def progress(self, step_offset: float = 0.0) -> float:
        """Fraction of the budget used: the larger of the step and the wall-clock fractions."""
        p = 0.0
        if self.tcfg.max_steps:
            p = max(p, (self.state["step"] + step_offset) / self.tcfg.max_steps)
        if self.tcfg.budget_s:
            p = max(p, self.state["elapsed_s"] / self.tcfg.budget_s)
        return p


def train(tcfg: TrainConfig, data, out: str | os.PathLike, resume: bool = False,
          show_progress: bool = True) -> dict[str, Any]:
    """Train (or resume) into `out`; return the summary written to manifest.json."""
    run = _start(tcfg, data, Path(out), resume)
    if run is None:                                   # resumed a run that had already finished
        return read_json(Path(out) / "manifest.json")
    _record_start(run)
    _loop(run, show_progress)
    return _finish(run)


def _start(tcfg: TrainConfig, data, out: Path, resume: bool) -> _Run | None:
    """The model, its engine and the state to start from (a checkpoint's, with `resume`); None if the
    resumed run has nothing left to do. Every mismatch is a UserError before any work."""
    tcfg.validate()
    init_distributed()
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    cfg = preset(tcfg.preset, tcfg.model, towers=tcfg.towers, vocab_size=data.vocab_size,
                 seq_len=data.seq_len, vocab_multiple=tcfg.vocab_multiple,
                 **({"norm_scheme": tcfg.norm_scheme, "position": tcfg.position}
                    if tcfg.model == "bert" and not tcfg.as_released else {}),
                 **(released_options(tcfg.model) if tcfg.as_released else {}))
    if tcfg.world_size is not None and tcfg.world_size != world:
        raise UserError(f"this run's step count was computed for {tcfg.world_size} process(es) but it runs on {world}: "
                        f"it would train {world / tcfg.world_size:g}x its token budget. Launch it with "
                        f"{tcfg.world_size} process(es), or pass --world-size {world} with --max-steps scaled to match")
    ds = deepspeed_config(tcfg)
    micro, accum = int(ds["train_micro_batch_size_per_gpu"]), int(ds["gradient_accumulation_steps"])
    identity = _run_identity(cfg, tcfg, data, micro, accum, world)
    if (out / "config.json").exists() and not resume:
        raise UserError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    torch.manual_seed(seed_of(tcfg.seed, "init"))
    engine, autocast = build_engine(tcfg, build_model(cfg), ds, world)

    state = {"step": 0, "tokens": 0, "elapsed_s": 0.0, "identity": identity, "interval_loss": 0.0,
             "interval_steps": 0}
    ckpt = latest_checkpoint(out) if resume else None
    if ckpt is not None:
        state = load_checkpoint(ckpt, engine)
        if state["identity"] != identity:
            raise UserError(f"--resume: {ckpt} belongs to a different run setup "
                            f"({state['identity']} vs now {identity}); use the same settings or a new --out")
        truncate_log(out / "log.jsonl", state["step"])
    elif resume and (out / "config.json").exists():
        raise UserError(f"--resume: {out} has no complete checkpoint; start it again without --resume "
                        "into a new --out")
    if (out / "model.safetensors").exists() and resume and not _more_to_do(state, tcfg):
        return None
    return _Run(tcfg, data, out, cfg, ds, engine, state, rank, world, micro, accum, autocast, resumed=ckpt is not None)


def build_engine(tcfg: TrainConfig, model, ds: dict, world: int) -> tuple[Any, bool]:
    """The engine that steps `model` (DeepSpeed's, or `TorchEngine`: DistributedDataParallel over several) and whether the
    forward passes run under bf16 autocast (CPUs: `use_bf16_autocast`; GPUs: DeepSpeed casts the model
    itself, the torch engine autocasts unless fp32)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]        # matrices and embeddings
    no_decay = [p for p in model.parameters() if p.ndim < 2]      # biases and LayerNorm gains
    groups = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
    ds_clean = {k: v for k, v in ds.items() if not k.startswith("_")}
    if tcfg.engine != "deepspeed":
        gpu = torch.cuda.is_available()
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if gpu else torch.device("cpu")
        autocast = tcfg.precision != "fp32" if gpu else use_bf16_autocast(tcfg)
        graphs = tcfg.engine == "torch-graphs"
        if graphs and not gpu:
            raise UserError(f"--engine {tcfg.engine} replays CUDA graphs and needs a CUDA GPU; on a CPU "
                            "--engine torch-compile-layers compiles the same regions")
        return TorchEngine(model, groups, ds_clean, device, compile=COMPILE_SCOPE.get(tcfg.engine),
                           cuda_graphs=graphs, world=world), autocast
    import deepspeed

    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=groups, config=ds_clean)
    return engine, use_bf16_autocast(tcfg)


def _record_start(run: _Run) -> None:
    """config.json, and for a fresh run the weights at 0 tokens and a first checkpoint (rank 0)."""
    if run.rank != 0:
        return
    data = run.data
    atomic_write_json(run.out / "config.json", {
        "model": run.cfg.to_dict(), "train": asdict(run.tcfg), "deepspeed": run.ds,
        "data": {"path": str(data.path), "data_hash": data.data_hash, "tokenizer": str(Path(data.path) / "tokenizer")},
        "world_size": run.world, "tokens_per_step": run.tokens_per_step})
    if not run.resumed:
        save_weights(run.engine.module, run.out / "snapshots" / f"{snapshot_name(0)}.safetensors")
        save_checkpoint(run.out, run.engine, run.state)


def _loop(run: _Run, show_progress: bool) -> None:
    """Optimizer steps until the budget is used, with the log, snapshots and checkpoints on their schedules."""
    from tqdm import tqdm

    tcfg, state = run.tcfg, run.state
    peak_lr = float(run.ds["optimizer"]["params"]["lr"])
    order = BlockOrder(len(run.data.train), tcfg.seed)
    next_snap = next_snapshot(state["tokens"], tcfg.snapshot_every_tokens)
    # also half way through a step-bounded run: the worse model of the quality-gap control
    half_way = tcfg.max_steps // 2 * run.tokens_per_step if tcfg.max_steps and tcfg.max_steps >= 2 else None
    t_start, elapsed0 = time.monotonic(), state["elapsed_s"]
    last_ckpt_time = t_start
    interval = _interval(t_start, state["tokens"])  # for tokens/s and step times; the loss sums live in `state`
    bar = tqdm(total=tcfg.max_steps, initial=state["step"], unit="step", dynamic_ncols=True,
               disable=run.rank != 0 or not show_progress)
    run.engine.train()
    done = not any_rank(run.progress() < 1.0)
    while not done:
        lr = lr_at(run.progress(step_offset=0.5), peak_lr, tcfg.warmup_fraction, tcfg.final_lr_fraction)  # mid-step: step 0 gets lr > 0
        started = time.monotonic()
        step_loss = _step(run, order, lr)
        now = time.monotonic()
        interval.update(step_s=interval["step_s"] + now - started, steps=interval["steps"] + 1)
        state["step"] += 1
        state["tokens"] += run.tokens_per_step
        state["elapsed_s"] = elapsed0 + now - t_start
        state["interval_loss"] += step_loss
        state["interval_steps"] += 1
        bar.update(1)

        done = not any_rank(run.progress() < 1.0)
        if state["step"] % tcfg.log_every_steps == 0 or done:
            _mean_over_processes(run)
            if run.rank == 0:
                interval = _log(run, lr, interval, evaluate_now=state["step"] % tcfg.eval_every_steps == 0 or done,
                                bar=bar)
            else:
                state.update(interval_loss=0.0, interval_steps=0)
        if run.rank == 0 and (state["tokens"] >= next_snap or state["tokens"] == half_way):
            save_weights(run.engine.module, run.out / "snapshots" / f"{snapshot_name(state['tokens'])}.safetensors")
            next_snap = next_snapshot(state["tokens"], tcfg.snapshot_every_tokens)
        by_steps = tcfg.checkpoint_every_steps and state["step"] % tcfg.checkpoint_every_steps == 0
        by_time = time.monotonic() - last_ckpt_time >= tcfg.checkpoint_every_s
        if run.rank == 0 and (by_steps or by_time or done):
            save_checkpoint(run.out, run.engine, state)
            last_ckpt_time = time.monotonic()
    bar.close()


def _step(run: _Run, order: BlockOrder, lr: float) -> float:
    """One optimizer step over `accum` micro-batches at learning rate `lr`; its mean loss. A loss that is
    not finite on any rank stops the run (TrainingDiverged) without saving that state.

    The micro-batches' losses add up on the device and are read once a step, not once a micro-batch:
    reading a GPU value waits for the queue to drain, so a step of many accumulated micro-batches
    would otherwise stall once per micro-batch (the sum is in fp64, as a Python float would be)."""
    step, engine = run.state["step"], run.engine
    for group in engine.optimizer.param_groups:
        group["lr"] = lr
    step_loss = torch.zeros((), dtype=torch.float64, device=engine.device)
    with step_region(engine, run.autocast):
        for j in range(run.accum):
            inputs, labels = micro_batch(run.data, order, run.tcfg, step, j, run.rank, run.world, run.micro, run.accum)
            batch = to_device(inputs, labels, engine.device, run.tcfg.label_bucket)
            torch.manual_seed(seed_of(run.tcfg.seed, "dropout", step, j * run.world + run.rank))
            step_loss += micro_step(engine, batch).detach().double() / run.accum
    loss_value = step_loss.item()
    if any_rank(not math.isfinite(loss_value)):
        last = latest_checkpoint(run.out)
        if run.rank == 0:
            append_log(run.out / "log.jsonl", {"event": "diverged", "step": step, "loss": loss_value})
        raise TrainingDiverged(
            f"the loss became {loss_value} at step {step} ({run.state['tokens']} tokens) on rank {run.rank}; "
            f"stopped without saving this state. Last good checkpoint: {last or 'none'}. Lower the "
            "learning rate in the DeepSpeed config or use --precision fp32, then train again "
            "(--resume continues from that checkpoint).")
    return loss_value


def step_region(engine, autocast: bool) -> torch.autocast:
    """The bf16 autocast region of one optimizer step, open over all of its micro-batches.

    Autocast keeps each weight's bf16 copy until its outermost region closes, so one region a step casts
    every weight once a step, not once a micro-batch: the same values, a fraction of the casts when
    micro-batches accumulate. The weights change only at the step's last micro-batch, as the region closes."""
    return torch.autocast(engine.device.type, dtype=torch.bfloat16, enabled=autocast)


def micro_step(engine, batch: tuple) -> torch.Tensor:
    """One micro-batch inside a step's region: its loss under the region's autocast; the backward pass and the
    engine's step (the optimizer's, at the accumulation boundary) outside autocast, which wraps forward
    passes only."""
    loss, _ = engine(*batch)
    with torch.autocast(engine.device.type, enabled=False):
        engine.backward(loss)
        engine.step()
    return loss


def _mean_over_processes(run: _Run) -> None:
    """The interval's loss as the mean over every process's micro-batches (one all-reduce a log line), so that
    N processes log what one process accumulating N times as many micro-batches logs."""
    if run.world > 1:
        device = next(run.engine.module.parameters()).device
        total = torch.tensor([run.state["interval_loss"]], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(total)
        run.state["interval_loss"] = float(total.item()) / run.world


def _interval(t: float, tokens: int) -> dict:
    """A log interval's start: the time and tokens of its tokens/s, and its optimizer steps' own seconds."""
    return {"t": t, "tokens": tokens, "step_s": 0.0, "steps": 0}


def _log(run: _Run, lr: float, interval: dict, evaluate_now: bool, bar) -> dict:
    """Append one record to log.jsonl (the interval's mean loss; its tokens/s, snapshots and checkpoints
    included; `step_s`, the mean seconds of its optimizer steps alone; on a GPU the peak memory so far; the
    validation loss when `evaluate_now`) and update the progress bar; return the next interval's start."""
    state, now = run.state, time.monotonic()
    tok_s = (state["tokens"] - interval["tokens"]) / max(now - interval["t"], 1e-9)
    record = {"step": state["step"], "tokens": state["tokens"], "elapsed_s": round(state["elapsed_s"], 3),
              "lr": lr, "loss": state["interval_loss"] / state["interval_steps"], "tokens_per_s": round(tok_s, 1),
              "step_s": round(interval["step_s"] / max(interval["steps"], 1), 4)}
    if run.engine.device.type == "cuda":
        record["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(run.engine.device) / 2**30, 2)
    if evaluate_now:
        record["val_loss"] = evaluate(run.engine.module, run.data, run.tcfg, run.micro, run.autocast)
    append_log(run.out / "log.jsonl", record)
    left = max(0.0, 1.0 - run.progress()) * state["elapsed_s"] / max(run.progress(), 1e-9)
    bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{tok_s:.0f}", left=f"{left / 60:.1f}m")
    state.update(interval_loss=0.0, interval_steps=0)
    return _interval(time.monotonic(), state["tokens"])


def _finish(run: _Run) -> dict[str, Any]:
    """The run's summary (manifest.json, with every rank's parameter checksums) and its final weights."""
    state, tcfg = run.state, run.tcfg
    checksums = rank_checksums(run.engine.module)
    summary = {"status": "complete", "seed": tcfg.seed, "steps": state["step"], "tokens_seen": state["tokens"],
               "wall_time_s": round(state["elapsed_s"], 3), "data_hash": run.data.data_hash,
               "config": {"model": run.cfg.to_dict(), "train": asdict(tcfg)}, "world_size": run.world,
               "param_sha256_by_rank": checksums,
               "engine": tcfg.engine,
               "precision": "bf16-autocast" if run.autocast else ("fp32" if tcfg.engine != "deepspeed" else ds_precision(run.ds))}
    if run.rank == 0:
        save_weights(run.engine.module, run.out / "snapshots" / f"{snapshot_name(state['tokens'])}.safetensors")
        atomic_write_json(run.out / "manifest.json", provenance(**summary))
        save_weights(run.engine.module, run.out / "model.safetensors")
    return summary


def _more_to_do(state: dict, tcfg: TrainConfig) -> bool:
    return bool((tcfg.max_steps and state["step"] < tcfg.max_steps) or
                (tcfg.budget_s and state["elapsed_s"] < tcfg.budget_s))


# ----------------------------------------------------------------------------- CLI

def train_job(tcfg: TrainConfig, data_path: str, out: str) -> None:
    """Train or resume one run from paths only: a module-level function, so `workers.run_jobs` can
    run it in a worker process (the book's training section, the emergence study)."""
    from twotower_lib.data import load_prepared
    from twotower_lib.workers import in_worker

    train(tcfg, load_prepared(data_path), out, resume=resume_or_clear(Path(out)), show_progress=not in_worker())




# how `train`'s generated options differ from `config_cli`'s defaults (also what `config_to_argv` writes back)
OPTIONS = {"model": {"choices": MODEL_TYPES}, "preset": {"choices": PRESETS, "default": "cpu"},
           "budget_s": {"flag": "--budget", "type": str, "metavar": "DURATION"},
           "checkpoint_every_s": {"flag": "--checkpoint-every", "type": str, "default": "10m", "metavar": "DURATION"},
           "precision": {"choices": PRECISIONS}, "engine": {"choices": ENGINES}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`train`'s options: one per `TrainConfig` field (`config_cli`), and where the run goes."""
    add_config_arguments(p, TrainConfig, options=OPTIONS)
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")


def main(args: argparse.Namespace) -> int:
    from twotower_lib.data import load_prepared

    if args.data is None:  # the default corpus at the default settings, as `data prepare` writes it
        from twotower_lib.data import DataConfig, prepared_dir

        args.data = str(prepared_dir(DataConfig()))
        if not Path(args.data).is_dir():
            raise UserError(f"no prepared data at {args.data}: run `python -m twotower_lib data prepare` first, "
                            "or pass another prepared directory with --data DIR")
    if not Path(args.data).is_dir():
        raise UserError(f"--data {args.data} does not exist; run `python -m twotower_lib data prepare` first")
    tcfg = config_from_args(TrainConfig, args, {"budget_s": parse_duration, "checkpoint_every_s": parse_duration})
    summary = train(tcfg, load_prepared(args.data), args.out, resume=args.resume)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"trained {summary['steps']} steps ({summary['tokens_seen']} tokens) in "
              f"{summary['wall_time_s']:.0f} s -> {args.out}")
    return 0
