"""Attention kernels for decoding, swapped into a model from outside (`use_decoding_attention`,
with `runtime.swap.replace_modules`).

Incremental decoding asks the model's `MultiHeadedAttention` (equation 1, computed plainly) for
something narrow: a few queries per row, and cross-attention where the g beams of a sentence read
that sentence's memory row. Two kernels do these faster, with the same math: beams sharing a
memory row attend to it in one product (its keys and values stored and read once per source, not
g times), and few queries on the CPU in eval mode run as two plain matmuls from
`FEW_QUERY_MIN_ROWS` query rows on. Asked for attention weights, a prepared model computes them as
the plain one does.

Details: docs/architecture.md, "Attention kernels for decoding"; the thresholds and their
measurements: docs/benchmarks.md.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..model.attention import (
    MultiHeadedAttention,
    rows_per_memory_row,
    scaled_dot_product_attention,
)
from .swap import rebuilt_as, replace_modules

FEW_QUERY_MAX_T = 8  # queries per row (one per step; a sentence's beams stacked)
FEW_QUERY_MIN_ROWS = 512  # B * H * T query rows from which two matmuls beat the fused kernel
# bf16: the fused kernel is several times slower than in fp32 for one query a row; two bf16
# matmuls beat it from about 64 rows, and below that the fp32 fused kernel on q, k, v cast up does
# (docs/benchmarks.md, "bf16 against fp32")
FEW_QUERY_MIN_ROWS_BF16 = 64


class DecodingAttention(MultiHeadedAttention):
    """`MultiHeadedAttention` with the decoding kernels; same weights, same results (inference)."""

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        bias: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of B = g * B_m query rows over B_m memory rows, each read by g consecutive
        query rows (beam search's g beams of a sentence): the g queries of a group are stacked, so
        the memory row is stored and read once.

        q (B, H, T, Dh), k/v (B_m, H_kv, S, Dh) -> (B, H, T, Dh), and the weights or None.
        """
        B, H, T, Dh = q.shape
        Bm = k.size(0)
        if Bm == B:
            return self._attend_rows(q, k, v, mask, bias, need_weights)
        g = rows_per_memory_row(B, k, mask)
        if bias is not None or (mask is not None and mask.size(2) != 1):
            raise ValueError("shared memory rows need a key-only mask and no score bias")
        q = q.view(Bm, g, H, T, Dh).transpose(1, 2).reshape(Bm, H, g * T, Dh)  # a group's queries
        out, weights = self._attend_rows(q, k, v, mask, None, need_weights)  # (B_m, H, g*T, Dh)
        out = out.view(Bm, H, g, T, Dh).transpose(1, 2).reshape(B, H, T, Dh)
        if weights is not None:
            weights = weights.view(Bm, H, g, T, -1).transpose(1, 2).reshape(B, H, T, -1)
        return out, weights

    def _attend_rows(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        bias: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        B, H, T, _ = q.shape
        bf16 = q.dtype == torch.bfloat16
        fast = self.fused and not need_weights and not self.training and q.device.type == "cpu"
        if fast and T <= FEW_QUERY_MAX_T:
            min_rows = FEW_QUERY_MIN_ROWS_BF16 if bf16 else FEW_QUERY_MIN_ROWS
            if min_rows <= B * H * T:
                return self._few_queries(q, k, v, mask, bias), None
            if bf16:  # fewer rows: the fp32 fused kernel beats the bf16 one, casts included
                bias = None if bias is None else bias.float()
                out, _ = super().attend(q.float(), k.float(), v.float(), mask, bias, False)
                return out.to(q.dtype), None
        return super().attend(q, k, v, mask, bias, need_weights)

    def _few_queries(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None
    ) -> Tensor:
        """Two matmuls, the query heads of a key/value head stacked.

        q (B, H, T, Dh) -> (B, H, T, Dh).
        """
        _, H, T, _ = q.shape
        if mask is not None:
            mask = self._stack_queries(mask, H, T)
        if bias is not None:
            bias = self._stack_queries(bias, H, T)
        if q.dtype == torch.bfloat16:  # bf16 products of a cache's strided slice run far slower
            k, v = k.contiguous(), v.contiguous()  # than a copy and the contiguous product
        return grouped_attention(q, k, v, mask, bias, self.score.scale / self.temperature)

    def _stack_queries(self, m: Tensor, H: int, T: int) -> Tensor:
        """A mask or bias (1|B, 1|H, 1|T, S) laid out for stacked queries.

        -> (1|B, H_kv, group*T, S); one that is the same for every query is returned as it is.
        """
        if m.size(1) == 1 and m.size(2) == 1:
            return m  # the same for every query: broadcasts as it is
        rows = m.size(0)
        return m.expand(rows, H, T, m.size(-1)).reshape(rows, self.n_kv_heads, -1, m.size(-1))


def grouped_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None, scale: float
) -> Tensor:
    """Equation 1 (`scaled_dot_product_attention`) with the query heads of a key/value head stacked
    as that head's queries: k and v are read as they are, not repeated per query head.

    q (B, H, T, Dh), k/v (B, H_kv, S, Dh), mask/bias laid out for stacked queries
    ((1|B, H_kv, group*T, S), or one for every query) -> (B, H, T, Dh).
    """
    B, H, T, Dh = q.shape
    q = q.reshape(B, k.size(1), -1, Dh)  # (B, H_kv, group*T, Dh)
    out, _ = scaled_dot_product_attention(q, k, v, mask, bias, scale=scale)
    return out.view(B, H, T, Dh)


def use_decoding_attention(model: nn.Module) -> nn.Module:
    """Replace every `MultiHeadedAttention` of `model` (in place) by a `DecodingAttention` holding
    the same weights (`replace_modules`); returns the model, or its replacement when the model is
    one attention module."""
    return replace_modules(model, MultiHeadedAttention, lambda m: rebuilt_as(m, DecodingAttention))


__all__ = [
    "FEW_QUERY_MAX_T",
    "FEW_QUERY_MIN_ROWS",
    "FEW_QUERY_MIN_ROWS_BF16",
    "DecodingAttention",
    "grouped_attention",
    "use_decoding_attention",
]
