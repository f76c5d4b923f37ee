"""Export a qkv translation model as a Hugging Face Marian directory: the inverse of
`qkv.interop.marian`.

    qkv export marian runs/demo --out demo-marian                   # the command line
    export_marian("runs/demo", "demo-marian")                       # the same in Python
    MarianMTModel.from_pretrained("demo-marian")                    # transformers reads it

The directory is written without `transformers`. Marian is the paper's post-norm encoder-decoder,
so qkv's layers map back one to one (every d_model axis permuted back): the export is exact.
transformers' beam search has no GNMT length penalty, so generation_config.json asks for beam 4
without one. What Marian cannot compute is refused with a ValueError before anything is written.

Details: docs/formats.md, "Exporting to a Marian directory".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from ..config import TransformerConfig
from ..data.tokenizer import SubwordTokenizer
from ..decode.options import DecodeOptions
from ..model import Transformer
from ..model.attention import MultiHeadedAttention
from ..model.layers import PositionwiseFeedForward
from ..modeldir import (
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    load_languages,
    load_model_dir,
)
from .marian import marian_permutation
from .marian_config import ACTIVATIONS as IMPORTED

QUANTIZATIONS = (None, "float32")
# qkv -> Marian: the import's table turned round, Marian's "swish" kept for SiLU (it comes first)
ACTIVATIONS = {qkv: marian for marian, qkv in reversed(IMPORTED.items())}
MARIAN_NORM_EPS = 1e-5  # Marian's nn.LayerNorm(d_model) uses torch's default


def _refusal(cfg: TransformerConfig) -> str | None:
    """What of `cfg` a Marian model cannot compute, or None."""
    if cfg.positional != "sinusoidal":
        return f"positional={cfg.positional!r}: Marian has sinusoidal positions only"
    if cfg.norm_first:
        return "norm_first=True (pre-norm): Marian is post-norm"
    if cfg.norm != "layernorm":
        return f"norm={cfg.norm!r}: Marian has LayerNorm only"
    if cfg.norm_eps != MARIAN_NORM_EPS:
        return f"norm_eps={cfg.norm_eps}: Marian's LayerNorm uses eps {MARIAN_NORM_EPS}"
    if cfg.activation not in ACTIVATIONS:
        return f"activation={cfg.activation!r}: Marian has {sorted(ACTIVATIONS)} only"
    if cfg.kv_heads != cfg.n_heads:
        return (
            f"n_kv_heads={cfg.n_kv_heads} (grouped-query attention): Marian has one key/value "
            "head per query head"
        )
    if cfg.attention != "scaled_dot":
        return f"attention={cfg.attention!r}: Marian computes scaled dot-product scores only"
    if cfg.attention_temperature != 1.0:
        return f"attention_temperature={cfg.attention_temperature}: Marian has no temperature"
    return None


def check_marian_exportable(model: nn.Module) -> None:
    """A ValueError (one line) naming what a Marian model cannot compute."""
    if not isinstance(model, Transformer):
        raise ValueError(
            f"Marian export covers encoder-decoder Transformers, not {type(model).__name__}"
        )
    reason = _refusal(model.config)
    if reason is not None:
        raise ValueError(f"cannot export to Marian: {reason}")


def config_to_marian(cfg: TransformerConfig) -> dict[str, Any]:
    """The config.json (a MarianConfig's settings) of a qkv config that Marian can compute."""
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "is_encoder_decoder": True,
        "vocab_size": cfg.src_vocab_size,
        "decoder_vocab_size": cfg.target_vocab_size,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.n_encoder_layers,
        "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": ACTIVATIONS[cfg.activation],
        "max_position_embeddings": cfg.max_positions,
        "scale_embedding": cfg.scale_embeddings,
        "share_encoder_decoder_embeddings": cfg.share_embeddings,
        "tie_word_embeddings": cfg.tie_output,
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "forced_eos_token_id": cfg.eos_id,
        "decoder_start_token_id": cfg.bos_id,
    }


def marian_generation_config(cfg: TransformerConfig) -> dict[str, Any]:
    """generation_config.json: qkv's beam search without its length penalty (GNMT's has no
    Marian equivalent), pad and bos never generated, eos forced at the position table's end."""
    return {
        "decoder_start_token_id": cfg.bos_id,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "forced_eos_token_id": cfg.eos_id,
        "bad_words_ids": [[i] for i in sorted({cfg.pad_id, cfg.bos_id})],
        "num_beams": DecodeOptions().beam,
        "length_penalty": 0.0,
        "max_length": cfg.max_positions,
    }


def _tensor(t: Tensor) -> Tensor:
    """A float32 copy with storage of its own (safetensors refuses tensors that share memory),
    contiguous: one copy, however `t` is laid out."""
    return t.detach().to(device="cpu", dtype=torch.float32).clone(
        memory_format=torch.contiguous_format
    )


def _bias(linear: nn.Linear) -> Tensor:
    """The bias of `linear`, zeros where it has none (bias=False: the same function)."""
    if linear.bias is not None:
        return linear.bias
    return torch.zeros(linear.out_features, dtype=linear.weight.dtype)


def _attention(
    state: dict[str, Tensor], prefix: str, attn: MultiHeadedAttention, inv: Tensor
) -> None:
    """q/k/v_proj (D, D) each reading Marian's features, out_proj writing them."""
    if attn.cross:
        weights = [attn.q_proj.weight, *attn.kv_proj.weight.chunk(2)]
        biases = [_bias(attn.q_proj), *_bias(attn.kv_proj).chunk(2)]
    else:
        weights, biases = list(attn.in_proj.weight.chunk(3)), list(_bias(attn.in_proj).chunk(3))
    for name, weight, bias in zip("qkv", weights, biases, strict=True):
        state[f"{prefix}.{name}_proj.weight"] = weight[:, inv]
        state[f"{prefix}.{name}_proj.bias"] = bias
    state[f"{prefix}.out_proj.weight"] = attn.out_proj.weight[inv]
    state[f"{prefix}.out_proj.bias"] = _bias(attn.out_proj)[inv]


def _feed_forward(
    state: dict[str, Tensor], prefix: str, ff: PositionwiseFeedForward, inv: Tensor
) -> None:
    state[f"{prefix}.fc1.weight"] = ff.w_1.weight[:, inv]
    state[f"{prefix}.fc1.bias"] = _bias(ff.w_1)
    state[f"{prefix}.fc2.weight"] = ff.w_2.weight[inv]
    state[f"{prefix}.fc2.bias"] = _bias(ff.w_2)[inv]


def _norm(state: dict[str, Tensor], prefix: str, norm: nn.Module, inv: Tensor) -> None:
    state[f"{prefix}.weight"] = norm.weight[inv]
    state[f"{prefix}.bias"] = norm.bias[inv]


def _embeddings(state: dict[str, Tensor], model: Transformer, inv: Tensor) -> None:
    """Token embeddings (`model.shared` when shared; the encoder's and decoder's own where
    transformers does not tie them to it), the untied output projection and final_logits_bias
    (1, V)."""
    cfg, encoder = model.config, model.encoder.embedding.weight
    if cfg.share_embeddings:
        state["model.shared.weight"] = encoder[:, inv]
    if not cfg.share_embeddings or not cfg.tie_output:  # transformers 5 then ties none of them
        state["model.encoder.embed_tokens.weight"] = encoder[:, inv]
        state["model.decoder.embed_tokens.weight"] = model.decoder.embedding.weight[:, inv]
    if not cfg.tie_output:
        state["lm_head.weight"] = model.output_projection.weight[:, inv]
    state["final_logits_bias"] = _bias(model.output_projection)[None]


@torch.no_grad()
def to_marian_state_dict(model: Transformer) -> dict[str, Tensor]:
    """The tensors of the MarianMTModel computing `model`'s logits, by MarianMTModel's names
    (float32, CPU; tied tensors once, no position tables)."""
    check_marian_exportable(model)
    inv = torch.argsort(marian_permutation(model.config.d_model))  # Marian feature j = qkv inv[j]
    state: dict[str, Tensor] = {}
    _embeddings(state, model, inv)
    for i, layer in enumerate(model.encoder.layers):
        prefix = f"model.encoder.layers.{i}"
        _attention(state, f"{prefix}.self_attn", layer.self_attn, inv)
        _norm(state, f"{prefix}.self_attn_layer_norm", layer.self_attn_block.norm, inv)
        _feed_forward(state, prefix, layer.feed_forward, inv)
        _norm(state, f"{prefix}.final_layer_norm", layer.ff_block.norm, inv)
    for i, layer in enumerate(model.decoder.layers):
        prefix = f"model.decoder.layers.{i}"
        _attention(state, f"{prefix}.self_attn", layer.self_attn, inv)
        _norm(state, f"{prefix}.self_attn_layer_norm", layer.self_attn_block.norm, inv)
        _attention(state, f"{prefix}.encoder_attn", layer.cross_attn, inv)
        _norm(state, f"{prefix}.encoder_attn_layer_norm", layer.cross_attn_block.norm, inv)
        _feed_forward(state, prefix, layer.feed_forward, inv)
        _norm(state, f"{prefix}.final_layer_norm", layer.ff_block.norm, inv)
    return {name: _tensor(t) for name, t in state.items()}


# --- the tokenizer -----------------------------------------------------------------------------
def _separate(tokenizer: SubwordTokenizer) -> bool:
    """Whether the two sides number their pieces apart (target_vocab.json)."""
    vocabulary = tokenizer.config.get("vocabulary")
    if vocabulary is not None:
        return vocabulary["tgt"] is not None
    return not tokenizer.config["joint"]


def _vocab(pieces: list[str], side: str) -> dict[str, int]:
    """{piece: id} for pieces in id order; a ValueError if a piece has two ids."""
    vocab = {piece: i for i, piece in enumerate(pieces)}
    if len(vocab) != len(pieces):
        raise ValueError(f"cannot export to Marian: the {side} vocabulary repeats a piece")
    return vocab


def _check_tokenizer(tokenizer: SubwordTokenizer, cfg: TransformerConfig) -> None:
    """A one-line ValueError where MarianTokenizer cannot give the ids the model reads."""
    if tokenizer.lowercase:
        raise ValueError(
            "cannot export to Marian: the tokenizer lowercases its input, MarianTokenizer does not"
        )
    sizes = (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    if sizes != (cfg.src_vocab_size, cfg.target_vocab_size):
        raise ValueError(
            f"the tokenizer has {sizes[0]}/{sizes[1]} pieces, the model "
            f"{cfg.src_vocab_size}/{cfg.target_vocab_size} embeddings"
        )
    ids = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id)
    if ids != (cfg.pad_id, cfg.unk_id, cfg.bos_id, cfg.eos_id):
        raise ValueError(
            f"the tokenizer's pad/unk/bos/eos ids {ids} are not the model's "
            f"{(cfg.pad_id, cfg.unk_id, cfg.bos_id, cfg.eos_id)}"
        )
    src, tgt = tokenizer.src_vocabulary(), tokenizer.tgt_vocabulary()
    for name, i in (("pad", cfg.pad_id), ("unk", cfg.unk_id), ("eos", cfg.eos_id)):
        if src[i] != tgt[i]:
            raise ValueError(
                f"cannot export to Marian: the {name} piece differs between the source "
                f"({src[i]!r}) and the target ({tgt[i]!r}) vocabularies"
            )


def tokenizer_files(
    tokenizer: SubwordTokenizer, cfg: TransformerConfig, languages: tuple[str, str] | None
) -> dict[str, bytes | dict[str, Any]]:
    """MarianTokenizer's files: {name: bytes (SentencePiece models) or a JSON object}."""
    _check_tokenizer(tokenizer, cfg)
    separate = _separate(tokenizer)
    pieces = tokenizer.tgt_vocabulary()
    source_lang, target_lang = languages or (None, None)
    files: dict[str, bytes | dict[str, Any]] = {
        "source.spm": tokenizer.sentencepiece_models[0],
        "target.spm": tokenizer.sentencepiece_models[1],
        "vocab.json": _vocab(tokenizer.src_vocabulary(), "source"),
        "tokenizer_config.json": {
            "tokenizer_class": "MarianTokenizer",
            "source_lang": source_lang,
            "target_lang": target_lang,
            "unk_token": pieces[cfg.unk_id],
            "eos_token": pieces[cfg.eos_id],
            "pad_token": pieces[cfg.pad_id],
            "model_max_length": cfg.max_positions,
            "separate_vocabs": separate,
            "sp_model_kwargs": {},
            "clean_up_tokenization_spaces": False,  # the text as SentencePiece writes it
        },
    }
    if separate:
        files["target_vocab.json"] = _vocab(pieces, "target")
    return files


README = """# {name}: a qkv model for Hugging Face transformers

Written by `qkv export marian` as a `MarianMTModel` with its `MarianTokenizer`:

```python
from transformers import MarianMTModel, MarianTokenizer

tokenizer = MarianTokenizer.from_pretrained("{out}")
model = MarianMTModel.from_pretrained("{out}")
batch = tokenizer(["{example}"], return_tensors="pt", padding=True)
beam = model.generate(**batch)  # generation_config.json: beam 4 without length penalty
greedy = model.generate(**batch, num_beams=1)
print(tokenizer.batch_decode(beam, skip_special_tokens=True))
```

(transformers 4 also reads it with `pipeline("translation", model="{out}")`.) These are the
translations of `qkv translate --beam 4 --alpha 0` and `qkv translate --beam 1`. Where the two can
differ:

* Length penalty: qkv divides a hypothesis's log-prob by GNMT's ((5 + L) / 6) ** alpha,
  transformers by L ** length_penalty; no setting makes them equal, so generation_config.json
  turns the penalty off (qkv's `--alpha 0`).
* Length limit: qkv ends a translation at its source's token count + 50 tokens, transformers at
  `max_length` = {positions} positions (generation_config.json; the position table's size, which
  also bounds the source). At the limit both force the end token; beam search then scores it
  differently (qkv with its log-prob, transformers with 0).
{notes}"""

SENTENCEPIECE_NOTES = """\
* Unknown tokens: `skip_special_tokens` drops them from the text; qkv writes SentencePiece's
  " \u2047 " for them.
* Target-language tokens: MarianTokenizer reads a leading ">>xx<<" as one token, unknown to this
  vocabulary; qkv's tokenizer segments it like any text.
"""


def _readme(out: Path, tokenizer: SubwordTokenizer, cfg: TransformerConfig) -> str:
    plain = tokenizer.config.get("vocabulary") is None
    return README.format(
        name=out.name,
        out=out,
        example="Hello world.",
        positions=cfg.max_positions,
        notes=SENTENCEPIECE_NOTES if plain else "",
    )


def export_marian(
    model_dir: str | Path, out_dir: str | Path, quantization: str | None = None
) -> Path:
    """Write the Hugging Face Marian directory of the qkv model directory `model_dir` to
    `out_dir` (new or empty); see the module docstring. A ValueError (one line) names what Marian
    cannot express, and nothing is written."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"quantization {quantization!r}: the Marian export writes float32 weights only"
        )
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty directory; choose a new one")
    model = load_model_dir(model_dir)
    state = to_marian_state_dict(model)  # refuses what Marian cannot compute
    tokenizer = SubwordTokenizer.load(model_dir)
    files = tokenizer_files(tokenizer, model.config, load_languages(model_dir))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "config.json", config_to_marian(model.config))
    atomic_write_json(out / "generation_config.json", marian_generation_config(model.config))
    atomic_write(
        out / "model.safetensors",
        lambda path: save_file(state, str(path), metadata={"format": "pt"}),
    )
    for name, content in files.items():
        if isinstance(content, bytes):
            atomic_write_bytes(out / name, content)
        else:
            atomic_write_json(out / name, content)
    atomic_write_text(out / "README.md", _readme(out, tokenizer, model.config))
    return out


__all__ = [
    "check_marian_exportable",
    "config_to_marian",
    "export_marian",
    "marian_generation_config",
    "to_marian_state_dict",
    "tokenizer_files",
]
