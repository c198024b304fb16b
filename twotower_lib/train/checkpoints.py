"""What a run directory keeps so that a run can resume exactly: checkpoints (weights as safetensors,
the optimizer's tensors, the counters; the last `KEEP_CHECKPOINTS` kept), final and snapshot weights,
and the training log, cut back to the checkpoint a run resumes from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save, save_file

from twotower_lib.artifacts import atomic_directory, atomic_write_bytes, atomic_write_json, atomic_write_text, read_json
from twotower_lib.errors import UserError

KEEP_CHECKPOINTS = 2


def cpu_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached, contiguous CPU copy of the weights: what safetensors writes and what is hashed."""
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}


def save_weights(model: torch.nn.Module, path: Path) -> None:
    atomic_write_bytes(path, save(cpu_state_dict(model)))


def save_checkpoint(run_dir: Path, engine, state: dict[str, Any]) -> Path:
    """Weights (safetensors) + optimizer state (tensors only) + counters, written atomically."""
    final = run_dir / "checkpoints" / f"step-{state['step']:09d}"
    with atomic_directory(final, lambda d: (d / "state.json").exists(), "a training checkpoint") as tmp:
        save_file(cpu_state_dict(engine.module), tmp / "model.safetensors")
        torch.save(engine.optimizer.state_dict(), tmp / "optimizer.pt")
        atomic_write_json(tmp / "state.json", state)
    for old in sorted((run_dir / "checkpoints").glob("step-*"))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    done = [p for p in sorted((run_dir / "checkpoints").glob("step-*")) if (p / "state.json").is_file()]
    return done[-1] if done else None


def load_checkpoint(path: Path, engine) -> dict[str, Any]:
    engine.module.load_state_dict(load_file(path / "model.safetensors"))
    try:
        opt_state = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
    except Exception as e:  # an optimizer whose state holds non-tensor objects cannot be loaded safely
        raise UserError(f"cannot load the optimizer state in {path} with weights_only=True ({e}); "
                        "this checkpoint was written with a different optimizer setup") from e
    engine.optimizer.load_state_dict(opt_state)
    return read_json(path / "state.json")


def append_log(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()


def truncate_log(path: Path, step: int) -> None:
    """Drop log lines written after the checkpoint we resume from: they will be written again.

    A line torn by a kill (the log is appended line by line) cannot be parsed; it can only be the
    last one, and it is dropped with a message instead of stopping the resume."""
    if not path.exists():
        return
    keep = []
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                print(f"{path}: dropped a torn last line (the run was killed while writing it): {ln[:60]!r}")
                continue
            raise UserError(f"{path} line {i + 1} is not valid JSON and is not the last line; the log was "
                            "modified by something else. Restore or remove that line, then resume.") from None
        if rec.get("step", 0) <= step and "event" not in rec:
            keep.append(ln)
    atomic_write_text(path, "".join(ln + "\n" for ln in keep))


def resume_or_clear(out: Path) -> bool:
    """Whether the pipeline's run folder `out` resumes: it does once it holds a complete checkpoint or the final
    weights. A folder killed before its first checkpoint (a config, a log, snapshot 0) holds nothing a restart
    would not write again bit for bit (the run is seeded), so it is cleared and the run starts over."""
    if not (out / "config.json").exists():
        return False
    if latest_checkpoint(out) is not None or (out / "model.safetensors").exists():
        return True
    shutil.rmtree(out)
    return False
