"""Positional information: the five ways qkv tells attention where tokens are.

Added to the embeddings (absolute):
  * `SinusoidalPositionalEncoding`  PE(pos, 2i)   = sin(pos / 10000^(2i/d))        (paper 3.5)
                                    PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
  * `LearnedPositionalEmbedding`    a trained table, one row per position (BERT, GPT-2)
Applied inside attention (relative):
  * `RotaryEmbedding`               rotate q and k by position-dependent angles (RoPE, Su 2021)
  * `RelativePositionBias`          a learned per-head bias per bucketed distance (T5, Raffel 2020)
  * `ALiBi`                         a fixed per-head linear penalty -m_h * |i - j| (Press 2022)

Biases have shape (1, H, T_q, T_k) and are added to the attention scores; the queries are the LAST
T_q of T_k positions, so the same call serves full passes (T_q = T_k) and incremental decoding
(T_q = 1).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoid_table(length: int, dim: int, base: float = 10000.0, start: int = 0) -> Tensor:
    """PE rows for positions start..start+length-1, sin/cos interleaved: (length, dim), float32."""
    pos = torch.arange(start, start + length, dtype=torch.float64)[:, None]  # (L, 1)
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (ceil(dim/2),)
    angles = pos * inv_freq  # (L, ceil(dim/2))
    # sin, cos, sin, cos, ...
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)[:, :dim]
    return pe.float()


class SinusoidalPositionalEncoding(nn.Module):
    """x + PE[offset : offset + T]. Fixed, no parameters, any length (the table grows)."""

    def __init__(self, d_model: int, base: float = 10000.0, initial_length: int = 512) -> None:
        super().__init__()
        self.d_model = d_model
        self.base = base
        self.register_buffer(
            "table", sinusoid_table(initial_length, d_model, base), persistent=False
        )

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        # x: (B, T, D)
        end = offset + x.size(1)
        if end > self.table.size(0):  # grow by doubling; never capped
            self.table = sinusoid_table(2 * end, self.d_model, self.base).to(self.table.device)
        return x + self.table[offset:end].to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """x + P[offset : offset + T] with P a trained (max_positions, D) table."""

    def __init__(self, max_positions: int, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_positions, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.size(1)
        if end > self.weight.size(0):
            raise ValueError(
                f"sequence of {end} positions exceeds max_positions={self.weight.size(0)} "
                "of the learned positional embedding"
            )
        return x + self.weight[offset:end]


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """RoPE: rotate each (x_i, x_{i+Dh/2}) pair of q and k by angle pos * base^(-2i/Dh).

    Then q_m . k_n depends on m - n only. `forward` returns the (cos, sin) for a range of positions,
    computed once per stack and shared by its layers; `apply_rotary` uses them.
    """

    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"rotary embedding needs an even head size, got {d_head}")
        inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        # (Dh/2,) float64 for exact angles
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(
        self, length: int, offset: int = 0, dtype: torch.dtype = torch.float32
    ) -> tuple[Tensor, Tensor]:
        pos = torch.arange(
            offset, offset + length, device=self.inv_freq.device, dtype=torch.float64
        )
        angles = torch.outer(pos, self.inv_freq)  # (T, Dh/2)
        angles = torch.cat((angles, angles), dim=-1)  # (T, Dh)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, H, T, Dh) rotated by position: x*cos + rotate_half(x)*sin, cos/sin (T, Dh)."""
    return x * cos + rotate_half(x) * sin


def relative_position_bucket(
    relative_position: Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """T5's bucketing of (key_pos - query_pos): exact when small, log-spaced up to max_distance.

    Bidirectional: half the buckets for later keys. Causal: only keys at or before the query count.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    log_ratio = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(
        max_distance / max_exact
    )
    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


def _query_key_positions(q_len: int, k_len: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Positions of the queries (the last q_len of k_len) and of the keys. -> (T_q, 1), (1, T_k)."""
    k_pos = torch.arange(k_len, device=device)
    return k_pos[k_len - q_len :, None], k_pos[None, :]


class RelativePositionBias(nn.Module):
    """T5 relative attention bias: a learned scalar per (head, distance bucket) added to scores."""

    def __init__(
        self, n_heads: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
    ) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.embedding = nn.Embedding(num_buckets, n_heads)

    def forward(self, q_len: int, k_len: int) -> Tensor:
        q_pos, k_pos = _query_key_positions(q_len, k_len, self.embedding.weight.device)
        # (T_q, T_k)
        buckets = relative_position_bucket(
            k_pos - q_pos, self.bidirectional, self.num_buckets, self.max_distance
        )
        return self.embedding(buckets).permute(2, 0, 1)[None]  # (1, H, T_q, T_k)


def alibi_slopes(n_heads: int) -> Tensor:
    """Head slopes m_h: the geometric sequence 2^(-8/n), 2^(-16/n), ...

    When n is not a power of two: the slopes for the power of two below n, then every other slope
    for the power of two above it.
    """

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra)


class ALiBi(nn.Module):
    """Attention with Linear Biases: score(i, j) += -m_h * |i - j|. No parameters, any length."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        # (H, 1, 1)
        self.register_buffer("slopes", alibi_slopes(n_heads)[:, None, None], persistent=False)

    def forward(self, q_len: int, k_len: int) -> Tensor:
        q_pos, k_pos = _query_key_positions(q_len, k_len, self.slopes.device)
        return (-self.slopes * (k_pos - q_pos).abs())[None]  # (1, H, T_q, T_k)
