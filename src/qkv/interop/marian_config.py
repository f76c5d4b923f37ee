"""The settings of a Marian config.json, checked, and the `TransformerConfig` they give.

    config_from_marian(json.loads(Path("opus-mt-en-de/config.json").read_text()))

`marian_settings` fills in MarianConfig's defaults and names a setting of the wrong type;
`check_sizes` names a setting that the weights contradict; `config_from_marian` refuses what qkv
cannot represent (see `qkv.interop.marian`, which imports the weights).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..config import TransformerConfig

# Marian's activation name -> qkv's name for the same function (swish = SiLU = x * sigmoid(x))
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}
# MarianConfig's defaults, for the keys a config.json leaves out
DEFAULTS: dict[str, Any] = dict(
    vocab_size=58101,
    decoder_vocab_size=None,
    max_position_embeddings=1024,
    encoder_layers=12,
    encoder_ffn_dim=4096,
    encoder_attention_heads=16,
    decoder_layers=12,
    decoder_ffn_dim=4096,
    decoder_attention_heads=16,
    activation_function="gelu",
    d_model=1024,
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    decoder_start_token_id=58100,
    scale_embedding=False,
    pad_token_id=58100,
    eos_token_id=0,
    share_encoder_decoder_embeddings=True,
    tie_word_embeddings=True,
    model_type="marian",
)
# the type of each setting qkv reads (a bool is no int here; None: the key may be null)
SIZES = (
    "vocab_size",
    "max_position_embeddings",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "encoder_attention_heads",
    "decoder_attention_heads",
)
FLAGS = ("scale_embedding", "share_encoder_decoder_embeddings", "tie_word_embeddings")
SETTING_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(SIZES, (int,)),
    "decoder_vocab_size": (int, type(None)),
    **dict.fromkeys(("dropout", "attention_dropout", "activation_dropout"), (int, float)),
    **dict.fromkeys(FLAGS, (bool,)),
    "activation_function": (str,),
    "model_type": (str,),
}
# options of BART's configuration that Marian's code ignores and qkv does not have
REFUSED_OPTIONS = (
    "normalize_before",
    "normalize_embedding",
    "add_final_layer_norm",
    "add_bias_logits",
)


def single_id(value: Any, name: str) -> int:
    """A token id given as an int or a one-element list."""
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise ValueError(f"{name}={value}: qkv has one {name}")
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"the Marian config has no usable {name} (got {value!r})")
    return value


def dims(shape: Tensor | torch.Size) -> str:
    """The sizes of a tensor or shape: "120 x 32"."""
    return " x ".join(map(str, shape.shape if isinstance(shape, Tensor) else shape))


def marian_settings(hf_config: Any) -> dict[str, Any]:
    """A MarianConfig or the dict of a config.json -> every setting, defaults filled in; a
    ValueError names a setting of the wrong type."""
    if hasattr(hf_config, "to_dict"):
        hf_config = hf_config.to_dict()
    if not isinstance(hf_config, dict):
        raise ValueError(f"expected a JSON object of settings, got {type(hf_config).__name__}")
    c = {**DEFAULTS, **hf_config}
    for key, kinds in SETTING_TYPES.items():
        value = c.get(key)
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            raise ValueError(f'"{key}" must be {names}, got {value!r}')
    if c["model_type"] != "marian":
        raise ValueError(f"model_type={c['model_type']!r}: not a Marian model")
    c["decoder_vocab_size"] = c["decoder_vocab_size"] or c["vocab_size"]
    return c


def check_sizes(c: dict[str, Any], state: dict[str, Tensor]) -> None:
    """A ValueError naming the setting of `c` (see `marian_settings`) that the weights contradict:
    the sizes of the embeddings and of the first feed-forward layers, and the number of layers."""

    def check(key: str, value: int, where: str) -> None:
        if c[key] != value:
            raise ValueError(f'"{key}" is {c[key]}, but the weights have {value} ({where})')

    def check_axis(key: str, name: str, axis: int) -> None:
        if name in state and state[name].dim() == 2:
            check(key, state[name].shape[axis], f"{name} is {dims(state[name])}")

    shared = "model.shared.weight"
    shared = shared if shared in state else "model.encoder.embed_tokens.weight"
    check_axis("vocab_size", shared, 0)
    check_axis("d_model", shared, 1)
    if not c["share_encoder_decoder_embeddings"]:
        check_axis("decoder_vocab_size", "model.decoder.embed_tokens.weight", 0)
    for stack in ("encoder", "decoder"):
        check_axis(f"{stack}_ffn_dim", f"model.{stack}.layers.0.fc1.weight", 0)
        prefix = f"model.{stack}.layers."
        n = len({k[len(prefix) :].split(".")[0] for k in state if k.startswith(prefix)})
        held = f"model.{stack}.layers.0 .. {n - 1}" if n else f"no model.{stack}.layers"
        check(f"{stack}_layers", n, f"the checkpoint has {held}")


def _refuse_unrepresentable(c: dict[str, Any]) -> None:
    """A ValueError naming the first setting of `c` that qkv has no equivalent for."""
    if c["activation_function"] not in ACTIVATIONS:
        raise ValueError(
            f"activation_function={c['activation_function']!r} has no qkv equivalent; qkv "
            f"supports {sorted(ACTIVATIONS)}"
        )
    if (
        c["encoder_attention_heads"] != c["decoder_attention_heads"]
        or c["encoder_ffn_dim"] != c["decoder_ffn_dim"]
    ):
        raise ValueError(
            "qkv uses one n_heads and one d_ff for encoder and decoder; this Marian model has "
            f"heads {c['encoder_attention_heads']}/{c['decoder_attention_heads']}, "
            f"ffn {c['encoder_ffn_dim']}/{c['decoder_ffn_dim']}"
        )
    for option in REFUSED_OPTIONS:
        if c.get(option):
            raise ValueError(f"{option}={c[option]!r}: qkv's Marian import does not have it")
    if c.get("static_position_embeddings") is False:
        raise ValueError("static_position_embeddings=False (learned positions): not Marian's")


def config_from_marian(hf_config: Any, unk_id: int | None = None) -> TransformerConfig:
    """The `TransformerConfig` of a `MarianConfig` (or of the dict of its config.json); a
    ValueError names what qkv cannot express.

    unk_id: Marian's config does not record the unknown-token id (only its vocabulary does, and
    the model never reads it); None picks the smallest id that is not pad, bos or eos.
    """
    c = marian_settings(hf_config)
    _refuse_unrepresentable(c)
    pad = single_id(c["pad_token_id"], "pad_token_id")
    bos = single_id(c["decoder_start_token_id"], "decoder_start_token_id")
    eos = single_id(c["eos_token_id"], "eos_token_id")
    if unk_id is None:
        unk_id = min(set(range(4)) - {pad, bos, eos})
    shared = bool(c["share_encoder_decoder_embeddings"])
    return TransformerConfig(
        src_vocab_size=c["vocab_size"],
        tgt_vocab_size=None if shared else c["decoder_vocab_size"],
        pad_id=pad,
        unk_id=unk_id,
        bos_id=bos,
        eos_id=eos,
        d_model=c["d_model"],
        n_heads=c["encoder_attention_heads"],
        d_ff=c["encoder_ffn_dim"],
        n_encoder_layers=c["encoder_layers"],
        n_decoder_layers=c["decoder_layers"],
        dropout=float(c["dropout"]),
        attention_dropout=float(c["attention_dropout"]),
        activation_dropout=float(c["activation_dropout"]),
        positional="sinusoidal",
        max_positions=c["max_position_embeddings"],
        cap_positions=True,
        activation=ACTIVATIONS[c["activation_function"]],
        norm="layernorm",
        norm_first=False,
        bias=True,
        scale_embeddings=bool(c["scale_embedding"]),
        share_embeddings=shared,
        tie_output=bool(c["tie_word_embeddings"]),
    )


__all__ = ["check_sizes", "config_from_marian", "dims", "marian_settings", "single_id"]
