"""Atomic writes, hashes and provenance: the contract between pipeline stages.

Every artifact on disk is written so that a crash never leaves a half-written file that a later
run could mistake for a complete one (write to a temporary name, fsync, rename), and carries a
manifest saying which config, seed, code version and package versions produced it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator

from twotower_lib.errors import UserError

# Packages whose versions decide numerical results; recorded in every manifest.
TRACKED_PACKAGES = (
    "torch", "deepspeed", "transformers", "tokenizers", "numpy", "scipy", "pandas",
    "scikit-learn", "spacy", "stanza", "safetensors",
)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_json(obj: Any) -> str:
    """Hash of a JSON-serialisable object, independent of key order."""
    return sha256_bytes(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def manifest_has(*keys: str):
    """An `owns` test for `atomic_directory`: the directory's manifest.json holds all of `keys`
    (each artifact kind writes its own identifying keys: prepared data `tokenizer_sha256`, a
    preference artifact `artifact_version`, ...)."""
    def owns(path: Path) -> bool:
        try:
            m = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(m, dict) and all(k in m for k in keys)
    return owns


def check_replaceable(final: Path, owns: Callable[[Path], bool], what: str) -> None:
    """Refuse to replace an existing, non-empty `final` unless `owns(final)` says it holds `what`.

    Why: an output directory given on the command line may be one the user keeps other work in;
    a command replaces only what the same kind of command wrote there.
    """
    if final.exists() and (not final.is_dir() or any(final.iterdir())) and not owns(final):
        raise UserError(f"{final} already exists and does not hold {what}; nothing was written and nothing "
                        f"was deleted. Give an output path that is new, empty, or holds {what} from an earlier run.")


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike, owns: Callable[[Path], bool] | None = None,
                     what: str = "an artifact of this kind") -> Iterator[Path]:
    """Build a directory under a temporary name and rename it into place only on success.

    If the body raises (or the process dies), `final` is untouched and the temporary directory
    is removed (or, after a hard kill, left with a `.tmp-` prefix that no reader looks at).
    An existing `final` is replaced only once the new one is complete, and only if it is empty or
    `owns(final)` says it holds an earlier artifact of the same kind (checked before any work, and
    again before the swap): a directory holding anything else is never deleted.
    """
    final = Path(final)
    owns = owns or (lambda _: False)
    check_replaceable(final, owns, what)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{final.name}-"))
    try:
        yield tmp
        check_replaceable(final, owns, what)
        if final.exists():
            old = final.with_name(f".old-{final.name}-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is not valid JSON ({e}); it is corrupted or was written by "
                         "something else. Delete it and re-run the command that produces it.") from e


def git_commit(repo_dir: str | os.PathLike | None = None) -> str:
    """The code version: git commit of the checkout (with '+dirty' if its code is modified), else the package
    version. Files under `results/` are what the studies write, not code: a study that rewrites its own results
    (every report does) leaves the code it ran clean."""
    from twotower_lib import __version__

    repo_dir = Path(repo_dir) if repo_dir else Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_dir, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!results"],
                               cwd=repo_dir, capture_output=True, text=True, timeout=10).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return f"twotower_lib=={__version__} (no git checkout)"


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def cpu_features() -> dict[str, Any]:
    """The CPU's model name and the vector units its kernels choose by (Linux; empty elsewhere).

    Why recorded: libraries pick their kernels by the instruction set, so two kinds of machine can compute a
    seed's result with different float rounding (torch's and numpy's kernels are pinned to one set on x86:
    `workers.pin_cpu_kernels`), and bf16 (asked for) runs only where the CPU has native bf16 units; the
    record says which kind of machine made it."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return {"model": fields.get("model name", "unknown"), "flags": [f for f in wanted if f in flags]}


def cpu_kernels() -> dict[str, str]:
    """The vector kernels this process's libraries run, where loaded: torch's (`AVX2`, `AVX512`, ...) and
    OpenBLAS's under numpy and scipy (`Haswell`, `SkylakeX`, ...); `workers.pin_cpu_kernels` pins both. numpy and
    scipy each load their own OpenBLAS: one name where they agree, each copy by its file where they do not (a
    copy loaded before the pin keeps its own kernels)."""
    out = {}
    if (torch := sys.modules.get("torch")) is not None:
        out["torch"] = torch.backends.cpu.get_cpu_capability()
    if "numpy" in sys.modules and importlib.util.find_spec("threadpoolctl") is not None:
        from threadpoolctl import threadpool_info

        found: dict[str, dict[str, str]] = {}
        for lib in threadpool_info():
            if lib.get("architecture"):
                found.setdefault(lib["internal_api"], {})[Path(lib["filepath"]).name] = lib["architecture"]
        for api, by_file in found.items():
            kinds = set(by_file.values())
            out[api] = kinds.pop() if len(kinds) == 1 else ", ".join(f"{a} ({f})" for f, a in sorted(by_file.items()))
    return out


def provenance(**extra: Any) -> dict[str, Any]:
    """What produced an artifact: code version, package versions, interpreter, machine, plus `extra`.

    `torch_threads` too: on a CPU, float sums (matmuls) are split differently with another number of
    threads, so a seed fixes a run's weights only together with it; `cpu` says which kind of CPU
    (`cpu_features`) and `cpu_kernels` which of its kernels the libraries ran (`workers.pin_cpu_kernels`)."""
    from datetime import datetime, timezone

    torch = sys.modules.get("torch")
    return {
        "code_version": git_commit(),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_features(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **({"torch_threads": torch.get_num_threads()} if torch is not None else {}),
        "cpu_kernels": cpu_kernels(),
        **extra,
    }


def portable_command(script: str, args: list[str]) -> str:
    """The command line a committed result records: a path inside a runs folder is shown from `runs/`
    on (it lives under $TWOTOWER_RUNS), any other absolute path by its last component; a committed
    file must not name the folders of the machine that made it (also after `NAME=`, as in `label=DIR`)."""
    def portable(arg: str) -> str:
        name, sep, rest = arg.partition("=")
        if sep and os.path.isabs(rest) and not os.path.isabs(name):
            return f"{name}={portable(rest)}"
        if not os.path.isabs(arg):
            return arg
        parts = Path(arg).parts
        return "/".join(parts[parts.index("runs"):]) if "runs" in parts else parts[-1]
    return " ".join(["python", script, *(shlex.quote(portable(a)) for a in args)])
