"""Two-tower language models: configs, construction, training objectives and loading.

    cfg = preset("cpu", "gpt", vocab_size=data.vocab_size)
    model = build_model(cfg)
    input_ids, labels = make_batch("gpt", ids, generator, data.special_ids, data.vocab_size)
    loss, logits = model(input_ids, labels)
    loss, _ = model(input_ids, *labeled_positions(labels))   # decode only the predicted positions
    states = model.tower_states(input_ids)          # (B, T, k, H): what the probes read
    model, cfg = load_model("runs/gpt-s1")           # final weights, or snapshot="tokens-..."
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from twotower_lib.artifacts import read_json
from twotower_lib.errors import UserError
from twotower_lib.models.config import MODEL_TYPES, PAPER_PRESETS, PRESETS, ModelConfig, preset

# torch and the towers (transformers) load on first use: a book section that only reads sizes,
# snapshots or an embedding starts seconds sooner (tests/test_pipeline.py checks which sections do).
if TYPE_CHECKING:
    import numpy as np
    import torch

    from twotower_lib.models.two_tower import TwoTowerLM

__all__ = ["MODEL_TYPES", "PAPER_PRESETS", "PRESETS", "ModelConfig", "TwoTowerLM", "build_model",
           "labeled_positions", "list_snapshots", "load_embedding", "load_model", "make_batch", "preset", "snapshot_name", "weights_path"]

IGNORE = -100  # label value for "nothing to predict here" (torch's cross-entropy default)


def __getattr__(name: str):
    if name == "TwoTowerLM":
        from twotower_lib.models.two_tower import TwoTowerLM

        return TwoTowerLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_model(cfg: ModelConfig) -> TwoTowerLM:
    """Validate `cfg` (UserError naming the bad field) and build the model with fresh weights."""
    from twotower_lib.models.two_tower import TwoTowerLM

    return TwoTowerLM(cfg.validate())


def make_batch(model_type: str, ids: torch.Tensor, generator: torch.Generator, special_ids: dict[str, int],
               vocab_size: int, mask_prob: float = 0.15, chosen: torch.Tensor | None = None,
               mask_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn token blocks (B, T) into (input_ids, labels) for the family's objective.

    gpt:  the state at i predicts token i+1 (the last position predicts nothing).
    elmo: cloze; the state at i predicts token i, which the tower never sees (see elmo.py).
    bert: 15% of the non-special tokens are chosen; of those 80% become [MASK], 10% a random
          token, 10% stay; only chosen positions are predicted.
    Padding is never a target. `generator` makes the masking reproducible. For BERT, `chosen`
    (bool, (B, T)) fixes which positions are predicted instead of drawing 15% (the probe scores
    the validation set in disjoint passes so that every token is predicted exactly once).
    `mask_only=True` puts [MASK] at every chosen position (Eq. 1: BERT's state at i is computed with
    [MASK] at i); training keeps the 80/10/10 corruption.
    """
    if model_type not in MODEL_TYPES:
        raise UserError(f"unknown model type {model_type!r}; choose one of {MODEL_TYPES}")
    import torch

    ids = ids.long()
    pad = special_ids.get("pad", -1)
    if model_type == "gpt":
        labels = torch.full_like(ids, IGNORE)
        labels[:, :-1] = ids[:, 1:]
        labels[labels == pad] = IGNORE
        return ids, labels
    if model_type == "elmo":
        return ids, ids.masked_fill(ids == pad, IGNORE)
    # bert
    special = torch.tensor(sorted(special_ids.values()), dtype=torch.long)
    is_special = torch.isin(ids, special)
    if chosen is None:
        chosen = torch.rand(ids.shape, generator=generator) < mask_prob
    chosen = chosen & ~is_special
    labels = ids.masked_fill(~chosen, IGNORE)
    branch = torch.rand(ids.shape, generator=generator)
    inputs = ids.clone()
    if mask_only:
        inputs[chosen] = special_ids["mask"]
        return inputs, labels
    inputs[chosen & (branch < 0.8)] = special_ids["mask"]
    is_ordinary = torch.ones(vocab_size, dtype=torch.bool)
    is_ordinary[special] = False
    ordinary = is_ordinary.nonzero().squeeze(1)                      # ids a random replacement may take
    random_tokens = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]
    to_random = chosen & (branch >= 0.8) & (branch < 0.9)
    inputs[to_random] = random_tokens[to_random]
    return inputs, labels


def labeled_positions(labels: torch.Tensor, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The labels of the predicted positions of `labels` (B, T), and those positions as flat indices into B*T:
    both (N',), in the order `TwoTowerLM.forward` takes them after the inputs.

    N' is the number of labels rounded up to `multiple`; the padding points at position 0 with the label
    IGNORE, so the loss is the same. Found where the labels are (on the host in training), the selection
    on the device waits for nothing; with `multiple` > 1 the decoder's shapes repeat from batch to batch,
    so torch.compile compiles once (BERT predicts a random number of positions).
    """
    import torch

    flat = labels.reshape(-1)
    positions = (flat != IGNORE).nonzero().squeeze(1)
    pad = -positions.numel() % multiple
    return (torch.cat([flat[positions], flat.new_full((pad,), IGNORE)]),
            torch.cat([positions, positions.new_zeros(pad)]))


def snapshot_name(tokens: int) -> str:
    """File stem of the weight snapshot taken after `tokens` training tokens (sorts by name)."""
    return f"tokens-{tokens:012d}"


def snapshot_tokens(weights: str | os.PathLike) -> int | None:
    """Tokens seen when a snapshot file (tokens-<n>.safetensors) was written; None for other files."""
    m = re.fullmatch(r"tokens-(\d+)\.safetensors", Path(weights).name)
    return int(m.group(1)) if m else None


def list_snapshots(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(tokens seen, path) of every weight snapshot of a run, in training order."""
    found = [(snapshot_tokens(p), p) for p in (Path(run_dir) / "snapshots").glob("tokens-*.safetensors")]
    return sorted((t, p) for t, p in found if t is not None)


def weights_path(run_dir: str | os.PathLike, snapshot: str | int | None = None) -> Path:
    """The safetensors file of a run: final weights, or a snapshot by name, token count or path."""
    run_dir = Path(run_dir)
    if snapshot is None:
        weights = run_dir / "model.safetensors"
    elif isinstance(snapshot, int):
        weights = run_dir / "snapshots" / f"{snapshot_name(snapshot)}.safetensors"
    elif Path(snapshot).is_file():
        weights = Path(snapshot)
    else:
        weights = run_dir / "snapshots" / (str(snapshot).removesuffix(".safetensors") + ".safetensors")
    if not weights.is_file():
        available = [p.stem for _, p in list_snapshots(run_dir)]
        raise UserError(f"no weights at {weights}. The run may be unfinished (resume it with --resume); "
                        f"snapshots available: {available or 'none'}")
    return weights


def load_model(run_dir: str | os.PathLike, snapshot: str | int | None = None,
               map_location: str = "cpu") -> tuple[TwoTowerLM, ModelConfig]:
    """Load a trained model (final weights, or a snapshot by name, token count or path) in eval mode.

    Weights are read with safetensors only; a run without `model.safetensors` (still training or
    interrupted) can still be loaded at any snapshot.
    """
    from safetensors.torch import load_file

    from twotower_lib.models.two_tower import TwoTowerLM

    cfg, weights = _config_and_weights(run_dir, snapshot)
    model = TwoTowerLM(cfg)
    missing, unexpected = model.load_state_dict(load_file(weights, device=map_location), strict=False)
    if missing or unexpected:
        raise UserError(f"{weights} does not match the config in {Path(run_dir) / 'config.json'}: missing {missing}, "
                        f"unexpected {unexpected}")
    return model.eval(), cfg


def _config_and_weights(run_dir: str | os.PathLike, snapshot: str | int | None) -> tuple[ModelConfig, Path]:
    config_path = Path(run_dir) / "config.json"
    if not config_path.is_file():
        raise UserError(f"{run_dir} is not a training run directory (no config.json); "
                        "train one with `python -m twotower_lib train ... --out DIR`")
    return ModelConfig.from_dict(read_json(config_path)["model"]), weights_path(run_dir, snapshot)


def load_embedding(run_dir: str | os.PathLike, snapshot: str | int | None = None) -> "np.ndarray":  # (V, E) float64
    """The trained input embedding of a run (the word vectors of the ICA, Section 5.3), read from its
    safetensors file alone: no model is built and torch is not imported."""
    import numpy as np
    from safetensors import safe_open

    _, weights = _config_and_weights(run_dir, snapshot)
    with safe_open(str(weights), framework="numpy") as f:
        if "tok_emb.weight" not in f.keys():
            raise UserError(f"{weights} has no tok_emb.weight: it is not a two-tower model's weights")
        return f.get_tensor("tok_emb.weight").astype(np.float64)
