"""Train/validation split, token blocks as memory-mapped arrays, token counts, and loading.

Layout of a prepared-data directory:
    manifest.json            sources, hashes, counts, config, provenance (written last)
    tokenizer/               transformers fast tokenizer (tokenizer.json, ...)
    train_ids.npy            int32 (n_train_blocks, seq_len): windows of the training token stream
    train_docs.npy           int32 (n_train_blocks, seq_len): document index of every token
    valid_ids.npy / valid_docs.npy   the same for validation (documents numbered from 0)
    counts.npy               int64 (vocab_size,): token counts over train_ids
    documents.jsonl.gz       every cleaned document (id, split, cased text), in index order per split
Documents are concatenated in order, each followed by [SEP]; the stream is cut into blocks of
`seq_len` tokens and the remainder (< seq_len tokens) is dropped.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterator
import numpy as np

from twotower_lib.artifacts import read_json, sha256_json
from twotower_lib.errors import UserError

MANIFEST = "manifest.json"
DOCUMENTS = "documents.jsonl.gz"
FORMAT_VERSION = 2


def is_validation(doc_id: str, seed: int, valid_fraction: float) -> bool:
    """Deterministic document-level split: a hash of (seed, doc_id), independent of order and count."""
    h = hashlib.sha256(f"{seed}\x00{doc_id}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < valid_fraction


class BlockWriter:
    """Stream one split's documents to disk as (ids, doc index) blocks of `seq_len` tokens.

    Tokens are appended to raw files as they come (so corpora larger than memory work), then
    `finish` writes `<split>_ids.npy` / `<split>_docs.npy` of shape (n_blocks, seq_len).
    """

    def __init__(self, out_dir: Path, split: str, tokenizer, seq_len: int, batch_size: int = 256):
        self.out_dir, self.split, self.tokenizer, self.seq_len = out_dir, split, tokenizer, seq_len
        self.sep_id = tokenizer.convert_tokens_to_ids("[SEP]")
        self.batch_size = batch_size
        self._pending: list[str] = []
        self.n_docs = 0
        self.n_tokens = 0
        self._ids = open(out_dir / f".{split}_ids.raw", "wb")
        self._docs = open(out_dir / f".{split}_docs.raw", "wb")

    def add(self, text: str) -> None:
        self._pending.append(text)
        if len(self._pending) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        enc = self.tokenizer(self._pending, add_special_tokens=False)["input_ids"]
        for ids in enc:
            self._ids.write(np.asarray(ids + [self.sep_id], dtype=np.int32).tobytes())
            self._docs.write(np.full(len(ids) + 1, self.n_docs, dtype=np.int32).tobytes())
            self.n_docs += 1
            self.n_tokens += len(ids) + 1
        self._pending.clear()

    def finish(self) -> int:
        """Write the .npy block arrays, delete the raw streams; return the number of blocks."""
        self._flush()
        self._ids.close()
        self._docs.close()
        n_blocks = self.n_tokens // self.seq_len
        for kind in ("ids", "docs"):
            raw = self.out_dir / f".{self.split}_{kind}.raw"
            stream = np.memmap(raw, dtype=np.int32, mode="r") if self.n_tokens else np.zeros(0, np.int32)
            out = np.lib.format.open_memmap(self.out_dir / f"{self.split}_{kind}.npy", mode="w+",
                                            dtype=np.int32, shape=(n_blocks, self.seq_len))
            T, step = self.seq_len, 1 << 16  # copy in chunks: the stream may exceed memory
            for i in range(0, n_blocks, step):
                j = min(i + step, n_blocks)
                out[i:j] = stream[i * T: j * T].reshape(j - i, T)
            out.flush()
            del out, stream
            raw.unlink()
        return n_blocks


@dataclass
class PreparedData:
    """A prepared-data directory, memory-mapped. See the module docstring for the layout."""

    path: Path
    manifest: dict
    train: np.ndarray = field(repr=False)
    valid: np.ndarray = field(repr=False)
    train_doc_ids: np.ndarray = field(repr=False)
    valid_doc_ids: np.ndarray = field(repr=False)
    counts: np.ndarray = field(repr=False)

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    @property
    def seq_len(self) -> int:
        return int(self.manifest["config"]["seq_len"])

    @property
    def special_ids(self) -> dict[str, int]:
        return dict(self.manifest["special_ids"])

    @property
    def data_hash(self) -> str:
        """Identity of this data for downstream manifests: the hash of its configuration and files.

        Not of the whole manifest, which also records when and how fast it was built: preparing the
        same data again must not invalidate the runs trained on it. (Manifests written before
        `content_hash` existed fall back to the whole-manifest hash.)"""
        return self.manifest.get("content_hash") or sha256_json(self.manifest)

    def unigram_loss(self) -> float:
        """The validation text's cross-entropy in nats under the training split's token frequencies (add-one
        smoothed), special tokens left out: what a model reaches from word frequencies alone, so a model whose
        loss is not below it has learned no context."""
        valid = np.asarray(self.valid).ravel()
        valid = valid[~np.isin(valid, list(self.special_ids.values()))]
        p = (self.counts + 1.0) / (self.counts.sum() + len(self.counts))
        return float(-np.log(p[valid]).mean())

    @cached_property
    def tokens(self) -> list[str]:
        """Every token's text, by id, read from tokenizer.json: what tables and charts label tokens with,
        without loading the tokenizer (transformers, about a second per notebook kernel)."""
        path = self.path / "tokenizer" / "tokenizer.json"
        if not path.exists():
            raise UserError(f"no tokenizer at {path.parent} (tokenizer.json missing); run "
                            "`python -m twotower_lib data prepare` to create it")
        vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
        tokens = [""] * len(vocab)
        for text, i in vocab.items():
            tokens[i] = text
        return tokens

    @cached_property
    def tokenizer(self):
        from twotower_lib.data.tokenizer import load_tokenizer

        return load_tokenizer(self.path / "tokenizer")

    def documents(self, split: str) -> list[str]:
        """Document ids of `split`; position i is document index i in `<split>_docs.npy`."""
        return [d["id"] for d in read_documents(self.path / DOCUMENTS) if d["split"] == split]

    def sources(self, split: str) -> np.ndarray:
        """The source (register) of each document of `split`, by document index: the first part of
        its id ("books/austen-emma#0003" -> "books"; a hub dataset's "hf/NAME/..." -> NAME)."""
        def source(doc_id: str) -> str:
            parts = doc_id.split("/")
            return parts[1] if parts[0] == "hf" and len(parts) > 2 else parts[0]
        return np.array([source(d) for d in self.documents(split)])

    def texts(self, split: str, limit: int | None = None) -> Iterator[str]:
        """Cleaned, cased text of the documents of `split` (what the POS tagger reads), in index order."""
        n = 0
        for d in read_documents(self.path / DOCUMENTS):
            if d["split"] == split:
                if limit is not None and n >= limit:
                    return
                n += 1
                yield d["text"]


def read_documents(path: Path) -> Iterator[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _open(path: Path, name: str, shape: tuple | None, dtype) -> np.ndarray:
    f = path / name
    if not f.exists():
        raise UserError(f"prepared data at {path} is incomplete: {name} is missing. Delete the directory "
                        "and run `python -m twotower_lib data prepare` again.")
    try:
        arr = np.load(f, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        raise UserError(f"{f} is corrupted ({e}); delete {path} and run `data prepare` again") from e
    if arr.dtype != np.dtype(dtype) or (shape is not None and arr.shape != shape):
        raise UserError(f"{f} has shape {arr.shape} / dtype {arr.dtype}, but the manifest says "
                        f"{shape} / {np.dtype(dtype)}: the directory is corrupted or was mixed with "
                        f"another one. Delete {path} and run `data prepare` again.")
    return arr


def load_prepared(path: str | Path) -> PreparedData:
    """Open a prepared-data directory, checking it is complete and consistent with its manifest."""
    path = Path(path)
    if not (path / MANIFEST).exists():
        raise UserError(f"no prepared data at {path} (no {MANIFEST}). Run `python -m twotower_lib data "
                        "prepare` first (see --help for --corpus/--vocab-size/--seq-len/--seed).")
    m = read_json(path / MANIFEST)
    if m.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{path} was written by another version of the data format "
                        f"({m.get('format_version')} != {FORMAT_VERSION}); run `data prepare` again")
    T = int(m["config"]["seq_len"])
    nt, nv = int(m["blocks"]["train"]), int(m["blocks"]["valid"])
    return PreparedData(
        path=path, manifest=m,
        train=_open(path, "train_ids.npy", (nt, T), np.int32),
        valid=_open(path, "valid_ids.npy", (nv, T), np.int32),
        train_doc_ids=_open(path, "train_docs.npy", (nt, T), np.int32),
        valid_doc_ids=_open(path, "valid_docs.npy", (nv, T), np.int32),
        counts=_open(path, "counts.npy", (int(m["vocab_size"]),), np.int64),
    )
