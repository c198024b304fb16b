"""The GPU path on CUDA (`pytest -m gpu`): DeepSpeed steps for every family in fp32, bf16 and fp16,
exact resume, the probe, DeepSpeed's fused BERT kernel, and CPU-vs-CUDA agreement of the loss.

Every test here skips cleanly where torch sees no CUDA device (CI has none). On a GPU run them with
`pytest -m gpu tests/test_gpu.py`; `results/gpu/` holds the log of the last run on the reference H100.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import interrupt_training_at
from twotower_lib.models import build_model, load_model, make_batch, preset
from twotower_lib.train.loop import TrainConfig, train

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)")]

FAMILIES = ("elmo", "gpt", "bert")
# CPU and CUDA compute the same fp32 sums in different orders (and cuDNN's LSTM fuses its gates):
# with TF32 switched off the mean cross-entropy agrees to this relative tolerance.
CPU_CUDA_RTOL = 1e-4


def tcfg(model: str, **kw) -> TrainConfig:
    base = dict(model=model, preset="tiny", seed=1, max_steps=24, micro_batch=8, grad_accum=1, precision="fp32",
                log_every_steps=2, eval_every_steps=4, eval_blocks=8, snapshot_every_tokens=10**9)
    return TrainConfig(**{**base, **kw})


@pytest.fixture
def deterministic():
    """fp32 without TF32, deterministic kernels: what exactness and CPU agreement need."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.are_deterministic_algorithms_enabled())
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.use_deterministic_algorithms(saved[2])


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("model", FAMILIES)
def test_deepspeed_steps_on_cuda(tiny_data, tmp_path, model, precision):
    out = tmp_path / f"{model}-{precision}"
    summary = train(tcfg(model, precision=precision), tiny_data, out, show_progress=False)
    assert summary["precision"] == precision and summary["steps"] == 24
    config = json.loads((out / "config.json").read_text())
    if precision == "fp16":  # the paper's fp16: dynamic loss scaling (loss_scale 0)
        assert config["deepspeed"]["fp16"]["enabled"] and config["deepspeed"]["fp16"]["loss_scale"] == 0
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["loss"]) for r in log)
    assert log[-1]["loss"] < log[0]["loss"]  # it learned (fp16 skips its first steps while the loss scale falls)
    first, final = load_file(out / "snapshots" / "tokens-000000000000.safetensors"), load_file(out / "model.safetensors")
    assert any(not torch.equal(first[k].float(), final[k].float()) for k in final)


@pytest.mark.parametrize("model", FAMILIES)
def test_the_torch_engine_on_cuda_trains_as_deepspeed_in_fp32(tiny_data, tmp_path, model, deterministic):
    """`--engine torch` on one GPU: fp32 against DeepSpeed's fp32 on the same seed and data, step by step
    (the CPU test holds them to 1e-5 nats; a GPU sums in other orders, so 1e-4 here); bf16 runs and learns."""
    losses = {}
    for engine in ("deepspeed", "torch"):
        out = tmp_path / f"{model}-{engine}"
        summary = train(tcfg(model, engine=engine, log_every_steps=1), tiny_data, out, show_progress=False)
        assert summary["engine"] == engine
        losses[engine] = [json.loads(x)["loss"] for x in (out / "log.jsonl").read_text().splitlines() if '"loss"' in x]
    assert max(abs(a - b) for a, b in zip(losses["deepspeed"], losses["torch"])) < 1e-4
    summary = train(tcfg(model, engine="torch", precision="bf16"), tiny_data, tmp_path / f"{model}-bf16",
                    show_progress=False)
    assert summary["precision"] == "bf16-autocast"
    log = [json.loads(x) for x in (tmp_path / f"{model}-bf16" / "log.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["loss"]) for r in log) and log[-1]["loss"] < log[0]["loss"]


@pytest.mark.parametrize("engine", ["torch-compile", "torch-compile-layers", "torch-graphs"])
@pytest.mark.parametrize("model", ["gpt", "bert"])
def test_the_compiled_torch_engine_on_cuda_trains_as_the_eager_one(tiny_data, tmp_path, model, engine):
    """`--engine torch-compile` (one graph), `torch-compile-layers` (region by region: at most its three regions
    for training and three for validation) and `torch-graphs` (those regions replayed as CUDA graphs) on one GPU,
    three micro-batches accumulated a step, the predicted positions padded (`label_bucket`): fp32 against the
    eager torch engine step by step (other kernels, so 1e-4 nats; a gradient overwritten by the next replay, or
    taken over as `.grad`, would differ at once), no recompilation for later micro-batches, no graph break, no
    region run without its CUDA graph; bf16 learns."""
    from torch._dynamo.utils import counters

    losses = {}
    for name, settings in (("eager", dict(engine="torch")), ("compiled", dict(engine=engine, label_bucket=256))):
        torch._dynamo.reset()
        counters.clear()
        out = tmp_path / f"{model}-{name}"
        train(tcfg(model, log_every_steps=1, grad_accum=3, **settings), tiny_data, out, show_progress=False)
        losses[name] = [json.loads(x)["loss"] for x in (out / "log.jsonl").read_text().splitlines() if '"loss"' in x]
    graphs = counters["stats"]["unique_graphs"]
    assert (graphs == 1 if engine == "torch-compile" else graphs <= 6) and not counters["graph_break"]
    assert engine != "torch-graphs" or not counters["inductor"]["cudagraph_skips"]
    assert max(abs(a - b) for a, b in zip(losses["eager"], losses["compiled"])) < 1e-4
    out = tmp_path / f"{model}-bf16"
    summary = train(tcfg(model, engine=engine, label_bucket=256, precision="bf16", grad_accum=3), tiny_data, out,
                    show_progress=False)
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert summary["engine"] == engine and all(np.isfinite(r["loss"]) for r in log) and log[-1]["loss"] < log[0]["loss"]


def test_fused_bert_towers_train_on_cuda_as_the_towers_one_by_one():
    """`fuse_towers` for BERT at Bert-base's width in bf16 (one vmapped call, whichever attention kernel SDPA
    takes for it): the loss and every tower gradient as the unfused towers' on the same weights, to bf16's
    rounding."""
    cfg = replace(preset("paper-bert-base", "bert", vocab_size=512, seq_len=128), n_layer=2, dropout=0.0)
    plain = build_model(cfg).cuda().train()
    fused = build_model(replace(cfg, fuse_towers=True)).cuda().train()
    fused.load_state_dict(plain.state_dict())
    g = torch.Generator().manual_seed(0)
    inputs, labels = make_batch("bert", torch.randint(5, 512, (16, 128), generator=g), g,
                                {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}, 512)
    grads = []
    for model in (plain, fused):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _ = model(inputs.cuda(), labels.cuda())
        loss.backward()
        grads.append((loss.item(), {n: p.grad.float() for n, p in model.towers.named_parameters()}))
    (loss_plain, g_plain), (loss_fused, g_fused) = grads
    assert loss_fused == pytest.approx(loss_plain, rel=1e-2)
    for name, grad in g_plain.items():
        torch.testing.assert_close(g_fused[name], grad, atol=2e-2, rtol=5e-2, msg=name)


def _elmo_batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """An ELMo batch on CUDA: 16 blocks of 128 tokens from a 500-token vocabulary."""
    special = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    inputs, labels = make_batch("elmo", torch.randint(5, 500, (16, 128), generator=g), g, special, 500)
    return inputs.cuda(), labels.cuda()


def _lstms(net) -> list[torch.nn.LSTM]:
    return [lstm for tower in net.towers for lstm in (tower.forward_lstm, tower.backward_lstm)]


def _autocast(dtype: torch.dtype | None):
    return torch.autocast("cuda", dtype=dtype) if dtype else contextlib.nullcontext()


def test_elmo_lstms_under_bf16_autocast_run_in_bf16():
    """Autocast alone runs cuDNN's LSTMs in fp16 (no loss scaling); `elmo.run_lstm` runs them in bf16 under
    bf16 autocast: every LSTM's states are bf16, and the loss and gradients are those of fp32 within bf16's
    precision."""
    torch.manual_seed(0)
    net = build_model(replace(preset("cpu", "elmo", vocab_size=500), dropout=0.0)).cuda()
    dtypes = []
    for lstm in _lstms(net):
        lstm.register_forward_hook(lambda module, args, out: dtypes.append(out[0].dtype))
    inputs, labels = _elmo_batch(torch.Generator().manual_seed(0))
    losses, grads = {}, {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        net.zero_grad()
        with _autocast(dtype):
            loss, _ = net(inputs, labels)
        loss.backward()
        losses[name], grads[name] = loss.item(), torch.cat([p.grad.flatten() for p in net.parameters()])
    assert dtypes == [torch.float32] * 4 + [torch.bfloat16] * 4
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=1e-2)
    assert torch.nn.functional.cosine_similarity(grads["bf16"], grads["fp32"], dim=0) > 0.99


@pytest.mark.parametrize("options", [{}, {"layout": "released", "elmo_backward_zeroed": True}])
def test_elmo_lstms_on_streams_compute_as_one_after_another(options, deterministic):
    """`lstm_streams`: every LSTM of both towers runs on a side stream (a hook sees each LSTM called under a
    stream that is not the caller's), and the loss and every gradient equal those of the LSTMs run one after
    another, in fp32 and under bf16 autocast, over three micro-batches accumulated."""
    torch.manual_seed(0)
    cfg = replace(preset("cpu", "elmo", vocab_size=500, **options), dropout=0.0)
    plain, streams = build_model(cfg).cuda(), build_model(replace(cfg, lstm_streams=True)).cuda()
    streams.load_state_dict(plain.state_dict())
    seen = []
    for lstm in _lstms(streams):
        lstm.register_forward_pre_hook(lambda module, args: seen.append(torch.cuda.current_stream()))
    g = torch.Generator()
    for dtype in (None, torch.bfloat16):
        losses = {}
        for name, net in (("plain", plain), ("streams", streams)):
            net.zero_grad()
            g.manual_seed(0)
            total = 0.0
            for _ in range(3):
                with _autocast(dtype):
                    loss, _ = net(*_elmo_batch(g))
                loss.backward()
                total += loss.item()
            losses[name] = total
        assert losses["streams"] == pytest.approx(losses["plain"], rel=1e-6 if dtype is None else 1e-3)
        grads = dict(streams.named_parameters())
        for name, p in plain.named_parameters():
            torch.testing.assert_close(grads[name].grad, p.grad, msg=name,
                                       **({} if dtype is None else dict(rtol=2e-2, atol=1e-4)))
    lstms_run = 2 * (1 if options else 2)                 # towers x directions run (the zeroed one is not)
    assert len(seen) == 2 * 3 * lstms_run and len({s.stream_id for s in seen[:lstms_run]}) == lstms_run
    assert all(s != torch.cuda.default_stream() for s in seen)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_resume_on_cuda_equals_uninterrupted(tiny_data, tmp_path, monkeypatch, precision, deterministic):
    import twotower_lib.train.loop as train_mod

    settings = dict(precision=precision, max_steps=10, checkpoint_every_steps=5)
    full = tmp_path / "full"
    train(tcfg("gpt", **settings), tiny_data, full, show_progress=False)
    part = tmp_path / "part"
    real = interrupt_training_at(monkeypatch, 7)
    with pytest.raises(KeyboardInterrupt):
        train(tcfg("gpt", **settings), tiny_data, part, show_progress=False)
    monkeypatch.setattr(train_mod, "micro_batch", real)
    train(tcfg("gpt", **settings), tiny_data, part, resume=True, show_progress=False)
    a, b = load_file(full / "model.safetensors"), load_file(part / "model.safetensors")
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0.0, rtol=0.0, msg=k)


def test_probe_on_cuda_matches_the_cpu_probe(tiny_data, tmp_path, monkeypatch, deterministic):
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe.run import ProbeConfig, probe_run

    run = tmp_path / "gpt"
    train(tcfg("gpt", max_steps=30), tiny_data, run, show_progress=False)
    cfg = ProbeConfig(train_blocks=64, max_epochs=6, precision="fp32", batch_size=256)
    on_cuda = load_artifact(probe_run(run, cfg, out=tmp_path / "probe-cuda", show=False))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    on_cpu = load_artifact(probe_run(run, cfg, out=tmp_path / "probe-cpu", show=False))
    a, b = on_cuda.table.dropna(subset=["score"]), on_cpu.table.dropna(subset=["score"])
    assert len(a) > 100 and list(a.token_id) == list(b.token_id)
    # the heads train in a different summation order on each device; the scores must still be one measurement
    assert np.corrcoef(a.score, b.score)[0, 1] > 0.999
    assert np.abs(a.score_logmean - b.score_logmean).max() < 1e-2


def _kernel_config(**kw):
    return preset("tiny", "bert", hidden=64, intermediate=256, n_head=4, n_layer=2, vocab_size=300, seq_len=32,
                  layout="released", **kw)


def kernel_matches_plain_layer(data_path: str) -> None:
    """DeepSpeed's fused transformer layer (the paper's BERT kernel) computes what `PreLNBertLayer`
    computes, given the same weights (the plain layer is the CPU stand-in for the kernel), and trains."""
    from twotower_lib.data import load_prepared

    data = load_prepared(data_path)
    torch.manual_seed(0)
    fused = build_model(_kernel_config(deepspeed_kernel=True)).cuda().eval()
    plain = build_model(_kernel_config()).cuda().eval()
    names = {"attn_qkvw": "qkv.weight", "attn_qkvb": "qkv.bias", "attn_ow": "attn_out.weight",
             "attn_ob": "attn_out.bias", "attn_nw": "attn_ln.weight", "attn_nb": "attn_ln.bias",
             "inter_w": "ffn_in.weight", "inter_b": "ffn_in.bias", "output_w": "ffn_out.weight",
             "output_b": "ffn_out.bias", "norm_w": "ffn_ln.weight", "norm_b": "ffn_ln.bias"}
    state = {}
    for key, value in fused.state_dict().items():
        prefix, _, leaf = key.rpartition(".")
        state[f"{prefix}.{names[leaf]}" if leaf in names else key] = value
    plain.load_state_dict(state)
    ids = torch.from_numpy(np.asarray(data.valid[:8], dtype=np.int64))
    inputs, labels = make_batch("bert", ids, torch.Generator().manual_seed(0), data.special_ids, 300)
    with torch.no_grad():
        _, logits_fused = fused(inputs.cuda(), labels.cuda())
        _, logits_plain = plain(inputs.cuda(), labels.cuda())
    # the kernel's GELU is the tanh approximation, the plain layer's the exact one
    torch.testing.assert_close(logits_fused, logits_plain, atol=2e-3, rtol=1e-3)
    fused.train()
    loss, _ = fused(inputs.cuda(), labels.cuda())
    loss.backward()
    grads = [p.grad for p in fused.towers.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)


@pytest.mark.xfail(reason="DeepSpeed 0.19.8's fused transformer kernel crashes (segmentation fault) when it creates "
                          "a layer on the reference H100 (CUDA 13.0, torch 2.11): results/gpu/gpu_tests_run2.log",
                   strict=False)
def test_deepspeed_kernel_bert_equals_the_plain_pre_ln_layer(tiny_data):
    """Run in a child process: a crash inside the kernel's C++ must fail this test, not end the session."""
    import subprocess
    import sys

    code = f"from tests.test_gpu import kernel_matches_plain_layer as check; check({str(tiny_data.path)!r})"
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("model", FAMILIES)
def test_the_same_model_has_the_same_loss_on_cpu_and_cuda(tiny_data, model, deterministic):
    torch.manual_seed(0)
    cfg = preset("cpu", model, vocab_size=tiny_data.vocab_size, seq_len=tiny_data.seq_len)
    net = build_model(replace(cfg, dropout=0.0)).eval()
    ids = torch.from_numpy(np.asarray(tiny_data.valid[:16], dtype=np.int64))
    inputs, labels = make_batch(model, ids, torch.Generator().manual_seed(0), tiny_data.special_ids,
                                tiny_data.vocab_size)
    with torch.no_grad():
        on_cpu = float(net(inputs, labels)[0])
        on_cuda = float(net.cuda()(inputs.cuda(), labels.cuda())[0])
    assert on_cuda == pytest.approx(on_cpu, rel=CPU_CUDA_RTOL)


def test_trained_weights_load_back_for_the_cpu(tiny_data, tmp_path):
    """A run trained on CUDA in bf16 is read by the CPU-side pipeline (probing, analyses) as fp32."""
    out = tmp_path / "bert"
    train(tcfg("bert", precision="bf16"), tiny_data, out, show_progress=False)
    model, _ = load_model(out)
    assert next(model.parameters()).device.type == "cpu"
    assert all(p.dtype == torch.float32 for p in model.parameters())
