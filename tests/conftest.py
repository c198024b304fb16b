import os
from pathlib import Path

# No hub is reachable here: fail at once instead of retrying for ~23 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# DeepSpeed's accelerator: CUDA where a GPU is (tests/test_gpu.py), else the CPU. Deterministic cuBLAS
# needs its workspace fixed before the first CUDA matmul.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def _seed_global_rngs() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before a test's fixtures are made: a module's fixture that draws from the global generators draws the same
    numbers whichever of its tests comes first, alone, in a subset or in the whole suite."""
    _seed_global_rngs()


@pytest.fixture(autouse=True)
def _global_rngs_from_one_seed():
    """Every test starts from the same state of the global generators (torch's, numpy's legacy one, `random`),
    whichever tests ran before it and whichever fixtures it made first: a test that draws from them without
    seeding gives the same numbers alone, in a subset or in the whole suite."""
    _seed_global_rngs()


@pytest.fixture(scope="session")
def tiny_corpus_dir(tmp_path_factory):
    """A directory of generated English-like .txt files (~18k words)."""
    from tests.textgen import write_corpus

    d = tmp_path_factory.mktemp("tiny_corpus")
    write_corpus(d, n_files=6, paragraphs_per_file=60, seed=0)
    return d


@pytest.fixture(scope="session")
def tiny_data(tiny_corpus_dir, tmp_path_factory):
    """PreparedData from the generated corpus: vocabulary ~300, blocks of 32 tokens."""
    from twotower_lib.data import DataConfig, load_prepared, prepare_data

    cfg = DataConfig(corpus=str(tiny_corpus_dir), vocab_size=300, seq_len=32, seed=0,
                     valid_fraction=0.2, doc_words=300)
    out = prepare_data(cfg, tmp_path_factory.mktemp("tiny_prepared") / "data", verbose=False)
    return load_prepared(out)


@pytest.fixture(scope="session")
def built_book(tiny_corpus_dir, tmp_path_factory):
    """Every existing section at the tiny profile (generated corpus), then the book (tests/test_book.py,
    tests/test_readme.py)."""
    import time

    from twotower_lib.book import build, pipeline

    tmp = tmp_path_factory.mktemp("book")
    # the generated corpus has ~60 documents: the tiny profile's 2% for validation would leave one
    overrides = {"data.corpus": str(tiny_corpus_dir), "data.valid_fraction": "0.2"}
    pipe = pipeline.make_pipeline("tiny", overrides, tmp / "runs")
    t0 = time.time()
    ran = pipe.run(log=print, jobs=pipeline.DEFAULT_JOBS)   # as the CLI runs it: the analysis sections side by side
    html = build.build(pipe, tmp)
    cold = time.time() - t0
    t0 = time.time()
    rerun = pipeline.make_pipeline("tiny", overrides, tmp / "runs").run(log=print)
    build.build(pipe, tmp)
    warm = time.time() - t0
    print(f"end to end: cold {cold:.1f} s, warm {warm:.1f} s, book {build.tree_size(html) / 1e6:.1f} MB")
    return {"pipe": pipe, "html": html, "ran": ran, "rerun": rerun, "cold": cold, "warm": warm}


# `make test` spreads the suite over workers (pytest-xdist, `--dist loadfile`): a test file's tests run on one worker, so
# its module fixtures are made once; the files whose tests read `built_book` go to one worker together, so the tiny
# profile and its book (a minute or more) are built once. (xdist's own `loadgroup` no longer groups on pytest 9.2: it
# marks a group in the test's id, which pytest 9.2 no longer lets a plugin change.)
BOOK_FILES = {p.relative_to(Path(__file__).parent.parent).as_posix() for p in Path(__file__).parent.rglob("test_*.py")
              if "built_book" in p.read_text()}


@pytest.hookimpl(tryfirst=True, optionalhook=True)    # optional: xdist's hook, absent without it (or with -p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the files that read the built tiny book as one file."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class BookFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "the files that read built_book" if path in BOOK_FILES else path

    return BookFilesTogether(config, log)


def skip_or_fail_in_ci(reason: str) -> None:
    """Skip a test whose tool is missing here; in CI (CI=true), where `.ci/run` installs every tool
    the suite needs, fail instead: a skipped test there would hide that it never ran."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run this test, but {reason}")
    pytest.skip(reason)


def interrupt_training_at(monkeypatch, step: int):
    """Make `train` raise KeyboardInterrupt when it reaches optimizer step `step` (an interrupted run);
    returns the real micro-batch function, which undoes it when set back."""
    import twotower_lib.train.loop as train_mod

    real = train_mod.micro_batch

    def interrupting(data, order, cfg, at, *args):
        if at == step:
            raise KeyboardInterrupt
        return real(data, order, cfg, at, *args)

    monkeypatch.setattr(train_mod, "micro_batch", interrupting)
    return real
