"""Runs side by side (twotower_lib.workers): how many, results in order, errors, thread counts; the pinned kernels."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

import pytest

from twotower_lib.artifacts import cpu_features
from twotower_lib.errors import UserError
from twotower_lib.workers import PINNED_KERNELS, run_jobs, torch_threads, worker_count


def threads_and_pid(tag: str) -> tuple[str, int, int]:
    import torch

    return tag, torch.get_num_threads(), os.getpid()


def fail_on(tag: str, bad: str, marker_dir: str) -> str:
    if tag == bad:
        raise UserError(f"job {tag} failed on purpose")
    time.sleep(0.3)
    open(os.path.join(marker_dir, tag), "w").close()
    return tag


def test_worker_count():
    assert worker_count(0, 10, cpus=8) == 1            # 0: one run at a time on every core
    assert worker_count(1, 10, cpus=2) == 2
    assert worker_count(2, 10, cpus=8) == 4
    assert worker_count(1, 3, cpus=8) == 3             # never more workers than jobs
    assert worker_count(4, 10, cpus=2) == 1            # more threads per run than cores: one at a time
    assert worker_count(1, 1, cpus=8) == 1
    with pytest.raises(UserError, match="threads_per_run"):
        worker_count(-1, 3)


def test_one_worker_runs_here_on_the_asked_threads_and_restores():
    import torch

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    out = run_jobs(threads_and_pid, [{"tag": "a"}, {"tag": "b"}], threads_per_run=0)
    assert [(t, p) for t, _, p in out] == [("a", os.getpid()), ("b", os.getpid())]
    assert torch.get_num_threads() == before


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to run side by side")
def test_jobs_run_in_workers_on_one_thread_each_and_come_back_in_order():
    jobs = [{"tag": t} for t in "abcde"]
    out = run_jobs(threads_and_pid, jobs, threads_per_run=1)
    assert [t for t, _, _ in out] == list("abcde")
    assert {n for _, n, _ in out} == {1}
    pids = {p for _, _, p in out}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2


def env_value(name: str) -> str | None:
    return os.environ.get(name)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to run side by side")
def test_workers_are_kept_for_the_next_call_and_restarted_when_the_environment_changed(monkeypatch):
    from twotower_lib import workers

    jobs = [{"tag": t} for t in "abcd"]
    run_jobs(threads_and_pid, jobs, threads_per_run=1)
    pool = workers._POOL[1]
    started = set(pool._processes)          # not the pids the jobs ran in: one worker may take them all
    second = {p for _, _, p in run_jobs(threads_and_pid, jobs, threads_per_run=1)}
    assert workers._POOL[1] is pool and second <= started     # the same processes: no second start
    monkeypatch.setenv("TWOTOWER_TEST_MARK", "changed")
    seen = run_jobs(env_value, [{"name": "TWOTOWER_TEST_MARK"}] * 2, threads_per_run=1)
    assert seen == ["changed", "changed"]               # new workers, which see the new environment


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to run side by side")
def test_a_failing_job_raises_its_error_and_cancels_the_rest(tmp_path):
    jobs = [{"tag": t, "bad": "a", "marker_dir": str(tmp_path)} for t in ["a"] + [f"x{i}" for i in range(12)]]
    with pytest.raises(UserError, match="job a failed on purpose"):
        run_jobs(fail_on, jobs, threads_per_run=1)
    assert len(list(tmp_path.iterdir())) < 12  # the jobs not yet started were cancelled


def report_pid_and_sleep(path: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(120)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux's /proc and two cores to run side by side")
def test_workers_stop_when_the_process_that_started_them_is_killed(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    marks = [str(tmp_path / t) for t in "ab"]
    script = ("from twotower_lib.workers import run_jobs\nfrom tests.test_workers import report_pid_and_sleep\n"
              f"run_jobs(report_pid_and_sleep, [{{'path': {marks[0]!r}}}, {{'path': {marks[1]!r}}}], threads_per_run=1)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=root)
    try:
        deadline = time.monotonic() + 120
        while not all(os.path.exists(m) for m in marks):
            assert parent.poll() is None and time.monotonic() < deadline, "the workers never started"
            time.sleep(0.2)
        pids = [int(Path(m).read_text()) for m in marks]
        assert all(_running(p) for p in pids)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 20
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_running(p) for p in pids), "a worker went on running after its parent was killed"


@pytest.mark.skipif(not os.path.isdir("/proc") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux's /proc and two cores to run side by side")
def test_an_interrupt_to_the_process_group_ends_kept_workers_without_a_traceback():
    """What a notebook kernel's shutdown does (it signals the kernel's process group): the kept, idle
    workers end at once, and print nothing."""
    import subprocess
    import sys
    from pathlib import Path

    script = ("import os, signal, time\nfrom twotower_lib.workers import run_jobs\n"
              "from tests.test_workers import threads_and_pid\n"
              "pids = {p for _, _, p in run_jobs(threads_and_pid, [{'tag': t} for t in 'abcd'], threads_per_run=1)}\n"
              "print('PIDS', *sorted(pids), flush=True)\n"
              "signal.signal(signal.SIGINT, signal.SIG_IGN)\nos.killpg(0, signal.SIGINT)\ntime.sleep(3)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=120, start_new_session=True)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for line in done.stdout.splitlines() if line.startswith("PIDS") for p in line.split()[1:]]
    assert pids and not any(_running(p) for p in pids)
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


@pytest.mark.skipif(not (os.uname().sysname == "Linux" and os.confstr("CS_GNU_LIBC_VERSION")),
                    reason="the allocator setting is for glibc")
def test_the_allocator_keeps_freed_memory_unless_told_not_to(monkeypatch):
    from twotower_lib.workers import keep_freed_memory

    assert keep_freed_memory() is True
    monkeypatch.setenv("TWOTOWER_MALLOC", "default")
    assert keep_freed_memory() is False


X86_WITH_AVX2 = platform.machine().lower() in ("x86_64", "amd64") and "avx2" in cpu_features().get("flags", [])


def _kernels(code: str, **env: str) -> str:
    """What a fresh interpreter prints after `code`, with `env` on top of this environment (minus the pins)."""
    base = {k: v for k, v in os.environ.items()
            if k not in (*PINNED_KERNELS, "TWOTOWER_CPU_KERNELS", "TORCHINDUCTOR_CACHE_DIR")}
    done = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()[-1]


@pytest.mark.skipif(not X86_WITH_AVX2, reason="the kernels are pinned on x86 CPUs with AVX2")
def test_torch_runs_avx2_kernels_once_the_library_is_imported_even_after_torch():
    """The pin holds where a notebook imported torch first, and numpy's and OpenBLAS's in the processes it
    starts (numpy's dispatcher reads its variable when numpy is imported); the user's own choice and `native`
    are kept, and the provenance names the kernels that ran."""
    ask = "import torch, twotower_lib; from twotower_lib.artifacts import provenance; "
    assert _kernels(ask + "print(torch.backends.cpu.get_cpu_capability())") == "AVX2"
    assert _kernels(ask + "print(provenance()['cpu_kernels']['torch'])") == "AVX2"
    blas = "import twotower_lib, numpy; from twotower_lib.artifacts import cpu_kernels; print(cpu_kernels()['openblas'])"
    assert _kernels(blas) == "Haswell"
    study = "import studies.seeds.book, scipy.linalg; from twotower_lib.artifacts import cpu_kernels; print(cpu_kernels()['openblas'])"
    assert _kernels(study) == "Haswell"  # a study's module imports numpy before the library: the package pins first
    assert _kernels("import numpy; from numpy._core._multiarray_umath import __cpu_features__ as f; import twotower_lib; "
                    "import subprocess, sys; print(subprocess.run([sys.executable, '-c', 'import numpy; "
                    "from numpy._core._multiarray_umath import __cpu_features__ as f; print(f[\"X86_V4\"])'], "
                    "capture_output=True, text=True).stdout.strip())") == "False"
    cache = "import os, twotower_lib; print(os.environ.get('TORCHINDUCTOR_CACHE_DIR', 'torch-default'))"
    assert _kernels(cache).endswith("torchinductor_avx2")  # compiled kernels cached apart from native ones
    assert _kernels(cache, TWOTOWER_CPU_KERNELS="native") == "torch-default"
    native = _kernels("import torch; print(torch.backends.cpu.get_cpu_capability())")
    assert _kernels(ask + "print(torch.backends.cpu.get_cpu_capability())", TWOTOWER_CPU_KERNELS="native") == native
    assert _kernels(ask + "print(torch.backends.cpu.get_cpu_capability())", ATEN_CPU_CAPABILITY="default") == "DEFAULT"


def test_an_unknown_kernel_choice_is_refused_by_name(monkeypatch):
    from twotower_lib.workers import pin_cpu_kernels

    monkeypatch.setenv("TWOTOWER_CPU_KERNELS", "avx512")
    with pytest.raises(UserError, match="TWOTOWER_CPU_KERNELS='avx512': use avx2"):
        pin_cpu_kernels()
    monkeypatch.setenv("TWOTOWER_CPU_KERNELS", "native")
    assert pin_cpu_kernels() is False


def test_the_provenance_names_each_openblas_copy_where_numpy_and_scipy_run_different_kernels(monkeypatch):
    """numpy and scipy each load an OpenBLAS; a copy loaded before the pin keeps its own kernels, and the record
    says so instead of naming whichever copy came last."""
    import threadpoolctl

    from twotower_lib.artifacts import cpu_kernels

    def libs(*archs):
        return lambda: [{"internal_api": "openblas", "architecture": a, "filepath": f"/x/{name}.so"}
                        for name, a in zip(("numpy_openblas", "scipy_openblas"), archs)] + \
                       [{"internal_api": "openmp", "filepath": "/x/libgomp.so"}]

    monkeypatch.setattr(threadpoolctl, "threadpool_info", libs("Haswell", "Haswell"))
    assert cpu_kernels()["openblas"] == "Haswell" and "openmp" not in cpu_kernels()
    monkeypatch.setattr(threadpoolctl, "threadpool_info", libs("SkylakeX", "Haswell"))
    assert cpu_kernels()["openblas"] == "SkylakeX (numpy_openblas.so), Haswell (scipy_openblas.so)"
