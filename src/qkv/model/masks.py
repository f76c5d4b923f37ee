"""Attention masks. ONE convention everywhere in qkv:

    a mask is a bool tensor that broadcasts to the scores (B, H, T_q, T_k);
    True = this query MAY attend to this key, False = it may not.

This is the convention of `torch.nn.functional.scaled_dot_product_attention` (and the opposite of
`nn.MultiheadAttention`'s `key_padding_mask`, where True means "ignore"). Masks combine with `&`.
A query whose every key is masked (a fully padded sequence) gets an all-zero attention row, not NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens. ids (B, S) -> mask (B, 1, 1, S)."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(q_len: int, k_len: int | None = None, device: torch.device | None = None) -> Tensor:
    """Query i may see keys j <= i + (k_len - q_len): the last q_len of k_len positions.

    -> (1, 1, T_q, T_k). With k_len > q_len the queries are the newest positions of a longer
    sequence (incremental decoding).
    """
    k_len = q_len if k_len is None else k_len
    offset = k_len - q_len
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=offset)[
        None, None
    ]


def window_mask(length: int, radius: int, device: torch.device | None = None) -> Tensor:
    """Restricted self-attention (the paper's Table 1): query i sees keys |i - j| <= radius.

    -> (1, 1, T, T). Each layer then costs O(radius * T * d) and a token reaches another
    (j - i) / radius layers away, not in one.
    """
    if radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    pos = torch.arange(length, device=device)
    return ((pos[:, None] - pos[None, :]).abs() <= radius)[None, None]


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the masks that are not None (None = attend everywhere)."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out
