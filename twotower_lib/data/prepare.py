"""`data prepare`: corpus -> clean documents -> split -> WordPiece tokenizer -> token blocks.

Writes one prepared-data directory (layout in `twotower_lib.data.blocks`) atomically: it is built
under a temporary name and renamed into place only when complete, so an interrupted or failed
run never leaves something a later run could take for finished. A second run with the same
inputs finds the directory up to date and does no work.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import time
from dataclasses import asdict
from pathlib import Path
import numpy as np
from tqdm import tqdm

from twotower_lib.artifacts import atomic_write_json, provenance, read_json, sha256_file, sha256_json
from twotower_lib.data.blocks import DOCUMENTS, FORMAT_VERSION, MANIFEST, BlockWriter, is_validation, read_documents
from twotower_lib.data.config import DataConfig, data_home, prepared_dir
from twotower_lib.data.sources import REGISTRY_PACKAGES, SourceReport, iter_documents, parse_registry_spec
from twotower_lib.data.tokenizer import special_ids, train_wordpiece
from twotower_lib.errors import UserError


def input_fingerprint(cfg: DataConfig) -> dict:
    """What the inputs are, cheaply: pinned hashes for registry packages, size+mtime for user files."""
    c = cfg.corpus
    if c == "registry" or c.startswith("registry:"):
        parts = parse_registry_spec(c)
        names = sorted({"bible": "books"}.get(p, p) for p in parts)
        return {"registry": {n: REGISTRY_PACKAGES[n].sha256 for n in names}, "parts": list(parts)}
    if c.startswith("hf:"):
        return {"hf": c, "max_docs": cfg.max_docs}
    path = Path(c).expanduser().resolve()
    files = sorted(path.rglob("*.txt")) if path.is_dir() else [path]
    return {"files": [[f.relative_to(path if path.is_dir() else path.parent).as_posix(),
                       f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()]}


def is_up_to_date(out: Path, cfg: DataConfig) -> bool:
    try:
        m = read_json(out / MANIFEST)
    except (FileNotFoundError, ValueError):
        return False
    return (m.get("format_version") == FORMAT_VERSION and m.get("config") == cfg.to_dict()
            and m.get("input_fingerprint") == input_fingerprint(cfg)
            and all((out / f).exists() for f in m.get("files", {})))


def prepare_data(cfg: DataConfig, out: str | Path | None = None, *, force: bool = False,
                 verbose: bool = True, cache: bool = False) -> Path:
    """Prepare `cfg`'s corpus into `out` (default: `prepared_dir(cfg)`); return the directory.

    `cache` (the book's data section): a pinned corpus (registry, Hugging Face) is prepared once into
    `prepared_dir(cfg)` and copied from there, each file checked against its manifest's sha256, so a run from an
    empty runs folder does not prepare the same bytes again."""
    out = Path(out) if out is not None else prepared_dir(cfg)
    if not force and is_up_to_date(out, cfg):
        if verbose:
            print(f"prepared data up to date: {out}")
        return out
    shared = prepared_dir(cfg) if cache and _pinned(cfg.corpus) else None
    if shared and shared != out and not force and is_up_to_date(shared, cfg) and _copy_prepared(shared, out):
        if verbose:
            print(f"prepared data copied from {shared}")
        return out
    _prepare(cfg, out, verbose)
    if shared and shared != out and not shared.exists():
        _copy_prepared(out, shared)
    return out


def _pinned(corpus: str) -> bool:
    """A corpus whose bytes a name fixes (a registry package's pinned version, a Hugging Face dataset): worth a
    shared copy; a folder of the user's files is prepared where it is asked for."""
    return corpus.startswith(("registry", "hf:"))


def _copy_prepared(src: Path, dest: Path) -> bool:
    """Copy prepared data `src` to `dest` atomically (hard links where one file system holds both: the files are
    never written again); False (nothing written) where a file's sha256 is not its manifest's."""
    import shutil

    from twotower_lib.artifacts import atomic_directory, manifest_has

    files = read_json(src / MANIFEST)["files"]
    try:
        with atomic_directory(dest, manifest_has("tokenizer_sha256", "content_hash"), "prepared data") as tmp:
            for name in [*files, MANIFEST]:
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(src / name, tmp / name)
                except OSError:
                    shutil.copyfile(src / name, tmp / name)
            if any(sha256_file(tmp / name) != digest for name, digest in files.items()):
                raise ValueError(f"{src} does not match its manifest")
    except (OSError, ValueError) as e:
        print(f"note: prepared data not copied from {src} to {dest} ({e})")
        return False
    return True


def _prepare(cfg: DataConfig, out: Path, verbose: bool) -> None:
    """Read, clean, split, tokenize and write `cfg`'s corpus into `out` (atomically)."""
    t0 = time.time()
    fingerprint = input_fingerprint(cfg)
    from twotower_lib.artifacts import atomic_directory, manifest_has

    with atomic_directory(out, manifest_has("tokenizer_sha256", "content_hash"), "prepared data") as tmp:
        corpus_file = tmp / DOCUMENTS  # kept: the POS section tags these (cased) texts
        reports, doc_ids, words = _read_corpus(cfg, corpus_file, verbose)
        # The tokenizer sees the training split only.
        train_texts = (d["text"] for d in read_documents(corpus_file) if d["split"] == "train")
        if verbose:
            print(f"training WordPiece tokenizer (vocab {cfg.vocab_size}) on {len(doc_ids['train'])} documents ...")
        tokenizer = train_wordpiece(train_texts, cfg.vocab_size)
        tokenizer.save_pretrained(str(tmp / "tokenizer"))
        blocks, tokens = _encode(cfg, tmp, corpus_file, tokenizer, sum(map(len, doc_ids.values())), verbose)
        files = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*"))
                 if p.is_file() and not p.name.startswith(".")}
        manifest = {
            "format_version": FORMAT_VERSION,
            "config": cfg.to_dict(),
            "input_fingerprint": fingerprint,
            "sources": [asdict(r) for r in reports],
            "documents": {s: len(v) for s, v in doc_ids.items()},
            "words": words,
            "tokens": tokens,  # before dropping the last partial block
            "blocks": blocks,
            "block_tokens": {s: blocks[s] * cfg.seq_len for s in blocks},
            "vocab_size": len(tokenizer),
            "vocab_size_requested": cfg.vocab_size,
            "special_ids": special_ids(tokenizer),
            "tokenizer_sha256": files["tokenizer/tokenizer.json"],
            "files": files,
            # Identity of the data, independent of when it was built: what downstream manifests record.
            "content_hash": sha256_json({"config": cfg.to_dict(), "files": files}),
            "replaced_characters": sum(r.replaced_characters for r in reports),
            "elapsed_seconds": round(time.time() - t0, 2),
            "provenance": provenance(),
        }
        atomic_write_json(tmp / MANIFEST, manifest)
    if verbose:
        print(summary_line(out, manifest))
        if manifest["replaced_characters"]:
            print(f"warning: {manifest['replaced_characters']} invalid UTF-8 sequences were replaced by U+FFFD "
                  f"(counts per source, and per file for --corpus PATH, in {out / MANIFEST} under sources)")


def _read_corpus(cfg: DataConfig, corpus_file: Path, verbose: bool) -> tuple[list[SourceReport], dict, dict]:
    """Pass 1: read and clean every document once into `corpus_file` (gzipped JSON lines, each with its
    split), keeping them on disk, not in memory; return the sources' reports, the document ids and the
    word counts of each split."""
    reports: list[SourceReport] = []
    doc_ids: dict[str, list[str]] = {"train": [], "valid": []}
    words = {"train": 0, "valid": 0}
    seen: set[str] = set()
    # mtime=0 and no file name in the gzip header: the same corpus gives the same bytes (content hash)
    with open(corpus_file, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz, \
            io.TextIOWrapper(gz, encoding="utf-8") as f:
        docs = iter_documents(cfg.corpus, data_home() / "sources", cfg.doc_words, cfg.max_docs, reports)
        for doc in tqdm(docs, desc="reading corpus", unit="doc", disable=not verbose):
            if doc.doc_id in seen:
                raise UserError(f"duplicate document id {doc.doc_id!r} in corpus {cfg.corpus!r}")
            seen.add(doc.doc_id)
            split = "valid" if is_validation(doc.doc_id, cfg.seed, cfg.valid_fraction) else "train"
            doc_ids[split].append(doc.doc_id)
            words[split] += len(doc.text.split())
            f.write(json.dumps({"id": doc.doc_id, "split": split, "text": doc.text}) + "\n")
    _check_nonempty(cfg, doc_ids, reports)
    return reports, doc_ids, words


def _encode(cfg: DataConfig, tmp: Path, corpus_file: Path, tokenizer, n_docs: int, verbose: bool) -> tuple[dict, dict]:
    """Pass 2: encode each split into blocks of `seq_len` tokens and count the training tokens
    (counts.npy); return the blocks and tokens of each split (UserError if a split has no block)."""
    writers = {s: BlockWriter(tmp, s, tokenizer, cfg.seq_len) for s in ("train", "valid")}
    for d in tqdm(read_documents(corpus_file), total=n_docs, desc="tokenizing", unit="doc", disable=not verbose):
        writers[d["split"]].add(d["text"])
    blocks = {s: w.finish() for s, w in writers.items()}
    tokens = {s: w.n_tokens for s, w in writers.items()}
    for s in blocks:
        if blocks[s] == 0:
            raise UserError(f"the {s} split has only {tokens[s]} tokens, fewer than one block of "
                            f"seq_len={cfg.seq_len}. Use a larger corpus, a smaller --seq-len, or "
                            "change the validation fraction.")
    train_ids = np.load(tmp / "train_ids.npy", mmap_mode="r")
    counts = np.bincount(np.asarray(train_ids).ravel(), minlength=len(tokenizer)).astype(np.int64)
    np.save(tmp / "counts.npy", counts, allow_pickle=False)
    return blocks, tokens


def _check_nonempty(cfg: DataConfig, doc_ids: dict, reports: list[SourceReport]) -> None:
    n = len(doc_ids["train"]) + len(doc_ids["valid"])
    if n == 0:
        where = ", ".join(r.name for r in reports) or cfg.corpus
        raise UserError(f"corpus {cfg.corpus!r} contains no text (source(s): {where}); every file was empty "
                        "or whitespace. Point --corpus at UTF-8 .txt files with prose.")
    for split in ("train", "valid"):
        if not doc_ids[split]:
            raise UserError(f"corpus {cfg.corpus!r} has {n} document(s) and none fell in the {split} split "
                            f"(valid_fraction={cfg.valid_fraction}). Add more text: documents are cut every "
                            f"~{cfg.doc_words} words, and both splits need at least one.")


def summary_line(out: Path, m: dict) -> str:
    d, w, t = m["documents"], m["words"], m["block_tokens"]
    vocab = f"vocabulary {m['vocab_size']:,}"
    if m["vocab_size"] < m.get("vocab_size_requested", m["vocab_size"]):
        vocab += (f" (of {m['vocab_size_requested']:,} requested: the training text holds no more distinct "
                  "WordPiece tokens; use more text or a smaller --vocab-size)")
    return (f"prepared {out}: {d['train'] + d['valid']:,} documents ({d['train']:,} train / {d['valid']:,} valid), "
            f"{w['train'] + w['valid']:,} words, {t['train'] + t['valid']:,} tokens in blocks "
            f"({t['train']:,} train / {t['valid']:,} valid), {vocab}, {m['elapsed_seconds']:.1f} s")


# ---------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = DataConfig()
    p.add_argument("--corpus", default=d.corpus,
                   help="registry (default: books+wiki+brown), registry:books,wiki,brown,bible, a directory "
                        "or .txt file, or hf:NAME[:CONFIG] (several joined with +)")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size, help=f"WordPiece vocabulary size (default {d.vocab_size}; paper 30522)")
    p.add_argument("--seq-len", type=int, default=d.seq_len, help=f"tokens per block (default {d.seq_len})")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the train/validation split")
    p.add_argument("--valid-fraction", type=float, default=d.valid_fraction, help="share of documents held out")
    p.add_argument("--max-docs", type=int, default=None, help="only the first N documents in corpus order (default: all)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: $TWOTOWER_DATA/prepared/<name>)")
    p.add_argument("--force", action="store_true", help="rebuild even if up to date")


def main(args: argparse.Namespace) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    cfg = DataConfig(corpus=args.corpus, vocab_size=args.vocab_size, seq_len=args.seq_len, seed=args.seed,
                     valid_fraction=args.valid_fraction, max_docs=args.max_docs)
    prepare_data(cfg, args.out, force=args.force)
    return 0
