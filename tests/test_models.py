"""Two-tower models: construction, validation, objectives, visibility, parameter counts."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

import pytest
import torch

from twotower_lib.errors import UserError
from tests import released_reference
from twotower_lib.models import MODEL_TYPES, ModelConfig, TwoTowerLM, build_model, labeled_positions, make_batch, preset

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
V = 60


def tiny(model_type: str, **kw) -> TwoTowerLM:
    torch.manual_seed(0)
    return build_model(preset("tiny", model_type, vocab_size=V, **kw)).eval()


def random_ids(B: int = 3, T: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.randint(len(SPECIAL), V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("towers", [1, 2, 3])
def test_shapes_and_loss(model_type, towers):
    model = tiny(model_type, towers=towers)
    ids = random_ids()
    inputs, labels = make_batch(model_type, ids, torch.Generator().manual_seed(1), SPECIAL, V)
    states = model.tower_states(inputs)
    assert states.shape == (3, 32, towers, model.cfg.hidden)
    loss, logits = model(inputs, labels)
    assert logits.shape == (3, 32, V)
    # An untrained model predicts close to uniformly: loss near log(V).
    assert abs(loss.item() - torch.log(torch.tensor(float(V))).item()) < 0.5
    # Decoding only the labelled positions gives the same loss, padded to a multiple or not.
    loss2, logits2 = model(inputs, *labeled_positions(labels))
    assert logits2.shape == ((labels != -100).sum().item(), V)
    torch.testing.assert_close(loss, loss2)
    loss3, logits3 = model(inputs, *labeled_positions(labels, 64))
    assert logits3.shape[0] % 64 == 0 and logits3.shape[0] > logits2.shape[0]
    torch.testing.assert_close(loss, loss3)


def test_decoder_is_tied_to_embedding():
    model = tiny("gpt")
    names = [n for n, _ in model.named_parameters()]
    assert not any("decoder" in n for n in names)
    ids = random_ids()
    _, logits = model(ids)
    with torch.no_grad():
        model.tok_emb.weight[7] += 1.0  # changing the embedding of token 7 changes its output logit
    _, logits_after = model(ids)
    assert not torch.allclose(logits[..., 7], logits_after[..., 7])


@pytest.mark.parametrize("field,value,model_type", [
    ("model_type", "rnn", "gpt"),
    ("hidden", 15, "gpt"),          # 15 % 2 heads != 0
    ("seq_len", 65, "bert"),        # max_position 64 in `tiny`
    ("towers", 0, "bert"),
    ("n_head", 0, "gpt"),
    ("hidden", 15, "elmo"),         # odd: no even forward/backward split
    ("n_layer", 0, "elmo"),
    ("deepspeed_kernel", True, "gpt"),  # the fused kernel is a BERT layer
])
def test_invalid_config_names_the_field(field, value, model_type):
    cfg = dataclasses.replace(preset("tiny", model_type, vocab_size=V), **{field: value})
    with pytest.raises(UserError, match=f"`{field}`"):
        build_model(cfg)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_deepspeed_kernel_needs_cuda():
    cfg = dataclasses.replace(preset("tiny", "bert", vocab_size=V), deepspeed_kernel=True)
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        build_model(cfg)


def test_unknown_preset_and_mismatched_family():
    with pytest.raises(UserError, match="unknown preset"):
        preset("huge", "gpt")
    with pytest.raises(UserError, match="paper-gpt"):
        preset("paper-gpt", "bert")


def _state_change(model, ids, i):
    """Per-position max change of tower states when token i is replaced."""
    other = ids.clone()
    other[:, i] = (ids[:, i] - len(SPECIAL) + 1) % (V - len(SPECIAL)) + len(SPECIAL)
    with torch.no_grad():
        return (model.tower_states(other) - model.tower_states(ids)).abs().amax(dim=(0, 2, 3))  # (T,)


@pytest.mark.parametrize("i", [0, 13, 31])
def test_elmo_position_never_sees_its_own_token(i):
    model = tiny("elmo", n_layer=2)
    change = _state_change(model, random_ids(), i)
    assert change[i] == 0.0
    others = torch.cat([change[:i], change[i + 1:]])
    assert (others > 0).all()  # every other position does see token i (forward or backward LSTM)


@pytest.mark.parametrize("i", [0, 13, 31])
@pytest.mark.parametrize("layout", ["paper", "released"])
def test_elmo_as_released_sees_only_the_left_context(i, layout):
    model = tiny("elmo", n_layer=2, elmo_backward_zeroed=True, layout=layout)
    change = _state_change(model, random_ids(), i)
    assert (change[:i + 1] == 0).all()        # as released: no position sees token i or what follows it
    assert (change[i + 1:] > 0).all()
    states = model.tower_states(random_ids())  # (B, T, k, H): the backward half is exactly 0
    assert (states[..., model.cfg.hidden // 2:] == 0).all()
    bidirectional = tiny("elmo", n_layer=2, layout=layout)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in bidirectional.parameters())


def test_elmo_as_released_is_an_elmo_option_saved_only_when_set():
    with pytest.raises(UserError, match="elmo_backward_zeroed.*ELMo option"):
        preset("tiny", "gpt", elmo_backward_zeroed=True)
    assert "elmo_backward_zeroed" not in preset("tiny", "elmo").to_dict()   # runs saved before it keep their identity
    released = preset("tiny", "elmo", elmo_backward_zeroed=True)
    assert ModelConfig.from_dict(released.to_dict()) == released


@pytest.mark.parametrize("released", [False, True])
def test_elmo_lstm_streams_is_an_elmo_option_and_changes_nothing_off_cuda(released):
    """`lstm_streams` (ELMo's LSTMs side by side on CUDA streams; tests/test_gpu.py checks it there) is refused
    for other families, saved only when set, and on the CPU the model computes as without it."""
    with pytest.raises(UserError, match="lstm_streams.*ELMo option"):
        preset("tiny", "bert", lstm_streams=True)
    assert "lstm_streams" not in preset("tiny", "elmo").to_dict()
    options = dict(elmo_backward_zeroed=True, layout="released") if released else {}
    model = tiny("elmo", n_layer=2, **options).train()
    streams = tiny("elmo", n_layer=2, lstm_streams=True, **options).train()
    assert ModelConfig.from_dict(streams.cfg.to_dict()) == streams.cfg
    ids = random_ids()
    for net in (model, streams):
        net.tower_states(ids).square().sum().backward()
    torch.testing.assert_close(streams.tower_states(ids), model.tower_states(ids))
    grads = dict(streams.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, msg=name)


def test_an_lstm_in_another_dtype_is_the_module_cast_to_it():
    """`elmo.in_dtype` (ELMo's LSTMs in bf16 under CUDA's bf16 autocast, `run_lstm`; tests/test_gpu.py checks
    that path): the states and every gradient equal those of a copy of the module converted to bf16, the
    gradients reach the module's own fp32 parameters, and the module is itself afterwards."""
    from torch import nn

    from twotower_lib.models.elmo import in_dtype, run_lstm

    torch.manual_seed(0)
    lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
    converted = copy.deepcopy(lstm).to(torch.bfloat16)
    x = torch.randn(3, 5, 8)
    out = in_dtype(lstm, x, torch.bfloat16)
    assert out.dtype == torch.bfloat16 and torch.equal(out, converted(x.to(torch.bfloat16))[0])
    out.float().square().sum().backward()
    converted(x.to(torch.bfloat16))[0].float().square().sum().backward()
    for (name, p), q in zip(lstm.named_parameters(), converted.parameters()):
        assert p.dtype == torch.float32 and torch.equal(p.grad, q.grad.float()), name
    assert torch.equal(run_lstm(lstm, x), lstm(x)[0]) and torch.equal(in_dtype(lstm, x, torch.float32), lstm(x)[0])


@pytest.mark.parametrize("i", [0, 13, 31])
def test_gpt_is_causal(i):
    model = tiny("gpt")
    change = _state_change(model, random_ids(), i)
    assert (change[:i] == 0).all()
    assert (change[i:] > 0).all()


def test_bert_sees_everything():
    model = tiny("bert")
    change = _state_change(model, random_ids(), 13)
    assert (change > 0).all()


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # SDPA has no vmap batching rule yet
def test_pre_ln_bert_has_pre_ln_layers_a_final_layer_norm_and_still_sees_everything():
    """`norm_scheme="pre"`: the paper's kernel's pre-LN layer with a LayerNorm after the stack (unlike the released
    layout, which has none), the same parameters but that LayerNorm's, bidirectional, and fused towers still equal."""
    from twotower_lib.models.bert import PreLNBertLayer

    post, pre = tiny("bert"), tiny("bert", norm_scheme="pre")
    assert all(isinstance(layer, PreLNBertLayer) for layer in pre.towers[0].layers)
    assert isinstance(pre.towers[0].ln_f, torch.nn.LayerNorm) and isinstance(post.towers[0].ln_f, torch.nn.Identity)
    n = lambda m: sum(p.numel() for p in m.parameters())
    assert n(pre) - n(post) == 2 * pre.cfg.towers * pre.cfg.hidden
    assert (_state_change(pre, random_ids(), 13) > 0).all()
    fused = TwoTowerLM(dataclasses.replace(pre.cfg, fuse_towers=True)).eval()
    fused.load_state_dict(pre.state_dict())
    torch.testing.assert_close(fused.tower_states(random_ids()), pre.tower_states(random_ids()))


def test_bert_positions_order_from_a_relative_bias_or_none():
    """`position`: "relative" replaces the position table by a bias per head and clipped distance, begun local
    (ALiBi's penalty); "none" is a bag of words, where reordering the other tokens leaves a position's output as it
    was; with "relative" reordering them changes it."""
    from twotower_lib.models.config import RELATIVE_DISTANCE

    rel, bag = tiny("bert", norm_scheme="pre", position="relative"), tiny("bert", norm_scheme="pre", position="none")
    assert rel.pos_emb is None and bag.pos_emb is None and not hasattr(bag.towers[0].layers[0], "rel_bias")
    bias = rel.towers[0].layers[0].rel_bias
    assert bias.shape == (rel.cfg.n_head, 2 * RELATIVE_DISTANCE + 1)
    assert (bias[:, RELATIVE_DISTANCE] == 0).all() and (bias[:, RELATIVE_DISTANCE] > bias[:, RELATIVE_DISTANCE + 5]).all()
    ids = random_ids(B=1)
    shuffled = torch.cat([ids[:, :1], ids[:, 1:][:, torch.randperm(ids.size(1) - 1, generator=torch.Generator().manual_seed(1))]], 1)
    torch.testing.assert_close(bag.tower_states(shuffled)[:, 0], bag.tower_states(ids)[:, 0])
    assert not torch.allclose(rel.tower_states(shuffled)[:, 0], rel.tower_states(ids)[:, 0])
    assert (_state_change(rel, random_ids(), 13) > 0).all()
    rel.tower_states(ids).square().sum().backward()
    assert bias.grad is not None and bias.grad.abs().sum() > 0     # the bias learns
    for changes in ({"position": "relative"}, {"position": "none", "model_type": "gpt"}, {"position": "far"}):
        with pytest.raises(UserError, match="`position`"):
            build_model(dataclasses.replace(preset("tiny", "bert", vocab_size=V), **changes))


@pytest.mark.parametrize("changes,match", [({"norm_scheme": "mid"}, "is not one of"),
                                           ({"norm_scheme": "pre", "model_type": "gpt"}, "a BERT option"),
                                           ({"norm_scheme": "pre", "layout": "released"}, "set by layout")])
def test_norm_scheme_is_checked(changes, match):
    cfg = dataclasses.replace(preset("tiny", "bert", vocab_size=V), **changes)
    with pytest.raises(UserError, match=f"`norm_scheme`.*{match}"):
        build_model(cfg)


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # SDPA has no vmap batching rule yet
@pytest.mark.parametrize("model_type", ["gpt", "bert"])
def test_fused_towers_match_sequential(model_type):
    model = tiny(model_type)
    fused = TwoTowerLM(dataclasses.replace(model.cfg, fuse_towers=True)).eval()
    fused.load_state_dict(model.state_dict())
    ids = random_ids()
    torch.testing.assert_close(fused.tower_states(ids), model.tower_states(ids))
    # Gradients reach every tower parameter, equal to the sequential path's.
    fused.tower_states(ids).square().sum().backward()
    model.tower_states(ids).square().sum().backward()
    grads = dict(fused.towers.named_parameters())
    for name, p in model.towers.named_parameters():
        assert grads[name].grad is not None, name
        torch.testing.assert_close(grads[name].grad, p.grad, msg=name)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_padded_positions_give_the_same_gradients_and_are_found_on_the_host(model_type):
    """The predicted positions padded to a multiple (`labeled_positions`; ignored labels at position 0): the
    same gradients as decoding exactly the predicted ones, to rounding: a padded row's gradient is zero, only
    the order of the sums over rows changes."""
    model = tiny(model_type).train()
    inputs, labels = make_batch(model_type, random_ids(), torch.Generator().manual_seed(1), SPECIAL, V)
    grads = []
    for multiple in (1, 64):
        at, positions = labeled_positions(labels, multiple)
        assert positions.shape == at.shape and positions.device.type == "cpu"
        assert torch.equal(at[at != -100], labels[labels != -100]) and (at == -100).sum() == -len(at[at != -100]) % multiple
        torch.manual_seed(0)
        model.zero_grad()
        model(inputs, at, positions)[0].backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-5, atol=1e-8, msg=name)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_padded_vocabulary_gives_the_same_loss_logits_and_gradients(model_type):
    """`vocab_multiple` pads the decoder's columns with masked ones: the same model, to rounding."""
    model = tiny(model_type).train()
    padded = TwoTowerLM(dataclasses.replace(model.cfg, vocab_multiple=64)).train()
    padded.load_state_dict(model.state_dict())
    assert -V % 64  # the test's vocabulary is not already a multiple
    inputs, labels = make_batch(model_type, random_ids(), torch.Generator().manual_seed(1), SPECIAL, V)
    for args in ((inputs, labels), (inputs, *labeled_positions(labels))):
        (loss, logits), (loss_p, logits_p) = (m(*args) for m in (model, padded))
        assert logits_p.shape == logits.shape and logits.shape[-1] == V
        torch.testing.assert_close(logits_p, logits)
        torch.testing.assert_close(loss_p, loss)
    model.zero_grad(), padded.zero_grad()
    model(inputs, labels)[0].backward()
    padded(inputs, labels)[0].backward()
    grads = dict(padded.named_parameters())
    for name, p in model.named_parameters():
        assert grads[name].grad.shape == p.grad.shape, name
        torch.testing.assert_close(grads[name].grad, p.grad, msg=name)
    assert "vocab_multiple" not in model.cfg.to_dict() and padded.cfg.to_dict()["vocab_multiple"] == 64
    with pytest.raises(UserError, match="`vocab_multiple`"):
        dataclasses.replace(model.cfg, vocab_multiple=0).validate()


def test_towers_start_different():
    states = tiny("gpt").tower_states(random_ids())
    assert not torch.allclose(states[:, :, 0], states[:, :, 1])


def test_make_batch_gpt_and_elmo():
    ids = random_ids()
    ids[0, 5] = SPECIAL["pad"]
    g = torch.Generator()
    inputs, labels = make_batch("gpt", ids, g, SPECIAL, V)
    assert torch.equal(inputs, ids)
    assert torch.equal(labels[1:, :-1], ids[1:, 1:])
    assert (labels[:, -1] == -100).all() and labels[0, 4] == -100  # last position; pad target
    inputs, labels = make_batch("elmo", ids, g, SPECIAL, V)
    assert torch.equal(inputs, ids) and labels[0, 5] == -100
    assert torch.equal(labels[1:], ids[1:])


def test_make_batch_bert_masking():
    ids = torch.randint(len(SPECIAL), V, (400, 64), generator=torch.Generator().manual_seed(0))
    ids[:, ::8] = SPECIAL["sep"]
    inputs, labels = make_batch("bert", ids, torch.Generator().manual_seed(3), SPECIAL, V)
    chosen = labels != -100
    ordinary = ids != SPECIAL["sep"]
    assert not chosen[~ordinary].any()                              # specials are never targets
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])               # unchosen positions untouched
    rate = chosen.sum().item() / ordinary.sum().item()
    assert abs(rate - 0.15) < 0.01
    n = chosen.sum().item()
    masked = (inputs[chosen] == SPECIAL["mask"]).sum().item() / n
    kept = (inputs[chosen] == ids[chosen]).sum().item() / n
    assert abs(masked - 0.8) < 0.02
    assert abs(kept - (0.1 + 0.1 / (V - len(SPECIAL)))) < 0.02      # a random token may equal the original
    random_part = inputs[chosen & (inputs != SPECIAL["mask"])]
    assert (random_part >= len(SPECIAL)).all()                      # random replacements are ordinary tokens
    again, _ = make_batch("bert", ids, torch.Generator().manual_seed(3), SPECIAL, V)
    assert torch.equal(inputs, again)


# ---------------------------------------------------------------- paper presets, counted by hand
# Parameter count of the assembly (V vocabulary, P positions, k towers of width H, E = k*H):
#   embedding V*E, positions P*E (GPT/BERT), embedding LayerNorm 2E, tower maps E*kH + kH,
#   head LayerNorm 2kH, head Linear kH*E + E, head LayerNorm 2E, output bias V (decoder tied).

def assembly(V, P, k, H, positions):
    E = k * H
    return V * E + (P * E if positions else 0) + 2 * E + (E * k * H + k * H) + 2 * k * H + (k * H * E + E) + 2 * E + V


def gpt_tower(layers, H, I):
    # per block: ln_1, qkv, attention out, ln_2, fc in, fc out; then the final LayerNorm
    block = 2 * H + (H * 3 * H + 3 * H) + (H * H + H) + 2 * H + (H * I + I) + (I * H + H)
    return layers * block + 2 * H


def bert_tower(layers, H, I):
    # per layer: q, k, v, attention out, LayerNorm, intermediate, output, LayerNorm
    return layers * (4 * (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H)


def elmo_tower(layers, H, L):
    # per direction: LSTM layer 1 reads H, later layers read L (4 gates, two bias vectors),
    # then a projection L -> H/2; two directions per tower
    lstm = 4 * (H * L + L * L + 2 * L) + (layers - 1) * 4 * (L * L + L * L + 2 * L)
    return 2 * (lstm + L * (H // 2) + H // 2)


V_PAPER, P_PAPER, K = 30522, 512, 2
PAPER_COUNTS = {
    "paper-elmo": assembly(V_PAPER, P_PAPER, K, 512, False) + K * elmo_tower(2, 512, 4096),
    "paper-gpt": assembly(V_PAPER, P_PAPER, K, 768, True) + K * gpt_tower(12, 768, 3072),
    "paper-bert-base": assembly(V_PAPER, P_PAPER, K, 384, True) + K * bert_tower(12, 384, 1024),
    "paper-bert-large": assembly(V_PAPER, P_PAPER, K, 512, True) + K * bert_tower(24, 512, 2048),
}


@pytest.mark.parametrize("name", sorted(PAPER_COUNTS))
def test_paper_preset_parameter_count(name):
    model_type = {"paper-elmo": "elmo", "paper-gpt": "gpt"}.get(name, "bert")
    cfg = preset(name, model_type)
    with torch.device("meta"):
        model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == PAPER_COUNTS[name]
    assert next(model.parameters()).device.type == "meta"


def test_config_round_trip():
    cfg = preset("cpu", "bert", vocab_size=123, towers=1)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(UserError, match="unknown field"):
        ModelConfig.from_dict({**cfg.to_dict(), "colour": "red"})


def test_embedding_is_read_without_building_the_model(tmp_path):
    """`load_embedding` (the ICA's word vectors, read with safetensors' numpy API) gives the trained
    model's own input embedding, and names a file that is not a two-tower model's weights."""
    from safetensors.torch import save_file

    from twotower_lib.artifacts import atomic_write_json
    from twotower_lib.models import load_embedding, load_model

    cfg = preset("cpu", "gpt", vocab_size=97)
    torch.manual_seed(0)
    model = build_model(cfg)
    atomic_write_json(tmp_path / "config.json", {"model": cfg.to_dict()})
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "model.safetensors")
    loaded, _ = load_model(tmp_path)
    emb = load_embedding(tmp_path)
    assert emb.dtype == np.float64 and emb.shape == (97, cfg.hidden * cfg.towers)
    np.testing.assert_array_equal(emb, loaded.tok_emb.weight.detach().double().numpy())
    (tmp_path / "snapshots").mkdir()
    save_file({"something.else": torch.zeros(2)}, tmp_path / "snapshots" / "x.safetensors")
    with pytest.raises(UserError, match="tok_emb.weight"):
        load_embedding(tmp_path, snapshot="x")


# The released code's modules (tests/released_reference.py) against the `released-*` presets
# built as released (models.config.RELEASED_OPTIONS), at the released vocabulary of 30,528.
def _built_as_released(name: str, model_type: str) -> int:
    from twotower_lib.models.config import released_options

    cfg = preset(name, model_type, vocab_size=released_reference.OUTPUT_SIZE, **released_options(model_type))
    with torch.device("meta"):
        return sum(p.numel() for p in build_model(cfg).parameters())


def test_released_elmo_has_the_released_parameter_count():
    assert _built_as_released("released-elmo", "elmo") == released_reference.elmo(256, 4096, 2)


def test_released_gpt_has_the_released_parameter_count_less_its_unused_matrix():
    total, used = released_reference.gpt(384, 12, 12, window=128)
    assert _built_as_released("released-gpt", "gpt") == used
    assert total - used == 30528 * 384    # model2's lm_head: the V x H matrix no forward pass reads


@pytest.mark.parametrize("name,H,inter,layers", [("released-bert-base", 384, 1536, 12),
                                                 ("released-bert-large", 512, 2048, 24)])
def test_released_bert_has_the_released_parameter_count(name, H, inter, layers):
    assert _built_as_released(name, "bert") == released_reference.bert(H, inter, layers)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_released_layout_trains_and_keeps_each_family_visibility(model_type):
    model = tiny(model_type, layout="released")
    ids = random_ids()
    inputs, labels = make_batch(model_type, ids, torch.Generator().manual_seed(1), SPECIAL, V)
    assert model.tower_states(inputs).shape == (3, 32, 2, model.cfg.hidden)
    loss, _ = model(inputs, labels)
    loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if "backward" not in n), "a part takes no gradient"
    change = _state_change(model, ids, 13)
    if model_type == "gpt":
        assert (change[:13] == 0).all() and (change[13:] > 0).all()
    elif model_type == "elmo":
        assert change[13] == 0 and (change[:13] > 0).all() and (change[14:] > 0).all()
    else:
        assert (change > 0).all()
    assert ModelConfig.from_dict(model.cfg.to_dict()) == model.cfg and "layout" not in tiny(model_type).cfg.to_dict()


def test_released_gpt_towers_read_the_shared_embedding_directly():
    model = tiny("gpt", layout="released")
    assert model.tower_in is None and model.emb_ln is None and model.cfg.embed_dim == model.cfg.hidden
    with pytest.raises(UserError, match="`layout`"):
        preset("tiny", "gpt", layout="as-written")


@pytest.mark.parametrize("fuse_towers", [False, True])
@pytest.mark.parametrize("model_type", ["gpt", "bert"])
def test_the_transformer_families_compile_into_one_graph_for_every_batch(model_type, fuse_towers):
    """With the predicted positions padded to a multiple (`labeled_positions`), micro-batches that predict
    different numbers of positions have the same shapes: torch.compile traces the whole forward pass once,
    with no graph break (fullgraph) and no recompilation, towers fused (vmap) or not. (ELMo's LSTMs are not
    traced; its graph breaks around them.)"""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = TwoTowerLM(dataclasses.replace(tiny(model_type).cfg, fuse_towers=fuse_towers)).train()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    counts = set()
    for seed in range(3):
        inputs, labels = make_batch(model_type, random_ids(seed=seed), torch.Generator().manual_seed(seed), SPECIAL, V)
        counts.add(int((labels != -100).sum()))
        torch.manual_seed(0)
        loss, _ = compiled(inputs, *labeled_positions(labels, 128))
        loss.backward()
        torch.manual_seed(0)
        torch.testing.assert_close(loss, model(inputs, labels)[0])
    assert counters["stats"]["unique_graphs"] == 1 and (model_type == "gpt" or len(counts) > 1)


@pytest.mark.parametrize("model_type, fuse_towers, graphs", [("gpt", False, 4), ("bert", False, 4), ("bert", True, 3),
                                                            ("elmo", False, 2)])
def test_compiled_region_by_region_the_model_computes_as_before(model_type, fuse_towers, graphs):
    """`compile_regions` (`--engine torch-compile-layers`): the embedding, the decoder with its loss and each layer
    compiled apart, in place. Three layers a tower compile to two graphs, not six (the first layer reads a strided
    slice, the others a whole tensor; fused, the towers are one region; ELMo's LSTMs stay eager), none again for
    later batches; losses and gradients as the eager model's, the state_dict's keys unchanged."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    eager = tiny(model_type, n_layer=3, fuse_towers=fuse_towers).train()
    model = tiny(model_type, n_layer=3, fuse_towers=fuse_towers).train()
    model.compile_regions(backend="aot_eager", fullgraph=True)
    for seed in range(3):
        inputs, labels = make_batch(model_type, random_ids(seed=seed), torch.Generator().manual_seed(seed), SPECIAL, V)
        batch = (inputs, *labeled_positions(labels, 128))
        for m in (eager, model):
            m.zero_grad()
            m(*batch)[0].backward()
        torch.testing.assert_close(model(*batch)[0], eager(*batch)[0])
        for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert counters["stats"]["unique_graphs"] == graphs and not counters["graph_break"]
    assert list(model.state_dict()) == list(eager.state_dict())
