"""Generated English-like text for tests: a small grammar over a Zipf-weighted vocabulary.

Deterministic given a seed; big enough to train a tokenizer and a few model steps in seconds.
"""

from __future__ import annotations

import random

DETERMINERS = ["the", "a", "this", "that", "every", "some", "my", "her", "his", "our"]
NOUNS = ["man", "woman", "house", "river", "king", "garden", "letter", "city", "ship", "child",
         "dog", "horse", "window", "mountain", "teacher", "doctor", "question", "morning", "story",
         "friend", "road", "book", "table", "family", "village", "captain", "sister", "door"]
PROPER = ["Emma", "London", "Harriet", "Boston", "Alice", "Paris", "Ahab", "Thames", "Jane", "Rome"]
VERBS = ["saw", "found", "loved", "wrote", "opened", "watched", "carried", "remembered", "followed",
         "visited", "heard", "painted", "built", "answered", "left"]
ADJS = ["old", "young", "quiet", "bright", "small", "large", "strange", "happy", "dark", "gentle"]
ADVS = ["slowly", "quickly", "never", "often", "suddenly", "always", "almost", "rather"]
PREPS = ["in", "on", "near", "under", "behind", "with", "from", "across", "towards"]
AUX = ["was", "had been", "would be", "could not be", "is", "will be"]


def _zipf_choice(rng: random.Random, words: list[str]) -> str:
    weights = [1.0 / (i + 1) for i in range(len(words))]
    return rng.choices(words, weights=weights, k=1)[0]


def sentence(rng: random.Random) -> str:
    def np_() -> str:
        if rng.random() < 0.2:
            return _zipf_choice(rng, PROPER)
        adj = f"{_zipf_choice(rng, ADJS)} " if rng.random() < 0.4 else ""
        return f"{_zipf_choice(rng, DETERMINERS)} {adj}{_zipf_choice(rng, NOUNS)}"

    kind = rng.random()
    if kind < 0.5:
        s = f"{np_()} {_zipf_choice(rng, VERBS)} {np_()}"
    elif kind < 0.8:
        s = f"{np_()} {_zipf_choice(rng, AUX)} {_zipf_choice(rng, ADJS)}"
    else:
        s = f"{np_()} {_zipf_choice(rng, ADVS)} {_zipf_choice(rng, VERBS)} {np_()}"
    if rng.random() < 0.5:
        s += f" {_zipf_choice(rng, PREPS)} {np_()}"
    s = s[0].upper() + s[1:]
    return s + rng.choice([".", ".", ".", "!", "?"])


def paragraph(rng: random.Random, n_sentences: int = 6) -> str:
    return " ".join(sentence(rng) for _ in range(n_sentences))


def write_corpus(directory, n_files: int = 6, paragraphs_per_file: int = 60, seed: int = 0) -> None:
    """Write `n_files` .txt files of generated prose (about 50 words a paragraph) into `directory`."""
    from pathlib import Path

    rng = random.Random(seed)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n_files):
        text = "\n\n".join(paragraph(rng) for _ in range(paragraphs_per_file))
        (directory / f"book{i:02d}.txt").write_text(text + "\n", encoding="utf-8")
