"""The incremental-decoding cache: an explicit object the decoder reads and writes, nothing hidden.

At decoding step t the decoder sees only the newest token. Its self-attention needs the keys and
values of all earlier target positions (they grow by one per step); its cross-attention needs the
keys and values of the source memory (computed once per source, then reused). `DecoderCache` holds
both, one `KVCache` per attention module, and `reorder(rows, sources)` follows beam search (or drops
finished sentences): the self-attention caches have one row per hypothesis, the cross-attention
caches one row per source, which all the hypotheses of that source read (see
`MultiHeadedAttention.forward`).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor


class Cache(Protocol):
    """Incremental-decoding state, whatever the model: its length, and `reorder(rows, sources)`
    (`DecoderCache` is the Transformer's; the decoding interface, `decode.interface`, takes any)."""

    @property
    def length(self) -> int: ...

    def reorder(self, rows: Tensor, sources: Tensor | None = None) -> None: ...


class KVCache:
    """Keys and values (B, H_kv, T, Dh) of one attention module.

    Self-attention appends into a preallocated buffer that doubles when full (no `torch.cat` per
    step); cross-attention stores the memory's keys and values once (`static`).
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._k: Tensor | None = None  # (B, H_kv, capacity, Dh)
        self._v: Tensor | None = None
        self.length = 0

    @property
    def empty(self) -> bool:
        return self._k is None

    @property
    def rows(self) -> int:
        """Batch rows held (0 when empty)."""
        return 0 if self._k is None else self._k.size(0)

    @property
    def keys(self) -> Tensor:
        assert self._k is not None, "empty cache"
        return self._k[:, :, : self.length]

    @property
    def values(self) -> Tensor:
        assert self._v is not None, "empty cache"
        return self._v[:, :, : self.length]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add T new positions k, v (B, H_kv, T, Dh); return all keys and values so far.

        -> keys, values (B, H_kv, L, Dh), L = positions held.
        """
        new_length = self.length + k.size(2)
        buffer_k, buffer_v = self.reserve(k, v)
        buffer_k[:, :, self.length : new_length] = k
        buffer_v[:, :, self.length : new_length] = v
        self.length = new_length
        return self.keys, self.values

    def reserve(self, k: Tensor, v: Tensor, spare: int = 0) -> tuple[Tensor, Tensor]:
        """The whole buffers (B, H_kv, capacity, Dh), grown if they cannot hold k's T positions
        (B, H_kv, T, Dh) after those held and `spare` more (a new buffer: capacity + spare). A step
        that writes its keys and values into them itself (`runtime.captured`) then calls
        `advance(T)`."""
        new_length = self.length + k.size(2) + spare
        if self._k is None or new_length > self._k.size(2):
            self._grow(k, v, max(2 * new_length, self.capacity + spare))
        assert self._k is not None and self._v is not None
        return self._k, self._v

    def advance(self, positions: int) -> None:
        """Count `positions` more as held: written into the buffers `reserve` gave."""
        self.length += positions

    def set_static(self, k: Tensor, v: Tensor) -> None:
        """Store keys and values computed once (cross-attention over the source), contiguous: they
        are views into the fused key/value projection, whose strides would make every step's product
        copy them."""
        self._k, self._v = k.contiguous(), v.contiguous()
        self.length = k.size(2)

    def cast(self, dtype: torch.dtype) -> None:
        """Hold keys and values in `dtype` from now on (the buffers converted once, when they are
        of another): a decoding back-end may store them narrower than the model computes."""
        if self._k is not None and self._v is not None and self._k.dtype != dtype:
            self._k, self._v = self._k.to(dtype), self._v.to(dtype)

    def _grow(self, k: Tensor, v: Tensor, capacity: int) -> None:
        B, H, _, Dh = k.shape
        new_k = k.new_zeros(B, H, capacity, Dh)  # finite: a masked read of NaN is NaN
        new_v = v.new_zeros(B, H, capacity, v.size(-1))
        if self._k is not None and self._v is not None:
            new_k[:, :, : self.length] = self.keys
            new_v[:, :, : self.length] = self.values
        self._k, self._v = new_k, new_v

    def select_rows(self, index: Tensor, moved: Tensor | None = None) -> None:
        """Keep batch rows `index` (B',), in that order: beam back-pointers, or dropping rows.

        Only the filled part is gathered. With room to spare and no more rows than the buffer has,
        the rows are written back into the buffer's first B' rows: the buffer is reused every step
        instead of a fresh one being allocated (and filled) per step and layer. moved (M,): when
        `index` keeps the number of rows, the rows i with index[i] != i; only those are copied (the
        others already hold their row)."""
        if self._k is None or self._v is None:
            return
        if moved is not None and len(index) == self._k.size(0) and self.length < self._k.size(2):
            rows = index.index_select(0, moved)  # gathered before anything is written
            self._k[:, :, : self.length].index_copy_(0, moved, self.keys.index_select(0, rows))
            self._v[:, :, : self.length].index_copy_(0, moved, self.values.index_select(0, rows))
            return
        # (B', H_kv, L, Dh)
        k, v = self.keys.index_select(0, index), self.values.index_select(0, index)
        if self.length == self._k.size(2):  # static, or a full buffer
            self._k, self._v = k, v
            return
        rows = len(index)
        if rows > self._k.size(0):  # more rows than the buffer holds (beam search's first step)
            self._k = self._k.new_zeros(rows, *self._k.shape[1:])
            self._v = self._v.new_zeros(rows, *self._v.shape[1:])
        else:
            self._k, self._v = self._k[:rows], self._v[:rows]  # contiguous views of the same buffer
        self._k[:, :, : self.length], self._v[:, :, : self.length] = k, v


class DecoderCache:
    """Per-layer self-attention and cross-attention caches of a decoder stack."""

    def __init__(self, n_layers: int, cross_attention: bool = True, capacity: int = 64) -> None:
        self.self_attn = [KVCache(capacity) for _ in range(n_layers)]
        self.cross_attn = [KVCache() for _ in range(n_layers)] if cross_attention else None

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the position of the next token)."""
        return self.self_attn[0].length if self.self_attn else 0

    def reorder(self, rows: Tensor, sources: Tensor | None = None) -> None:
        """Keep hypothesis rows `rows` (R',) of the self-attention caches and memory rows `sources`
        (B',) of the cross-attention caches, each in that order.

        sources None leaves the cross-attention caches as they are: right when `rows` only moves
        rows among those sharing a source (the beams of one sentence); pass the kept sources when
        some leave the batch (or `rows` itself when every hypothesis row has its own memory row).
        """
        moved = None
        # none leave: copy only the moved
        if self.self_attn and len(rows) == self.self_attn[0].rows:
            moved = (rows != torch.arange(len(rows), device=rows.device)).nonzero().squeeze(1)
        if moved is None or moved.numel():
            for c in self.self_attn:
                c.select_rows(rows, moved)
        if sources is not None:
            for c in self.cross_attn or []:
                c.select_rows(sources)

    def cast(self, dtype: torch.dtype) -> None:
        """Every cache's keys and values held in `dtype` (`KVCache.cast`)."""
        for c in self.self_attn + (self.cross_attn or []):
            c.cast(dtype)

    def layer(self, i: int) -> tuple[KVCache, KVCache | None]:
        return self.self_attn[i], None if self.cross_attn is None else self.cross_attn[i]
