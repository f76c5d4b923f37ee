"""Attention: score functions, the paper's scaled dot-product attention, and multi-head attention.

    Attention(Q, K, V) = softmax(score(Q, K) + bias) V                  score: (B, H, T_q, T_k)
    scaled dot-product:  score = Q K^T / sqrt(d_k)                      (paper eq. 1, the default)
    dot-product:         score = Q K^T                                  (Luong)
    additive:            score = v^T tanh(W_q q + W_k k)                (Bahdanau)
    bilinear:            score = Q W K^T                                (Luong "general")
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O
    head_i             = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Equation 1 is written out once, readable, in `scaled_dot_product_attention`; `MultiHeadedAttention`
runs PyTorch's fused twin unless the weights are asked for (`fused`). Masks are bool, True = may
attend. Details: docs/architecture.md, "Attention".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cache import KVCache
from .positions import apply_rotary


def softmax_attention(
    scores: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout: nn.Module | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(scores + bias) V with masked keys removed.

    scores (B, H, T_q, T_k), v (B, H, T_k, Dv), mask/bias broadcast to the scores. Returns the
    output (B, H, T_q, Dv) and the weights (B, H, T_q, T_k). A row whose keys are all masked gets
    zero weights.
    """
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        # finite: no NaN, even in grads
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask  # zero rows where nothing may be attended (as F.sdpa does)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout: nn.Module | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The paper's equation, written out: softmax(Q K^T / sqrt(d_k)) V.

    q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v) -> (..., T_q, d_v), and the weights
    (..., T_q, T_k). `scale` replaces 1 / sqrt(d_k) (a temperature, Luong's plain dot product), as
    in `F.scaled_dot_product_attention`.
    """
    d_k = q.size(-1)
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # Q K^T / sqrt(d_k): (..., T_q, T_k)
    return softmax_attention(scores, v, mask, bias, dropout)


class DotProductScore(nn.Module):
    """score = Q K^T * scale: 1/sqrt(d_k) is the paper's scaled dot product, 1 the plain one."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return q @ k.transpose(-2, -1) * self.scale  # (B, H, T_q, T_k)


class AdditiveScore(nn.Module):
    """Bahdanau: score(q_i, k_j) = v^T tanh(W_q q_i + W_k k_j), per head, hidden width A = Dh.
    Memory O(T_q T_k Dh)."""

    def __init__(self, n_heads: int, d_head: int) -> None:
        super().__init__()
        self.w_q = nn.Parameter(torch.empty(n_heads, d_head, d_head))
        self.w_k = nn.Parameter(torch.empty(n_heads, d_head, d_head))
        self.v = nn.Parameter(torch.empty(n_heads, d_head))
        for w in (self.w_q, self.w_k):
            nn.init.xavier_uniform_(w)
        nn.init.normal_(self.v, std=d_head**-0.5)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        """Every head: q (B, H, T_q, Dh), k (B, H, T_k, Dh) -> (B, H, T_q, T_k)."""
        return self.score_keys(q, self.project_keys(k))

    def project_keys(self, k: Tensor, head: int | None = None) -> Tensor:
        """W_k k, which depends on the keys alone (computed once per source when decoding).

        k (B, H, T_k, Dh) -> (B, H, T_k, A); for one `head`, (..., T_k, Dh) -> (..., T_k, A).
        """
        return k @ (self.w_k if head is None else self.w_k[head])  # (H, Dh, A) or (Dh, A)

    def score_keys(self, q: Tensor, kw: Tensor, head: int | None = None) -> Tensor:
        """v^T tanh(W_q q + kw) from the projected keys kw = W_k k.

        q (B, H, T_q, Dh), kw (B, H, T_k, A) -> (B, H, T_q, T_k); for one `head`, q (..., T_q, Dh),
        kw (..., T_k, A) -> (..., T_q, T_k).
        """
        if head is None:  # every head's weights, laid out to broadcast over (B, H, ...)
            w_q, v = self.w_q, self.v[:, None, :, None]  # (H, Dh, A), (H, 1, A, 1)
        else:
            w_q, v = self.w_q[head], self.v[head, :, None]  # (Dh, A), (A, 1)
        qw = q @ w_q  # (..., T_q, A)
        hidden = torch.tanh(qw[..., :, None, :] + kw[..., None, :, :])  # (..., T_q, T_k, A)
        return (hidden @ v).squeeze(-1)  # (..., T_q, T_k)


class BilinearScore(nn.Module):
    """Luong's "general" score: score = Q W K^T with one W (Dh, Dh) per head."""

    def __init__(self, n_heads: int, d_head: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_heads, d_head, d_head))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return (q @ self.weight[None]) @ k.transpose(-2, -1)  # (B, H, T_q, T_k)


def make_score(kind: str, n_heads: int, d_head: int) -> nn.Module:
    if kind == "scaled_dot":
        return DotProductScore(1.0 / math.sqrt(d_head))
    if kind == "dot":
        return DotProductScore(1.0)
    if kind == "additive":
        return AdditiveScore(n_heads, d_head)
    if kind == "bilinear":
        return BilinearScore(n_heads, d_head)
    raise ValueError(f"unknown attention score {kind!r}")


class MultiHeadedAttention(nn.Module):
    """Multi-head attention with fused projections and heads split by reshape.

    Self-attention: `in_proj` stacks [W^Q; W^K; W^V] (the layout of
    `nn.MultiheadAttention.in_proj_weight`), one matmul for all three. Cross-attention
    (`cross=True`) reads two inputs, so it has `q_proj` (W^Q, for the target) and `kv_proj`
    ([W^K; W^V], for the memory, computed once per source when decoding). Every projection is a
    plain `nn.Linear` module, so module-level tools (dynamic int8 quantization) apply. With
    n_kv_heads < n_heads, groups of query heads share a key/value head (grouped-query attention;
    n_kv_heads = 1 is multi-query attention).

    `fused`: the dot-product scores run through `F.scaled_dot_product_attention` unless the weights
    are requested; False runs the readable `scaled_dot_product_attention`. Same result either way.
    Another score runs its module, then `softmax_attention`.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        score: str = "scaled_dot",
        temperature: float = 1.0,
        cross: bool = False,
    ) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(
                f"d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv_heads} do not divide"
            )
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_head = d_model // n_heads
        self.q_dim = d_model
        self.kv_dim = n_kv_heads * self.d_head
        self.cross = cross
        if cross:
            self.q_proj = nn.Linear(d_model, self.q_dim, bias=bias)
            self.kv_proj = nn.Linear(d_model, 2 * self.kv_dim, bias=bias)
        else:
            self.in_proj = nn.Linear(d_model, self.q_dim + 2 * self.kv_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.score = make_score(score, n_heads, self.d_head)
        self.temperature = temperature
        self.dropout = nn.Dropout(dropout)
        # the fused kernel computes exactly this
        self.fused = isinstance(self.score, DotProductScore)

    def _heads(self, x: Tensor, n: int) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.d_head).transpose(1, 2)  # (B, T, n*Dh) -> (B, n, T, Dh)

    def project_self(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention projections in one matmul.

        x (B, T, D) -> q (B, H, T, Dh), k and v (B, H_kv, T, Dh).
        """
        q, k, v = self.in_proj(x).split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        return (
            self._heads(q, self.n_heads),
            self._heads(k, self.n_kv_heads),
            self._heads(v, self.n_kv_heads),
        )

    def project_query(self, query: Tensor) -> Tensor:
        """Cross-attention queries: query (B, T, D) -> (B, H, T, Dh)."""
        return self._heads(self.q_proj(query), self.n_heads)

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Memory keys and values, cached once per source. (B, S, D) -> 2 x (B, H_kv, S, Dh)."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        return self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)

    def projection(self) -> tuple[Tensor, Tensor | None]:
        """[W^Q; W^K; W^V] (D + 2 D_kv, D) and its bias, whichever layout holds them."""
        if not self.cross:
            return self.in_proj.weight, self.in_proj.bias
        bias = (
            None if self.q_proj.bias is None else torch.cat([self.q_proj.bias, self.kv_proj.bias])
        )
        return torch.cat([self.q_proj.weight, self.kv_proj.weight]), bias

    def forward(
        self,
        query: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """query (B, T, D); memory (B, S, D) for cross-attention, None for self-attention.

        mask: bool, broadcast to (B, H, T, S), True = may attend. bias: float (1|B, H, T, S) added
        to the scores (relative positions, ALiBi). rotary: (cos, sin) (T, Dh) for the T new
        positions (RoPE). cache: self-attention appends the new keys/values; cross-attention
        computes them on first use. Returns the output (B, T, D) and, if need_weights, the weights
        (B, H, T, S).

        Cross-attention also takes a memory of B_m = B / g rows (and a mask of B_m rows, keys only):
        beam search's g beams of a sentence read one memory row (see `attend`). Its keys and values
        are computed and cached once per memory row, not once per beam.
        """
        B, T, _ = query.shape
        if (memory is not None) != self.cross:
            raise ValueError(
                "this attention was built for "
                + (
                    "cross-attention: pass memory"
                    if self.cross
                    else "self-attention: build it with cross=True to attend to a memory"
                )
            )
        if memory is None:  # self-attention
            q, k, v = self.project_self(query)
            if rotary is not None:
                q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
            if cache is not None:
                k, v = cache.append(k, v)
        else:  # cross-attention: the memory's keys/values are computed once per source when cached
            q = self.project_query(query)
            if cache is None or cache.empty:
                k, v = self.project_memory(memory)
                if cache is not None:
                    cache.set_static(k, v)
            else:
                k, v = cache.keys, cache.values
        out, weights = self.attend(q, k, v, mask, bias, need_weights)
        out = out.transpose(1, 2).reshape(B, T, self.q_dim)  # concat heads: (B, T, H*Dh)
        return self.out_proj(out), weights

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        bias: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """All heads at once.

        q (B, H, T, Dh), k/v (B_m, H_kv, S, Dh) -> (B, H, T, Dh), and the weights or None. B_m = B,
        or B / g when g consecutive query rows share a memory row (beam search's g beams of a
        sentence): the plain model repeats each memory row for its g rows (`repeat_memory_rows`),
        `qkv.runtime.decoding_attention` stacks their queries instead.
        """
        if k.size(0) != q.size(0):
            k, v, mask = repeat_memory_rows(q.size(0), k, v, mask)
        if self.fused and not need_weights:  # the fused twin of the readable path below
            attn_mask = mask
            if bias is not None:
                attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=attn_mask,
                dropout_p=self.dropout.p if self.training else 0.0,
                scale=self.score.scale / self.temperature,
                enable_gqa=self.n_kv_heads != self.n_heads,
            )
            return out, None
        if self.n_kv_heads != self.n_heads:  # each key/value head serves a group of query heads
            k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
            v = v.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        if isinstance(self.score, DotProductScore):  # equation 1 as written, with a temperature
            scale = self.score.scale / self.temperature
            out, weights = scaled_dot_product_attention(q, k, v, mask, bias, self.dropout, scale)
        else:
            scores = self.score(q, k) / self.temperature  # (B, H, T, S)
            out, weights = softmax_attention(scores, v, mask, bias, self.dropout)
        return out, weights if need_weights else None


def rows_per_memory_row(B: int, k: Tensor, mask: Tensor | None) -> int:
    """g, the query rows per memory row (k has B_m = B / g rows); a mask has 1 or B_m rows."""
    if B % k.size(0) or (mask is not None and mask.size(0) not in (1, k.size(0))):
        raise ValueError(f"{B} query rows cannot share {k.size(0)} memory rows")
    return B // k.size(0)


def repeat_memory_rows(
    B: int, k: Tensor, v: Tensor, mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Beam search's layout made plain: B = g * B_m query rows come in consecutive groups of g that
    read one memory row (a sentence's g beams read its memory). Keys/values (B_m, H_kv, S, Dh) and a
    key mask (B_m | 1, 1, 1, S) -> each memory row repeated g times, (B, ...)."""
    g = rows_per_memory_row(B, k, mask)
    if mask is not None and mask.size(0) > 1:
        mask = mask.repeat_interleave(g, dim=0)
    return k.repeat_interleave(g, dim=0), v.repeat_interleave(g, dim=0), mask


@dataclass
class AttentionWeights:
    """The attention weights of a forward pass, one tensor per layer, every head, in layer order.

        weights = AttentionWeights()
        logits = model(src_ids, tgt_in_ids, weights=weights)
        weights.cross[-1]             # the last decoder layer's cross-attention (B, H, T, S)

    encoder: the encoder layers' self-attention, (B, H, S, S)
    decoder: the decoder layers' masked self-attention, (B, H, T, T_k) (T_k = cached + T positions)
    cross:   the decoder layers' attention over the memory, (B, H, T, S)

    Each attention module that runs with it appends its weights to the list of its kind (encoder
    layers to `encoder`, decoder layers to `decoder` and `cross`), computed by the readable path
    (`softmax_attention`): the fused kernel gives no weights. Row q of a map is query q's weights
    over the keys: they sum to 1 over the keys it may attend to and are 0 elsewhere. With a cache,
    every decoding step appends one more entry per layer (use a fresh one per step).
    """

    encoder: list[Tensor] = field(default_factory=list)
    decoder: list[Tensor] = field(default_factory=list)
    cross: list[Tensor] = field(default_factory=list)


def per_head_attention(
    mha: MultiHeadedAttention,
    query: Tensor,
    memory: Tensor | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """The reference: MultiHead = Concat(head_1..head_h) W^O, one head at a time (a Python loop).

    Slow and literal, for reading against the paper and for testing the fused `MultiHeadedAttention`
    (scaled dot-product score). query (B, T, D), memory (B, S, D) or None -> (B, T, D).
    """
    memory = query if memory is None else memory
    d = mha.q_dim
    Dh = mha.d_head
    group = mha.n_heads // mha.n_kv_heads
    W, b = mha.projection()
    if b is None:
        b = torch.zeros(W.size(0), dtype=W.dtype, device=W.device)
    heads = []
    for i in range(mha.n_heads):
        j = i // group  # the key/value head this query head reads
        q_rows = slice(i * Dh, (i + 1) * Dh)
        k_rows = slice(d + j * Dh, d + (j + 1) * Dh)
        v_rows = slice(d + mha.kv_dim + j * Dh, d + mha.kv_dim + (j + 1) * Dh)
        q = query @ W[q_rows].T + b[q_rows]  # Q W_i^Q: (B, T, Dh)
        k = memory @ W[k_rows].T + b[k_rows]  # K W_i^K: (B, S, Dh)
        v = memory @ W[v_rows].T + b[v_rows]  # V W_i^V: (B, S, Dh)
        head_mask = None if mask is None else mask[:, min(i, mask.size(1) - 1)]  # (B, T|1, S)
        head, _ = scaled_dot_product_attention(q, k, v, head_mask)
        heads.append(head)
    return mha.out_proj(torch.cat(heads, dim=-1))  # Concat(head_1..head_h) W^O
