"""Import a Marian / OPUS-MT model into qkv: the same function, computed by qkv's code.

    qkv convert marian opus-mt-en-de --out en-de              # the command line
    convert_marian("opus-mt-en-de", "en-de")                  # a qkv model directory
    model = from_marian(MarianMTModel(marian_config))         # a Transformer of a model in memory

The source is a Hugging Face Marian directory as it is downloaded; no `transformers` is needed.
Marian is the paper's post-norm encoder-decoder, so every weight has a place in qkv; only the
sinusoid table is laid out differently, and permuting the d_model axis of every weight
(`marian_permutation`) makes the import exact. What qkv cannot represent is refused with a
ValueError naming it, never approximated.

Details: docs/formats.md, "Importing a Marian / OPUS-MT model".
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from ..data.tokenizer import SubwordTokenizer
from ..model import Transformer
from ..model.attention import MultiHeadedAttention
from ..model.layers import PositionwiseFeedForward
from ..model.positions import sinusoid_table
from ..modeldir import save_model_dir
from .marian_config import check_sizes, config_from_marian, dims, marian_settings, single_id


def marian_permutation(d_model: int) -> Tensor:
    """perm (d_model,) with qkv feature i = Marian feature perm[i]: [sin | cos] -> interleaved
    (sin, cos) pairs.

    Marian puts ceil(d/2) sines first, then floor(d/2) cosines; qkv's feature 2k is the k-th sine
    and 2k + 1 the k-th cosine.
    """
    n_sin = (d_model + 1) // 2
    perm = torch.empty(d_model, dtype=torch.long)
    perm[0::2] = torch.arange(n_sin)
    perm[1::2] = torch.arange(n_sin, d_model)
    return perm


class _Weights:
    """A Marian state dict read by name; remembers what was read, so that the rest can be
    refused."""

    def __init__(self, state: dict[str, Tensor]) -> None:
        self.state = state
        self.used: set[str] = set()

    def get(self, *names: str, shape: torch.Size | None = None) -> Tensor:
        """The first of `names` the checkpoint holds (tied weights are stored under one name);
        a ValueError when its shape is not `shape`, the one the config gives."""
        for name in names:
            if name not in self.state:
                continue
            self.used.add(name)
            if shape is not None and self.state[name].shape != shape:
                raise ValueError(f"{name} is {dims(self.state[name])}, not {dims(shape)}")
            return self.state[name].float()
        raise ValueError(f"the checkpoint lacks {names[0]}")

    def unused(self) -> list[str]:
        return sorted(set(self.state) - self.used)


def _copy_attention(dst: MultiHeadedAttention, w: _Weights, prefix: str, perm: Tensor) -> None:
    """q/k/v (D, D) each -> in_proj (3D, D), or q_proj + kv_proj for cross-attention, reading
    permuted features; out_proj writes permuted features."""
    square, vector = dst.out_proj.weight.shape, dst.out_proj.bias.shape  # (D, D), (D,)
    weights = [w.get(f"{prefix}.{p}_proj.weight", shape=square) for p in "qkv"]
    biases = [w.get(f"{prefix}.{p}_proj.bias", shape=vector) for p in "qkv"]
    groups = [(dst.q_proj, 0, 1), (dst.kv_proj, 1, 3)] if dst.cross else [(dst.in_proj, 0, 3)]
    for linear, start, end in groups:
        linear.weight.copy_(torch.cat(weights[start:end])[:, perm])
        linear.bias.copy_(torch.cat(biases[start:end]))
    dst.out_proj.weight.copy_(w.get(f"{prefix}.out_proj.weight", shape=square)[perm])
    dst.out_proj.bias.copy_(w.get(f"{prefix}.out_proj.bias", shape=vector)[perm])


def _copy_feed_forward(
    dst: PositionwiseFeedForward, w: _Weights, prefix: str, perm: Tensor
) -> None:
    w_1, w_2 = dst.w_1, dst.w_2
    w_1.weight.copy_(w.get(f"{prefix}.fc1.weight", shape=w_1.weight.shape)[:, perm])
    w_1.bias.copy_(w.get(f"{prefix}.fc1.bias", shape=w_1.bias.shape))
    w_2.weight.copy_(w.get(f"{prefix}.fc2.weight", shape=w_2.weight.shape)[perm])
    w_2.bias.copy_(w.get(f"{prefix}.fc2.bias", shape=w_2.bias.shape)[perm])


def _copy_norm(dst: nn.Module, w: _Weights, prefix: str, perm: Tensor) -> None:
    dst.weight.copy_(w.get(f"{prefix}.weight", shape=dst.weight.shape)[perm])
    dst.bias.copy_(w.get(f"{prefix}.bias", shape=dst.bias.shape)[perm])


def _copy_embeddings(model: Transformer, w: _Weights, perm: Tensor) -> None:
    """The token embeddings (encoder, decoder) and the output projection's weight."""
    cfg, encoder, shared = model.config, model.encoder.embedding.weight, "model.shared.weight"
    encoder.copy_(w.get(shared, "model.encoder.embed_tokens.weight", shape=encoder.shape)[:, perm])
    if cfg.share_embeddings:  # the same tensor, if stored
        w.get("model.encoder.embed_tokens.weight", shared, shape=encoder.shape)
        w.get("model.decoder.embed_tokens.weight", shared, shape=encoder.shape)
    else:
        decoder = model.decoder.embedding.weight
        decoder.copy_(w.get("model.decoder.embed_tokens.weight", shape=decoder.shape)[:, perm])
    if cfg.tie_output:
        w.used.add("lm_head.weight")  # Marian ties it to the target embedding
    else:
        output = model.output_projection.weight
        output.copy_(w.get("lm_head.weight", shape=output.shape)[:, perm])


def _check_positions(w: _Weights, stack: str, cfg: TransformerConfig, perm: Tensor) -> None:
    """A stored position table (recent checkpoints leave it out: it is computed), permuted, must
    be qkv's sinusoid table for Marian's positions 0 .. max_position_embeddings - 1."""
    name = f"model.{stack}.embed_positions.weight"
    if name not in w.state:
        return
    table = w.get(name)
    expected = sinusoid_table(cfg.max_positions, cfg.d_model)
    if table.shape != expected.shape or not torch.allclose(table[:, perm], expected, atol=1e-5):
        raise ValueError(f"{name} is not the sinusoid table of Marian; cannot import it exactly")


@torch.no_grad()
def from_marian_state_dict(
    hf_config: Any, state: dict[str, Tensor], unk_id: int | None = None
) -> Transformer:
    """A float32 qkv `Transformer` (eval mode) computing the logits of the Marian model with
    config `hf_config` (a MarianConfig or the dict of its config.json) and weights `state` (the
    names of `MarianMTModel.state_dict()`). A ValueError names what qkv cannot represent, and
    the setting (or the tensor) where config and weights disagree."""
    w = _Weights(state)
    settings = marian_settings(hf_config)
    check_sizes(settings, state)
    cfg = config_from_marian(settings, unk_id)
    bias = None
    if "final_logits_bias" in state:
        bias = w.get("final_logits_bias").flatten()
        if bias.numel() != cfg.target_vocab_size:
            raise ValueError(
                f"final_logits_bias has {bias.numel()} values for {cfg.target_vocab_size} tokens"
            )
    if bias is not None and bool(bias.any()):
        cfg = cfg.replace(output_bias=True)
    perm = marian_permutation(cfg.d_model)
    model = Transformer(cfg).eval()
    _copy_embeddings(model, w, perm)
    if cfg.output_bias:
        model.output_projection.bias.copy_(bias)
    for stack in ("encoder", "decoder"):
        _check_positions(w, stack, cfg, perm)
    for i, layer in enumerate(model.encoder.layers):
        prefix = f"model.encoder.layers.{i}"
        _copy_attention(layer.self_attn, w, f"{prefix}.self_attn", perm)
        _copy_feed_forward(layer.feed_forward, w, prefix, perm)
        _copy_norm(layer.self_attn_block.norm, w, f"{prefix}.self_attn_layer_norm", perm)
        _copy_norm(layer.ff_block.norm, w, f"{prefix}.final_layer_norm", perm)
    for i, layer in enumerate(model.decoder.layers):
        prefix = f"model.decoder.layers.{i}"
        _copy_attention(layer.self_attn, w, f"{prefix}.self_attn", perm)
        _copy_attention(layer.cross_attn, w, f"{prefix}.encoder_attn", perm)
        _copy_feed_forward(layer.feed_forward, w, prefix, perm)
        _copy_norm(layer.self_attn_block.norm, w, f"{prefix}.self_attn_layer_norm", perm)
        _copy_norm(layer.cross_attn_block.norm, w, f"{prefix}.encoder_attn_layer_norm", perm)
        _copy_norm(layer.ff_block.norm, w, f"{prefix}.final_layer_norm", perm)
    if w.unused():
        raise ValueError(f"the checkpoint has weights qkv has no place for: {w.unused()[:5]}")
    return model


def from_marian(hf_model: nn.Module, unk_id: int | None = None) -> Transformer:
    """A qkv `Transformer` computing the same logits as `hf_model`, a Hugging Face
    `MarianMTModel`, with its dtype, device and train/eval mode. Its hidden states (`encode`, the
    decoder's output) are Marian's with the d_model features permuted by `marian_permutation`."""
    like = hf_model.model.encoder.embed_tokens.weight
    state = {k: v.detach().cpu() for k, v in hf_model.state_dict().items()}
    model = from_marian_state_dict(hf_model.config, state, unk_id)
    return model.to(device=like.device, dtype=like.dtype).train(hf_model.training)


# --- the directory --------------------------------------------------------------------------
def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path.parent} is not a Marian model directory: no {path.name}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None


def read_marian_weights(directory: str | Path) -> dict[str, Tensor]:
    """The tensors of model.safetensors, else of pytorch_model.bin (tensors only: weights_only)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    directory = Path(directory)
    path = directory / "model.safetensors"
    try:
        if path.is_file():
            return load_file(path)
        path = directory / "pytorch_model.bin"
        if path.is_file():
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or not all(
                isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()
            ):
                raise ValueError(f"{path} does not hold a dict of named tensors")
            return state
    except (SafetensorError, pickle.UnpicklingError, RuntimeError, EOFError, IndexError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot read the tensors of {path}: {reason}") from None
    raise ValueError(f"{directory} has no model.safetensors or pytorch_model.bin")


def _vocabulary(path: Path) -> list[str]:
    """vocab.json {piece: id} -> the pieces in id order (ids 0 .. n-1, each once)."""
    vocab = _read_json(path)
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ValueError(f"{path} must map each piece to an integer id")
    pieces = sorted(vocab, key=vocab.__getitem__)
    if [vocab[p] for p in pieces] != list(range(len(pieces))):
        raise ValueError(f"{path}: the ids must be 0 .. {len(pieces) - 1}, each once")
    return pieces


def _token(settings: dict[str, Any], name: str, default: str) -> str:
    """A special token of tokenizer_config.json: a string, or an object with its "content"."""
    value = settings.get(name) or default
    return value["content"] if isinstance(value, dict) else value


def _tokenizer_settings(directory: Path) -> dict[str, Any]:
    """tokenizer_config.json (MarianTokenizer's settings), or {} without one."""
    if not (directory / "tokenizer_config.json").is_file():
        return {}
    settings = _read_json(directory / "tokenizer_config.json")
    if not isinstance(settings, dict):
        raise ValueError(f"{directory / 'tokenizer_config.json'} must hold a JSON object")
    return settings


def _sentencepiece_model(path: Path) -> bytes:
    """The bytes of a SentencePiece model file; a ValueError naming it when it is none."""
    if not path.is_file():
        raise ValueError(f"{path.parent} is not a Marian model directory: no {path.name}")
    proto = path.read_bytes()
    try:
        if proto:  # SentencePiece loads no bytes as a model without pieces
            spm.SentencePieceProcessor(model_proto=proto)
            return proto
    except RuntimeError:
        pass
    raise ValueError(f"{path} is not a SentencePiece model (it does not parse as one)")


def marian_tokenizer(directory: str | Path, decoder_start_id: int) -> SubwordTokenizer:
    """A qkv tokenizer giving MarianTokenizer's ids: source.spm / target.spm over vocab.json (and
    target_vocab.json); bos is the piece of the decoder's start token."""
    directory = Path(directory)
    settings = _tokenizer_settings(directory)
    src_pieces = _vocabulary(directory / "vocab.json")
    tgt_pieces = None
    if settings.get("separate_vocabs"):
        tgt_pieces = _vocabulary(directory / "target_vocab.json")
    protos = [_sentencepiece_model(directory / name) for name in ("source.spm", "target.spm")]
    if not 0 <= decoder_start_id < len(tgt_pieces or src_pieces):
        raise ValueError(f"decoder_start_token_id={decoder_start_id} is outside the vocabulary")
    vocabulary = {
        "src": src_pieces,
        "tgt": tgt_pieces,
        "pad": _token(settings, "pad_token", "<pad>"),
        "unk": _token(settings, "unk_token", "<unk>"),
        "bos": (tgt_pieces or src_pieces)[decoder_start_id],
        "eos": _token(settings, "eos_token", "</s>"),
    }
    config = {
        "joint": protos[0] == protos[1],
        "model_type": "marian",
        "vocab_size": len(src_pieces),
        "lowercase": False,
        "vocabulary": vocabulary,
    }
    return SubwordTokenizer(protos[0], protos[1], config)


def convert_marian(src_dir: str | Path, out_dir: str | Path, origin: str | None = None) -> Path:
    """Write the qkv model directory of the Hugging Face Marian directory `src_dir` to `out_dir`
    (see the module docstring), with the languages of tokenizer_config.json (source_lang,
    target_lang) when it names both; a ValueError names what cannot be imported. config.json
    records where it came from: `origin`, else the directory's name."""
    src_dir, out_dir = Path(src_dir), Path(out_dir)
    if not src_dir.is_dir():
        raise ValueError(f"{src_dir} is not a directory")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ValueError(f"{out_dir} is not empty; choose a new directory for the model")
    config_path = src_dir / "config.json"
    settings = _read_json(config_path)
    weights = read_marian_weights(src_dir)
    try:  # what config.json says, and whether the weights agree
        settings = marian_settings(settings)
        check_sizes(settings, weights)
        config_from_marian(settings)
        start = single_id(settings["decoder_start_token_id"], "decoder_start_token_id")
    except ValueError as e:
        raise ValueError(f"{config_path}: {e}") from None
    tokenizer = marian_tokenizer(src_dir, start)
    model = from_marian_state_dict(settings, weights, tokenizer.unk_id)
    cfg = model.config
    checks = {
        "pad_token_id": (cfg.pad_id, tokenizer.pad_id),
        "eos_token_id": (cfg.eos_id, tokenizer.eos_id),
        "vocab_size": (cfg.src_vocab_size, tokenizer.src_vocab_size),
        "decoder_vocab_size": (cfg.target_vocab_size, tokenizer.tgt_vocab_size),
    }
    for key, (model_value, vocabulary_value) in checks.items():
        if model_value != vocabulary_value:
            raise ValueError(
                f"config.json has {key}={model_value}, but the vocabulary files say "
                f"{vocabulary_value}"
            )
    settings = _tokenizer_settings(src_dir)
    languages = {"src_lang": settings.get("source_lang"), "tgt_lang": settings.get("target_lang")}
    if None in languages.values():  # recorded only when both are known
        languages = {}
    return save_model_dir(
        out_dir, model, tokenizer, imported_from=f"marian: {origin or src_dir.name}", **languages
    )


__all__ = [
    "config_from_marian",
    "convert_marian",
    "from_marian",
    "from_marian_state_dict",
    "marian_permutation",
    "marian_tokenizer",
    "read_marian_weights",
]
