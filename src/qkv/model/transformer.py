"""The stacks and the models built from them.

    Encoder:      ids -> embedding (+ positions) -> N x EncoderLayer -> memory (B, S, D)
    Decoder:      ids -> embedding (+ positions) -> N x DecoderLayer(memory) -> hidden (B, T, D)
    EncoderDecoder: logits = output_projection(decoder(tgt, encoder(src)))
    Transformer:  the encoder-decoder of the paper (Encoder and Decoder in that frame)
    EncoderOnly:  BERT-style, with a masked-token head and a classification head
    DecoderOnly:  GPT-style causal language model (decoder layers without cross-attention)

Positional information (config.positional) is added to the embeddings ("sinusoidal", "learned") or
given to every layer's self-attention ("rope": rotations, "relative"/"alibi": score biases),
computed once per stack and shared by its layers. Cross-attention has no positional term.

Every model and stack takes an optional `AttentionWeights` (`weights=`), which receives the
attention weights of every layer and head; without one the fused attention kernel runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import TransformerConfig
from .attention import AttentionWeights
from .cache import Cache, DecoderCache
from .embedding import TokenEmbedding
from .heads import ClassificationHead
from .layers import DecoderLayer, EncoderLayer, make_norm
from .masks import causal_mask, padding_mask
from .positions import (
    ALiBi,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)


class Stack(nn.Module):
    """What encoder and decoder stacks share: the embedding, the positions, the final norm."""

    def __init__(self, cfg: TransformerConfig, embedding: TokenEmbedding, causal: bool) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = embedding
        self.absolute: nn.Module | None = None  # added to the embeddings
        self.rotary: RotaryEmbedding | None = None  # rotates q and k
        self.score_bias: nn.Module | None = None  # added to the scores
        if cfg.positional == "sinusoidal":
            self.absolute = SinusoidalPositionalEncoding(cfg.d_model)
        elif cfg.positional == "learned":
            self.absolute = LearnedPositionalEmbedding(cfg.max_positions, cfg.d_model)
        elif cfg.positional == "rope":
            self.rotary = RotaryEmbedding(cfg.d_head, cfg.rope_base)
        elif cfg.positional == "relative":
            self.score_bias = RelativePositionBias(
                cfg.n_heads,
                bidirectional=not causal,
                num_buckets=cfg.relative_buckets,
                max_distance=cfg.relative_max_distance,
            )
        elif cfg.positional == "alibi":
            self.score_bias = ALiBi(cfg.n_heads)
        self.dropout = nn.Dropout(cfg.dropout)
        # pre-norm leaves the residual stream un-normalised, so the stack ends with one more norm
        self.norm = (
            make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if cfg.norm_first else nn.Identity()
        )

    def embed(self, ids: Tensor, offset: int = 0) -> Tensor:
        """ids (B, T) at positions offset.. -> Dropout(Embedding * sqrt(D) + PE): (B, T, D)."""
        x = self.embedding(ids)
        if self.absolute is not None:
            x = self.absolute(x, offset)
        return self.dropout(x)

    def max_positions(self) -> int | None:
        """How many positions this stack can embed: the learned table's size, else no limit."""
        capped = self.cfg.positional == "learned" or self.cfg.cap_positions
        return self.cfg.max_positions if capped else None

    def positional_terms(
        self, q_len: int, k_len: int, dtype: torch.dtype
    ) -> tuple[Tensor | None, tuple[Tensor, Tensor] | None]:
        """The score bias (1, H, T_q, T_k) and the rotary (cos, sin) (T_q, Dh).

        For the queries at the last q_len of k_len positions.
        """
        bias = None if self.score_bias is None else self.score_bias(q_len, k_len).to(dtype)
        rotary = None if self.rotary is None else self.rotary(q_len, k_len - q_len, dtype)
        return bias, rotary


class Encoder(Stack):
    """N encoder layers over the embedded source. ids (B, S) -> memory (B, S, D)."""

    def __init__(self, cfg: TransformerConfig, embedding: TokenEmbedding) -> None:
        super().__init__(cfg, embedding, causal=False)
        self.layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers)])

    def forward(
        self, src_ids: Tensor, mask: Tensor | None = None, weights: AttentionWeights | None = None
    ) -> Tensor:
        """mask: bool (B, 1, 1, S), True = real token; built from the padding id when None.
        weights: if given, each layer's self-attention weights (B, H, S, S) go to its `encoder`."""
        if mask is None:
            mask = padding_mask(src_ids, self.cfg.pad_id)
        x = self.embed(src_ids)  # (B, S, D)
        bias, rotary = self.positional_terms(x.size(1), x.size(1), x.dtype)
        for layer in self.layers:
            x = layer(x, mask, bias, rotary, weights)
        return self.norm(x)


class Decoder(Stack):
    """N decoder layers. ids (B, T) [+ memory (B, S, D)] -> (hidden (B, T, D), weights).

    Causal self-attention: position t sees positions <= t. Targets are right-padded, so the causal
    mask already hides padding from every real position. With a `DecoderCache`, `tgt_ids` holds only
    the new positions (usually one) and the earlier ones are read from the cache. `weights`: the
    `AttentionWeights` given, filled with each layer's self-attention (B, H, T, T_k) in `decoder`
    and cross-attention (B, H, T, S) in `cross`; None when none is given.
    """

    def __init__(
        self, cfg: TransformerConfig, embedding: TokenEmbedding, cross_attention: bool = True
    ) -> None:
        super().__init__(cfg, embedding, causal=True)
        self.layers = nn.ModuleList(
            [DecoderLayer(cfg, cross_attention) for _ in range(cfg.n_decoder_layers)]
        )

    def forward(
        self,
        tgt_ids: Tensor,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
        weights: AttentionWeights | None = None,
    ) -> tuple[Tensor, AttentionWeights | None]:
        offset = 0 if cache is None else cache.length
        T = tgt_ids.size(1)
        x = self.embed(tgt_ids, offset)  # (B, T, D)
        # one new token sees all
        self_mask = None if T == 1 else causal_mask(T, offset + T, x.device)
        bias, rotary = self.positional_terms(T, offset + T, x.dtype)
        for i, layer in enumerate(self.layers):
            self_cache, cross_cache = (None, None) if cache is None else cache.layer(i)
            x = layer(
                x,
                memory,
                self_mask,
                memory_mask,
                bias,
                rotary,
                self_cache,
                cross_cache,
                weights,
            )
        return self.norm(x), weights


def make_embeddings(cfg: TransformerConfig) -> tuple[TokenEmbedding, TokenEmbedding]:
    """The source and target embeddings: one module for both with `share_embeddings` (3.4)."""
    src = TokenEmbedding(cfg.src_vocab_size, cfg.d_model, cfg.pad_id, cfg.scale_embeddings)
    if cfg.share_embeddings:
        return src, src
    tgt = TokenEmbedding(cfg.target_vocab_size, cfg.d_model, cfg.pad_id, cfg.scale_embeddings)
    return src, tgt


def init_linear_weights(module: nn.Module) -> None:
    """Xavier-uniform matrices and zero biases for every nn.Linear (as nn.Transformer does)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class EncoderDecoder(nn.Module):
    """An encoder, a decoder and the pre-softmax projection over the target vocabulary: the frame
    that `Transformer` and the recurrent baseline (`rnn.RNNSearch`) share.

    model(src_ids (B, S), tgt_in_ids (B, T)) -> logits (B, T, V_tgt). `encoder_class` and
    `decoder_class` are built as cls(config, embedding). Weight tying (paper 3.4):
    `share_embeddings` uses one embedding for source and target (joint vocabulary); `tie_output`
    makes the pre-softmax projection the target embedding matrix.
    """

    def __init__(
        self,
        config: TransformerConfig,
        encoder_class: type[nn.Module],
        decoder_class: type[nn.Module],
    ) -> None:
        super().__init__()
        cfg = self.config = config
        src_embedding, tgt_embedding = make_embeddings(cfg)
        self.encoder = encoder_class(cfg, src_embedding)
        self.decoder = decoder_class(cfg, tgt_embedding)
        self.output_projection = nn.Linear(cfg.d_model, cfg.target_vocab_size, bias=cfg.output_bias)
        init_linear_weights(self)
        if cfg.tie_output:
            self.output_projection.weight = tgt_embedding.weight

    def forward(
        self, src_ids: Tensor, tgt_in_ids: Tensor, weights: AttentionWeights | None = None
    ) -> Tensor:
        """src_ids (B, S), tgt_in_ids (B, T) -> logits (B, T, V) (teacher forcing).

        weights: if given, it receives every layer's attention weights (encoder, decoder, cross)."""
        src_mask = padding_mask(src_ids, self.config.pad_id)
        memory = self.encode(src_ids, src_mask, weights)
        return self.decode(tgt_in_ids, memory, src_mask, weights=weights)

    def encode(
        self,
        src_ids: Tensor,
        src_mask: Tensor | None = None,
        weights: AttentionWeights | None = None,
    ) -> Tensor:
        """src_ids (B, S) -> memory (B, S, D). Run once per source sentence."""
        return self.encoder(src_ids, src_mask, weights)

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        memory_mask: Tensor | None = None,
        cache: Cache | None = None,
        weights: AttentionWeights | None = None,
    ) -> Tensor:
        """tgt_ids (R, T) -> logits (R, T, V). With `cache` (the model's `new_cache()`), tgt_ids
        are the next positions only.

        memory (B, S, D) has one row per source; R is a multiple of B, and consecutive groups of
        R / B target rows (beam search's hypotheses of one sentence) share a memory row."""
        hidden, _ = self.decoder(tgt_ids, memory, memory_mask, cache, weights)
        return self.output_projection(hidden)

    def num_parameters(self) -> int:
        """Trainable and frozen parameters, each shared tensor counted once."""
        return sum(p.numel() for p in self.parameters())


class Transformer(EncoderDecoder):
    """The encoder-decoder Transformer of the paper: a stack of `EncoderLayer`s and one of
    `DecoderLayer`s. model(src_ids (B, S), tgt_in_ids (B, T)) -> logits (B, T, V_tgt)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config, Encoder, Decoder)

    def new_cache(self, capacity: int = 64) -> DecoderCache:
        """An empty cache for incremental decoding with this model, with room for `capacity` target
        positions before its buffers grow (the longest output + 1 for bos allocates once)."""
        return DecoderCache(len(self.decoder.layers), cross_attention=True, capacity=capacity)

    def max_target_positions(self) -> int | None:
        """The most target positions the decoder can place (learned positions: the table's size)."""
        return self.decoder.max_positions()


class EncoderOnly(nn.Module):
    """BERT-style encoder: hidden states, masked-token logits (tied embedding), class logits."""

    def __init__(self, config: TransformerConfig, n_classes: int | None = None) -> None:
        """n_classes: the classification head's size (default: config.n_classes, which records
        it)."""
        super().__init__()
        if n_classes is not None:
            config = config.replace(n_classes=n_classes)
        cfg = self.config = config
        self.encoder = Encoder(
            cfg, TokenEmbedding(cfg.src_vocab_size, cfg.d_model, cfg.pad_id, cfg.scale_embeddings)
        )
        self.mlm_transform = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_model),
            nn.GELU(),
            make_norm(cfg.norm, cfg.d_model, cfg.norm_eps),
        )
        self.mlm_bias = nn.Parameter(torch.zeros(cfg.src_vocab_size))
        self.head = ClassificationHead(cfg.d_model, cfg.n_classes, cfg.pooling, cfg.dropout)
        init_linear_weights(self)

    def forward(self, ids: Tensor, weights: AttentionWeights | None = None) -> Tensor:
        """ids (B, S) -> hidden states (B, S, D). weights: if given, receives every layer's
        self-attention weights (B, H, S, S) in weights.encoder."""
        return self.encoder(ids, weights=weights)

    def masked_lm_logits(self, ids: Tensor) -> Tensor:
        """Logits over the vocabulary at every position (B, S, V), for masked-token prediction."""
        return self.mlm_output(self.encoder(ids))

    def mlm_output(self, hidden: Tensor) -> Tensor:
        """Hidden states (..., D) -> vocabulary logits (..., V): the transform, then the tied
        embedding matrix and a bias."""
        return F.linear(self.mlm_transform(hidden), self.encoder.embedding.weight, self.mlm_bias)

    def classify(self, ids: Tensor) -> Tensor:
        """Class logits (B, n_classes), pooled as config.pooling says: the first token's state
        (put a [CLS] id there; qkv uses bos) or the mean of the real tokens' states."""
        return self.head(self.encoder(ids), ids != self.config.pad_id)


class DecoderOnly(nn.Module):
    """GPT-style causal language model: ids (B, T) -> next-token logits (B, T, V)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        cfg = self.config = config
        embedding = TokenEmbedding(
            cfg.src_vocab_size, cfg.d_model, cfg.pad_id, cfg.scale_embeddings
        )
        self.decoder = Decoder(cfg, embedding, cross_attention=False)
        self.lm_head = nn.Linear(cfg.d_model, cfg.src_vocab_size, bias=False)
        init_linear_weights(self)
        if cfg.tie_output:
            self.lm_head.weight = embedding.weight

    def forward(
        self,
        ids: Tensor,
        cache: DecoderCache | None = None,
        weights: AttentionWeights | None = None,
    ) -> Tensor:
        """ids (B, T) -> logits (B, T, V). With `cache`, ids are the next positions only.
        weights: if given, receives every layer's self-attention weights in weights.decoder."""
        hidden, _ = self.decoder(ids, cache=cache, weights=weights)
        return self.lm_head(hidden)

    # --- the decoding interface (qkv.decode.interface.Decodable): a prompt instead of a memory
    def encode(self, prompt_ids: Tensor, prompt_mask: Tensor | None = None) -> None:
        """No encoder, so no memory: the searches then continue the prompt itself."""
        return None

    def decode(
        self,
        ids: Tensor,
        memory: None = None,
        memory_mask: None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """ids (B, T) -> logits (B, T, V); the same as calling the model (there is no memory)."""
        return self(ids, cache)

    def new_cache(self, capacity: int = 64) -> DecoderCache:
        """An empty cache with room for `capacity` positions (prompt included) before it grows."""
        return DecoderCache(len(self.decoder.layers), cross_attention=False, capacity=capacity)

    def max_target_positions(self) -> int | None:
        """The most positions (prompt included) the model can place."""
        return self.decoder.max_positions()


def count_parameters(config: TransformerConfig) -> int:
    """Parameters of `Transformer(config)`, computed on the meta device (no memory, any size)."""
    with torch.device("meta"):
        return Transformer(config).num_parameters()


__all__ = ["Decoder", "DecoderOnly", "Encoder", "EncoderOnly", "Transformer", "count_parameters"]
