import os

# No hub is reachable here: fail at once instead of retrying for ~23 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


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


def skip_or_fail_in_ci(reason: str) -> None:
    """Skip a test whose tool is missing here; in CI (CI=true), where `.ci/run` installs every tool
    the suite needs, fail instead: a skipped test there would hide that it never ran."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run this test, but {reason}")
    pytest.skip(reason)
