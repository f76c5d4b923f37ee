"""Token embeddings: ids -> vectors, scaled by sqrt(d_model) as in the paper (section 3.4).

The padding row is zero and never trained: `nn.Embedding(padding_idx=...)` zeroes its gradient from
the lookup, and a gradient hook also zeroes it when the same matrix is the tied output projection
(whose softmax would otherwise push gradient into it).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """ids (B, T) -> embeddings (B, T, D) * sqrt(D) (if scale). `weight` is (V, D)."""

    def __init__(
        self, vocab_size: int, d_model: int, padding_idx: int | None = None, scale: bool = True
    ) -> None:
        super().__init__()
        self.lookup = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        # so the scaled embedding has unit scale
        nn.init.normal_(self.lookup.weight, std=d_model**-0.5)
        self.padding_idx = padding_idx
        self.scale = math.sqrt(d_model) if scale else 1.0
        if padding_idx is not None:
            with torch.no_grad():
                self.lookup.weight[padding_idx].zero_()
            self.lookup.weight.register_hook(self._zero_pad_grad)

    @property
    def weight(self) -> nn.Parameter:
        return self.lookup.weight

    def _zero_pad_grad(self, grad: Tensor) -> Tensor:
        return grad.index_fill(0, torch.tensor([self.padding_idx], device=grad.device), 0.0)

    def forward(self, ids: Tensor) -> Tensor:
        return self.lookup(ids) * self.scale  # (B, T, D)

    @classmethod
    def from_pretrained(
        cls,
        weight: Tensor,
        padding_idx: int | None = None,
        freeze: bool = True,
        scale: bool = False,
    ) -> TokenEmbedding:
        """An embedding initialised from a (V, D) matrix (e.g. word2vec), frozen or trainable."""
        emb = cls(weight.size(0), weight.size(1), padding_idx=padding_idx, scale=scale)
        with torch.no_grad():
            emb.lookup.weight.copy_(weight)
            if padding_idx is not None:
                emb.lookup.weight[padding_idx].zero_()
        emb.lookup.weight.requires_grad_(not freeze)
        return emb
