"""The BERT recipe pilots (studies/bert_recipe): each recipe is the profile's training with its levers changed, and
the book's part reads the committed pilots against the context gate."""

from __future__ import annotations

import pandas as pd
import pytest

from twotower_lib.book.tables import FULL_WIDTH

from studies.bert_recipe import runner
from twotower_lib import paper
from twotower_lib.book.profiles import get_profile


def test_a_recipe_changes_only_its_levers_and_keeps_the_token_budget_unless_it_names_one():
    p = get_profile("cpu")
    base = runner.recipe_config(p, "bert-large", 1, "/d", runner.RECIPES["baseline"])
    assert (base.norm_scheme, base.position, base.mask_rate, base.micro_batch) == ("post", "absolute", 0.15, 32)
    steps = runner.recipe_config(p, "bert-large", 1, "/d", runner.RECIPES["pre-ln+mask40+steps"])
    assert (steps.norm_scheme, steps.mask_rate, steps.mask_style, steps.micro_batch) == ("pre", 0.4, "mask", 8)
    assert steps.max_steps * steps.micro_batch == pytest.approx(base.max_steps * base.micro_batch, rel=0.02)
    assert (steps.lr, steps.grad_clip, steps.seed, steps.preset) == (base.lr, None, 1, base.preset)
    longer = runner.recipe_config(p, "bert-large", 1, "/d", runner.RECIPES["pre-ln+mask40+steps+6M"])
    assert longer.max_steps * longer.micro_batch * p.data.seq_len >= 6_000_000 > (longer.max_steps - 1) * 8 * p.data.seq_len


def _pilots(beyond):
    return pd.DataFrame({"recipe": ["baseline", "pre-ln"], "norm_scheme": ["post", "pre"],
                         "position": ["absolute", "relative"], "mask_rate": [0.15, 0.4],
                         "mask_style": ["corrupt", "mask"], "micro_batch": [32, 8], "steps": [10, 40],
                         "tokens": [1000, 1000], "lr": [None, 3e-4], "grad_clip": [None, 0.5],
                         "beyond_word_frequencies": beyond, "train_minutes": [1.0, 2.5], "threads": [1, 1]})


def test_the_book_part_reads_the_pilots_against_the_gate():
    text = runner.book_parts(_pilots([0.1, 0.25]), "cpu")["BERT_RECIPE@cpu"]
    assert "| 0.15 |" in text and "the best pilot, `pre-ln`, 0.25 in 2.5 minutes" in text
    assert text.startswith(FULL_WIDTH) and "| 1k |" in text          # across the margin, tokens as the book prints them
    named = runner.book_parts(_pilots([0.1, 0.2]).assign(recipe=["baseline", "pre-ln+mask40"]), "cpu")["BERT_RECIPE@cpu"]
    assert "| pre-ln+<wbr>mask40 |" in named                          # a recipe's name breaks only after its "+"
    assert f"None of the 2 pilots reaches the context gate ({paper.CONTEXT_GATE:g} nats)" in text
    passed = runner.book_parts(_pilots([0.1, paper.CONTEXT_GATE + 0.1]), "cpu")["BERT_RECIPE@cpu"]
    assert "1 of 2 pilots pass the context gate" in passed


def test_an_unknown_recipe_or_a_model_that_is_not_bert_is_refused(capsys):
    assert runner.cli(["--recipes", "pre-ln,fastest"]) == 1 and "unknown ['fastest']" in capsys.readouterr().out
    assert runner.cli(["--model", "gpt"]) == 1 and "is not a BERT model" in capsys.readouterr().out
