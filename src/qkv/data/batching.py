"""Token-based batching, as in fairseq and JoeyNMT.

The paper: "Sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000
target tokens." `TokenBatchSampler` sorts the examples by length, cuts the sorted order into batches
whose padded size stays within `max_tokens`, and shuffles the order of the batches; `collate` turns
one batch of id sequences into padded tensors.

Lengths passed to the sampler are those of the tokenizer's ids; the specials `collate` adds (eos to
the source, bos and eos to the target) are counted here, through SRC_SPECIALS and TGT_SPECIALS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice, pairwise

import numpy as np
import torch

SRC_SPECIALS = 1  # src = ids + [eos]
TGT_SPECIALS = 2  # tgt = [bos] + ids + [eos]


@dataclass
class Batch:
    """A padded batch of sentence pairs.

    src: (B, S) source ids, each followed by eos, right-padded with pad.
    tgt: (B, T+1) [bos] + target ids + [eos], right-padded; the decoder reads tgt[:, :-1] and
        is trained to predict tgt[:, 1:].
    n_src_tokens: non-pad tokens in src.
    n_tgt_tokens: non-pad tokens in tgt[:, 1:], the number of predicted tokens.
    indices: the dataset index of each row.
    """

    src: torch.Tensor
    tgt: torch.Tensor
    n_src_tokens: int
    n_tgt_tokens: int
    indices: list[int]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The same batch with its tensors on `device`."""
        return Batch(
            self.src.to(device, non_blocking=non_blocking),
            self.tgt.to(device, non_blocking=non_blocking),
            self.n_src_tokens,
            self.n_tgt_tokens,
            self.indices,
        )


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Right-pad id sequences into a (len(seqs), longest) LongTensor.

    One tensor per batch, not one per row: all ids go into one flat array and a (rows, longest)
    mask of the real positions places them, row by row in order. Building a batch row by row costs
    a torch.tensor call per sentence, which keeps a GPU waiting on the host.
    """
    lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))  # (B,)
    ids = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(lens.sum()))
    out = np.full((len(seqs), int(lens.max())), pad_id, dtype=np.int64)  # (B, longest)
    out[np.arange(out.shape[1]) < lens[:, None]] = ids
    return torch.from_numpy(out)


def collate(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int,
    bos_id: int,
    eos_id: int,
    indices: Sequence[int] | None = None,
) -> Batch:
    """(source ids, target ids) pairs -> Batch; `indices` defaults to 0..len(pairs)-1."""
    srcs = [[*src, eos_id] for src, _ in pairs]
    tgts = [[bos_id, *tgt, eos_id] for _, tgt in pairs]
    return Batch(
        src=pad_sequences(srcs, pad_id),
        tgt=pad_sequences(tgts, pad_id),
        n_src_tokens=sum(map(len, srcs)),
        n_tgt_tokens=sum(len(t) - 1 for t in tgts),
        indices=list(range(len(pairs)) if indices is None else indices),
    )


def cut_into_batches(src_sizes: np.ndarray, tgt_sizes: np.ndarray, max_tokens: int) -> list[int]:
    """Greedily cut a sequence of examples into consecutive batches of padded size <= max_tokens.

    src_sizes, tgt_sizes: (N,) padded-tensor lengths of the examples, in batching order.
    Returns the start offset of each batch, followed by N (just [0] when N = 0).
    """
    bounds = [0]
    longest = 0
    sizes = np.maximum(src_sizes, tgt_sizes)
    for start in range(0, len(sizes), 1 << 20):  # a million at a time: no list of N ints
        for i, size in enumerate(sizes[start : start + (1 << 20)].tolist(), start):
            longest = max(longest, size)
            if (i - bounds[-1] + 1) * longest > max_tokens:  # example i opens a new batch
                bounds.append(i)
                longest = size
    if len(src_sizes) > bounds[-1]:
        bounds.append(len(src_sizes))
    return bounds


class TokenBatchSampler:
    """Yields lists of example indices whose padded batch holds at most `max_tokens` tokens.

    Every epoch the examples are sorted by (target length, source length) with ties broken at
    random, cut into batches, and the batches are shuffled; both random steps are seeded by
    (seed, epoch), so an epoch's order is reproducible. The lengths in the sorted order do not
    depend on the tie-break, so the batch boundaries, and the number of batches, are the same in
    every epoch.

    With `world_size` > 1, rank r takes batches r, r + world_size, ... of the global order; the last
    global batches are dropped so that every rank gets the same number.

    Iterating to the end of an epoch moves on to the next one, so that `for batch in sampler` can
    simply be repeated; `set_epoch` chooses an epoch explicitly. `state_dict` records the epoch and
    the number of batches yielded in it, so that a restored sampler yields exactly the rest of the
    epoch.
    With shuffle=False (evaluation) batches come in length order and nothing is random.
    """

    def __init__(
        self,
        src_lens: Sequence[int],
        tgt_lens: Sequence[int],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.position = 0
        self.set_lengths(src_lens, tgt_lens)

    def set_lengths(self, src_lens: Sequence[int], tgt_lens: Sequence[int]) -> None:
        """Batch examples of these lengths from now on (the epoch and position stay).

        For a training set whose segmentation is sampled anew every epoch. Call it before the
        epoch's first batch.
        """
        if len(src_lens) != len(tgt_lens):
            raise ValueError(f"{len(src_lens)} source lengths but {len(tgt_lens)} target lengths")
        self.src_lens, self.tgt_lens = _lengths(src_lens), _lengths(tgt_lens)  # no copy of arrays
        src_sizes = self.src_lens.astype(np.int32) + SRC_SPECIALS  # padded lengths, for now
        tgt_sizes = self.tgt_lens.astype(np.int32) + TGT_SPECIALS
        too_long = np.flatnonzero(np.maximum(src_sizes, tgt_sizes) > self.max_tokens)
        if too_long.size:
            i = int(too_long[0])
            raise ValueError(
                f"example {i} (source {src_lens[i]}, target {tgt_lens[i]} tokens plus specials) "
                f"does not fit in max_tokens={self.max_tokens}; filter long examples out first "
                f"({too_long.size} example(s) too long)"
            )
        order = self._sorted_order(None)
        self.bounds = cut_into_batches(src_sizes[order], tgt_sizes[order], self.max_tokens)

    def _sorted_order(self, rng: np.random.Generator | None) -> np.ndarray:
        """(N,) example indices sorted by (target size, source size), ties shuffled if rng;
        int32 where N allows (half the memory of numpy's int64 indices). Sizes are lengths plus
        a constant per side: the lengths sort the same."""
        n = len(self.src_lens)
        dtype = np.int32 if n <= np.iinfo(np.int32).max else np.int64
        perm = (rng.permutation(n) if rng is not None else np.arange(n)).astype(dtype, copy=False)
        return perm[np.lexsort((self.src_lens[perm], self.tgt_lens[perm]))]

    def global_batches(self, epoch: int) -> list[np.ndarray]:
        """All batches of `epoch` (arrays of example indices), over all ranks, in the order they
        are dealt out."""
        rng = np.random.default_rng([self.seed, epoch]) if self.shuffle else None
        order = self._sorted_order(rng)
        batches = [order[start:end] for start, end in pairwise(self.bounds)]
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return (len(self.bounds) - 1) // self.world_size

    def rank_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of `epoch`."""
        return [batch.tolist() for batch in self._rank_arrays(epoch)]

    def _rank_arrays(self, epoch: int) -> list[np.ndarray]:
        n_dealt = len(self) * self.world_size
        return self.global_batches(epoch)[self.rank : n_dealt : self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        my_batches = self._rank_arrays(self.epoch)  # indices as arrays: no list of N ints
        while self.position < len(my_batches):
            self.position += 1
            yield my_batches[self.position - 1].tolist()
        self.epoch, self.position = self.epoch + 1, 0

    def set_epoch(self, epoch: int) -> None:
        """Go to the start of `epoch`; a no-op for the current epoch, so a resumed one goes on."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]


def _lengths(lengths: Sequence[int]) -> np.ndarray:
    """The lengths as an integer array: an array as it is (a corpus of millions of pairs keeps
    no copy), a list in the smallest of uint16 and int32 that holds it."""
    if isinstance(lengths, np.ndarray) and lengths.dtype.kind in "iu":
        return lengths
    array = np.asarray(lengths, dtype=np.int64)
    longest = int(array.max()) if len(array) else 0
    return array.astype(np.uint16 if longest <= np.iinfo(np.uint16).max else np.int32)


def sorted_batches(
    ids: Sequence[Sequence[int]], batch_tokens: int, parts: int = 1
) -> list[list[int]]:
    """Batches for decoding: the indices of the non-empty sequences, longest first, cut into
    batches of at most batch_tokens padded tokens (eos counted; a longer sequence goes alone);
    with fewer batches than `parts`, the largest are split so that each part has one."""
    order = sorted((i for i, seq in enumerate(ids) if seq), key=lambda i: -len(ids[i]))
    sizes = np.minimum(np.array([len(ids[i]) + 1 for i in order], dtype=np.int64), batch_tokens)
    bounds = list(pairwise(cut_into_batches(sizes, sizes, batch_tokens)))
    while len(bounds) < parts and any(end - start > 1 for start, end in bounds):
        start, end = max(bounds, key=lambda b: b[1] - b[0])  # split the largest batch in two
        middle = (start + end) // 2
        bounds.remove((start, end))
        bounds = sorted([*bounds, (start, middle), (middle, end)])
    return [order[start:end] for start, end in bounds]


def chunks(
    texts: Iterable[str],
    encode: Callable[[list[str]], list[list[int]]],
    chunk_tokens: float,
    block_lines: int,
) -> Iterator[tuple[list[str], list[list[int]]]]:
    """Consecutive runs of `texts` with their ids, each holding at most chunk_tokens tokens (eos
    counted; empty sequences count none); a longer sequence is a run alone. The texts are read and
    encoded (`encode`, called on `block_lines` texts at a time) only as the runs are asked for:
    memory holds one run and one block, whatever the length of the input."""
    reading = iter(texts)
    run_texts: list[str] = []
    run_ids: list[list[int]] = []
    tokens = 0
    while block := list(islice(reading, block_lines)):
        for text, seq in zip(block, encode(block), strict=True):
            size = len(seq) + 1 if seq else 0
            if tokens and tokens + size > chunk_tokens:
                yield run_texts, run_ids
                run_texts, run_ids, tokens = [], [], 0
            run_texts.append(text)
            run_ids.append(seq)
            tokens += size
    if run_texts:
        yield run_texts, run_ids
