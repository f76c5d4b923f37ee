"""The Transformer in plain PyTorch: every piece of the paper as a small module.

Imports nothing else of qkv except the config.
"""

from .attention import (
    AdditiveScore,
    AttentionWeights,
    BilinearScore,
    DotProductScore,
    MultiHeadedAttention,
    per_head_attention,
    scaled_dot_product_attention,
    softmax_attention,
)
from .cache import DecoderCache, KVCache
from .embedding import TokenEmbedding
from .layers import DecoderLayer, EncoderLayer, PositionwiseFeedForward, SublayerConnection
from .masks import causal_mask, combine, padding_mask, window_mask
from .nadaraya_watson import NadarayaWatson
from .positions import (
    ALiBi,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
)
from .transformer import Decoder, DecoderOnly, Encoder, EncoderOnly, Transformer, count_parameters

__all__ = [
    "ALiBi",
    "AdditiveScore",
    "AttentionWeights",
    "BilinearScore",
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "DecoderOnly",
    "DotProductScore",
    "Encoder",
    "EncoderLayer",
    "EncoderOnly",
    "KVCache",
    "LearnedPositionalEmbedding",
    "MultiHeadedAttention",
    "NadarayaWatson",
    "PositionwiseFeedForward",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "SublayerConnection",
    "TokenEmbedding",
    "Transformer",
    "apply_rotary",
    "causal_mask",
    "combine",
    "count_parameters",
    "padding_mask",
    "per_head_attention",
    "scaled_dot_product_attention",
    "softmax_attention",
    "window_mask",
]
