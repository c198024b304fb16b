"""Every command line of the README's command block works as written.

Each `python -m twotower_lib ...` line of the block is run from a scratch directory (so its relative
paths land there) with only what a test machine needs changed: the generated corpus instead of the
registry's, and the `tiny` profile (its run copied from the session's end-to-end build, `top_n` at its own N) for
`run`, `book` and `publish`. A README line of a command this test does not know fails it: a new line needs its tiny
form here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"Command line[^\n]*\n+```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no ```bash block after 'Command line'"
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line.startswith("python -m twotower_lib")]


def test_the_readme_block_lists_every_command_of_the_cli():
    from twotower_lib.__main__ import COMMANDS

    listed = {line.split()[3] for line in readme_commands()}
    assert listed == {"data", *COMMANDS}, f"README command block: {sorted(listed)}; CLI: data, {sorted(COMMANDS)}"


def test_every_relative_link_of_the_readme_resolves():
    """The README's links, its generated answer block's too (written for the book's folder, `front.readme_blocks`
    points them from the README's), name files of the repository."""
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert links and not [link for link in links if not (ROOT / link).exists()]


@pytest.mark.slow
def test_the_layout_table_names_every_module():
    """A new contributor finds each module of the library in the README's layout table."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    modules = [p for p in sorted((ROOT / "twotower_lib").rglob("*.py")) if p.name not in ("__init__.py", "__main__.py")]
    unnamed = [p.relative_to(ROOT).as_posix() for p in modules if f"{p.name}`" not in readme]
    assert not unnamed, f"modules the README's layout table does not name: {unnamed}"


def test_every_readme_command_runs_as_written(built_book, tiny_corpus_dir, tmp_path):
    from tests.textgen import write_corpus
    from twotower_lib.book.profiles import get_profile

    corpus = str(tiny_corpus_dir)
    shutil.copytree(built_book["pipe"].root, tmp_path / "runs" / "tiny")   # the tiny profile, already run
    tiny = ["--profile", "tiny", "-p", "corpus", corpus, "-p", "valid_fraction", "0.2"]  # as built_book

    def tiny_form(args: list[str]) -> list[str]:
        command = args[0] if args[0] != "data" else "data prepare"
        if command == "data prepare":  # enough generated text for documents of the default 2,000 words
            write_corpus(tmp_path / "corpus", n_files=12, paragraphs_per_file=150, seed=3)
            return args + ["--corpus", str(tmp_path / "corpus"), "--out", "prepared"]
        if command == "train":
            return args + ["--data", "prepared"]
        if command == "probe":
            return args
        if command == "run":  # top_n at the tiny profile's own N (its vocabulary is 300 tokens)
            args = [str(get_profile("tiny").analysis.top_n) if prev == "analysis.top_n" else a for prev, a in zip([""] + args, args)]
            return args + ([] if "--profile" in args else tiny[:2]) + tiny[2:]
        if command == "book":
            return args + tiny[:2] + ["--out", "."]
        if command == "publish":
            i = args.index("--profile")
            return args[:i] + args[i + 2:] + tiny + ["--results", "profiles"]
        raise AssertionError(f"README command {' '.join(args)!r} has no tiny form in {__file__}")

    lines = readme_commands()
    assert len(lines) >= 6
    for line in lines:
        args = tiny_form(line.split()[3:])
        done = subprocess.run(_cli(*args), cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True)
        assert done.returncode == 0, f"README line {line!r} failed (as {args}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert (tmp_path / "runs" / "gpt-s1" / "probe" / "preference.parquet").exists()
    assert (tmp_path / "_build" / "html" / "index.html").exists()
    assert (tmp_path / "profiles" / "tiny.json").exists()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "twotower_lib", *args]


def _env(tmp: Path) -> dict[str, str]:
    """A user's shell: without the torch.distributed variables that training in this test process
    set (a child would otherwise take them for a launcher's and bind this process's port)."""
    launcher = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    return {**{k: v for k, v in os.environ.items() if k not in launcher}, "TWOTOWER_DATA": str(tmp / "data-home"),
            "TWOTOWER_RUNS": str(tmp / "runs"), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
