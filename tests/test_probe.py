"""Probing heads, tower ordering (Eq. 3), preference scores (Eq. 4) and the artifact."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from twotower_lib.artifacts import atomic_write_json, read_json, sha256_file
from twotower_lib.errors import UserError
from twotower_lib.models import ModelConfig
from twotower_lib.preference import (TowerSums, check_same_vocabulary, document_stats, frequency_rank,
                                     load_artifact, order_towers, preference_table, save_artifact)
from twotower_lib.probe.run import ProbeConfig, write_preference
from twotower_lib.probe.training import score_validation, train_heads, training_features

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- Eq. 3 and Eq. 4 by hand


def test_tower_ordering_rule():
    assert order_towers([0.1, 0.3]) == [1, 0]
    assert order_towers([0.3, 0.1]) == [0, 1]
    assert order_towers([0.2, 0.2]) == [0, 1]  # a tie keeps the physical order
    with pytest.raises(UserError, match="not finite"):
        order_towers([0.2, float("nan")])


def test_both_averaging_variants_against_hand_computation():
    # token 5 seen twice, token 7 once, every other token never
    sums = TowerSums(token_ids=np.array([5, 5, 7]), doc_ids=np.array([0, 1, 1]),
                     p=np.array([[0.5, 0.2], [0.1, 0.2], [0.4, 0.8]]),
                     logp=np.log(np.array([[0.5, 0.2], [0.1, 0.2], [0.4, 0.8]])))
    counts = np.arange(10)[::-1].copy()
    t = preference_table(sums, 0, 1, 10, counts, [f"t{i}" for i in range(10)]).set_index("token_id")
    assert t.loc[5, "count"] == 2 and t.loc[7, "count"] == 1 and t.loc[0, "count"] == 0
    assert t.loc[5, "p1_mean"] == pytest.approx(0.3) and t.loc[5, "p2_mean"] == pytest.approx(0.2)
    assert t.loc[5, "score"] == pytest.approx(math.log(0.3) - math.log(0.2))          # log of mean p
    assert t.loc[5, "score_logmean"] == pytest.approx((math.log(0.5) + math.log(0.1)) / 2 - math.log(0.2))
    assert t.loc[7, "score"] == pytest.approx(math.log(0.4 / 0.8))
    unseen = t.drop(index=[5, 7])
    assert unseen[["score", "score_logmean", "p1_mean"]].isna().all().all()  # NaN, never 0
    assert list(t["rank"].loc[[0, 1, 9]]) == [1, 2, 10]
    # swapping primary and secondary flips the sign
    t2 = preference_table(sums, 1, 0, 10, counts, [f"t{i}" for i in range(10)]).set_index("token_id")
    assert t2.loc[5, "score"] == pytest.approx(-t.loc[5, "score"])
    # the per-document sums add up to the table
    d = document_stats(sums, 0, 1)
    assert d[d.token_id == 5]["n"].sum() == 2 and d[d.token_id == 5]["sum_p1"].sum() == pytest.approx(0.6)
    assert len(d) == 3


def test_frequency_rank_ties_by_token_id():
    assert list(frequency_rank(np.array([5, 9, 5, 0]))) == [2, 1, 3, 4]


# ---------------------------------------------------------------- a planted preference, end to end


class PlantedModel(nn.Module):
    """Stands in for a trained two-tower model: tower 0 'knows' the planted tokens, tower 1 all others.

    Each tower's feature at a position is the true token's code vector if the tower knows the token,
    plus noise; the probe heads must discover this from the features alone.
    """

    def __init__(self, vocab_size: int, planted: set[int], model_type: str = "elmo", hidden: int = 32):
        super().__init__()
        self.cfg = ModelConfig(model_type, n_layer=1, hidden=hidden, intermediate=hidden, n_head=2,
                               vocab_size=vocab_size, seq_len=32, max_position=64)
        g = torch.Generator().manual_seed(0)
        self.register_buffer("code", torch.randn(vocab_size, hidden, generator=g) * 3)
        self.register_buffer("planted", torch.zeros(vocab_size, dtype=torch.bool))
        self.planted[list(planted)] = True
        self.tok_emb = nn.Embedding(vocab_size, 2 * hidden)

    def tower_states(self, ids):  # (B, T) -> (B, T, 2, H)
        known0, known1 = self.planted[ids], ~self.planted[ids]
        noise = torch.randn(*ids.shape, 2, self.cfg.hidden) * 0.5
        c = self.code[ids]
        return torch.stack([c * known0[..., None], c * known1[..., None]], dim=2) + noise

    def decode(self, states):  # (..., 2, H) -> (..., V): a uniform cooperative model
        return torch.zeros(*states.shape[:-2], self.cfg.vocab_size)


def _planted_setup(tiny_data, model_type="elmo"):
    freq = np.argsort(-tiny_data.counts)
    ordinary = [int(t) for t in freq if t not in tiny_data.special_ids.values()][:60]
    planted = set(ordinary[10:20])  # ten fairly frequent tokens
    return PlantedModel(tiny_data.vocab_size, planted, model_type), planted, ordinary


def test_planted_tokens_get_the_right_sign_and_nothing_else_does(tiny_data, tmp_path):
    torch.manual_seed(0)
    model, planted, ordinary = _planted_setup(tiny_data)
    cfg = ProbeConfig(features="raw", train_blocks=300, max_epochs=8, batch_size=512, lr=3e-3, forward_batch=64,
                      precision="fp32")
    heads, record = train_heads(model, tiny_data, cfg, show=False)
    curve = record["curve"]
    assert min(c["heldout_loss"][1] for c in curve) < curve[0]["train_loss"][1] - 1.0  # the heads learned
    [sums], _ = score_validation(model, heads, tiny_data, cfg, show=False)
    out = write_preference(tmp_path / "probe", sums, tiny_data, {"tokenizer_sha256": "x", "val_loss": {}}, {}, show=False)
    r = load_artifact(out)
    # Tower 1 knows the far more frequent rest, so it is the primary tower (Eq. 3) ...
    assert r.manifest["ordering"]["primary_tower"] == 1
    scored = r.table[(r.table["count"] >= 3) & r.table["token_id"].isin(ordinary)].set_index("token_id")["score"]
    negative = set(scored.index[scored < 0])
    # ... and the preference score is negative (secondary tower better) on exactly the planted tokens.
    assert negative == planted & set(scored.index)
    assert len(negative) >= 8


def test_bert_validation_scores_every_token_exactly_once(tiny_data):
    model, _, _ = _planted_setup(tiny_data, "bert")
    cfg = ProbeConfig(features="raw", train_blocks=20, max_epochs=1, eval_blocks=10, precision="fp32")
    heads, _ = train_heads(model, tiny_data, cfg, show=False)
    [sums], _ = score_validation(model, heads, tiny_data, cfg, show=False)
    valid = np.asarray(tiny_data.valid[:10])
    ordinary = ~np.isin(valid, list(tiny_data.special_ids.values()))
    assert len(sums.token_ids) == int(ordinary.sum())
    assert np.array_equal(np.sort(sums.token_ids), np.sort(valid[ordinary]))


# ---------------------------------------------------------------- the artifact


def _tiny_artifact(tmp_path, name="a", tokenizer="tok1"):
    sums = TowerSums(np.array([1, 2, 2]), np.array([0, 0, 1]), np.array([[0.5, 0.2], [0.1, 0.2], [0.3, 0.3]]),
                     np.log(np.array([[0.5, 0.2], [0.1, 0.2], [0.3, 0.3]])))
    table = preference_table(sums, 0, 1, 4, np.array([1, 5, 3, 0]), ["a", "b", "c", "d"])
    return save_artifact(tmp_path / name, table, document_stats(sums, 0, 1), {"tokenizer_sha256": tokenizer}), table


def test_artifact_round_trip(tmp_path):
    out, table = _tiny_artifact(tmp_path)
    r = load_artifact(out)
    pd.testing.assert_frame_equal(r.table, table)
    assert r.manifest["vocab_size"] == 4 and set(r.manifest["files"]) == {"preference.parquet", "doc_stats.parquet"}
    assert r.scores.loc[1] == pytest.approx(math.log(0.5 / 0.2))
    # every column by hand: token 1 seen once, token 2 twice (in two documents), 0 and 3 never
    t = r.table.set_index("token_id")
    assert t.loc[1, ["count", "p1_mean", "p2_mean"]].tolist() == pytest.approx([1, 0.5, 0.2])
    assert t.loc[2, ["count", "p1_mean", "p2_mean"]].tolist() == pytest.approx([2, 0.2, 0.25])
    assert t.loc[2, "logp1_mean"] == pytest.approx((math.log(0.1) + math.log(0.3)) / 2)
    assert t.loc[2, "score"] == pytest.approx(math.log(0.2 / 0.25))
    assert t.loc[2, "score_logmean"] == pytest.approx((math.log(0.1 / 0.2) + math.log(0.3 / 0.3)) / 2)
    assert t.loc[[0, 3], "score"].isna().all() and t.loc[[0, 3], "count"].tolist() == [0, 0]
    assert t["rank"].tolist() == [3, 1, 2, 4] and t["train_count"].tolist() == [1, 5, 3, 0]
    expected_docs = pd.DataFrame({"doc_id": [0, 0, 1], "token_id": [1, 2, 2], "n": [1, 1, 1],
                                  "sum_p1": [0.5, 0.1, 0.3], "sum_p2": [0.2, 0.2, 0.3],
                                  "sum_logp1": np.log([0.5, 0.1, 0.3]), "sum_logp2": np.log([0.2, 0.2, 0.3])})
    pd.testing.assert_frame_equal(r.doc_stats, expected_docs, check_dtype=False)


def test_an_artifact_is_found_in_its_run_directory_and_checked_for_shape(tmp_path):
    out, table = _tiny_artifact(tmp_path / "run", "probe")
    found = load_artifact(tmp_path / "run")
    assert found.path == out and found.table.equals(load_artifact(out).table)
    gap = table.assign(token_id=[0, 1, 3, 4])       # one row per token, but not tokens 0..3
    save_artifact(tmp_path / "gap", gap, load_artifact(out).doc_stats, {})
    with pytest.raises(UserError, match="one row per vocabulary token 0..3"):
        load_artifact(tmp_path / "gap")
    odd = _tiny_artifact(tmp_path, "odd")[0]        # doc_stats with a column too many, files re-hashed
    load_artifact(odd).doc_stats.assign(extra=1).to_parquet(odd / "doc_stats.parquet", index=False)
    manifest = json.loads((odd / "manifest.json").read_text())
    manifest["files"]["doc_stats.parquet"] = sha256_file(odd / "doc_stats.parquet")
    (odd / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="unexpected columns"):
        load_artifact(odd)


def test_truncated_or_corrupted_artifact_is_refused(tmp_path):
    out, _ = _tiny_artifact(tmp_path)
    f = out / "preference.parquet"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(UserError, match="truncated or modified"):
        load_artifact(out)
    out2, _ = _tiny_artifact(tmp_path, "b")
    (out2 / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_artifact(out2)
    with pytest.raises(UserError, match="no preference artifact"):
        load_artifact(tmp_path / "nothing")


def test_mismatched_vocabularies_are_refused(tmp_path):
    a = load_artifact(_tiny_artifact(tmp_path, "a", "tok1")[0])
    b = load_artifact(_tiny_artifact(tmp_path, "b", "tok2")[0])
    check_same_vocabulary([a, load_artifact(_tiny_artifact(tmp_path, "c", "tok1")[0])])
    with pytest.raises(UserError, match="different vocabularies"):
        check_same_vocabulary([a, b])


def test_probe_command_options_make_the_config_they_name():
    import argparse

    from twotower_lib.probe.run import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    parse = lambda *a: config_from_args(parser.parse_args(["run", *a]))  # noqa: E731
    assert (parse().head, parse().peak_lr, parse().cooldown_epochs, parse().cooldown_average) == ("linear", 3e-3, 2, True)
    legacy = parse("--legacy")
    assert (legacy.head, legacy.peak_lr, legacy.schedule, legacy.max_epochs) == ("mlp", 1e-3, "linear", 3)
    assert (parse("--head", "mlp").head, parse("--head", "mlp").peak_lr) == ("mlp", 1e-3)
    assert parse("--legacy", "--head", "tied", "--lr", "0.01").peak_lr == 0.01
    assert parse("--replicate", "--seed", "3").replicate and parse("--seed", "3").seed == 3
    released = parse("--as-released")   # the authors' recipe: untied heads, 80/10/10, 1/3 warm-up, linear decay
    assert (released.head, released.features, released.bert_events, released.schedule, released.peak_lr,
            round(released.warmup_fraction, 3), released.holdout_fraction) == ("mlp", "joint_ln", "corrupt", "linear",
                                                                               1e-3, 0.333, 0.0)
    with pytest.raises(SystemExit):
        parse("--legacy", "--as-released")


def test_probe_config_validation():
    with pytest.raises(UserError, match="head"):
        ProbeConfig(head="affine").validate()
    with pytest.raises(UserError, match="max_epochs"):
        ProbeConfig(max_epochs=0).validate()
    with pytest.raises(UserError, match="train_positions"):
        ProbeConfig(train_positions=0).validate()
    with pytest.raises(UserError, match="features"):
        ProbeConfig(features="pooled").validate()
    with pytest.raises(UserError, match="bert_events"):
        ProbeConfig(bert_events="random").validate()
    with pytest.raises(UserError, match="holdout_fraction"):  # the held-out loss decides when to stop
        ProbeConfig(holdout_fraction=0.0).validate()
    with pytest.raises(UserError, match="cooldown_average"):
        ProbeConfig(cooldown_epochs=0).validate()
    ProbeConfig(cooldown_epochs=0, cooldown_average=False).validate()
    with pytest.raises(UserError, match="score_precision"):
        ProbeConfig(score_precision="fp16").validate()
    ProbeConfig.legacy().validate()  # the earlier recipe needs no held-out split
    ProbeConfig.as_released().validate()


# ---------------------------------------------------------------- real (tiny) trained runs


@pytest.mark.slow
def test_probe_cli_on_trained_runs_and_independent_pair(tiny_data, tmp_path, capsys):
    from twotower_lib.__main__ import main as cli
    from twotower_lib.probe.run import pair_runs
    from twotower_lib.train.loop import TrainConfig, train

    runs = {}
    for name, towers, seed in [("two", 2, 1), ("one_a", 1, 1), ("one_b", 1, 2)]:
        runs[name] = tmp_path / name
        train(TrainConfig(model="gpt", preset="tiny", seed=seed, towers=towers, max_steps=8), tiny_data,
              runs[name], show_progress=False)
    args = ["--train-blocks", "64", "--max-epochs", "2", "--eval-blocks", "16"]
    assert cli(["probe", str(runs["two"]), *args]) == 0
    r = load_artifact(runs["two"])
    assert r.manifest["towers"] == 2 and r.manifest["scored_positions"] > 0
    assert set(r.manifest["val_loss"]) == {"cooperative", "tower0_head", "tower1_head"}
    assert r.table["score"].notna().sum() == r.manifest["scored_tokens"]
    assert cli(["probe", str(runs["two"]), *args]) == 0 and "up to date" in capsys.readouterr().out
    assert r.manifest["resolved_precision"] == {"towers": "fp32", "heads": "fp32", "scoring": "fp32"}  # auto on a CPU
    manifest = runs["two"] / "probe" / "manifest.json"          # the same probe, as if a bf16 run had written it
    atomic_write_json(manifest, {**read_json(manifest), "resolved_precision": {"towers": "bf16", "heads": "bf16",
                                                                                 "scoring": "bf16"}})
    assert cli(["probe", str(runs["two"]), *args]) == 0 and "up to date" not in capsys.readouterr().out
    assert load_artifact(runs["two"]).manifest["resolved_precision"]["heads"] == "fp32"
    for name in ("one_a", "one_b"):
        assert cli(["probe", str(runs[name]), *args]) == 0
    seeds = [load_artifact(runs[n] / "probe").manifest["head_seed"] for n in ("two", "one_a", "one_b")]
    assert len(set(seeds)) == 3  # every model's heads start from their own initialisation
    pair = load_artifact(pair_runs(runs["one_a"] / "probe", runs["one_b"] / "probe", tmp_path / "pair", show=False))
    assert pair.manifest["towers"] == 2 and pair.table["score"].notna().any()
    # the pair's score is Eq. 4 over the two runs' own per-position probabilities, primary first
    from twotower_lib.preference import load_positions

    pa, pb = (load_positions(runs[n] / "probe") for n in ("one_a", "one_b"))
    frame = pd.DataFrame({"t": pa.token_ids, "a": pa.p[:, 0], "b": pb.p[:, 0]}).groupby("t").mean()
    primary_a = pa.p.mean() >= pb.p.mean()
    expected = (np.log(frame["a"]) - np.log(frame["b"])) * (1 if primary_a else -1)
    got = pair.table.set_index("token_id")["score"].reindex(frame.index)
    np.testing.assert_allclose(got.to_numpy(), expected.to_numpy(), rtol=1e-9)
    assert expected.abs().max() > 0.01  # two different runs, not a tower compared with itself
    with pytest.raises(UserError, match="not a single-tower probe"):
        pair_runs(runs["two"] / "probe", runs["one_b"] / "probe", tmp_path / "bad", show=False)


class NoiseModel(PlantedModel):
    """Towers whose features carry no information at all: fresh noise at every call, from the model's own stream."""

    def __init__(self, vocab_size: int, seed: int):
        super().__init__(vocab_size, set())
        self.noise = torch.Generator().manual_seed(seed)

    def tower_states(self, ids):
        return torch.randn(*ids.shape, 2, self.cfg.hidden, generator=self.noise)


def test_heads_of_different_models_do_not_share_their_start(tiny_data, tmp_path):
    """Two uninformative models must not agree on which tower a token prefers.

    With one head seed for all models, head j of both models starts from the same weights, and the
    trace of that start makes tower-j-minus-tower-k differences agree across models (the bug that
    gave two untrained BERTs r = -0.34). probe_run derives the head seed from the weights.
    """
    cfg = ProbeConfig.legacy(train_blocks=200, max_epochs=4, batch_size=256, forward_batch=64, precision="fp32")

    def physical_difference(model, head_seed):
        heads, _ = train_heads(model, tiny_data, cfg, show=False, head_seed=head_seed)
        [sums], _ = score_validation(model, heads, tiny_data, cfg, show=False)
        table = pd.DataFrame({"t": sums.token_ids, "p0": sums.p[:, 0], "p1": sums.p[:, 1]}).groupby("t").agg(
            n=("p0", "size"), p0=("p0", "mean"), p1=("p1", "mean"))
        return np.log(table["p0"]) - np.log(table["p1"]), table["n"]

    a, n = physical_difference(NoiseModel(tiny_data.vocab_size, seed=1), head_seed=11)
    b_shared, _ = physical_difference(NoiseModel(tiny_data.vocab_size, seed=2), head_seed=11)  # the old behaviour
    b_own, _ = physical_difference(NoiseModel(tiny_data.vocab_size, seed=2), head_seed=12)
    frequent = n.index[n >= 5]
    r_shared = np.corrcoef(a[frequent], b_shared[frequent])[0, 1]
    r_own = np.corrcoef(a[frequent], b_own[frequent])[0, 1]
    print(f"{len(frequent)} tokens: r with a shared head seed {r_shared:.2f}, with own seeds {r_own:.2f}")
    # ~90 tokens: the null r of independent heads has SD ~0.1, so the margins below are >3 SD (Fisher z)
    # from the values measured on this data (shared 0.80, own -0.11): no valid split should cross them
    assert len(frequent) >= 80, len(frequent)
    assert r_shared > 0.6, r_shared    # the artefact is real and large ...
    assert abs(r_own) < 0.35, r_own    # ... and independent heads remove it


@pytest.mark.parametrize("rows", [None, 7])
@pytest.mark.parametrize("kind", ["mlp", "tied", "linear"])
def test_head_loss_equals_cross_entropy_in_value_and_gradients(kind, rows, monkeypatch):
    """The loss and gradients of `ProbeHead.loss` (the linear head folded into one map, the softmax a
    block of `rows` at a time) equal torch's cross-entropy of the head written out layer by layer."""
    import torch.nn.functional as F

    from twotower_lib.probe import heads as heads_module
    from twotower_lib.probe.heads import ProbeHead, token_logprob

    if rows:
        monkeypatch.setattr(heads_module, "rows_per_chunk", lambda vocab_size, device: rows)
    torch.manual_seed(0)
    emb = torch.randn(50, 12)
    head = ProbeHead(8, 50, kind, embedding=emb)
    assert head.folds == (kind == "linear")   # the tower (8) is narrower than the embedding (12)
    h, y = torch.randn(33, 8, requires_grad=True), torch.randint(0, 50, (33,))
    grads = []
    for loss_fn in (lambda: F.cross_entropy(F.linear(head.features(h), *head.decoder_weights()), y),
                    lambda: head.loss(h, y)):
        head.zero_grad(set_to_none=True)
        h.grad = None
        loss = loss_fn()
        loss.backward()
        grads.append((loss.detach(), h.grad.clone(), [p.grad.clone() for p in head.parameters()]))
    (l0, gh0, gp0), (l1, gh1, gp1) = grads
    torch.testing.assert_close(l1, l0)
    torch.testing.assert_close(gh1, gh0)
    assert len(gp0) == len(gp1) == {"mlp": 6, "tied": 5, "linear": 3}[kind]   # linear: dense and bias only
    for a, b in zip(gp0, gp1):
        torch.testing.assert_close(b, a)
    logits = head(h).detach()
    torch.testing.assert_close(token_logprob(logits, y), -F.cross_entropy(logits, y, reduction="none"))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # scores stay fp32 under the towers' autocast
        torch.testing.assert_close(head.logprob(h.detach(), y), token_logprob(logits, y))
    # bf16 logits only inside the log-sum-exp: close, not equal (the target's logit stays exact)
    coarse = head.logprob(h.detach(), y, torch.bfloat16)
    assert not torch.equal(coarse, token_logprob(logits, y))
    torch.testing.assert_close(coarse, token_logprob(logits, y), atol=0.05, rtol=0)
    # and bf16 matmuls in training: the same loss to bf16's precision
    torch.testing.assert_close(head.loss(h, y, torch.bfloat16), l0, atol=0.05, rtol=0)

    # the bf16 fold of the linear head in training: gradients within bf16's precision of the fp32 ones
    head.zero_grad(set_to_none=True)
    head.loss(h.detach(), y, torch.bfloat16).backward()
    for a, b in zip(gp0, [p.grad for p in head.parameters()]):
        torch.testing.assert_close(b, a, atol=0.02 * float(a.abs().max()), rtol=0)


def test_head_loss_is_exact_where_the_true_token_probability_underflows():
    """A true token 200 nats below the best one has probability 0 in fp32; its loss is then taken from the
    logits (log-sum-exp), not from log 0."""
    import torch.nn.functional as F

    from twotower_lib.probe.heads import LinearCrossEntropy

    x = torch.ones(2, 1)
    w, b = torch.tensor([[0.0], [200.0], [1.0]], requires_grad=True), torch.zeros(3, requires_grad=True)
    t = torch.tensor([0, 2])
    loss = LinearCrossEntropy.apply(x, w, b, t)
    expected = F.cross_entropy(x @ w.t() + b, t)
    assert math.isfinite(float(loss.detach()))
    torch.testing.assert_close(loss, expected)


def test_the_head_weight_gradient_accumulates_bit_for_bit_as_before():
    """In fp32 the (V, H) gradient is accumulated inside each block's product (`addmm_`): bit for bit the
    sum of the blocks' products it replaced, so no committed probe changes."""
    from twotower_lib.probe.heads import LinearCrossEntropy, rows_per_chunk

    g = torch.Generator().manual_seed(3)
    n, H, V = 300, 16, 4096                           # several blocks of rows_per_chunk(V) rows, the last short
    x, t = torch.randn(n, H, generator=g), torch.randint(V, (n,), generator=g)
    w = (torch.randn(V, H, generator=g) * 0.1).requires_grad_()
    b = torch.randn(V, generator=g).requires_grad_()
    LinearCrossEntropy.apply(x, w, b, t).backward()
    expected, step = torch.zeros(V, H), rows_per_chunk(V, x.device)
    assert step < n
    for r in range(0, n, step):
        d = torch.softmax((x[r:r + step] @ w.detach().t()).add_(b.detach()), dim=1)
        d[torch.arange(len(d)), t[r:r + step]] -= 1
        expected += d.t() @ x[r:r + step]
    assert torch.equal(w.grad, expected / n)


def test_the_head_training_benchmark_compares_an_epoch_with_its_products(tmp_path):
    """`benchmarks/bench_head_training.py`: one epoch of the probe's head training against its matrix products,
    at tiny shapes; the ratio is the products' fastest round over the epoch's, the FLOPs those of the steps."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_head_training", ROOT / "benchmarks" / "bench_head_training.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "head.json"
    assert bench.main(["--threads", "1", "--hidden", "8", "--width", "16", "--vocab", "64", "--positions", "3000",
                       "--rounds", "2", "--precision", "fp32", "--out", str(out)]) == 0
    found = json.loads(out.read_text())
    s = found["seconds"]
    assert len(s["epoch"]) == len(s["products"]) == 2
    assert found["ratio"] == pytest.approx(min(s["products"]) / min(s["epoch"]), abs=1e-3)
    assert found["settings"]["matmul_dtype"] == "float32"
    assert bench.step_flops(128, 256, 8192, 1024) == 4 * 1024 * 128 * 8192 + 4 * 8192 * 256 * 128
    assert bench.step_flops(128, 128, 8192, 1024) == 4 * 1024 * 128 * 8192      # no fold where H = E



# ---------------------------------------------------------------- the instrument itself


def _mask_id(data):
    return data.special_ids["mask"]


def test_bert_probe_events_have_mask_at_every_probed_position(tiny_data):
    """Eq. 1: BERT's state at a predicted position is computed with [MASK] there. The earlier
    scoring reused the training corruption, whose unchanged 10% show the answer to the towers."""
    from twotower_lib.probe.training import probe_batch

    ids = torch.from_numpy(np.asarray(tiny_data.train[:64], dtype=np.int64))
    args = ("bert", ids, torch.Generator().manual_seed(0), tiny_data.special_ids, tiny_data.vocab_size)
    inputs, y = probe_batch(*args, ProbeConfig(bert_events="mask"))
    probed = y != -100
    assert probed.sum() > 100 and bool((inputs[probed] == _mask_id(tiny_data)).all())
    assert bool((inputs[~probed] == ids[~probed]).all())  # nothing else is touched
    inputs, y = probe_batch(*args, ProbeConfig(bert_events="corrupt"))
    probed = y != -100
    visible = (inputs[probed] == y[probed]).float().mean().item()  # the 10% left unchanged (+ random hits)
    assert 0.04 < visible < 0.2, visible


def test_heads_stop_on_the_heldout_plateau_and_keep_their_best_state(tiny_data):
    model, _, _ = _planted_setup(tiny_data)
    cfg = ProbeConfig(features="raw", train_blocks=150, max_epochs=60, batch_size=256, lr=3e-3, tol=0.01,
                      forward_batch=64, precision="fp32")
    heads, record = train_heads(model, tiny_data, cfg, show=False)
    assert record["stopped"] == "converged" and record["epochs"] < 60
    assert record["heldout_positions"] > 0 and record["train_positions"] > 5 * record["heldout_positions"]
    lrs = [c["lr"] for c in record["curve"]]
    assert lrs[-1] < 0.1 * lrs[0]  # after the plateau the rate fell to its last step's 1/steps of the peak
    # the heads returned are the best held-out state, not the last epoch's
    from twotower_lib.probe.training import _heldout_losses, extract_features

    rng = np.random.default_rng(cfg.seed)
    n_train = 150
    chosen = rng.choice(len(tiny_data.train), size=n_train + 15, replace=False)
    # recompute the held-out loss of the returned heads on the same held-out blocks
    feats, labels = extract_features(model, tiny_data.train[np.sort(chosen[n_train:])], tiny_data.special_ids,
                                     tiny_data.vocab_size, torch.Generator().manual_seed(0), cfg, show=False)
    now = _heldout_losses(heads[0], feats, labels, 2, torch.device("cpu"))
    best = [min(c["heldout_loss"][j] for c in record["curve"]) for j in range(2)]
    assert now == pytest.approx(best, abs=0.05)  # the planted model's features are noisy per call


def test_joint_layernorm_features_are_the_cooperative_heads_input(tiny_data):
    from twotower_lib.models import build_model, preset
    from twotower_lib.probe.training import head_features

    torch.manual_seed(0)
    model = build_model(preset("tiny", "gpt", vocab_size=tiny_data.vocab_size, seq_len=tiny_data.seq_len)).eval()
    with torch.no_grad():
        nn.init.normal_(model.head_ln1.weight)  # a LayerNorm that is not the identity affine map
        states = model.tower_states(torch.from_numpy(np.asarray(tiny_data.train[:2], dtype=np.int64)))
        joint = head_features(model, states, "joint_ln")                  # (B, T, k, H)
        assert torch.equal(head_features(model, states, "raw"), states)
        assert joint.shape == states.shape
        torch.testing.assert_close(joint.flatten(-2), model.head_ln1(states.flatten(-2)))
        assert not torch.allclose(joint[..., 0, :], nn.functional.layer_norm(states[..., 0, :], (states.shape[-1],)))


def test_replicate_heads_differ_only_in_seed_and_agree_on_a_planted_preference(tiny_data, tmp_path):
    from twotower_lib.preference import load_positions, replicate_table

    torch.manual_seed(0)    # the planted towers' noise: this test's numbers, whichever tests ran before it
    model, planted, ordinary = _planted_setup(tiny_data)
    cfg = ProbeConfig(features="raw", train_blocks=200, max_epochs=6, batch_size=512, lr=3e-3, forward_batch=64,
                      precision="fp32", replicate=True)
    feats = training_features(model, tiny_data, cfg, 5, show=False)   # the planted towers' noise drawn once
    sets, record = train_heads(model, tiny_data, cfg, show=False, head_seed=5, features=feats)
    assert len(sets) == 2 and record["head_seeds"] == [5, 5 + 7919]
    assert not torch.equal(sets[0][0].dense.weight, sets[1][0].dense.weight)
    # the replicate trains on its own schedule: the first set is, bit for bit, the probe without it (at a
    # tolerance where the replicate's gains, were they pooled, would keep the first set training an epoch longer)
    plateaus = dataclasses.replace(cfg, tol=0.025, max_epochs=12)
    both, record_both = train_heads(model, tiny_data, plateaus, show=False, head_seed=5, features=feats)
    [alone], single = train_heads(model, tiny_data, dataclasses.replace(plateaus, replicate=False), show=False,
                                  head_seed=5, features=feats)
    for a, b in zip(alone.state_dict().values(), both[0].state_dict().values()):
        assert torch.equal(a, b)
    assert single["curve"] == record_both["curve"] and "replicate" not in single
    assert record_both["replicate"]["epochs"] > record_both["epochs"]      # each set stopped on its own plateau
    (main, rep), _ = score_validation(model, sets, tiny_data, cfg, show=False)
    assert np.array_equal(main.token_ids, rep.token_ids) and not np.array_equal(main.logp, rep.logp)
    out = write_preference(tmp_path / "probe", main, tiny_data, {"tokenizer_sha256": "x", "val_loss": {}}, {},
                           show=False, replicate=rep)
    np.testing.assert_array_equal(load_positions(out, replicate=True).logp, rep.logp)
    a = load_artifact(out).table.set_index("token_id")
    b = replicate_table(out, tiny_data).set_index("token_id")
    ids = [t for t in ordinary if a.loc[t, "count"] >= 3]
    r = np.corrcoef(a.loc[ids, "score"], b.loc[ids, "score"])[0, 1]
    assert r > 0.9, r  # the planted division dominates the head-seed noise
    # a probe with a replicate made when both sets shared one schedule is made again; one without is the same probe
    from twotower_lib.probe.run import probe_identity

    with_rep, without = probe_identity(cfg, "w", "d"), probe_identity(dataclasses.replace(cfg, replicate=False), "w", "d")
    assert with_rep["replicate_heads"] == "own schedule" and "replicate_heads" not in without
    assert set(with_rep) - set(without) == {"replicate_heads"}
    with pytest.raises(UserError, match="second head seed"):
        load_positions(write_preference(tmp_path / "single", main, tiny_data, {"tokenizer_sha256": "x"}, {},
                                        show=False), replicate=True)


def test_tower_order_rules_disagreement_is_flagged(tiny_data, tmp_path):
    """Eq. 3 orders by mean probability, the authors' code by mean log-probability: a tower that is
    confident on easy tokens and hopeless on hard ones wins one rule and loses the other."""
    p = np.array([[0.9, 0.5], [0.9, 0.5], [1e-4, 0.1], [0.9, 0.5]])
    sums = TowerSums(np.array([5, 6, 7, 5]), np.zeros(4, dtype=int), p, np.log(p))
    assert sums.p[:, 0].mean() > sums.p[:, 1].mean() and sums.logp[:, 0].mean() < sums.logp[:, 1].mean()
    out = write_preference(tmp_path / "p", sums, tiny_data, {"tokenizer_sha256": "x"}, {}, show=False)
    o = load_artifact(out).manifest["ordering"]
    assert o["primary_tower"] == 0 and o["rules_agree"] is False
    p2 = np.array([[0.9, 0.5], [0.8, 0.5]])
    both = write_preference(tmp_path / "r", TowerSums(np.array([5, 6]), np.zeros(2, dtype=int), p2, np.log(p2)),
                            tiny_data, {"tokenizer_sha256": "x"}, {}, show=False)
    assert load_artifact(both).manifest["ordering"]["rules_agree"] is True


def test_frequency_order_is_the_one_top_n_ordering():
    from twotower_lib.preference import frequency_order

    counts = np.array([5, 9, 5, 0, 9])
    assert list(frequency_order(counts)) == [1, 4, 0, 2, 3]          # ties: the smaller id first
    ids = np.array([30, 10, 20])                                       # positions hold other ids
    assert list(frequency_order(np.array([2, 2, 7]), ids)) == [2, 1, 0]


def test_cooldown_average_ends_the_heads_at_the_mean_of_the_cool_down_iterates(tiny_data, monkeypatch):
    """`cooldown_average`: the heads end at the uniform average of their weights after each step of
    the cool-down (the last epoch), not at the last step's weights (which carry the last steps' noise)."""
    model, _, _ = _planted_setup(tiny_data)
    cfg = ProbeConfig(features="raw", train_blocks=150, max_epochs=40, batch_size=256, lr=1e-2, tol=0.02,
                      forward_batch=64, precision="fp32", cooldown_epochs=1, cooldown_average=True)
    iterates = []
    step = torch.optim.AdamW.step

    def recording_step(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        iterates.append(self.param_groups[0]["params"][0].detach().clone())   # head 0's output bias
        return out
    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    torch.manual_seed(0)
    [heads], record = train_heads(model, tiny_data, cfg, show=False, head_seed=11)
    assert record["stopped"] == "converged"
    per_epoch = record["curve"][0]["step"]
    assert len(iterates) == record["curve"][-1]["step"] and per_epoch > 1
    expected = torch.stack(iterates[-per_epoch:]).mean(0)
    torch.testing.assert_close(heads[0].bias, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(heads[0].bias, iterates[-1], atol=1e-6)


def test_linear_heads_of_two_seeds_reach_one_optimum(tiny_data):
    """The linear read-out's likelihood is concave in its weights: two seeds (different starts,
    different orders) end far closer together than the tied head's, whose GELU and LayerNorm give
    each seed its own optimum."""
    model, _, _ = _planted_setup(tiny_data)
    gap = {}
    for kind in ("tied", "linear"):
        cfg = ProbeConfig(head=kind, features="raw", train_blocks=100, max_epochs=12, batch_size=256, tol=0.01,
                          forward_batch=64, precision="fp32", replicate=True, cooldown_epochs=2, cooldown_average=True)
        torch.manual_seed(0)
        sets, _ = train_heads(model, tiny_data, cfg, show=False, head_seed=11)
        torch.manual_seed(1)
        (main, rep), _ = score_validation(model, sets, tiny_data, cfg, show=False)
        gap[kind] = float(np.abs(main.logp - rep.logp).mean())
    assert gap["linear"] < 0.5 * gap["tied"], gap


# ---------------------------------------------------------------- whitened features (`precondition`)


def test_whitening_gives_unit_covariance_and_leaves_a_constant_direction_out():
    from twotower_lib.probe.training import FeatureWhitening

    g = torch.Generator().manual_seed(0)
    mix = torch.linalg.qr(torch.randn(2, 16, 16, generator=g))[0] * torch.logspace(-1, 1, 16)  # (k, H, H): scales 0.1-10
    x = torch.einsum("nki,kij->nkj", torch.randn(5000, 2, 16, generator=g), mix) + 3.0
    x[:, 1, 5] = 7.0                                                                # tower 1: a constant feature
    x[:, 1] += 1e-4 * torch.randn(5000, 16, generator=g)                            # ... up to rounding-sized noise
    w = FeatureWhitening.fit(x)
    z = w.apply(x)
    assert z.dtype == x.dtype and torch.isfinite(z).all()
    torch.testing.assert_close(torch.cov(z[:, 0].T.double()), torch.eye(16, dtype=torch.float64), atol=1e-3, rtol=0)
    assert z.mean(0).abs().max() < 1e-3
    assert w.dropped == [0, 1] and w.condition[0] == pytest.approx(1e4, rel=0.2)
    ev = torch.linalg.eigvalsh(torch.cov(z[:, 1].T.double()))
    assert ev[0] < 1e-3 and torch.allclose(ev[1:], torch.ones(15, dtype=torch.float64), atol=1e-2)  # the noise is not blown up


@pytest.mark.parametrize("kind", ["mlp", "tied", "linear"])
def test_a_head_trained_on_whitened_features_folds_back_into_the_same_head(kind):
    from twotower_lib.probe.heads import ProbeHead
    from twotower_lib.probe.training import FeatureWhitening

    torch.manual_seed(0)
    H, V = 8, 50
    x = torch.randn(400, 2, H) @ torch.randn(H, H) + torch.randn(H)
    w = FeatureWhitening.fit(x)
    head = ProbeHead(H, V, kind, torch.randn(V, 2 * H))
    with torch.no_grad():
        for p in head.parameters():
            p.normal_()
    before = head(w.apply(x)[:, 1])                                                 # logits on whitened tower 1
    w.fold(head, 1)
    torch.testing.assert_close(head(x[:, 1]), before, atol=1e-3, rtol=1e-3)  # logits of size ~10: fp32 rounding


def test_a_folded_head_is_scored_in_fp32_unless_bf16_is_asked_for():
    """Why `score_precision="auto"` is fp32 even where the heads train in bf16: a linear head trained on whitened
    features with a large offset and directions of tiny variance (a deep post-LN tower's), folded back onto the
    raw features, has logits that are differences of large numbers; their bf16 log-sum-exp is off by nats."""
    from twotower_lib.probe import precision
    from twotower_lib.probe.config import ProbeConfig
    from twotower_lib.probe.heads import ProbeHead
    from twotower_lib.probe.training import FeatureWhitening

    g = torch.Generator().manual_seed(1)
    H, V, N = 64, 2000, 4000
    q, _ = torch.linalg.qr(torch.randn(H, H, generator=g))
    x = torch.randn(N, 2, H, generator=g) @ ((q * torch.logspace(-2, 0.5, H)) @ q.T) + 3 * torch.randn(H, generator=g)
    w = FeatureWhitening.fit(x)
    head = ProbeHead(H, V, "linear", 0.5 * torch.randn(V, 2 * H, generator=g))
    with torch.no_grad():
        head.dense.weight.normal_(0, 0.3, generator=g)
        head.dense.bias.normal_(0, 0.3, generator=g)
    t = torch.randint(0, V, (N,), generator=g)
    whitened = head.logprob(w.apply(x)[:, 0], t).mean()
    w.fold(head, 0)
    assert head.logprob(x[:, 0], t, torch.float32).mean() == pytest.approx(float(whitened), abs=1e-3)
    assert abs(head.logprob(x[:, 0], t, torch.bfloat16).mean() - whitened) > 0.5        # the bf16 scoring's error
    for cfg in (ProbeConfig(precision="bf16"), ProbeConfig()):                          # heads in bf16, or auto
        assert precision.score_dtype(cfg, torch.device("cpu")) == torch.float32
    assert precision.score_dtype(ProbeConfig(score_precision="bf16"), torch.device("cpu")) == torch.bfloat16


class CollapsedPlantedModel(PlantedModel):
    """The planted model's features shrunk to a thousandth around a large offset, as a tower that learned little
    leaves them after its LayerNorm: the information is all there, below bf16's resolution at that offset."""

    def tower_states(self, ids):
        g = torch.Generator().manual_seed(2)
        return 1e-3 * super().tower_states(ids) + 8 + 4 * torch.rand(self.cfg.hidden, generator=g)


def test_features_that_vary_below_bf16_resolution_need_the_fp32_cache(tiny_data):
    """Heads trained on bf16-cached features of a collapsed tower learn the rounding, and the validation text,
    scored on the towers' fp32 features, reads far worse than their held-out loss; cached in fp32 they read
    what they learned (`ProbeConfig.feature_dtype`)."""
    from twotower_lib.probe.training import score_validation

    freq = np.argsort(-tiny_data.counts)
    ordinary = [int(t) for t in freq if t not in tiny_data.special_ids.values()][:60]
    model = CollapsedPlantedModel(tiny_data.vocab_size, set(ordinary[10:20]))
    val, held = {}, {}
    for dtype in ("bf16", "fp32"):
        cfg = ProbeConfig(head="linear", features="raw", train_blocks=150, max_epochs=6, batch_size=256,
                          forward_batch=64, precision="fp32", feature_dtype=dtype, eval_blocks=40)
        torch.manual_seed(0)
        heads, record = train_heads(model, tiny_data, cfg, show=False, head_seed=3)
        held[dtype] = float(np.mean(record["curve"][-1]["heldout_loss"]))
        sums, _ = score_validation(model, heads, tiny_data, cfg, show=False)
        val[dtype] = float(-sums[0].logp.mean())
    print("held-out", held, "validation", val)
    assert val["fp32"] < held["fp32"] + 0.5                      # fp32: the validation text reads as held out
    assert val["bf16"] > held["bf16"] + 1.0 and val["bf16"] > val["fp32"] + 1.0   # bf16: the heads learned the rounding
    with pytest.raises(UserError, match="feature_dtype"):
        ProbeConfig(feature_dtype="fp16").validate()


def test_a_recorded_probe_without_the_feature_cache_field_was_cached_in_bf16():
    from dataclasses import asdict
    from twotower_lib.probe.config import settled

    old = {k: v for k, v in asdict(ProbeConfig()).items() if k != "feature_dtype"}
    assert settled(old) == asdict(ProbeConfig()) and settled(old) != asdict(ProbeConfig(feature_dtype="fp32"))
    assert settled({}) == {}


class SkewedPlantedModel(PlantedModel):
    """The planted model seen through a fixed, badly conditioned linear map with an offset: the same
    information, features on scales from 0.03 to 30 that are strongly correlated."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        g = torch.Generator().manual_seed(1)
        H = self.cfg.hidden
        q, _ = torch.linalg.qr(torch.randn(H, H, generator=g))
        self.register_buffer("skew", (q * torch.logspace(-1.5, 1.5, H)) @ q.T)
        self.register_buffer("offset", torch.randn(H, generator=g) * 5)

    def tower_states(self, ids):
        return super().tower_states(ids) @ self.skew + self.offset


def test_whitened_heads_reach_a_lower_loss_on_ill_conditioned_features(tiny_data):
    """What `precondition="whiten"` is for: on correlated, unevenly scaled features the same recipe and
    number of epochs ends at a higher held-out loss without it."""
    freq = np.argsort(-tiny_data.counts)
    ordinary = [int(t) for t in freq if t not in tiny_data.special_ids.values()][:60]
    model = SkewedPlantedModel(tiny_data.vocab_size, set(ordinary[10:20]))
    final = {}
    for precondition in ("none", "whiten"):
        cfg = ProbeConfig(head="linear", features="raw", train_blocks=150, schedule="linear", max_epochs=4,
                          batch_size=256, forward_batch=64, precision="fp32", precondition=precondition,
                          holdout_fraction=0.1)
        torch.manual_seed(0)
        _, record = train_heads(model, tiny_data, cfg, show=False, head_seed=3)
        final[precondition] = record["curve"][-1]["heldout_loss"]
        assert record["precondition"] == precondition
        assert ("feature_condition" in record) == (precondition == "whiten")
    assert all(w < n - 0.05 for w, n in zip(final["whiten"], final["none"])), final


def test_the_first_epoch_says_what_head_training_can_cost_and_how_to_make_it_cheaper():
    from twotower_lib.probe.training import _cost_note

    note = _cost_note(93.0, 200_000, 4, ProbeConfig(max_epochs=30))
    assert "took 93 s" in note and "at most 30 epochs (up to 46 min)" in note
    assert "--train-positions 50,000" in note and "--max-epochs 7" in note


@pytest.mark.parametrize("stage", ["while the heads train", "while the validation text is scored", "while writing"])
def test_a_probe_killed_at_any_stage_is_made_again_the_same(tiny_data, tmp_path, monkeypatch, stage):
    """A probe interrupted mid-way leaves nothing a rerun would take for finished: the rerun writes the artifact a
    probe that was never interrupted writes."""
    import twotower_lib.preference as preference
    import twotower_lib.probe.run as probe_mod
    from twotower_lib.probe.run import probe_run
    from twotower_lib.probe.config import ProbeConfig
    from twotower_lib.train.loop import TrainConfig, train

    run = tmp_path / "run"
    train(TrainConfig(model="gpt", preset="tiny", seed=1, max_steps=8), tiny_data, run, show_progress=False)
    cfg = ProbeConfig(train_blocks=64, max_epochs=2, eval_blocks=16, precision="fp32")
    clean = load_artifact(probe_run(run, cfg, data_dir=tiny_data.path, out=tmp_path / "clean", show=False))
    target = {"while the heads train": (probe_mod, "train_heads"),
              "while the validation text is scored": (probe_mod, "score_validation"),
              "while writing": (preference, "sha256_file")}[stage]   # the tables written, the manifest not yet
    real = getattr(*target)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(*target, killed)
    with pytest.raises(KeyboardInterrupt):
        probe_run(run, cfg, data_dir=tiny_data.path, out=tmp_path / "killed", show=False)
    monkeypatch.setattr(*target, real)
    again = load_artifact(probe_run(run, cfg, data_dir=tiny_data.path, out=tmp_path / "killed", show=False))
    pd.testing.assert_frame_equal(again.table, clean.table)
    pd.testing.assert_frame_equal(again.doc_stats, clean.doc_stats)


def test_a_cache_larger_than_the_free_memory_is_refused_before_it_is_filled(tiny_data, monkeypatch):
    """The feature cache is projected from its first batch (twice: the cache and its whitened copy) and refused
    with a way out where the host cannot hold it, instead of the OS killing a probe hours in; where the memory is
    unknown, or enough, the features are cached."""
    import twotower_lib.workers as workers
    from twotower_lib.models import build_model, preset
    from twotower_lib.probe.training import extract_features

    real = workers.available_memory()                                    # this machine's, read from the OS
    torch.manual_seed(0)
    model = build_model(preset("tiny", "gpt", vocab_size=tiny_data.vocab_size, seq_len=tiny_data.seq_len)).eval()
    cfg, blocks = ProbeConfig(forward_batch=4, feature_dtype="fp32"), tiny_data.train[:12]
    args = (model, blocks, tiny_data.special_ids, tiny_data.vocab_size, torch.Generator().manual_seed(0), cfg)
    monkeypatch.setattr(workers, "available_memory", lambda: None)
    feats, _ = extract_features(*args, show=False)
    need = 2 * feats.element_size() * feats.numel()                      # all 12 blocks' features, twice
    monkeypatch.setattr(workers, "available_memory", lambda: need - 1)
    with pytest.raises(UserError, match=r"would cache about .* GiB of tower features \(fp32.*--train-positions"):
        extract_features(*args, show=False)
    monkeypatch.setattr(workers, "available_memory", lambda: need)
    assert torch.equal(extract_features(*args, show=False)[0], feats)
    assert real is None or real > 0


def test_the_replicate_schedule_study_reads_both_probings_of_each_run(tiny_data, tmp_path):
    """`studies.probe.replicate_schedule`: per run probed with a replicate in both folders, each probing's
    reliability and epochs, and how far the first set moved between them; a run without a replicate is left out."""
    from studies.probe import replicate_schedule

    rng = np.random.default_rng(0)
    n = 4000
    ids, docs = rng.integers(0, tiny_data.vocab_size, n), np.zeros(n, dtype=int)

    def sums(p):
        p = np.clip(p, 1e-4, 1)
        return TowerSums(ids, docs, p, np.log(p))

    first = rng.uniform(0.05, 0.9, (n, 2))
    for folder, noise, epochs in (("shared", 0.01, 7), ("own", 0.2, 6)):
        main = sums(first + (0.0 if folder == "shared" else 0.02) * rng.standard_normal((n, 2)))
        rep = sums(main.p + noise * rng.standard_normal((n, 2)))
        heads = {"epochs": epochs, **({"replicate": {"epochs": 5}} if folder == "own" else {})}
        write_preference(tmp_path / folder / "gpt-s1", main, tiny_data, {"tokenizer_sha256": "x", "val_loss": {},
                         "heads": heads, "replicate": {}}, {}, show=False, replicate=rep)
        write_preference(tmp_path / folder / "gpt-s2", main, tiny_data, {"tokenizer_sha256": "x", "val_loss": {},
                         "heads": {"epochs": 3}}, {}, show=False)
    [row] = replicate_schedule.compare(tmp_path / "shared", tmp_path / "own", tiny_data, 100)
    assert row["run"] == "gpt-s1" and (row["epochs shared"], row["epochs own"], row["replicate epochs own"]) == (7, 6, 5)
    assert row["reliability shared (score)"] > row["reliability own (score)"]
    assert 0.5 < row["first set, shared vs own (score)"] < 1
    # the command (the data beside the folders, as in a runs folder) writes what the appendix reads, without the
    # machine's folders
    from studies.probe.report import replicate_schedule as finding

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prepared").symlink_to(tiny_data.path)
    out = tmp_path / "replicate_schedule.json"
    assert replicate_schedule.main(["--probes", f"books={tmp_path / 'shared'}:{tmp_path / 'own'}", "--top-n", "100",
                                    "--out", str(out)]) == 0
    assert str(tmp_path) not in out.read_text()
    text = finding(out)
    assert "of 1 runs (books)" in text and f"median {row['reliability shared (score)']:.3f}" in text
    with pytest.raises(UserError, match="no run holds a replicate"):
        (tmp_path / "none").mkdir()
        replicate_schedule.main(["--probes", f"x={tmp_path / 'shared'}:{tmp_path / 'none'}", "--out", str(out)])
