"""The decoding interface: what greedy, beam search and sampling need of a model, and nothing more.

`Transformer`, `DecoderOnly` and `Ensemble` implement it, so the searches hold no type branches:

    # (B, S, D), once per source; None: no encoder (decoder-only), and the output continues `src`
    # itself (a prompt)
    memory = model.encode(src, src_mask)
    # ids (R, T) -> (R, T, V); R = g * B rows, the g rows of a source consecutive (beam search's
    # hypotheses)
    logits = model.decode(ids, memory, src_mask, cache)
    # the explicit incremental state; reorder(rows, sources)
    cache = model.new_cache(capacity)
    # the most target positions it can place (None: no limit)
    model.max_target_positions()
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from ..config import TransformerConfig
from ..model.cache import Cache


class Decodable(Protocol):
    """A model the searches can decode. `config` gives the special ids (pad, bos, eos)."""

    config: TransformerConfig
    training: bool

    def encode(self, src_ids: Tensor, src_mask: Tensor | None = None) -> Tensor | None: ...

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor | None,
        memory_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> Tensor: ...

    def new_cache(self, capacity: int = 64) -> Cache: ...

    def max_target_positions(self) -> int | None: ...


__all__ = ["Decodable"]
