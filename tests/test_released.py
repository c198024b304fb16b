"""The page "The paper, its code, and this companion": every difference links a pinned line, and the
measured effects are computed from the measurement's rows, never typed."""

from __future__ import annotations

import re

from studies.released import report as released


def _found(rows, order):
    return {"pairs": [{"a": a, "b": b, "variant": v, "r": r, "ci_low": r - 0.05, "ci_high": r + 0.05}
                      for a, b, v, r in rows],
            "ordering": [{"case": c, "rules agree": ok} for c, ok in order]}


def test_every_difference_links_a_line_at_a_pinned_commit():
    table = released.to_markdown(None)
    assert sum(line.startswith("| ") for line in table.splitlines()) == len(released.DIFFERENCES) + 1   # and the header
    links = re.findall(r"\((https://github.com/[^)]+)\)", table)
    assert len(links) == sum(len(d.where) for d in released.DIFFERENCES)
    assert all(re.search(r"/blob/[0-9a-f]{40}/.+#L\d+$", link) for link in links)
    assert "Not measured yet" in table


def test_effects_are_computed_from_the_pairs_and_the_orderings():
    rows = [("elmo-s1", "elmo-s2", "score", 0.30), ("elmo-s1", "elmo-s2", "score_logmean", 0.35),
            ("elmo-released-s1", "elmo-released-s2", "score", 0.60),
            ("elmo-released-s1", "elmo-released-s2", "score_logmean", 0.62),
            ("elmo-s1", "gpt-s1", "score", 0.10), ("elmo-s2", "gpt-s1", "score", 0.20),
            ("gpt-s1", "elmo-released-s1", "score", 0.50), ("elmo-released-s2", "gpt-s1", "score", 0.70)]
    order = [("elmo-s1", True), ("elmo-s2", True), ("elmo-released-s1", False), ("elmo-released-s2", True),
             ("gpt-s1", True)]
    found = _found(rows, order)
    effects = released.effects(found)
    assert "bidirectional ELMo pair r = +0.30 [+0.25, +0.35] (mean log p +0.35" in effects["elmo"]
    assert "as released ELMo pair r = +0.60" in effects["elmo"]
    assert "ELMo-gpt: mean r +0.15 bidirectional (2 pairs, +0.10 to +0.20) vs +0.60 as released (2 pairs, +0.50 to +0.70)" in effects["elmo"]
    assert effects["order"].startswith("the two tower-order rules disagree on 1 of 5 runs (elmo-released-s1")
    assert "gpt" not in effects            # no GPT pair in either layout: nothing claimed
    table = released.to_markdown(found)
    assert "+0.60 as released" in table and "Not measured yet" not in table


def test_probe_recipes_give_the_shortfall_and_the_reliability():
    from studies.probe.report import DEFAULT_RECIPE

    recipes = {"runs": [
        {"run": "gpt-k1-s1", "recipe": "as released", "towers": 1, "head_minus_cooperative": 0.2},
        {"run": "gpt-s1", "recipe": "as released", "towers": 2, "head_minus_cooperative": 0.1, "reliability_score": 0.5},
        {"run": "gpt-s2", "recipe": "as released", "towers": 2, "head_minus_cooperative": 0.1, "reliability_score": 0.7},
        {"run": "gpt-s1", "recipe": DEFAULT_RECIPE, "head_minus_cooperative": 0.0, "reliability_score": 0.8}],
        "pairs": [{"recipe": "as released", "a": "gpt-s1", "b": "gpt-s2", "r_score": 0.25, "r_score_logmean": 0.35}]}
    text = released.effects(_found([], []), recipes)["probe"]
    assert f"{DEFAULT_RECIPE}: shortfall not measured, probe-seed reliability 0.80-0.80" in text
    assert "as released: shortfall +0.200 nats, probe-seed reliability 0.50-0.70, gpt-s1 vs gpt-s2 r = +0.25 " \
           "(mean log p +0.35)" in text


def test_the_model_page_states_the_measured_elmo_finding():
    from twotower_lib.book import build
    from twotower_lib.book.sections import PROJECT_ROOT

    found = {**_found([("elmo-s1", "elmo-s2", "score", 0.3), ("elmo-released-s1", "elmo-released-s2", "score", 0.6)],
                      [("elmo-s1", True), ("elmo-s2", True), ("elmo-released-s1", True), ("elmo-released-s2", True)]),
             "profile": "cpu", "top_n": 1000}
    sentence = released.elmo_sentence(found)
    assert sentence.startswith("Measured at the `cpu` profile (top 1000 tokens") and "+0.60" in sentence
    assert released.elmo_sentence(None) == ""
    intro = (PROJECT_ROOT / "book" / "model.md").read_text()
    assert "<!-- RELEASED_ELMO:" in intro
    card = {"profile": "tiny", "rows": [], "points": [],
            "counts": {"reproduced": 0, "partly": 0, "not": 0, "not attempted": 0}}
    filled = build.fill_placeholders(intro, card)
    assert "RELEASED_ELMO" not in filled and "einsum" in filled


def test_each_layout_reports_its_models_quality_and_probe_ceiling():
    found = _found([("gpt-s1", "gpt-s2", "score", 0.3), ("gpt-s1", "gpt-s2", "score_logmean", 0.3)],
                   [("gpt-s1", True), ("gpt-s2", True)])
    for row, loss in zip(found["ordering"], (5.87, 5.90)):
        row |= {"validation loss": loss, "probe reliability (Eq. 4)": 0.8}
    assert "as here GPT pair r = +0.30 [+0.25, +0.35] (mean log p +0.30 [+0.25, +0.35]) [validation loss 5.87, 5.90; " \
           "probe-seed reliability 0.80, 0.80]" in released.effects(found)["gpt"]


def test_the_page_says_when_its_numbers_come_from_an_older_probe():
    from twotower_lib.probe.config import CURRENT_PROBE, PROBE_VERSION, probe_label

    old = {**_found([], []), "probe_version": PROBE_VERSION - 1, "probe_precondition": "whiten",
           "command": "python -m studies.released -p x y"}
    assert f"Measured with probe version {PROBE_VERSION - 1} (whitened)" in released.to_markdown(old)
    assert "-p x y" in released.to_markdown(old)
    current = {**old, "probe_version": PROBE_VERSION}
    assert probe_label(PROBE_VERSION, "whiten") == CURRENT_PROBE
    assert "Measured with probe version" not in released.to_markdown(current)
    # the same version with the other feature setting is another probe; a file that predates the field
    # was probed on the features as they are
    for other in ({**current, "probe_precondition": "none"}, {k: v for k, v in current.items() if k != "probe_precondition"}):
        assert (f"Measured with probe version {PROBE_VERSION} (unwhitened); the current probe is version "
                f"{CURRENT_PROBE}") in released.to_markdown(other)