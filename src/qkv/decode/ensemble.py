"""Several trained encoder-decoders decoding as one: an ensemble (e.g. Sennrich et al., 2016).

At every step each member predicts the next token from its own encoding of the source and its own
cache, and the ensemble's distribution is the mean of the members' probabilities,

    P(y_t | y_<t, x) = 1/M * sum_m P_m(y_t | y_<t, x),

so `greedy`, `beam_search` and `sample` run on an `Ensemble` unchanged. The members must share the
vocabulary (the same tokenizer); their shapes may differ. The searches handle the memory as one
tensor, so the members' memories are laid side by side along the feature axis:
(B, S, D_1 + ... + D_M).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..model import Transformer
from ..model.cache import DecoderCache


class EnsembleCache:
    """One `DecoderCache` per member, reordered together."""

    def __init__(self, caches: list[DecoderCache]) -> None:
        self.members = caches

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the position of the next token)."""
        return self.members[0].length

    def reorder(self, rows: Tensor, sources: Tensor | None = None) -> None:
        """As `DecoderCache.reorder`, for every member."""
        for cache in self.members:
            cache.reorder(rows, sources)


class Ensemble(nn.Module):
    """Encoder-decoder Transformers over one vocabulary, their next-token probabilities averaged."""

    def __init__(self, members: list[Transformer]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        first = members[0].config
        for i, m in enumerate(members[1:], start=2):
            c = m.config
            if (c.src_vocab_size, c.target_vocab_size, c.pad_id, c.bos_id, c.eos_id) != (
                first.src_vocab_size,
                first.target_vocab_size,
                first.pad_id,
                first.bos_id,
                first.eos_id,
            ):
                raise ValueError(
                    f"model {i} has another vocabulary or other special ids than model 1: "
                    "ensemble members must share their tokenizer"
                )
        self.members = nn.ModuleList(members)
        self.widths = [m.config.d_model for m in members]
        self.config = first  # the special ids, which all members share

    def encode(self, src_ids: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src_ids (B, S) -> the members' memories side by side (B, S, D_1 + ... + D_M)."""
        return torch.cat([m.encode(src_ids, src_mask) for m in self.members], dim=-1)

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        memory_mask: Tensor | None = None,
        cache: EnsembleCache | None = None,
    ) -> Tensor:
        """tgt_ids (R, T) -> log of the mean of the members' next-token probabilities (R, T, V).

        The result is normalized (a log-softmax of it changes nothing). memory as `encode` returns
        it; cache from `new_cache`.
        """
        memories = memory.split(self.widths, dim=-1)
        caches = [None] * len(self.members) if cache is None else cache.members
        # (M, R, T, V)
        logp = torch.stack(
            [
                F.log_softmax(m.decode(tgt_ids, mem, memory_mask, c).float(), dim=-1)
                for m, mem, c in zip(self.members, memories, caches, strict=True)
            ]
        )
        return torch.logsumexp(logp, dim=0) - math.log(len(self.members))

    def new_cache(self, capacity: int = 64) -> EnsembleCache:
        """An empty cache: one `DecoderCache` per member."""
        return EnsembleCache([m.new_cache(capacity) for m in self.members])

    def max_target_positions(self) -> int | None:
        """The fewest target positions any member can place (None: no member has a limit)."""
        limits = [n for m in self.members if (n := m.max_target_positions()) is not None]
        return min(limits, default=None)
