"""The verdict rules (`twotower_lib.paper`): each rule at its named thresholds, on both sides of every boundary."""

from __future__ import annotations

import math

import pytest

from twotower_lib import paper


def test_several_items_take_the_weakest_verdict():
    assert paper.weakest(["reproduced", "not", "partly"]) == "not"
    assert paper.weakest(["reproduced", "partly"]) == "partly"
    assert paper.weakest(["reproduced", "not attempted"]) == "not attempted"


@pytest.mark.parametrize("ci, paper_r, control, expected", [
    ((0.85, 0.95), 0.94, 0.2, "reproduced"),
    ((0.5, 0.7), 0.94, 0.2, "partly"),
    ((0.2, 0.9), 0.94, 0.2, "not"),             # a CI that only touches the control is not above it
    ((0.21, 0.4), 0.5, 0.2, "reproduced"),      # reaches exactly the paper's r less the tolerance (0.5 - 0.1)
    ((0.21, 0.45), 0.5, 0.2, "reproduced"),
    ((0.21, 0.35), 0.5, 0.2, "partly"),
    ((-0.95, -0.85), 0.94, 0.2, "reproduced"),  # the same division with the towers' roles swapped: |r| is judged
    ((-0.7, -0.5), 0.94, 0.2, "partly"),
    ((-0.2, -0.1), 0.94, -0.3, "not"),          # a control's |r| counts: 0.3 is above |r|'s interval [0.1, 0.2]
    ((0.35, 0.5), 0.94, -0.3, "partly"),
    ((-0.1, 0.5), 0.94, 0.05, "not"),           # an interval holding 0 holds |r| = 0
    ((0.5, 0.7), 0.94, None, "not attempted"),
])
def test_one_runs_correlation(ci, paper_r, control, expected):
    assert paper.correlation_verdict(ci, paper_r, control) == expected
    flipped = paper.correlation_verdict((-ci[1], -ci[0]), paper_r, None if control is None else -control)
    assert flipped == expected   # no verdict hangs on which tower Eq. 3 calls primary


@pytest.mark.parametrize("ci, expected", [((0.2, 0.5), (0.2, 0.5)), ((-0.5, -0.2), (0.2, 0.5)),
                                          ((-0.3, 0.5), (0.0, 0.5)), ((-0.6, 0.1), (0.0, 0.6)), ((0.0, 0.3), (0.0, 0.3))])
def test_the_interval_of_abs_r(ci, expected):
    assert paper.abs_interval(ci) == expected


def test_fig5_over_seeds_counts_only_what_training_made_sparser():
    """Fig. 5 over seeds: every seed's trained share within [-1, 1] must be above its own untrained towers'; then
    the median is judged as one run's share is."""
    near, gaussian_plus = paper.FIG5_WITHIN_1, paper.GAUSSIAN_WITHIN_1 + 0.01
    assert paper.fig5_seed_verdict([near, near + 0.01, near - 0.01], [0.70, 0.70, 0.70]) == "reproduced"
    assert paper.fig5_seed_verdict([near, near, near], [0.70, 0.70, near]) == "not"        # one seed not above its own
    assert paper.fig5_seed_verdict([near, near], [near + 0.04, near + 0.05]) == "not"    # untrained sparser: nothing learned
    assert paper.fig5_seed_verdict([gaussian_plus, gaussian_plus + 0.01], [0.60, 0.60]) == "partly"
    assert paper.fig5_seed_verdict([0.60, 0.61], [0.50, 0.50]) == "not"                  # below a Gaussian's
    assert paper.fig5_seed_verdict([0.70, 0.90, 0.80], [0.5, 0.5, 0.5]) == "reproduced"   # the median, 0.80, decides
    assert paper.fig5_seed_verdict([0.70, 0.72, 0.90], [0.5, 0.5, 0.5]) == "partly"       # median 0.72, not the best seed
    assert paper.fig5_seed_verdict([], []) == "not" and paper.fig5_seed_verdict([near], []) == "not"
    tolerance = paper.FIG5_TOLERANCE                                                        # the rule as the book states it
    assert f"is {near - tolerance:.0%} to {near + tolerance:.0%} (the paper's {near:.0%})" in paper.FIG5_RULE
    assert f"above a Gaussian's {paper.GAUSSIAN_WITHIN_1:.0%}" in paper.FIG5_RULE


def test_the_published_default_is_judged_by_todays_rules():
    """`publish` records the rules' edition; the default profile's published run must record its verdicts by
    today's rules for one run (`paper.RUN_RULES_EDITION`: later editions changed only verdicts over seeds, decided
    anew where a record is shown), and one of an earlier edition (a record without one is of the first) says so
    where the book shows it."""
    from twotower_lib.artifacts import read_json
    from twotower_lib.book import publish

    pub = read_json(publish.RESULTS_DIR / "cpu.json")
    assert paper.RUN_RULES_EDITION <= pub.get("rules", 1) <= paper.RULES_EDITION, "re-run and re-publish the cpu profile"
    fig4 = next(r for r in pub["scorecard"]["rows"] if r["id"] == "fig4")
    assert f"over {paper.FIG4_PERMUTATIONS:,} shuffles" in fig4["note"]     # Fig. 4's null as the rules set it
    assert f"within {paper.FIG4_FREQUENCY_BINS} frequency bins" in fig4["note"]   # and its second null, beside
    assert publish.earlier_rules(pub) == ""
    older = {k: v for k, v in pub.items() if k != "rules"}
    assert "rules' edition 1" in publish.earlier_rules(older) and f"today's: {paper.RULES_EDITION}" in publish.earlier_rules(older)


def test_a_check_of_several_parts():
    assert paper.share_verdict([True, True]) == "reproduced"
    assert paper.share_verdict([True, True], complete=False) == "partly"
    assert paper.share_verdict([True, False]) == "partly"
    assert paper.share_verdict([False, False]) == "not"


@pytest.mark.parametrize("strongest, weakest_pair, expected", [
    (0.2, 0.5, "reproduced"), (0.3, 0.5, "partly"), (0.2, 0.3, "partly"), (0.4, 0.35, "not"), (0.4, 0.4, "not"),
    (0.4, 0.41, "partly"), (0.29, 0.31, "reproduced")])
def test_frequency_weak_with_rank_strong_between_runs(strongest, weakest_pair, expected):
    assert paper.frequency_verdict(strongest, weakest_pair) == expected


def test_fig8_reads_its_own_curves_only():
    assert [paper.fig8_verdict(r) for r in (0.0, 0.13, 0.29, 0.3, 0.6)] == ["reproduced"] * 3 + ["not"] * 2


def test_fig4_counts_the_claims_that_hold_in_every_run():
    n = len(paper.FIG4_CLAIM)
    assert paper.fig4_verdict([n, n], 0.01) == "reproduced"
    assert paper.fig4_verdict([n, n - 1], 0.01) == "partly"
    assert paper.fig4_verdict([5, 5], 0.01) == "partly"            # at least 5 of the 7 in every run
    assert paper.fig4_verdict([4, n], 0.01) == "not"
    assert paper.fig4_verdict([n, n], paper.ALPHA) == "not"        # counts chance reaches as often decide nothing
    assert paper.fig4_verdict([n, n], math.nan) == "not"
    assert paper.fig4_checkable(3) and not paper.fig4_checkable(2)   # three scored tokens of a tag are enough


def test_fig5_near_the_papers_share_or_sparser_than_a_gaussian(monkeypatch):
    assert paper.fig5_verdict(paper.FIG5_WITHIN_1) == "reproduced"
    assert paper.fig5_verdict(paper.FIG5_WITHIN_1 - 0.04) == "reproduced"
    assert paper.fig5_verdict(paper.FIG5_WITHIN_1 + 0.1) == "partly"
    assert paper.fig5_verdict(0.7) == "partly"
    assert paper.fig5_verdict(paper.GAUSSIAN_WITHIN_1) == "not"
    assert paper.fig5_verdict(0.5) == "not"
    monkeypatch.setattr(paper, "FIG5_WITHIN_1", 0.75)
    monkeypatch.setattr(paper, "FIG5_TOLERANCE", 0.25)
    assert paper.fig5_verdict(0.5) == paper.fig5_verdict(1.0) == "reproduced"     # exactly at the tolerance


def test_fig6_counts_its_three_numbers_near_the_papers(monkeypatch):
    assert paper.fig6_verdict(dict(paper.FIG6)) == "reproduced"
    for key, off in (("share_one", 0.2), ("share_none", 0.2), ("mean_groups", 0.5), ("share_one", -0.2)):
        assert paper.fig6_verdict({**paper.FIG6, key: paper.FIG6[key] + off}) == "partly", key
    assert paper.fig6_verdict({"share_one": 0.0, "share_none": 0.9, "mean_groups": 9.0}) == "not"
    assert paper.fig6_verdict({**paper.FIG6, "share_one": paper.FIG6["share_one"] + 0.5}) == "partly"
    assert paper.fig6_verdict({**paper.FIG6, "mean_groups": paper.FIG6["mean_groups"] + 1.0}) == "partly"
    monkeypatch.setattr(paper, "FIG6", {"share_one": 0.5, "share_none": 0.25, "mean_groups": 1.5})
    monkeypatch.setattr(paper, "FIG6_SHARE_TOLERANCE", 0.25)
    monkeypatch.setattr(paper, "FIG6_MEAN_TOLERANCE", 0.5)
    assert paper.fig6_verdict({"share_one": 0.25, "share_none": 0.5, "mean_groups": 1.0}) == "reproduced"   # at each edge


@pytest.mark.parametrize("rho_p, expected", [
    ([(0.8, 0.01)], "reproduced"), ([(0.75, 0.01), (0.9, 0.001)], "reproduced"), ([(0.74, 0.01)], "partly"),
    ([(0.5, 0.01)], "partly"), ([(0.5, 0.05)], "not"), ([(0.8, 0.05)], "not"), ([(0.0, 0.01)], "not"),
    ([(0.8, 0.01), (-0.1, 0.2)], "not"), ([(0.8, 0.01), (-0.1, 0.01)], "partly"), ([(-0.8, 0.01)], "reproduced"),
    ([(-0.8, 0.01), (0.9, 0.001)], "reproduced")])
def test_table3_ranks_agree_between_runs(rho_p, expected):
    """Table 3 reads |rho|: a run whose primary tower is the other one negates its group means, and its verdict
    must not change with that label."""
    assert paper.table3_verdict(rho_p) == expected
    assert paper.table3_verdict([(-r, p) for r, p in rho_p]) == expected


def test_fig6_over_seeds_counts_a_number_only_where_training_moved_every_seed_toward_the_paper(monkeypatch):
    paper_, near = dict(paper.FIG6), {k: v + 0.01 for k, v in paper.FIG6.items()}
    far = {"share_one": 0.0, "share_none": 1.0, "mean_groups": 0.0}
    assert paper.fig6_seed_verdict([near, paper_, near], [far, far, far]) == "reproduced"
    untrained_near = {**far, "share_one": paper.FIG6["share_one"]}                           # one seed's untrained nearer
    assert paper.fig6_seed_verdict([near, paper_, near], [far, far, untrained_near]) == "partly"
    assert paper.fig6_seed_verdict([near, near], [paper_, paper_]) == "not"                # untrained nearer: none counts
    assert paper.fig6_seed_verdict([far, far, near], [far, far, far]) == "not"             # the median decides, not the best
    assert paper.fig6_seed_verdict([], []) == "not" and paper.fig6_seed_verdict([near], []) == "not"
    assert paper.fig6_seed_verdict([near, near], [near, near]) == "not"                 # as near untrained: not training's
    one_off = {**near, "mean_groups": paper.FIG6["mean_groups"] + 2 * paper.FIG6_MEAN_TOLERANCE}
    assert paper.fig6_seed_verdict([one_off, one_off], [far, far]) == "partly"
    assert f"within {paper.FIG6_SHARE_TOLERANCE:.0%} ({paper.FIG6_MEAN_TOLERANCE:g} groups)" in paper.FIG6_RULE
    monkeypatch.setattr(paper, "FIG6", {"share_one": 0.5, "share_none": 0.25, "mean_groups": 1.5})
    monkeypatch.setattr(paper, "FIG6_SHARE_TOLERANCE", 0.25)
    monkeypatch.setattr(paper, "FIG6_MEAN_TOLERANCE", 0.5)
    edge = {"share_one": 0.25, "share_none": 0.5, "mean_groups": 1.0}
    assert paper.fig6_seed_verdict([edge, edge], [far, far]) == "reproduced"            # the median at each tolerance


def test_table3_over_seeds_is_capped_by_whether_its_ranks_repeat_between_seeds():
    assert [paper.table3_seed_cap(d) for d in ("holds", "unstable", "not")] == ["reproduced", "partly", "not"]
    assert paper.weakest(["reproduced", paper.table3_seed_cap("unstable")]) == "partly"
    assert paper.weakest(["not", paper.table3_seed_cap("holds")]) == "not"        # a cap never raises a verdict
    with pytest.raises(ValueError, match="not attempted"):
        paper.table3_seed_cap("not attempted")
    assert f"reaches {paper.TABLE3_RHO:g} at p < {paper.ALPHA:g}" in paper.TABLE3_RULE


def test_the_register_test_per_pair_and_source():
    assert paper.register_verdict([2, 1], [2, 1]) == "reproduced"   # a swapped source counts as a split one
    assert paper.register_verdict([1, 1], [2, 1]) == "partly"
    assert paper.register_verdict([0, 0], [2, 1]) == "not"


def test_a_distribution_over_seeds_against_the_papers_value():
    assert paper.seed_verdict("not attempted", 0.4, 0.6, 0.5) == "not attempted"
    assert paper.seed_verdict("not", 0.4, 0.6, 0.5) == "not"
    assert paper.seed_verdict("holds", 0.4, 0.6, 0.5) == "reproduced"
    assert paper.seed_verdict("unstable", 0.4, 0.6, 0.5) == "partly"     # a division that a seed left out undoes
    assert paper.seed_verdict("holds", 0.4, 0.6, 0.7) == "partly"
    assert paper.seed_verdict("holds", 0.4, 0.6, 0.3) == "partly"
    assert paper.seed_verdict("holds", 0.4, 0.6, (0.45, 0.6)) == "reproduced"  # every value of the paper's within
    assert paper.seed_verdict("holds", 0.4, 0.6, [0.4, 0.4]) == "reproduced"
    assert paper.seed_verdict("holds", 0.4, 0.6, (0.6, 0.8)) == "partly"       # one of two within is not enough
    assert paper.seed_verdict("holds", 0.4, 0.6, [0.2, 0.4]) == "partly"
    assert paper.seed_verdict("holds", 0.4, 0.6, (0.61, 0.8)) == "partly"
    with pytest.raises(ValueError, match="division verdict"):
        paper.seed_verdict("reproduced", 0.4, 0.6, 0.5)


def test_the_context_gate():
    """`CONTEXT_RULE`: a run counts only at least `CONTEXT_GATE` nats below its word-frequency loss; a verdict whose
    runs do not is "no verdict" (but "not attempted" stays), and a division of "no verdict" passes through."""
    gate = paper.CONTEXT_GATE
    assert paper.learned_context(6.0 - gate, 6.0) and paper.learned_context(5.0 - gate, 5.0)
    assert not paper.learned_context(6.0 - gate + 1e-3, 6.0) and not paper.learned_context(6.1, 6.0)
    assert not paper.learned_context(math.nan, 6.0) and not paper.learned_context(5.0, math.nan)
    assert paper.gated("reproduced", True) == "reproduced" and paper.gated("not", True) == "not"
    assert paper.gated("reproduced", False) == paper.gated("not", False) == paper.NO_CONTEXT == "no verdict"
    assert paper.gated("not attempted", False) == "not attempted"
    assert paper.seed_verdict(paper.NO_CONTEXT, 0.4, 0.6, 0.5) == paper.NO_CONTEXT
    assert paper.weakest(["partly", paper.NO_CONTEXT]) == paper.NO_CONTEXT
    assert paper.weakest([paper.NO_CONTEXT, "not attempted"]) == "not attempted"
    assert paper.weakest(["not", paper.NO_CONTEXT]) == paper.NO_CONTEXT
    assert f"{gate:g} nats" in paper.CONTEXT_RULE and "no verdict" in paper.CONTEXT_RULE


def test_every_family_above_its_controls():
    assert paper.controls_verdict([]) == paper.controls_verdict([None]) == "not attempted"
    assert paper.controls_verdict([True, True]) == "reproduced"
    assert paper.controls_verdict([True, None]) == "partly"
    assert paper.controls_verdict([True, False]) == "partly"
    assert paper.controls_verdict([False, None]) == "not"


def test_the_partition_rule():
    assert paper.partition_verdict(0.5, 0.4, 0.3) == "holds"
    assert paper.partition_verdict(0.5, 0.3, 0.3) == "unstable"
    assert paper.partition_verdict(0.3, 0.2, 0.3) == "not"
    assert paper.partition_verdict(0.5, math.nan, 0.3) == "not attempted"
    assert paper.partition_verdict(0.5, 0.4, math.nan) == "not attempted"


def test_the_orientation_rule():
    assert paper.orientation_verdict(2, 1, False, True, [0.5]) == "not attempted"   # one pair: as the partition
    assert paper.orientation_verdict(3, 0, False, True, []) == "not attempted"
    assert paper.orientation_verdict(3, 3, True, True, [0.5, 0.4, -0.5]) == "not"
    assert paper.orientation_verdict(3, 3, False, True, [0.5, 0.4, 0.3]) == "holds"
    assert paper.orientation_verdict(3, 3, False, False, [0.5, 0.4, 0.3]) == "unresolved"
    assert paper.orientation_verdict(3, 3, False, True, []) == "unresolved"
    assert paper.orientation_verdict(3, 3, False, True, [0.5, -0.1]) == "unresolved"
    assert paper.orientation_verdict(3, 3, False, True, [0.0, 0.5]) == "unresolved"
