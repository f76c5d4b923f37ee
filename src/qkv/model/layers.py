"""The layers: feed-forward, normalisation, residual "Add & Norm", the encoder and decoder layers.

FFN(x) = max(0, x W_1 + b_1) W_2 + b_2                (paper eq. 2; GELU, SiLU, SwiGLU as options)
post-norm (paper):  x = Norm(x + Dropout(Sublayer(x)))
pre-norm:           x = x + Dropout(Sublayer(Norm(x)))      (the stack then ends with a final Norm)
EncoderLayer:  self-attention -> FFN
DecoderLayer:  masked self-attention -> cross-attention over the encoder output -> FFN
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from ..config import TransformerConfig
from .attention import AttentionWeights, MultiHeadedAttention
from .cache import KVCache


class PositionwiseFeedForward(nn.Module):
    """Two linear maps with an activation between, applied to each position alike.

    (B, T, D) -> (B, T, D).

    SwiGLU (Shazeer 2020): (Swish(x W) * (x V)) W_2, with W and V fused in `w_1` (D -> 2 d_ff).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: str = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.activation = activation
        self.w_1 = nn.Linear(d_model, 2 * d_ff if activation == "swiglu" else d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.w_1(x)  # (B, T, d_ff) or (B, T, 2 d_ff)
        if self.activation == "swiglu":
            gate, value = h.chunk(2, dim=-1)
            h = F.silu(gate) * value
        elif self.activation == "gelu":
            h = F.gelu(h)
        elif self.activation == "silu":  # Swish (Marian, OPUS-MT)
            h = F.silu(h)
        else:
            h = F.relu(h)
        return self.w_2(self.dropout(h))


class BatchNormFoil(nn.BatchNorm1d):
    """`norm: batchnorm`, a foil for the norm comparison, not a choice for text: BatchNorm over the
    features of every position of every sentence, (B, T, D) seen as (B*T, D), pads included (as a
    tutorial applies `nn.BatchNorm1d`). In training, a sentence's output depends on its batch-mates
    and on how much padding the batch has; in eval mode it uses the running statistics."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.reshape(-1, x.size(-1))).view(x.shape)  # (B, T, D)


def make_norm(kind: str, d_model: int, eps: float) -> nn.Module:
    """LayerNorm (paper), RMSNorm (Zhang & Sennrich 2019: no centring, no bias) or the BatchNorm
    foil."""
    if kind == "batchnorm":
        return BatchNormFoil(d_model, eps=eps)
    return nn.RMSNorm(d_model, eps=eps) if kind == "rmsnorm" else nn.LayerNorm(d_model, eps=eps)


class SublayerConnection(nn.Module):
    """Residual connection around a sub-layer, with dropout and a norm.

    The norm comes before the sub-layer (pre-norm) or after the residual sum (post-norm, the paper).
    """

    def __init__(
        self,
        d_model: int,
        dropout: float,
        norm_first: bool = False,
        norm: str = "layernorm",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.norm = make_norm(norm, d_model, eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))

    def with_weights(
        self,
        x: Tensor,
        sublayer: Callable[[Tensor], tuple[Tensor, Tensor | None]],
        into: list[Tensor] | None,
    ) -> Tensor:
        """The same for an attention sub-layer, which returns (output, weights or None): the
        weights are appended to `into` (a list of an `AttentionWeights`), when it is given."""
        out, weights = sublayer(self.norm(x) if self.norm_first else x)
        if into is not None and weights is not None:
            into.append(weights)
        if self.norm_first:
            return x + self.dropout(out)
        return self.norm(x + self.dropout(out))


def _attention(cfg: TransformerConfig, cross: bool = False) -> MultiHeadedAttention:
    return MultiHeadedAttention(
        cfg.d_model,
        cfg.n_heads,
        cfg.kv_heads,
        cfg.attention_dropout,
        cfg.bias,
        cfg.attention,
        cfg.attention_temperature,
        cross=cross,
    )


def _sublayer(cfg: TransformerConfig) -> SublayerConnection:
    return SublayerConnection(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.norm, cfg.norm_eps)


def _feed_forward(cfg: TransformerConfig) -> PositionwiseFeedForward:
    return PositionwiseFeedForward(
        cfg.d_model, cfg.d_ff, cfg.activation, cfg.activation_dropout, cfg.bias
    )


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a SublayerConnection. (B, S, D) -> (B, S, D)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = _attention(cfg)
        self.feed_forward = _feed_forward(cfg)
        self.self_attn_block = _sublayer(cfg)
        self.ff_block = _sublayer(cfg)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
        weights: AttentionWeights | None = None,
    ) -> Tensor:
        """weights: if given, the self-attention weights (B, H, S, S) go to `weights.encoder`."""
        keep = weights is not None
        x = self.self_attn_block.with_weights(
            x,
            lambda h: self.self_attn(h, mask=mask, bias=bias, rotary=rotary, need_weights=keep),
            None if weights is None else weights.encoder,
        )
        return self.ff_block(x, self.feed_forward)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the memory (absent in decoder-only models), FFN.

    x (B, T, D), memory (B, S, D) -> (B, T, D). weights: if given, the self-attention weights
    (B, H, T, T_k) go to `weights.decoder` and the cross-attention weights (B, H, T, S) to
    `weights.cross`.
    """

    def __init__(self, cfg: TransformerConfig, cross_attention: bool = True) -> None:
        super().__init__()
        self.self_attn = _attention(cfg)
        self.self_attn_block = _sublayer(cfg)
        self.cross_attn = _attention(cfg, cross=True) if cross_attention else None
        self.cross_attn_block = _sublayer(cfg) if cross_attention else None
        self.feed_forward = _feed_forward(cfg)
        self.ff_block = _sublayer(cfg)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        weights: AttentionWeights | None = None,
    ) -> Tensor:
        keep = weights is not None
        x = self.self_attn_block.with_weights(
            x,
            lambda h: self.self_attn(
                h, mask=self_mask, bias=bias, rotary=rotary, cache=self_cache, need_weights=keep
            ),
            None if weights is None else weights.decoder,
        )
        if self.cross_attn is not None and self.cross_attn_block is not None:
            if memory is None:
                raise ValueError("an encoder-decoder layer needs the encoder output (memory)")
            x = self.cross_attn_block.with_weights(
                x,
                lambda h: self.cross_attn(
                    h, memory, mask=memory_mask, cache=cross_cache, need_weights=keep
                ),
                None if weights is None else weights.cross,
            )
        return self.ff_block(x, self.feed_forward)
