"""Uncased WordPiece tokenizer, trained with `tokenizers`, used through `transformers`.

The paper used BERT's uncased ~30K WordPiece vocabulary; we train the same kind of tokenizer on
the training split (never on validation text) at the vocabulary size of the profile.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

from twotower_lib.errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SPECIAL_NAMES = ("pad", "unk", "cls", "sep", "mask")
# Below this the vocabulary cannot hold the specials plus a usable alphabet.
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 64


def _bert_normalizer_and_pretokenizer():
    from tokenizers import normalizers, pre_tokenizers

    norm = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True,
                                      handle_chinese_chars=True)
    return norm, pre_tokenizers.BertPreTokenizer()


def count_words(texts: Iterable[str]) -> Counter:
    """Word counts after BERT's uncased normalisation and pre-tokenisation (what WordPiece sees)."""
    norm, pre = _bert_normalizer_and_pretokenizer()
    counts: Counter = Counter()
    for text in texts:
        counts.update(w for w, _ in pre.pre_tokenize_str(norm.normalize_str(text)))
    return counts


def _split_words(word_counts: dict[str, int], limit_alphabet: int) -> tuple[list[list[str]], list[int], set[str]]:
    """The alphabet (the `limit_alphabet` most frequent characters, ties by text) and every word made only of it,
    in text order, as its first character and continuation pieces, with its count; other words stay [UNK]."""
    char_counts: Counter = Counter()
    for w, c in word_counts.items():
        for ch in w:
            char_counts[ch] += c
    alphabet = set(sorted(char_counts, key=lambda ch: (-char_counts[ch], ch))[:limit_alphabet])
    words: list[list[str]] = []
    counts: list[int] = []
    for w, c in sorted(word_counts.items()):
        if all(ch in alphabet for ch in w):
            words.append([w[0]] + ["##" + ch for ch in w[1:]])
            counts.append(c)
    return words, counts, alphabet


def _merge(word: list[str], a: str, b: str, merged: str) -> list[str]:
    """`word` with every adjacent (a, b), left to right, replaced by `merged`."""
    out, j = [], 0
    while j < len(word):
        if j + 1 < len(word) and word[j] == a and word[j + 1] == b:
            out.append(merged)
            j += 2
        else:
            out.append(word[j])
            j += 1
    return out


def learn_wordpiece_vocab(word_counts: dict[str, int], vocab_size: int, *, min_frequency: int = 2,
                          limit_alphabet: int = 256) -> list[str]:
    """Learn a WordPiece vocabulary by BPE-style merges, deterministically.

    The same algorithm as `tokenizers`' WordPieceTrainer (alphabet, then the most frequent
    adjacent pair is merged until the vocabulary is full; continuation pieces carry `##`), with
    ties broken by the symbols' text. `tokenizers` breaks ties by hash-map order, so its vocabulary
    changes from run to run; a seed must fix every result here, so we learn the vocabulary
    ourselves and hand it to the fast WordPiece model.
    """
    import heapq
    from collections import defaultdict

    words, counts, alphabet = _split_words(word_counts, limit_alphabet)
    vocab = list(SPECIAL_TOKENS) + sorted(alphabet) + sorted({s for w in words for s in w[1:]})
    in_vocab = set(vocab)

    pair_counts: dict[tuple[str, str], int] = defaultdict(int)
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, w in enumerate(words):
        for pair in zip(w, w[1:]):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    heap = [(-c, a, b) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        neg, a, b = heapq.heappop(heap)
        c = pair_counts.get((a, b), 0)
        if c != -neg:  # stale entry: the count changed since it was pushed
            if c > 0:
                heapq.heappush(heap, (-c, a, b))
            continue
        if c < min_frequency:
            break
        merged = a + b[2:]  # b is always a continuation piece "##..."
        touched: set[tuple[str, str]] = set()
        for i in sorted(where.pop((a, b))):
            w, n = words[i], counts[i]
            for pair in zip(w, w[1:]):
                pair_counts[pair] -= n
                where[pair].discard(i)
                touched.add(pair)
            words[i] = new_w = _merge(w, a, b, merged)
            for pair in zip(new_w, new_w[1:]):
                pair_counts[pair] += n
                where[pair].add(i)
                touched.add(pair)
        pair_counts.pop((a, b), None)
        for pair in touched:
            if pair_counts.get(pair, 0) > 0:
                heapq.heappush(heap, (-pair_counts[pair], *pair))
            else:
                pair_counts.pop(pair, None)
        if merged not in in_vocab:
            vocab.append(merged)
            in_vocab.add(merged)
    return vocab


def train_wordpiece(texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2):
    """Train an uncased BERT-style WordPiece tokenizer; returns a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    if vocab_size < MIN_VOCAB_SIZE:
        raise UserError(f"vocab_size {vocab_size} is too small: it must hold the {len(SPECIAL_TOKENS)} "
                        f"special tokens {', '.join(SPECIAL_TOKENS)} plus the alphabet; use at least "
                        f"{MIN_VOCAB_SIZE} (the CPU profiles use 8192, the paper 30522).")
    vocab = learn_wordpiece_vocab(count_words(texts), vocab_size, min_frequency=min_frequency)
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = _bert_normalizer_and_pretokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, **dict(zip(
        ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"), SPECIAL_TOKENS)))


def load_tokenizer(path: str | Path):
    """Load a tokenizer saved by `save_pretrained` (a directory with tokenizer.json)."""
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    if not (path / "tokenizer.json").exists():
        raise UserError(f"no tokenizer at {path} (tokenizer.json missing); run "
                        "`python -m twotower_lib data prepare` to create it")
    return PreTrainedTokenizerFast.from_pretrained(str(path))


def special_ids(tokenizer) -> dict[str, int]:
    return {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in zip(SPECIAL_NAMES, SPECIAL_TOKENS)}
