"""`TransformerConfig`: every architectural choice of the model in one validated dataclass.

cfg = TransformerConfig.preset("base", src_vocab_size=37000)   # the paper's base model
cfg = TransformerConfig.from_dict({"d_model": 256, ...})        # unknown keys raise ValueError
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

T = TypeVar("T")
POSITIONAL = ("sinusoidal", "learned", "rope", "relative", "alibi", "none")
ATTENTION_SCORES = ("scaled_dot", "dot", "additive", "bilinear")
ACTIVATIONS = ("relu", "gelu", "silu", "swiglu")
NORMS = ("layernorm", "rmsnorm", "batchnorm")  # batchnorm: a foil (qkv.model.layers)
POOLINGS = ("first", "mean")
ARCHS = ("transformer", "rnn")
# the fields that name one of a few choices, and their choices
CHOICES = {
    "positional": POSITIONAL,
    "attention": ATTENTION_SCORES,
    "activation": ACTIVATIONS,
    "norm": NORMS,
    "pooling": POOLINGS,
    "arch": ARCHS,
}

# Paper, Table 3: base = N 6, d_model 512, d_ff 2048, h 8, P_drop 0.1; big = 1024 / 4096 / 16 / 0.3.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        d_model=64,
        n_heads=4,
        d_ff=128,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.1,
        attention_dropout=0.1,
        max_positions=256,
    ),
    "base": dict(
        d_model=512,
        n_heads=8,
        d_ff=2048,
        n_encoder_layers=6,
        n_decoder_layers=6,
        dropout=0.1,
        attention_dropout=0.1,
    ),
    "big": dict(
        d_model=1024,
        n_heads=16,
        d_ff=4096,
        n_encoder_layers=6,
        n_decoder_layers=6,
        dropout=0.3,
        attention_dropout=0.3,
    ),
}


@functools.cache
def _field_adapters(cls: type) -> dict[str, tuple[TypeAdapter[Any], str]]:
    """One pydantic TypeAdapter per field of a config dataclass, with the type's readable name."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        name = f.type if isinstance(f.type, str) else getattr(hint, "__name__", str(hint))
        out[f.name] = (TypeAdapter(hint), name)
    return out


def _is_float_type(type_name: str) -> bool:
    return type_name.replace(" ", "") in ("float", "float|None", "None|float")


def dataclass_from_dict(cls: type[T], d: Any) -> T:
    """Build a config dataclass from a dict, every value checked against its field's type.

    One parser for every source (YAML recipes, `--key value` overrides, config.json): each value is
    validated by pydantic in strict mode (`2.5` is no int, `"64"` no int, `0.9` no pair of floats),
    with two conversions a config file needs: numbers that YAML 1.1 reads as strings (`1e-9`)
    become floats for float fields, and lists become tuples for tuple fields. An unknown key, a
    value of the wrong type or a section that is not a mapping is a ValueError naming the key, the
    value and the expected type.
    """
    if not isinstance(d, dict):
        raise ValueError(f"{cls.__name__}: expected a mapping of keys to values, got {d!r}")
    adapters = _field_adapters(cls)
    unknown = sorted(str(k) for k in set(d) - set(adapters))
    if unknown:
        raise ValueError(
            f"{cls.__name__}: unknown key(s) {unknown}; known keys: {sorted(adapters)}"
        )
    values: dict[str, Any] = {}
    for name, value in d.items():
        adapter, type_name = adapters[name]
        if isinstance(value, str) and _is_float_type(type_name):
            with contextlib.suppress(ValueError):  # if not a number, pydantic names the problem
                value = float(value)
        if isinstance(value, list) and type_name.startswith("tuple"):
            value = tuple(value)
        try:
            values[name] = adapter.validate_python(value, strict=True)
        except ValidationError as e:
            reason = e.errors()[0]["msg"]
            raise ValueError(
                f"{cls.__name__}: {name} must be {type_name}, got {value!r} ({reason})"
            ) from None
    return cls(**values)


def _check(ok: bool, msg: str) -> None:
    """A ValueError "TransformerConfig: msg" unless `ok`."""
    if not ok:
        raise ValueError(f"TransformerConfig: {msg}")


@dataclass
class TransformerConfig:
    """Hyper-parameters of an encoder-decoder, encoder-only or decoder-only Transformer.

    Defaults are the paper's base model with a shared 8k vocabulary. Token ids follow the
    tokenizer (pad 0, unk 1, bos 2, eos 3 for qkv's SentencePiece models).
    """

    # vocabulary and special ids
    src_vocab_size: int = 8000
    tgt_vocab_size: int | None = None  # None: same as src (joint vocabulary)
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3
    # "transformer"; "rnn": the GRU encoder-decoder with Bahdanau attention it is compared with
    # (qkv.model.rnn; it reads d_model, the layer counts, dropout and the vocabulary)
    arch: str = "transformer"
    # shape
    d_model: int = 512
    n_heads: int = 8
    n_kv_heads: int | None = None  # None: = n_heads; 1: multi-query; else grouped-query
    d_ff: int = 2048  # 0: the feed-forward sub-layer adds only its bias b_2 (the FFN ablation)
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    # regularisation (paper: P_drop on sub-layer outputs, embeddings + positions)
    dropout: float = 0.1
    attention_dropout: float = 0.1  # on the attention weights
    activation_dropout: float = 0.0  # inside the FFN, after the activation
    # choices
    positional: str = "sinusoidal"
    max_positions: int = 1024  # table size for "learned"; "sinusoidal" has no cap unless:
    cap_positions: bool = False  # sinusoidal: at most max_positions (Marian's fixed table)
    rope_base: float = 10000.0
    relative_buckets: int = 32
    relative_max_distance: int = 128
    attention: str = "scaled_dot"
    attention_temperature: float = 1.0
    activation: str = "relu"
    norm: str = "layernorm"  # or "rmsnorm"; "batchnorm" is a foil (qkv.model.layers.BatchNormFoil)
    norm_first: bool = False  # False: post-norm (paper); True: pre-norm
    norm_eps: float = 1e-5
    bias: bool = True  # biases in the linear layers
    scale_embeddings: bool = True  # multiply embeddings by sqrt(d_model) (paper 3.4)
    share_embeddings: bool = True  # one embedding for source and target (needs a joint vocabulary)
    tie_output: bool = True  # target embedding = pre-softmax projection (paper 3.4)
    output_bias: bool = False  # a bias in the pre-softmax projection (Marian's final_logits_bias)
    # encoder-only models (EncoderOnly): the classification head's classes and pooling ("first":
    # the first token's state, BERT's [CLS]; "mean": the mean of the real tokens' states)
    n_classes: int = 2
    pooling: str = "first"

    def __post_init__(self) -> None:
        self.validate()

    # --- derived -------------------------------------------------------------------------------
    @property
    def target_vocab_size(self) -> int:
        return self.src_vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    # --- validation ----------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ValueError naming the field for any impossible combination."""
        self._check_sizes()
        self._check_choices()
        self._check_vocabulary()

    def _check_sizes(self) -> None:
        """Sizes, counts and rates."""
        for name in ("src_vocab_size", "d_model", "n_heads", "max_positions"):
            _check(getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}")
        _check(self.d_ff >= 0, f"d_ff must be >= 0, got {self.d_ff}")
        _check(
            self.target_vocab_size > 0,
            f"tgt_vocab_size must be positive, got {self.tgt_vocab_size}",
        )
        for name in ("n_encoder_layers", "n_decoder_layers"):
            _check(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        _check(
            self.d_model % self.n_heads == 0,
            f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}",
        )
        _check(
            0 < self.kv_heads <= self.n_heads and self.n_heads % self.kv_heads == 0,
            f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}",
        )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            p = getattr(self, name)
            _check(0.0 <= p < 1.0, f"{name} must be in [0, 1), got {p}")
        _check(self.n_classes >= 1, f"n_classes must be positive, got {self.n_classes}")
        _check(self.attention_temperature > 0, "attention_temperature must be positive")

    def _check_choices(self) -> None:
        """The named choices, and what each needs of the other fields."""
        for name, options in CHOICES.items():
            value = getattr(self, name)
            _check(value in options, f"{name}={value!r}; choose from {options}")
        _check(
            self.arch != "rnn" or self.d_model % 2 == 0,
            f"arch 'rnn' needs an even d_model (two encoder directions), got {self.d_model}",
        )
        _check(
            self.arch != "rnn" or min(self.n_encoder_layers, self.n_decoder_layers) >= 1,
            "arch 'rnn' needs at least one encoder and one decoder layer",
        )
        _check(
            self.positional != "rope" or self.d_head % 2 == 0,
            f"rope needs an even head size, got d_model/n_heads = {self.d_head}",
        )
        _check(
            self.positional != "relative" or self.relative_buckets >= 2,
            "relative_buckets must be >= 2",
        )

    def _check_vocabulary(self) -> None:
        """The vocabularies and the special ids in them."""
        _check(
            not self.share_embeddings or self.target_vocab_size == self.src_vocab_size,
            f"share_embeddings needs one vocabulary, got src {self.src_vocab_size} "
            f"and tgt {self.target_vocab_size}",
        )
        specials = {
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }
        for name, value in specials.items():
            _check(
                0 <= value < min(self.src_vocab_size, self.target_vocab_size),
                f"{name}={value} is outside the vocabulary",
            )
        _check(
            len({self.pad_id, self.unk_id, self.eos_id}) == 3
            and self.bos_id not in (self.unk_id, self.eos_id),
            f"special ids must differ (only bos may be pad, as in Marian), got {specials}",
        )

    # --- construction --------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """A named preset ("tiny", "base", "big") with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TransformerConfig:
        """Build from a dict; an unknown key is an error that names the key ("extra", a notes
        field model directories may hold, is skipped: it does not shape the model)."""
        if isinstance(d, dict) and "extra" in d:
            d = {k: v for k, v in d.items() if k != "extra"}
        return dataclass_from_dict(cls, d)

    def replace(self, **overrides: Any) -> TransformerConfig:
        return self.from_dict({**self.to_dict(), **overrides})


def cache_dir() -> Path:
    """qkv's user cache folder: `$QKV_CACHE_DIR` if set, else `~/.cache/qkv`. It holds the named
    corpora (`data/`), Hub models converted once (`models/`) and the measured decoding paths."""
    return Path(os.environ.get("QKV_CACHE_DIR") or Path.home() / ".cache" / "qkv").expanduser()
