"""The linear head's optimum (the probe study's `studies.probe.optimum`): one head from every start, a certificate that tells an
optimum from a stopped optimiser, the head written back exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.test_probe import _planted_setup
from twotower_lib.errors import UserError
from twotower_lib.probe.heads import LinearCrossEntropy, ProbeHead
from twotower_lib.probe.config import ProbeConfig
from twotower_lib.probe.training import score_validation, train_heads
from studies.probe.optimum import RefineConfig, Refinement, _coordinates, calibrate_biases, certificate, refine_head

N, H, D, V = 12_000, 8, 16, 120


@pytest.fixture(scope="module")
def problem():
    """Ill-conditioned tower features (variances over four decades, an offset, one constant direction) and
    tokens drawn from a planted softmax regression with Zipf-like frequencies."""
    g = torch.Generator().manual_seed(0)
    E = torch.randn(V, D, generator=g) * 0.1
    z = torch.randn(N, H, generator=g)
    rot = torch.linalg.qr(torch.randn(H, H, generator=g))[0]
    scales = torch.logspace(0, -2, H)
    scales[-1] = 0.0                                           # a constant direction (LayerNorm leaves one)
    x = (z * scales) @ rot + 2.0
    logits = z[:, :-1] @ torch.randn(V, H - 1, generator=g).T * 0.6 - 1.1 * torch.arange(1, V + 1).float().log()
    y = torch.multinomial(torch.softmax(logits, 1), 1, generator=g)[:, 0]   # from `g`: whichever test comes first
    return E, x.to(torch.bfloat16), y                          # the probe caches features in bf16


def head(E, seed: int, scale: float = 0.0) -> ProbeHead:
    torch.manual_seed(seed)
    h = ProbeHead(H, V, "linear", E)
    with torch.no_grad():
        if scale:
            h.dense.weight.normal_(0, scale)
            h.dense.bias.normal_(0, scale)
            h.bias.normal_(0, 3 * scale)
    return h


def logprobs(h: ProbeHead, x) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(h(x.float()), dim=1)


def test_every_start_reaches_the_same_head(problem):
    E, x, y = problem
    cfg = RefineConfig(max_iter=300, gtol=2e-5)
    heads, records = [], []
    for seed, scale, unigram in ((0, 0.0, True), (1, 0.3, False), (2, 1.0, False)):
        h = head(E, seed, scale)
        records.append(refine_head(h, x, y, cfg, from_unigram=unigram, show=False))
        heads.append(h)
    for r in records:
        assert r["stopped"] == "gtol", r["stopped"]
        assert r["after"]["grad_max"] <= cfg.gtol
        assert r["after"]["bias_residual_max"] < 0.01           # every token's predicted count within 1% of its count
        assert r["after"]["loss"] < r["before"]["loss"]
    frequent = torch.bincount(y, minlength=V).argsort(descending=True)[:40]
    lp = [logprobs(h, x)[:, frequent] for h in heads]
    for other in lp[1:]:
        assert (other - lp[0]).abs().max() < 0.02               # the same head, whatever the start
    assert abs(records[1]["after"]["loss"] - records[0]["after"]["loss"]) < 1e-5


def test_the_certificate_tells_a_stopped_optimiser_from_the_optimum(problem):
    E, x, y = problem
    stopped = head(E, 0)
    refine_head(stopped, x, y, RefineConfig(max_iter=4), from_unigram=True, show=False)
    done = head(E, 0)
    refine_head(done, x, y, RefineConfig(max_iter=300, gtol=2e-5), from_unigram=True, show=False)
    early, final = certificate(stopped, x, y), certificate(done, x, y)
    assert early["bias_residual_max"] > 10 * final["bias_residual_max"]
    assert early["grad_norm"] > 10 * final["grad_norm"]
    assert early["loss"] > final["loss"]


def test_the_head_is_written_back_exactly(problem):
    """The head refine_head leaves has the objective value and gradient it certified (the dense bias folded
    into the vocabulary bias, the read-out mapped back from the preconditioned coordinates)."""
    E, x, y = problem
    h = head(E, 3, 0.1)
    r = refine_head(h, x, y, RefineConfig(max_iter=30), show=False)
    assert torch.count_nonzero(h.dense.bias) == 0
    again = certificate(h, x, y)
    assert again["loss"] == pytest.approx(r["after"]["loss"], abs=1e-5)
    assert again["bias_residual_max"] == pytest.approx(r["after"]["bias_residual_max"], rel=0.05, abs=1e-4)


def test_coordinates_keep_the_logits_of_any_head(problem):
    E, x, y = problem
    co = _coordinates(E, x, y)
    h = head(E, 4, 0.5)
    C, gamma = co.from_head(E, h.dense.weight.detach(), h.dense.bias.detach(), h.bias.detach())
    A, b = co.to_head(E, C, gamma)
    xf = x.float()
    before = xf @ h.dense.weight.detach().T @ E.T + E @ h.dense.bias.detach() + h.bias.detach()
    after = xf @ A.T @ E.T + b
    # equal up to the constant direction, which the features hold at its mean (bf16 rounding of x aside)
    assert (before - after).abs().max() < 1e-2 * before.abs().max()


def test_the_logit_penalty_does_not_depend_on_the_embeddings_coordinates(problem):
    """With penalty "logit" (tr(Bᵀ G B)) the objective, and so its optimum, is a function of the predictions
    alone: a head on the embedding E R (R invertible) ends at the same log-probabilities as one on E. The
    read-out penalty |B|² is not (it charges each direction of the embedding space by its coordinates)."""
    E, x, y = problem
    R = torch.diag(torch.logspace(-1, 1, D)) @ torch.linalg.qr(torch.randn(D, D, generator=torch.Generator().manual_seed(9)))[0]
    frequent = torch.bincount(y, minlength=V).argsort(descending=True)[:40]
    gap = {}
    for penalty in ("logit", "readout"):
        cfg = RefineConfig(max_iter=400, gtol=1e-5, ridge=0.05 if penalty == "readout" else 5.0, penalty=penalty)
        lp = []
        for emb in (E, E @ R):
            h = head(emb, 0)
            refine_head(h, x, y, cfg, from_unigram=True, show=False)
            lp.append(logprobs(h, x)[:, frequent])
        gap[penalty] = float((lp[1] - lp[0]).abs().max())
    assert gap["logit"] < 0.02 and gap["readout"] > 5 * gap["logit"], gap


def test_the_unigram_bias_prior_pulls_the_biases_to_the_smoothed_frequencies(problem):
    """bias_prior "unigram": the logits at the mean feature are pulled toward the log of the add-one smoothed
    training frequencies; with a strong bias ridge they end there, with the default prior (zero) they do not."""
    E, x, y = problem
    counts = torch.bincount(y, minlength=V).double()
    log_f = ((counts + 1) / (counts.sum() + V)).log()
    at_mean = {}
    for prior in ("zero", "unigram"):
        h = head(E, 0)
        refine_head(h, x, y, RefineConfig(max_iter=100, ridge=0.05, bias_ridge=10.0, bias_prior=prior), from_unigram=True, show=False)
        with torch.no_grad():
            logits = h(x.float().mean(0, keepdim=True))[0].double()
        at_mean[prior] = float((logits - logits.mean() - (log_f - log_f.mean())).abs().max())
    assert at_mean["unigram"] < 0.05 < at_mean["zero"], at_mean


def test_fp64_loss_equals_the_fp32_one():
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(300, 6, generator=g), torch.randn(50, 6, generator=g), torch.randn(50, generator=g)
    t = torch.randint(0, 50, (300,), generator=g)
    l32 = LinearCrossEntropy.apply(x, w, b, t, torch.float32)
    l64 = LinearCrossEntropy.apply(x, w, b, t, torch.float32, torch.float64)
    assert l32.dtype == torch.float32 and l64.dtype == torch.float64
    assert float(l64) == pytest.approx(float(l32), rel=1e-6)
    assert float(l64) == pytest.approx(float(torch.nn.functional.cross_entropy(x @ w.T + b, t)), rel=1e-5)


def test_clear_errors(problem):
    E, x, y = problem
    with pytest.raises(UserError, match="linear head"):
        refine_head(ProbeHead(H, V, "tied", E), x, y, show=False)
    with pytest.raises(UserError, match="no training positions"):
        refine_head(head(E, 0), x[:0], y[:0], show=False)
    with pytest.raises(UserError, match="max_iter"):
        RefineConfig(max_iter=0).validate()
    with pytest.raises(UserError, match="gtol"):
        RefineConfig(gtol=0).validate()
    with pytest.raises(UserError, match="penalty"):
        RefineConfig(penalty="l1").validate()
    with pytest.raises(UserError, match="bias_prior"):
        RefineConfig(bias_prior="uniform").validate()


def test_calibrating_the_biases_restores_them(problem):
    """Proportional fitting puts every token's predicted count at its count and, given the optimum's
    read-out, its biases back at the optimum's (up to the tiny bias ridge)."""
    E, x, y = problem
    best = head(E, 0)
    refine_head(best, x, y, RefineConfig(max_iter=300, gtol=2e-5), from_unigram=True, show=False)
    moved = head(E, 0)
    moved.load_state_dict(best.state_dict())
    with torch.no_grad():
        moved.bias += torch.randn(V, generator=torch.Generator().manual_seed(5)) * 0.3
    assert certificate(moved, x, y)["bias_residual_max"] > 0.2
    record = calibrate_biases(moved, x, y, passes=30, tol=1e-4)
    assert record["passes"] <= 30 and record["largest_gap"][-1] <= 1e-4 < record["largest_gap"][0]   # it converged
    assert certificate(moved, x, y)["bias_residual_max"] < 1e-3
    frequent = torch.bincount(y, minlength=V).argsort(descending=True)[:40]
    assert (logprobs(moved, x)[:, frequent] - logprobs(best, x)[:, frequent]).abs().max() < 0.01


def test_refined_heads_of_two_recipes_reach_one_optimum(tiny_data):
    """`Refinement` (the probe's `refine` step): after AdamW, L-BFGS takes each linear head to the optimum of one explicit objective,
    so two recipes that AdamW leaves apart (features as they are, or whitened) end at one head; the record
    holds each head's certificate before and after."""
    model, _, _ = _planted_setup(tiny_data)
    logp, records = {}, {}
    for iters in (0, 150):
        for precondition in ("none", "whiten"):
            cfg = ProbeConfig(features="raw", train_blocks=100, max_epochs=6, batch_size=256, tol=0.01, forward_batch=64,
                              precision="fp32", precondition=precondition)
            torch.manual_seed(0)
            refine = Refinement(iters, ridge=1e-3, penalty="logit") if iters else None
            [heads], records[iters, precondition] = train_heads(model, tiny_data, cfg, show=False, head_seed=11,
                                                                refine=refine)
            torch.manual_seed(1)
            [s], _ = score_validation(model, [heads], tiny_data, cfg, show=False)
            logp[iters, precondition] = s.logp
    gap = {iters: float(np.abs(logp[iters, "none"] - logp[iters, "whiten"]).mean()) for iters in (0, 150)}
    assert gap[150] < 0.2 * gap[0], gap
    assert "refine" not in records[0, "none"]
    for r in records[150, "none"]["refine"]:
        assert r["after"]["grad_max"] < 0.1 * r["before"]["grad_max"] and r["after"]["loss"] < r["before"]["loss"]
    assert len(records[150, "whiten"]["refined_heldout_loss"]) == model.cfg.towers


def test_the_refine_command_probes_a_run_with_the_defined_head(tiny_data, tmp_path, capsys):
    """`python -m studies.probe refine RUN`: the probe with its heads taken on by L-BFGS, recorded as such
    (its identity names the refinement, the manifest holds each head's certificate); the plain probe of the
    same run is another probe, and a refinement of a non-linear head stops before any work."""
    from studies.probe.__main__ import main as study_cli
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe.run import probe_run
    from twotower_lib.train.loop import TrainConfig, train

    run = tmp_path / "gpt"
    train(TrainConfig(model="gpt", preset="tiny", seed=1, max_steps=8), tiny_data, run, show_progress=False)
    args = ["--train-blocks", "64", "--max-epochs", "2", "--eval-blocks", "16"]
    assert study_cli(["refine", str(run), *args, "--iters", "5", "--out", str(tmp_path / "refined")]) == 0
    refined = load_artifact(tmp_path / "refined").manifest
    assert refined["identity"]["refine"] == {"iters": 5, "ridge": 0.03, "penalty": "logit"}
    assert len(refined["heads"]["refine"]) == 2 and all("after" in r for r in refined["heads"]["refine"])
    plain = probe_run(run, config_for(args), out=tmp_path / "plain", show=False)
    assert "refine" not in load_artifact(plain).manifest["identity"]
    with pytest.raises(UserError, match="linear head"):
        study_cli(["refine", str(run), *args, "--head", "tied"])


def config_for(args: list[str]) -> ProbeConfig:
    """The ProbeConfig the `probe` command builds from these arguments."""
    import argparse

    from twotower_lib.probe.run import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(["RUN", *args]))
