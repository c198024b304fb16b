"""The training stage of the book (section 01): every case of a profile, and the single-tower
runs of the independent-pairs control, trained into `runs/<profile>/training/` — kept when
finished, resumed when the budget grew, trained again (the old run set aside) when the setup
changed. On a CPU runs go side by side (`twotower_lib.workers`); with `launcher="deepspeed"`
each goes through DeepSpeed's own launcher."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from twotower_lib.artifacts import read_json
from twotower_lib.book.profiles import Profile
from twotower_lib.book.sections import SectionContext, find_section
from twotower_lib.errors import UserError
from twotower_lib.run_names import case_name, control_name

if TYPE_CHECKING:
    import pandas as pd


def training_runs(profile: Profile) -> list[tuple[str, str, int, int]]:
    """(name, model, seed, towers) of every run 01_training trains: the cases, then the control runs."""
    return ([(case_name(m, s), m, s, 2) for m, s in profile.case_list()]
            + [(control_name(m, s), m, s, 1) for m, s in profile.independent_runs()])


# What makes an existing run another run: a change in any of these trains it again from scratch.
RUN_SETUP = ("model", "preset", "seed", "towers", "micro_batch", "grad_accum", "precision", "lr", "final_lr_fraction",
             "deepspeed_config", "as_released", "engine")


def why_retrain(old_config: dict, steps_done: int, tcfg, data_hash: str) -> str | None:
    """Why a run directory written with `old_config` (its config.json) cannot be kept or resumed as
    `tcfg` on the data `data_hash`, or None if it can (a longer budget resumes it)."""
    from twotower_lib.train.loop import TrainConfig

    if old_config["data"]["data_hash"] != data_hash:
        return (f"because the prepared data changed (data hash {old_config['data']['data_hash'][:12]} -> "
                f"{data_hash[:12]})")
    if steps_done > tcfg.max_steps:
        return f"because its budget shrank ({steps_done} steps done, {tcfg.max_steps} asked)"
    changed = {k: (old_config["train"].get(k, getattr(TrainConfig, k, None)), getattr(tcfg, k)) for k in RUN_SETUP}
    changed = {k: v for k, v in changed.items() if v[0] != v[1]}
    if changed:
        return "because its setup changed: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items())
    return None


def set_aside(run_dir: Path, root: Path) -> Path:
    """Move a run that is about to be trained again to `root/superseded/<section output>/<run>-<UTC time>/`
    instead of deleting it: its weights and curves stay there until the user removes them."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = root / "superseded" / run_dir.parent.name / f"{run_dir.name}-{stamp}"
    n = 1
    while dest.exists():
        n += 1
        dest = dest.with_name(f"{run_dir.name}-{stamp}-{n}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(run_dir, dest)
    return dest


def train_cases(ctx: SectionContext, data) -> pd.DataFrame:
    """Train every case (and the independent-pairs control runs) into 01_training's output; one row per run.

    A finished run with the same setup is kept; a longer budget resumes it; a run with another
    setup (model, seed, batch, learning rate, precision or data changed, or a shorter budget) is trained again,
    the old one moved aside (`set_aside`).
    On a CPU the runs go side by side at the profile's `threads_per_run` (`twotower_lib.workers`).
    """
    import pandas as pd

    from twotower_lib.train.loop import train_job
    from twotower_lib.workers import run_jobs

    jobs = []
    for name, model, seed, towers in training_runs(ctx.profile):
        out = ctx.out / name
        tcfg = ctx.profile.train_config(model, seed, data.path, towers=towers)
        if (out / "config.json").exists():
            steps = read_json(out / "manifest.json")["steps"] if (out / "manifest.json").exists() else 0
            reason = why_retrain(read_json(out / "config.json"), steps, tcfg, data.data_hash)
            if reason:
                moved = set_aside(out, ctx.root)
                print(f"{name}: training again from scratch, {reason}; the old run is kept in {moved}")
        if not ((out / "manifest.json").exists() and read_json(out / "manifest.json")["steps"] == tcfg.max_steps):
            if ctx.profile.train.launcher == "deepspeed":
                _deepspeed_train(ctx, tcfg, out)
            else:
                jobs.append({"tcfg": tcfg, "data_path": str(data.path), "out": str(out)})
    run_jobs(train_job, jobs, ctx.profile.train.threads_per_run, "training", label=lambda j: Path(j["out"]).name)

    rows = []
    for name, model, seed, towers in training_runs(ctx.profile):
        m = read_json(ctx.out / name / "manifest.json")
        log = training_log(ctx, [name])
        rows.append({"run": name, "model": model, "preset": m["config"]["train"]["preset"], "towers": towers,
                     "seed": seed, "role": "case" if towers == 2 else "control (independent pairs)",
                     "steps": m["steps"], "tokens seen": m["tokens_seen"], "minutes": round(m["wall_time_s"] / 60, 2),
                     "peak lr": read_json(ctx.out / name / "config.json")["deepspeed"]["optimizer"]["params"]["lr"],
                     "final lr / peak": m["config"]["train"].get("final_lr_fraction", 0.0),
                     "precision": m["precision"], "threads": m.get("torch_threads"),
                     "final val loss": log["val_loss"].dropna().iloc[-1]})
    return pd.DataFrame(rows).set_index("run")


def training_summary(ctx: SectionContext, summary: pd.DataFrame) -> str:
    """Section 01's closing summary from `train_cases`'s table: the cases, their tokens and minutes, and which
    loss each family's objective reports (BERT's is lowered by its training corruption, so section 02's loss with
    [MASK] at every scored position is the one held against word frequencies)."""
    from twotower_lib.book.paper_tables import tokens_label

    cases, controls = summary[summary["role"] == "case"], summary[summary["role"] != "case"]
    low, high = int(cases["tokens seen"].min()), int(cases["tokens seen"].max())
    tokens = tokens_label(low) if tokens_label(low) == tokens_label(high) else f"{tokens_label(low)} to {tokens_label(high)}"
    text = (f"At profile `{ctx.profile.name}`, {len(cases)} two-tower cases ({', '.join(cases.index)}) trained for "
            f"{tokens} tokens each, in {summary['minutes'].sum():.0f} run-minutes"
            + (f" with {len(controls)} single-tower control runs" if len(controls) else "")
            + f". Their last validation losses run from {cases['final val loss'].min():.2f} to "
            f"{cases['final val loss'].max():.2f} nats, each on its family's own objective.")
    if cases["model"].str.startswith("bert").any():
        text += (" BERT's is measured under its training corruption, where one scored position in ten shows its answer, "
                 "so it reads lower than its loss with [MASK] at every scored position, which section 02 measures and "
                 "holds against word frequencies alone.")
    return text


def deepspeed_command(num_gpus: int, tcfg, out: Path) -> list[str]:
    """The DeepSpeed-launcher command line that trains (or resumes) `tcfg` into `out`: every setting of `tcfg`
    written as `train` parses it (`config_cli.config_to_argv`), the world size the launcher's GPUs (a folder killed
    before its first checkpoint starts over, as `train.train_job` does)."""
    import dataclasses

    from twotower_lib.config_cli import config_to_argv
    from twotower_lib.train.checkpoints import resume_or_clear
    from twotower_lib.train.loop import OPTIONS

    tcfg = dataclasses.replace(tcfg, world_size=tcfg.world_size or num_gpus)
    return (["deepspeed", f"--num_gpus={num_gpus}", "--module", "twotower_lib", "train"]
            + config_to_argv(tcfg, OPTIONS) + ["--out", str(out)] + (["--resume"] if resume_or_clear(out) else []))


def _deepspeed_train(ctx: SectionContext, tcfg, out: Path) -> None:
    """Multi-GPU training through the DeepSpeed launcher (one process per GPU), as the paper did."""
    import subprocess

    cmd = deepspeed_command(ctx.profile.train.num_gpus, tcfg, out)
    if subprocess.run(cmd).returncode != 0:
        raise UserError(f"DeepSpeed training of {out.name} failed; the command was: {' '.join(cmd)}")


def training_log(ctx: SectionContext, runs: list[str] | None = None) -> pd.DataFrame:
    """The logged training and validation loss of each run (default: the cases) against tokens seen (long table)."""
    import json

    import pandas as pd

    frames = []
    for name in runs or [case_name(m, s) for m, s in ctx.profile.case_list()]:
        run = ctx.root / find_section("01_training", ctx.sections).output / name
        with open(run / "log.jsonl", encoding="utf-8") as f:
            records = [r for r in map(json.loads, f) if "tokens" in r]
        frames.append(pd.DataFrame(records).assign(case=name))
    return pd.concat(frames, ignore_index=True)
