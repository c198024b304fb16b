"""DeepSpeed for the trainer, on one CPU or many GPUs: the process group (`init_distributed`, with or
without a launcher), the DeepSpeed JSON config a run uses (`deepspeed_config`), and the CPU precision
rule (`use_bf16_autocast`), and the check that data parallelism left every rank's weights equal
(`rank_checksums`). The training loop itself is `twotower_lib.train`.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from twotower_lib.cuda_arch import cuda_arch_list_for_deepspeed
from twotower_lib.errors import UserError

if TYPE_CHECKING:
    from twotower_lib.train.config import TrainConfig

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
OWN_PORT_ENV = "TWOTOWER_OWN_MASTER_PORT"  # the MASTER_PORT `init_distributed` chose itself (no launcher)


# ----------------------------------------------------------------------------- distributed setup

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STALE_BUILD_LOCK_S = 600  # a JIT build of DeepSpeed's fused Adam takes a minute or two
# DeepSpeed ops that training never calls but DeepSpeed's torch backend JIT-builds whenever a process group starts
# on a CPU (about 30 s on 2 cores, once per Python environment): the shared-memory all-reduce serves only DeepSpeed
# inference's tensor parallelism (`inference_all_reduce`).
UNUSED_OPS = ("deepspeed_shm_comm",)


def clear_stale_build_lock(name: str = "fused_adam", max_age_s: float = STALE_BUILD_LOCK_S) -> Path | None:
    """Remove the lock file of an interrupted JIT build of DeepSpeed's op `name`, saying so; return its path
    if one was removed.

    Why: DeepSpeed JIT-builds its fused Adam (the GPU configs' optimizer) the first time a run starts in an
    environment, under torch's file lock. A process killed during that build leaves the lock behind, and every
    later run then waits for it forever without a word. A lock older than `max_age_s` belongs to no running build."""
    try:
        from torch.utils.cpp_extension import _get_build_directory  # torch's own rule for the folder

        lock = Path(_get_build_directory(name, verbose=False)) / "lock"
        if time.time() - lock.stat().st_mtime <= max_age_s:
            return None
        lock.unlink()
    except (ImportError, OSError):
        return None
    print(f"note: removed {lock}, left by an interrupted build of DeepSpeed's {name} op "
          f"(older than {max_age_s / 60:.0f} min); the op is built again", file=sys.stderr)
    return lock


def init_distributed() -> None:
    """Start torch.distributed through DeepSpeed; without a launcher, become rank 0 of 1.

    DeepSpeed otherwise tries MPI discovery (and fails without mpi4py) when RANK is not set.
    """
    import deepspeed

    cuda_arch_list_for_deepspeed()

    # Ours to choose: no launcher set the rank, or the rank and port are the ones a process of ours set
    # without a launcher and a child inherited (a notebook kernel or a CLI call started from it): that
    # port is its parent's, already bound. A launcher's MASTER_PORT differs from the one we recorded.
    own_port = "RANK" not in os.environ or os.environ.get(OWN_PORT_ENV) == os.environ.get("MASTER_PORT")
    if own_port:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
        os.environ[OWN_PORT_ENV] = os.environ["MASTER_PORT"]
    if not torch.distributed.is_initialized():
        if not torch.cuda.is_available():   # a GPU has no such op; reading the table there would probe every op
            deepspeed.ops.__compatible_ops__.update(dict.fromkeys(UNUSED_OPS, False))  # DeepSpeed's "not buildable here"
        clear_stale_build_lock()
        for attempt in range(5):
            try:
                deepspeed.init_distributed(dist_backend="gloo" if not torch.cuda.is_available() else "nccl",
                                           verbose=False)
                break
            except torch.distributed.DistNetworkError:
                # the free port we picked was taken before the store bound it (another process on
                # this machine): pick another; under a launcher the port is the launcher's, so re-raise
                if not own_port or attempt == 4:
                    raise
                os.environ["MASTER_PORT"] = os.environ[OWN_PORT_ENV] = str(_free_port())
        # Once per process, at exit: DeepSpeed caches its groups, so a destroyed process group cannot
        # be re-created for a second run in the same process (tests, notebooks).
        atexit.register(shutdown_distributed)


def shutdown_distributed() -> None:
    """Barrier then destroy: without it a fraction of gloo runs abort at interpreter exit."""
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def any_rank(flag: bool) -> bool:
    """True if `flag` is true on any rank (so that all ranks stop or save together)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0])
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return bool(t.item() > 0)


# ----------------------------------------------------------------------------- configuration

def deepspeed_config(tcfg: TrainConfig) -> dict[str, Any]:
    """The repository's DeepSpeed JSON (or the user's), with micro-batch/accumulation overrides.

    Without --deepspeed-config the precision picks it: on a GPU deepspeed_gpu.json (bf16) for auto
    and bf16, deepspeed_gpu_fp16.json (the paper's V100 fp16) for fp16, and the bf16 one with mixed
    precision switched off for fp32; on a CPU deepspeed_cpu.json (fp32 weights; bf16 comes from autocast).
    """
    gpu = torch.cuda.is_available()
    if tcfg.precision == "fp16" and not gpu:
        raise UserError("--precision fp16 needs a GPU (DeepSpeed's fp16 with loss scaling); on a CPU use auto, "
                        "fp32 or bf16")
    default = ("deepspeed_gpu_fp16.json" if tcfg.precision == "fp16" else "deepspeed_gpu.json") if gpu \
        else "deepspeed_cpu.json"
    path = Path(tcfg.deepspeed_config) if tcfg.deepspeed_config else CONFIG_DIR / default
    if not path.is_file():
        raise UserError(f"DeepSpeed config {path} does not exist; pass --deepspeed-config FILE.json")
    try:
        ds = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"DeepSpeed config {path} is not valid JSON: {e}") from e
    if tcfg.micro_batch is not None:
        ds["train_micro_batch_size_per_gpu"] = tcfg.micro_batch
    if tcfg.grad_accum is not None:
        ds["gradient_accumulation_steps"] = tcfg.grad_accum
    if tcfg.lr is not None:
        ds.setdefault("optimizer", {}).setdefault("params", {})["lr"] = tcfg.lr
    if tcfg.grad_clip is not None:
        ds["gradient_clipping"] = tcfg.grad_clip
    ds.pop("train_batch_size", None)  # derived: micro * accumulation * world size
    if gpu and tcfg.precision == "fp32" and not tcfg.deepspeed_config:
        ds.pop("bf16", None)
    if ds.get("zero_optimization", {}).get("stage", 0) != 0:
        raise UserError(f"{path}: checkpoints of this trainer hold the optimizer state of ZeRO stage 0 only; "
                        "set zero_optimization.stage to 0")
    opt = ds.get("optimizer", {})
    if opt.get("type", "").lower() == "adam" and opt.get("params", {}).get("weight_decay", 0) and \
            "adam_w_mode" not in opt.get("params", {}):
        raise UserError(f"{path}: optimizer type 'Adam' with weight decay silently becomes AdamW in DeepSpeed; "
                        "write 'AdamW', or set adam_w_mode explicitly")
    ds["_source"] = str(path)
    return ds


def use_bf16_autocast(tcfg: TrainConfig) -> bool:
    """Whether to train under CPU bf16 autocast; GPUs use the DeepSpeed config's fp16/bf16 instead.

    Only when asked for (`--precision bf16`): `auto` is fp32 on every CPU, as the probe's is, so that a
    seed gives the same run whichever CPU trains it, up to float rounding (bf16 rounding moves the
    weights, and through them the probes; `results/probe/precision.json` measured how far for the
    probe's dtype). On CPUs with AMX tiles bf16 matmuls are several times faster than fp32
    (`benchmarks/bench_train.py` measures it): ask for bf16 there, with `TWOTOWER_CPU_KERNELS=native` (the
    kernels `workers.pin_cpu_kernels` pins by default are AVX2's, which leave the AMX tiles unused).
    """
    if torch.cuda.is_available() or tcfg.precision != "bf16":
        return False
    if not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        raise UserError("--precision bf16 asked for, but this CPU has no native bf16 support; use fp32 or auto")
    return True


# ----------------------------------------------------------------------------- after training

def params_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of a model's parameters by name: equal on every rank after a correct data-parallel step."""
    from twotower_lib.train.checkpoints import cpu_state_dict

    h = hashlib.sha256()
    for name, tensor in sorted(cpu_state_dict(model).items()):
        h.update(name.encode())
        h.update(tensor.float().numpy().tobytes())
    return h.hexdigest()


def rank_checksums(model: torch.nn.Module) -> list[str]:
    """Parameter hash of every rank; data parallelism must leave them identical."""
    mine = params_sha256(model)
    if torch.distributed.get_world_size() == 1:
        return [mine]
    gathered: list[str] = [""] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, mine)
    if len(set(gathered)) != 1:
        raise RuntimeError(f"parameters differ across ranks at the end of training: {gathered}")
    return gathered


def ds_precision(ds: dict) -> str:
    """The weights' precision a DeepSpeed config trains in."""
    for name in ("bf16", "fp16"):
        if ds.get(name, {}).get("enabled"):
            return name
    return "fp32"
