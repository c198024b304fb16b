"""Running on a CPU: several training runs at once, each on a fixed number of threads, an allocator
setting that keeps freed memory for reuse (`keep_freed_memory`), and one set of vector kernels on every
x86 machine (`pin_cpu_kernels`).

Why: the CPU-sized towers are small, so their matrix products do not keep two cores busy, and runs
side by side on one thread each get through more work than the same runs one after the other on
every thread. Probes too: their (N, V) products scale well over threads, but the softmax between them
and the towers' passes do not. `benchmarks/bench_workers.py` measures both on your machine.

A second reason: on a CPU, float sums are split across threads, so a run's weights depend on its
thread count. With a fixed `threads_per_run` they do not depend on how many cores the machine has
(every artifact's provenance records `torch_threads`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import platform
import sys
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterator

from tqdm import tqdm

from twotower_lib.errors import UserError

# A spawned worker inherits the parent's environment; a rank set there (a notebook that already
# trained in-process) would make every worker join the same one-process group on one port.
_DISTRIBUTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TWOTOWER_OWN_MASTER_PORT")


def available_cpus() -> int:
    """Cores this process may use (the affinity mask, e.g. a container's limit, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes of memory the OS can give this process without swapping (Linux's MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None


# glibc's mallopt parameters (malloc.h) and the values `keep_freed_memory` sets.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_KEEP = {_M_MMAP_THRESHOLD: 512 << 20, _M_TRIM_THRESHOLD: 1 << 30, _M_TOP_PAD: 256 << 20}


def keep_freed_memory() -> bool:
    """Let glibc's allocator keep freed memory for reuse instead of returning it to the OS.

    Why: by default every block over 32 MiB (a probe head's (1024, 8192) fp32 logits, a tower's
    activations) is a fresh mmap, so each step pays page faults to touch new memory; kept, the same
    memory is reused, with identical results (`benchmarks/bench_workers.py` measures the gain). The
    cost: the process keeps up to 1 GiB of freed memory. Set at import; off with `TWOTOWER_MALLOC=default`,
    and a no-op where the C library is not glibc. Returns whether the setting was applied.
    """
    if os.environ.get("TWOTOWER_MALLOC", "") == "default" or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    return all(mallopt(param, value) == 1 for param, value in _KEEP.items())


# The variables that cap the kernels at AVX2 (torch's own, oneDNN's, MKL's; OpenBLAS's and numpy's own, under
# numpy and scipy: the names numpy's dispatcher knows), and the values `pin_cpu_kernels` sets.
PINNED_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                  "OPENBLAS_CORETYPE": "Haswell", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}


def pin_cpu_kernels() -> bool:
    """Give torch, numpy and scipy the vector kernels of AVX2 on every x86 CPU, so that a seed gives the same
    weights and scores on a CPU with AVX-512 as on one with AVX2 alone.

    Why: the libraries pick their vector kernels (torch's softmax, GELU, LayerNorm; OpenBLAS's products under
    the ICA) by the instruction set, and they round floats differently; a training run's weights then differ
    in their last bits, and the probe's margins and pair r by a few hundredths, enough for a reader's re-run
    to miss the published numbers (`benchmarks/compare_published.py` compares a run with them). Pinned, the
    default profile gives the same numbers on an AVX-512 machine as on an AVX2-only one; at the CPU
    profiles' sizes it costs no measurable time. Set at import: torch reads its variable at its first
    operation, numpy and OpenBLAS theirs when numpy is imported, so a process that imported numpy before
    this library keeps numpy's own kernels (its subprocesses, the pipeline's notebooks and workers, inherit
    the pin). A variable the user set is kept; off with `TWOTOWER_CPU_KERNELS=native`; nothing changes on
    other CPUs (ARM) or in a GPU's kernels. Every artifact's provenance records the kernels that ran
    (`artifacts.cpu_kernels`). Returns whether pinned.
    """
    choice = os.environ.get("TWOTOWER_CPU_KERNELS", "avx2")
    if choice not in ("avx2", "native"):
        raise UserError(f"TWOTOWER_CPU_KERNELS={choice!r}: use avx2 (the default: the same numbers on every x86 "
                        "CPU) or native (torch's own choice for this CPU)")
    if choice == "native" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    for name, value in PINNED_KERNELS.items():
        os.environ.setdefault(name, value)
    # torch.compile's CPU kernels follow the pin, but its on-disk cache does not tell them apart: a kernel cached
    # for AVX-512 and loaded for AVX2 computes garbage (a compiled step's loss is nan), so pinned runs keep their own.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "torchinductor_avx2"))
    return True


def worker_count(threads_per_run: int, jobs: int, cpus: int | None = None) -> int:
    """How many runs go side by side: as many as the cores allow at `threads_per_run` threads each
    (0 = one run at a time on every core), never more than there are jobs."""
    if not isinstance(threads_per_run, int) or threads_per_run < 0:
        raise UserError(f"threads_per_run = {threads_per_run!r} must be a non-negative integer "
                        "(0: one run at a time on every core)")
    if threads_per_run == 0 or jobs <= 1:
        return 1
    return max(1, min(jobs, (cpus or available_cpus()) // threads_per_run))


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block on `n` torch threads (0: leave the setting alone), then restore it."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_IN_WORKER = False


def in_worker() -> bool:
    """True inside a worker process of `run_jobs` (where per-run progress bars would interleave)."""
    return _IN_WORKER


def _exit_with_parent(parent: int, every_s: float = 2.0) -> None:
    """End this worker as soon as the process that started it is gone.

    Why: a pipeline stopped from outside (Ctrl-C, a killed notebook kernel, a pre-empted job) kills
    the pool's owner, but its workers would go on training, unseen, and a re-run would then train
    the same run directory twice at once. The run resumes from its last checkpoint instead."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(1)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _end_quietly(signum: int, frame: Any) -> None:
    """An interrupt ends a worker at once, without a traceback.

    Why: a notebook kernel's interrupt and its shutdown signal the kernel's whole process group, kept
    workers (`_pool`) included; idle ones would each print a KeyboardInterrupt traceback into the
    pipeline's log at the end of every section that used them. A run stopped this way resumes from its
    last checkpoint, as after `_exit_with_parent`."""
    os._exit(128 + signum)


def _start_worker(threads: int, parent: int) -> None:
    import signal

    signal.signal(signal.SIGINT, _end_quietly)   # first: an interrupt may come while torch is still importing
    import torch

    global _IN_WORKER
    _IN_WORKER = True
    for k in _DISTRIBUTED_ENV:
        os.environ.pop(k, None)
    torch.set_num_threads(threads)
    _exit_with_parent(parent)


_POOL: tuple[tuple, ProcessPoolExecutor] | None = None


def _pool(workers: int, threads_per_run: int) -> ProcessPoolExecutor:
    """The worker processes of `run_jobs`, kept for its next call with the same number of workers, threads
    and environment (a worker inherits the environment when it starts).

    Why kept: a spawned worker imports torch and the library before its first job, seconds that a
    section calling `run_jobs` more than once (the probes of the cases, then of the controls) would pay
    at every call. The workers end with this process."""
    global _POOL
    key = (workers, threads_per_run, tuple(sorted(os.environ.items())), tuple(sys.path))
    if _POOL is not None and (_POOL[0] != key or getattr(_POOL[1], "_broken", False)):
        _POOL[1].shutdown(wait=True)
        _POOL = None
    if _POOL is None:
        _POOL = (key, ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                          initializer=_start_worker, initargs=(threads_per_run, os.getpid())))
    return _POOL[1]


def _drop_pool() -> None:
    """Stop the kept workers: after a failed job, the jobs not yet started are cancelled with them."""
    global _POOL
    if _POOL is not None:
        _POOL[1].shutdown(wait=True, cancel_futures=True)
        _POOL = None


def run_jobs(fn: Callable[..., Any], jobs: list[dict[str, Any]], threads_per_run: int,
             desc: str = "runs", label: Callable[[dict], str] = str) -> list[Any]:
    """`fn(**job)` for every job, side by side where the cores allow; the results in job order.

    `fn` must be a module-level function (workers are spawned processes, kept for the next call:
    `_pool`). With one worker the jobs run here, one after the other. If a job fails, the jobs not
    yet started are cancelled, the ones running finish (their results are saved by `fn` as usual),
    and the error is raised.
    """
    workers = worker_count(threads_per_run, len(jobs))
    if workers == 1:
        out = []
        with torch_threads(threads_per_run), tqdm(total=len(jobs), desc=f"{desc} (one at a time, {threads_per_run} "
                                                  f"thread(s))", unit="run", disable=len(jobs) < 2) as bar:
            for job in jobs:
                bar.set_postfix_str(label(job))
                out.append(fn(**job))
                bar.update(1)
        return out
    results: list[Any] = [None] * len(jobs)
    pool = _pool(workers, threads_per_run)
    with tqdm(total=len(jobs), desc=f"{desc} ({workers} at once, {threads_per_run} thread(s) each)", unit="run") as bar:
        pending = {pool.submit(fn, **job): i for i, job in enumerate(jobs)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_EXCEPTION)
            for fut in done:
                i = pending.pop(fut)
                if fut.exception() is not None:
                    _drop_pool()
                    raise fut.exception()
                results[i] = fut.result()
                bar.write(f"done: {label(jobs[i])}")
                bar.update(1)
    return results
