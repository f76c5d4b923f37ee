"""Import a Hugging Face `MarianMTModel` into a qkv `Transformer`: the same function, computed by
qkv's code.

    from transformers import MarianMTModel
    from qkv.interop.marian import from_marian
    model = from_marian(MarianMTModel(marian_config))   # logits equal Marian's up to float rounding

Marian is the paper's post-norm encoder-decoder, so every weight has a place in qkv: the q/k/v
projections stack into `in_proj` ([W^Q; W^K; W^V]; cross-attention: `q_proj` and `kv_proj` =
[W^K; W^V]), fc1/fc2 are the feed-forward network, the layer norms of a layer map one to one onto
the norms of its sub-layer blocks (`self_attn_block`, `cross_attn_block`, `ff_block`), and the
embeddings are scaled by sqrt(d_model) and tied as the config says.

One thing is laid out differently: the sinusoidal positions. Marian's table is
[sin(pos f_0) .. sin(pos f_{h-1}) | cos(pos f_0) .. cos(pos f_{h-1})], qkv's interleaves the two
(sin(pos f_0), cos(pos f_0), sin(pos f_1), ...), with the same frequencies f_k = 10000^(-2k/d). So
qkv's feature i is Marian's feature `perm[i]` (`marian_permutation`). Every operation on the
residual stream commutes with a permutation of its d_model features: a linear map reading it
permutes its weight's columns, one writing it permutes its rows and bias, LayerNorm permutes its
gain and bias (its mean and variance are order-free), and the tied output projection permutes like
the embedding. The attention heads split the projections' outputs, which are not permuted.
Permuting the d_model axis of every weight therefore gives a qkv model whose hidden states are
Marian's with permuted features and whose logits are Marian's: the import is exact (only the order
of float additions changes).

What qkv cannot represent (the import raises instead of approximating):
  * Marian's activation "swish" (the default of the OPUS-MT checkpoints): qkv has relu, gelu,
    swiglu.
  * a non-zero `final_logits_bias` (OPUS-MT checkpoints carry Marian's output bias): qkv's output
    projection has no bias.
  * `decoder_start_token_id == pad_token_id` (Marian's convention): qkv's config needs four
    distinct special ids.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from ..model import Transformer
from ..model.attention import MultiHeadedAttention
from ..model.layers import PositionwiseFeedForward
from ..model.positions import sinusoid_table

# Hugging Face activation name -> qkv name, for the same function
ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}


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


def _single_id(value: Any, name: str) -> int:
    """A token id given as an int or a one-element list."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise ValueError(f"{name}={value}: qkv has one {name}")
        value = value[0]
    if value is None:
        raise ValueError(f"the Marian config has no {name}")
    return int(value)


def config_from_marian(hf_config: Any, unk_id: int | None = None) -> TransformerConfig:
    """The `TransformerConfig` of a `MarianConfig`; ValueError or NotImplementedError for what qkv
    cannot express.

    unk_id: Marian's config does not record the unknown-token id (only its tokenizer does, and the
    model never reads it); None picks the smallest id that is not pad, bos or eos.
    """
    c = hf_config
    if c.activation_function not in ACTIVATIONS:
        raise ValueError(
            f"activation_function={c.activation_function!r} has no qkv equivalent; qkv supports "
            f"{sorted(ACTIVATIONS)} (build the Marian model with one of them)"
        )
    if (
        c.encoder_attention_heads != c.decoder_attention_heads
        or c.encoder_ffn_dim != c.decoder_ffn_dim
    ):
        raise ValueError(
            "qkv uses one n_heads and one d_ff for encoder and decoder; Marian has heads "
            f"{c.encoder_attention_heads}/{c.decoder_attention_heads}, "
            f"ffn {c.encoder_ffn_dim}/{c.decoder_ffn_dim}"
        )
    if c.encoder_layerdrop or c.decoder_layerdrop:
        raise ValueError("qkv has no LayerDrop; set encoder_layerdrop = decoder_layerdrop = 0")
    pad = _single_id(c.pad_token_id, "pad_token_id")
    bos = _single_id(c.decoder_start_token_id, "decoder_start_token_id")
    eos = _single_id(c.eos_token_id, "eos_token_id")
    if bos == pad:
        raise NotImplementedError(
            f"decoder_start_token_id = pad_token_id = {pad} (Marian's convention: the decoder "
            "starts from the zero pad embedding) needs qkv's TransformerConfig to allow "
            "bos_id == pad_id"
        )
    if unk_id is None:
        unk_id = min(set(range(4)) - {pad, bos, eos})
    shared = bool(c.share_encoder_decoder_embeddings)
    return TransformerConfig(
        src_vocab_size=c.vocab_size,
        tgt_vocab_size=None if shared else c.decoder_vocab_size,
        pad_id=pad,
        unk_id=unk_id,
        bos_id=bos,
        eos_id=eos,
        d_model=c.d_model,
        n_heads=c.encoder_attention_heads,
        d_ff=c.encoder_ffn_dim,
        n_encoder_layers=c.encoder_layers,
        n_decoder_layers=c.decoder_layers,
        dropout=float(c.dropout),
        attention_dropout=float(c.attention_dropout),
        activation_dropout=float(c.activation_dropout),
        positional="sinusoidal",
        max_positions=c.max_position_embeddings,
        activation=ACTIVATIONS[c.activation_function],
        norm="layernorm",
        norm_first=False,
        bias=True,
        scale_embeddings=bool(c.scale_embedding),
        share_embeddings=shared,
        tie_output=bool(c.tie_word_embeddings),
    )


def _copy_norm(dst: nn.Module, src: nn.LayerNorm, perm: Tensor) -> None:
    if not isinstance(dst, nn.LayerNorm) or dst.eps != src.eps:
        raise ValueError(f"layer norm mismatch: qkv {dst}, Marian {src}")
    dst.weight.copy_(src.weight[perm])
    dst.bias.copy_(src.bias[perm])


def _copy_attention(dst: MultiHeadedAttention, src: nn.Module, perm: Tensor) -> None:
    """q/k/v (D, D) each -> in_proj (3D, D), or q_proj + kv_proj for cross-attention, reading
    permuted features; out_proj writes permuted features."""
    projections = (src.q_proj, src.k_proj, src.v_proj)
    if any(p.bias is None for p in (*projections, src.out_proj)):
        raise ValueError(
            "qkv's config has one `bias` switch; this Marian attention lacks some biases"
        )
    groups = (
        [(dst.q_proj, projections[:1]), (dst.kv_proj, projections[1:])]
        if dst.cross
        else [(dst.in_proj, projections)]
    )
    for linear, parts in groups:
        linear.weight.copy_(torch.cat([p.weight for p in parts])[:, perm])
        linear.bias.copy_(torch.cat([p.bias for p in parts]))
    dst.out_proj.weight.copy_(src.out_proj.weight[perm])
    dst.out_proj.bias.copy_(src.out_proj.bias[perm])


def _copy_feed_forward(
    dst: PositionwiseFeedForward, fc1: nn.Linear, fc2: nn.Linear, perm: Tensor
) -> None:
    dst.w_1.weight.copy_(fc1.weight[:, perm])
    dst.w_1.bias.copy_(fc1.bias)
    dst.w_2.weight.copy_(fc2.weight[perm])
    dst.w_2.bias.copy_(fc2.bias[perm])


def _check_positions(table: Tensor, perm: Tensor) -> None:
    """Marian's position table (P, D), permuted, must be qkv's sinusoid table (the import relies
    on it)."""
    expected = sinusoid_table(table.size(0), table.size(1))
    if not torch.allclose(table.float()[:, perm].cpu(), expected, atol=1e-5):
        raise ValueError(
            "the Marian position table is not the sinusoid qkv computes; cannot import it exactly"
        )


@torch.no_grad()
def from_marian(hf_model: nn.Module, unk_id: int | None = None) -> Transformer:
    """A qkv `Transformer` computing the same logits as `hf_model`, a Hugging Face `MarianMTModel`.

    The result has hf_model's dtype, device and train/eval mode. Its hidden states (`encode`, the
    decoder's output) are Marian's with the d_model features permuted by `marian_permutation`;
    logits are the same. Raises ValueError or NotImplementedError (see the module docstring) for
    what qkv cannot represent.
    """
    hf_config = hf_model.config
    bias = getattr(hf_model, "final_logits_bias", None)
    if bias is not None and bool(bias.any()):
        raise NotImplementedError(
            "final_logits_bias is non-zero; qkv's output projection has no bias"
        )
    cfg = config_from_marian(hf_config, unk_id)
    marian = hf_model.model
    _check_positions(marian.encoder.embed_positions.weight, marian_permutation(cfg.d_model))
    _check_positions(marian.decoder.embed_positions.weight, marian_permutation(cfg.d_model))
    like = marian.encoder.embed_tokens.weight
    perm = marian_permutation(cfg.d_model).to(like.device)
    model = Transformer(cfg).to(device=like.device, dtype=like.dtype)
    model.encoder.embedding.weight.copy_(marian.encoder.embed_tokens.weight[:, perm])
    if not cfg.share_embeddings:
        model.decoder.embedding.weight.copy_(marian.decoder.embed_tokens.weight[:, perm])
    if not cfg.tie_output:
        model.output_projection.weight.copy_(hf_model.lm_head.weight[:, perm])
    for dst, src in zip(model.encoder.layers, marian.encoder.layers, strict=True):
        _copy_attention(dst.self_attn, src.self_attn, perm)
        _copy_feed_forward(dst.feed_forward, src.fc1, src.fc2, perm)
        _copy_norm(dst.self_attn_block.norm, src.self_attn_layer_norm, perm)
        _copy_norm(dst.ff_block.norm, src.final_layer_norm, perm)
    for dst, src in zip(model.decoder.layers, marian.decoder.layers, strict=True):
        _copy_attention(dst.self_attn, src.self_attn, perm)
        _copy_attention(dst.cross_attn, src.encoder_attn, perm)
        _copy_feed_forward(dst.feed_forward, src.fc1, src.fc2, perm)
        _copy_norm(dst.self_attn_block.norm, src.self_attn_layer_norm, perm)
        _copy_norm(dst.cross_attn_block.norm, src.encoder_attn_layer_norm, perm)
        _copy_norm(dst.ff_block.norm, src.final_layer_norm, perm)
    return model.train(hf_model.training)


__all__ = ["config_from_marian", "from_marian", "marian_permutation"]
