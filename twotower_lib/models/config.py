"""Model configuration and named presets (Table 1 of the paper, plus CPU-sized ones).

One dataclass describes every tower family so that a run directory's `config.json` can be read
back without knowing which family wrote it. Fields a family does not use are ignored by it
(ELMo has no heads and no position table).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from twotower_lib.paper import TABLE1_VOCAB
from twotower_lib.errors import UserError

MODEL_TYPES = ("elmo", "gpt", "bert")
# "paper": the architecture as the paper's text describes it (Eq. 1, Fig. 1). "released": the module
# layout of the authors' released code (hezq06/twotower_lm at e8b468e, ttlm/model.py), per family:
#   elmo  the embedding is H wide (not k*H); each tower reads H/2 (emb1/emb2), its forward and backward
#         LSTMs read that width, and each direction has its own embedding LayerNorm
#   gpt   the towers share one H-wide token and position embedding and read it directly: no embedding
#         LayerNorm, no per-tower projection (two GPT2LMHeadModels with tied wte/wpe)
#   bert  pre-LN layers (the DeepSpeed kernel's `pre_layer_norm=True`) with no final LayerNorm
LAYOUTS = ("paper", "released")

NORM_SCHEMES = ("post", "pre")  # BERT layers: LayerNorm after each residual sum (the original BERT's, Hugging Face's) or
                                # before each sub-layer with a final LayerNorm (the paper's DeepSpeed kernel, Cramming's)

# Where a transformer tower's attention learns word order from: "absolute" a learned position table added to the
# embedding (the paper's, GPT-2's and BERT's); "relative" (pre-LN BERT) a learned bias per head and clipped distance
# (T5's), started as ALiBi's linear penalty so that heads begin local; "none" no position at all (a bag of words, the
# diagnostic of how much order a BERT uses).
POSITIONS = ("absolute", "relative", "none")
RELATIVE_DISTANCE = 16      # "relative": offsets beyond +-this share the last bias

_LATER_OPTIONS = {"elmo_backward_zeroed": False, "layout": "paper", "vocab_multiple": 1, "lstm_streams": False,
                  "norm_scheme": "post", "position": "absolute"}  # option -> its default


@dataclass(frozen=True)
class ModelConfig:
    model_type: str           # "elmo" | "gpt" | "bert"
    n_layer: int              # layers per tower (LSTM layers per direction for ELMo)
    hidden: int               # tower width H: what each tower reads and emits
    intermediate: int         # feed-forward width (GPT/BERT) or LSTM state size (ELMo)
    n_head: int = 0           # attention heads (GPT/BERT)
    towers: int = 2           # k; k = 1 is the single-tower baseline
    vocab_size: int = TABLE1_VOCAB  # set from the prepared data when training (default: the paper's)
    seq_len: int = 128        # training block length
    max_position: int = 512   # learned position table size (GPT/BERT)
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    fuse_towers: bool = False  # run the k transformer towers in one batched call (same weights layout)
    deepspeed_kernel: bool = False  # BERT on CUDA: DeepSpeed's fused transformer kernel, as in the paper
    elmo_backward_zeroed: bool = False  # ELMo as released: every backward output is 0, so both directions read
                                        # only the left context (see elmo.py); the paper's text: False
    layout: str = "paper"     # "paper" | "released": the module layout of the text or of the authors' code (LAYOUTS)
    vocab_multiple: int = 1   # the decoder's output columns padded to a multiple of this, the padding masked to
                              # -inf (the same softmax): 64 aligns the bf16 output GEMMs on GPUs; weights unchanged
    lstm_streams: bool = False  # ELMo on CUDA: every LSTM of every tower on a CUDA stream of its own, side by side
                                # (the same arithmetic; elsewhere they run one after another)
    norm_scheme: str = "post"  # BERT's layers in the paper's layout: "post" (Hugging Face's BertLayer) or "pre"
                               # (the pre-LN layer of the paper's DeepSpeed kernel, a final LayerNorm per tower)
    position: str = "absolute"  # BERT: "absolute" | "relative" | "none" (POSITIONS)

    @property
    def embed_dim(self) -> int:
        """Width of the shared embedding: k * H, so the tied decoder reads the concatenated features
        at full width (the authors' BERT); their ELMo and GPT embed at the tower width H."""
        if self.layout == "released" and self.model_type in ("elmo", "gpt"):
            return self.hidden
        return self.towers * self.hidden

    @property
    def tower_input(self) -> int:
        """Width each tower reads: H, except the released ELMo's H/2 (one projection shared by its
        forward and backward LSTMs)."""
        return self.hidden // 2 if self.layout == "released" and self.model_type == "elmo" else self.hidden

    def to_dict(self) -> dict[str, Any]:
        """The fields, without options added later that are at their default: a run saved before an
        option existed keeps its identity (and resumes)."""
        return {k: v for k, v in asdict(self).items() if not (k in _LATER_OPTIONS and v == _LATER_OPTIONS[k])}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserError(f"model config has unknown field(s) {unknown}; known fields: {sorted(known)}. "
                            "It was written by a different version of twotower_lib; retrain or fix config.json.")
        return cls(**d)

    def validate(self) -> "ModelConfig":
        """Raise UserError naming the first bad field; return self so calls can chain."""
        def bad(field: str, why: str) -> UserError:
            return UserError(f"invalid model config: `{field}` = {getattr(self, field)!r} {why}")

        for name, allowed in (("model_type", MODEL_TYPES), ("layout", LAYOUTS), ("norm_scheme", NORM_SCHEMES),
                              ("position", POSITIONS)):
            if getattr(self, name) not in allowed:
                raise bad(name, f"is not one of {allowed}")
        for name in ("n_layer", "hidden", "intermediate", "vocab_size", "seq_len"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise bad(name, "must be a positive integer")
        if not isinstance(self.towers, int) or self.towers < 1:
            raise bad("towers", "must be an integer >= 1 (1 is the single-tower baseline, 2 the paper's setting)")
        if not 0.0 <= self.dropout < 1.0:
            raise bad("dropout", "must be in [0, 1)")
        if self.deepspeed_kernel and self.model_type != "bert":
            raise bad("deepspeed_kernel", f"is only available for BERT towers, not {self.model_type!r}")
        if not isinstance(self.vocab_multiple, int) or self.vocab_multiple < 1:
            raise bad("vocab_multiple", "must be a positive integer (1: no padding; 64 aligns GPU matrix products)")
        if self.norm_scheme != "post" and self.model_type != "bert":
            raise bad("norm_scheme", f"is a BERT option (where its layers normalise), not one of {self.model_type!r}")
        if self.norm_scheme != "post" and self.layout == "released":
            raise bad("norm_scheme", "is set by layout 'released' (pre-LN with no final LayerNorm); leave it at 'post'")
        if self.position != "absolute" and (self.norm_scheme != "pre" or self.deepspeed_kernel):
            raise bad("position", "needs BERT's pre-LN layers in plain torch (norm_scheme 'pre', no DeepSpeed kernel)")
        if self.lstm_streams and self.model_type != "elmo":
            raise bad("lstm_streams", f"is an ELMo option (its LSTMs on CUDA streams), not one of {self.model_type!r}")
        if self.elmo_backward_zeroed and self.model_type != "elmo":
            raise bad("elmo_backward_zeroed", f"is an ELMo option, not one of {self.model_type!r}")
        if self.model_type == "elmo":
            if self.hidden % 2:
                raise bad("hidden", "must be even for ELMo: each tower emits forward and backward halves")
        else:
            if not isinstance(self.n_head, int) or self.n_head < 1:
                raise bad("n_head", f"must be a positive integer for model_type {self.model_type!r}")
            if self.hidden % self.n_head:
                raise bad("hidden", f"is not divisible by n_head = {self.n_head}")
            if self.seq_len > self.max_position:
                raise bad("seq_len", f"is longer than the position table (max_position = {self.max_position}); "
                                     "raise max_position or use shorter blocks")
        return self


# Table 1 of the paper. ELMo's "hidden size 4096" is the LSTM state; each direction is projected
# to H/2 so a tower emits H = 512 (the authors' code uses 256 per direction).
# Bert-base uses Table 1's intermediate size 1024 (the authors' code has 1536).
PAPER_PRESETS: dict[str, ModelConfig] = {
    "paper-elmo": ModelConfig("elmo", n_layer=2, hidden=512, intermediate=4096),
    "paper-gpt": ModelConfig("gpt", n_layer=12, hidden=768, intermediate=3072, n_head=12),
    "paper-bert-base": ModelConfig("bert", n_layer=12, hidden=384, intermediate=1024, n_head=12),
    "paper-bert-large": ModelConfig("bert", n_layer=24, hidden=512, intermediate=2048, n_head=16),
}

# The shapes of the authors' released code (`get_model_config` of each class, ttlm/model.py at e8b468e)
# in its layout. GPT "base_2tower": two 384-wide towers (Table 1's 768 / 3072 are the two together?),
# a 128-position table (the window); BERT base: intermediate 1536, not Table 1's 1024; ELMo
# "large_2tower": model_size 256 per direction, LSTM state 4096.
RELEASED_PRESETS: dict[str, ModelConfig] = {
    "released-elmo": ModelConfig("elmo", n_layer=2, hidden=512, intermediate=4096, layout="released"),
    "released-gpt": ModelConfig("gpt", n_layer=12, hidden=384, intermediate=1536, n_head=12, max_position=128,
                                layout="released"),
    "released-bert-base": ModelConfig("bert", n_layer=12, hidden=384, intermediate=1536, n_head=12, layout="released"),
    "released-bert-large": ModelConfig("bert", n_layer=24, hidden=512, intermediate=2048, n_head=16, layout="released"),
}

# CPU presets depend on the family only through which fields it reads.
# `tiny`: unit tests, seconds. `cpu`: the default CPU reproduction.
CPU_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(n_layer=1, hidden=16, intermediate=32, n_head=2, seq_len=32, max_position=64, dropout=0.0),
    # No dropout on CPU: short budget-bound runs are far from overfitting, and dropout's masks
    # cost ~20% of a CPU step.
    "cpu": dict(n_layer=2, hidden=128, intermediate=512, n_head=4, seq_len=128, max_position=512, dropout=0.0),
    # The CPU stand-in for Bert-base next to `cpu` as Bert-large: half the layers and 3/4 of the
    # width, as Table 1's 12 x 384 against 24 x 512.
    "cpu-small": dict(n_layer=1, hidden=96, intermediate=384, n_head=4, seq_len=128, max_position=512, dropout=0.0),
    # Width and depth variants of `cpu` for the emergence study (studies/emergence).
    "cpu-wide": dict(n_layer=2, hidden=256, intermediate=1024, n_head=4, seq_len=128, max_position=512, dropout=0.0),
    "cpu-deep": dict(n_layer=4, hidden=128, intermediate=512, n_head=4, seq_len=128, max_position=512, dropout=0.0),
    # The top rung of the CPU size ladder (studies/ladder): four layers of 256, twice `cpu` in depth and width.
    "cpu-large": dict(n_layer=4, hidden=256, intermediate=1024, n_head=4, seq_len=128, max_position=512, dropout=0.0),
}
CPU_ELMO_INTERMEDIATE = {"tiny": 32, "cpu": 256, "cpu-small": 192, "cpu-wide": 512, "cpu-deep": 256,
                        "cpu-large": 512}  # LSTM state size

PRESETS = tuple(CPU_PRESETS) + tuple(PAPER_PRESETS) + tuple(RELEASED_PRESETS)


def preset(name: str, model_type: str, **overrides: Any) -> ModelConfig:
    """The named preset for `model_type`, with `overrides` (e.g. towers, vocab_size, seq_len) applied."""
    if model_type not in MODEL_TYPES:
        raise UserError(f"unknown model type {model_type!r}; choose one of {MODEL_TYPES}")
    if name in PAPER_PRESETS or name in RELEASED_PRESETS:
        cfg = PAPER_PRESETS.get(name) or RELEASED_PRESETS[name]
        if cfg.model_type != model_type:
            raise UserError(f"preset {name!r} is a {cfg.model_type} configuration but --model is {model_type!r}; "
                            f"use --model {cfg.model_type} or a preset among {PRESETS}")
    elif name in CPU_PRESETS:
        kw = dict(CPU_PRESETS[name])
        if model_type == "elmo":
            kw.update(intermediate=CPU_ELMO_INTERMEDIATE[name], n_head=0)
        cfg = ModelConfig(model_type, **kw)
    else:
        raise UserError(f"unknown preset {name!r}; choose one of {PRESETS}")
    if "seq_len" in overrides and "max_position" not in overrides:  # the position table grows to fit the data's blocks
        overrides["max_position"] = max(cfg.max_position, overrides["seq_len"])
    return replace(cfg, **overrides).validate()


# Where the authors' released code builds a model other than the paper's text describes (the book's page
# "The paper, its code, and this companion"): the model options that give the released model, per family.
# The shapes are the preset's: `released-*` presets hold the released code's own sizes.
RELEASED_OPTIONS: dict[str, dict[str, Any]] = {"elmo": {"layout": "released", "elmo_backward_zeroed": True},
                                               "gpt": {"layout": "released"},
                                               "bert": {"layout": "released"}}


def released_options(model: str) -> dict[str, Any]:
    """The ModelConfig options of the released code's `model` family."""
    if model not in RELEASED_OPTIONS:
        raise UserError(f"no as-released variant of model type {model!r}; choose among {sorted(RELEASED_OPTIONS)}")
    return RELEASED_OPTIONS[model]
