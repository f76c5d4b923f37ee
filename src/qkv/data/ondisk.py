"""Sequences on disk: what lets a corpus of millions of pairs train in the memory of a small one.

A `TokenArray` is a list of id sequences stored as one flat array of ids (`NAME.bin`, raw
little-endian: uint16 when every id fits, else int32) and an index of offsets (`NAME.idx.npy`,
(N+1,) int64): sequence i is ids[offsets[i]:offsets[i+1]]. A `TextLines` is the same for UTF-8
text (`NAME.bin` the bytes, each text followed by a newline; `NAME.idx.npy` the byte offsets).
This is the layout of fairseq's indexed datasets, in numpy's own formats, so nothing is unpickled.
The index and the sequences are read with positional reads (`os.pread`) as a batch asks for
them, so the operating system's page cache, shared by all processes, holds them, and a process's
own memory holds only the lengths and what a batch reads (a mapped file counts in the resident
memory of each process that reads it, and an epoch reads all of it).

`SequenceWriter` appends sequences chunk by chunk, so that nothing is held whole while writing.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

INDEX_SUFFIX = ".idx.npy"
DATA_SUFFIX = ".bin"
BLOCK = 10_000  # texts read with one decode when iterating


def id_dtype(vocab_size: int) -> np.dtype:
    """The narrowest dtype that holds every id of a vocabulary: uint16, else int32."""
    return np.dtype(np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32)


class SequenceWriter:
    """Writes `NAME.bin` and `NAME.idx.npy` in `directory`, a chunk of sequences at a time.

    `add_ids` takes id sequences, `add_texts` strings (stored as UTF-8); `close` writes the index
    and returns the number of sequences.
    """

    def __init__(self, directory: Path, name: str, dtype: np.dtype | type) -> None:
        self.dtype = np.dtype(dtype)
        self.index_path = directory / f"{name}{INDEX_SUFFIX}"
        self._data: BinaryIO = open(directory / f"{name}{DATA_SUFFIX}", "wb")  # noqa: SIM115
        self._lengths: list[np.ndarray] = []  # one (chunk,) int64 array per chunk

    def add_ids(self, sequences: Sequence[Sequence[int]]) -> None:
        lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
        flat = np.fromiter(
            (i for seq in sequences for i in seq), dtype=self.dtype, count=int(lengths.sum())
        )
        self._data.write(flat.tobytes())
        self._lengths.append(lengths)

    def add_texts(self, texts: Iterable[str]) -> None:
        """Texts without a newline, each stored with one after it (a block of them reads back
        with one decode and one split)."""
        encoded = [text.encode("utf-8") + b"\n" for text in texts]
        self._data.write(b"".join(encoded))
        self._lengths.append(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))

    def close(self) -> int:
        self._data.close()
        lengths = np.concatenate([np.zeros(1, np.int64), *self._lengths])
        np.save(self.index_path, np.cumsum(lengths))
        return len(lengths) - 1


class _Offsets:
    """The (N+1,) int64 offsets of an `.idx.npy` file, read from the file as they are asked for:
    `offsets[i]` an int, `offsets.span(start, stop)` an array."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            if major not in (1, 2):
                raise ValueError(f"{path}: .npy format version {major}, not 1 or 2")
            read_header = (
                np.lib.format.read_array_header_1_0
                if major == 1
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(f)
            self._start = f.tell()
        if len(shape) != 1 or fortran or dtype != np.dtype("<i8"):
            raise ValueError(f"{path}: not a 1-d int64 index ({dtype}, shape {shape})")
        self._n = shape[0]
        if path.stat().st_size != self._start + 8 * self._n:
            raise ValueError(f"{path}: {path.stat().st_size} bytes, too short for {shape}")
        self._fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)

    def __len__(self) -> int:
        return self._n

    def span(self, start: int, stop: int) -> np.ndarray:
        """offsets[start:stop], read with one read."""
        raw = os.pread(self._fd, 8 * (stop - start), self._start + 8 * start)
        return np.frombuffer(raw, dtype="<i8")

    def __getitem__(self, i: int) -> int:
        i = i + self._n if i < 0 else i
        if not 0 <= i < self._n:
            raise IndexError(f"offset {i} of {self._n}")
        return int(self.span(i, i + 1)[0])

    def lengths(self, block: int = 1 << 20) -> np.ndarray:
        """(N,) the differences of consecutive offsets, in the smallest of uint16 and int32 that
        holds them, read a block at a time."""
        parts = [
            np.diff(self.span(a, min(a + block + 1, self._n))) for a in range(0, self._n - 1, block)
        ]
        longest = max((int(p.max()) for p in parts if p.size), default=0)
        dtype = np.uint16 if longest <= np.iinfo(np.uint16).max else np.int32
        return np.concatenate([p.astype(dtype) for p in parts]) if parts else np.zeros(0, dtype)


class _Stored:
    """The index of NAME in `directory` and an open file of its data, checked against each
    other."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.offsets = _Offsets(directory / f"{name}{INDEX_SUFFIX}")
        path = directory / f"{name}{DATA_SUFFIX}"
        expected = self.offsets[-1] * dtype.itemsize
        size = path.stat().st_size
        if size != expected:
            raise ValueError(f"{path}: {size} bytes, but its index says {expected}")
        self._fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)

    def read(self, start: int, stop: int) -> bytes:
        """The bytes of items start..stop-1 (ids or text bytes) of the data file."""
        size = self.dtype.itemsize
        return os.pread(self._fd, (stop - start) * size, start * size)


class TokenArray(_Stored, Sequence[list[int]]):
    """Id sequences on disk: `array[i]` is sequence i as a list of ints; `lengths` is the (N,)
    array of their lengths, in memory (the batch sampler sorts by them)."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype | str) -> None:
        super().__init__(directory, name, np.dtype(dtype))
        self.lengths = self.offsets.lengths()

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i) + len(self) if i < 0 else int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"sequence {i} of {len(self)}")
        start, stop = self.offsets.span(i, i + 2).tolist()
        return np.frombuffer(self.read(start, stop), dtype=self.dtype).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        return (self[i] for i in range(len(self)))

    def id_chunks(self, size: int = 1 << 22) -> Iterator[np.ndarray]:
        """All the ids, back to back, `size` at a time."""
        total = self.offsets[-1]
        for start in range(0, total, size):
            yield np.frombuffer(self.read(start, min(start + size, total)), dtype=self.dtype)


class TextLines(_Stored, Sequence[str]):
    """UTF-8 texts on disk, each stored with a newline after it: `lines[i]` is text i."""

    def __init__(self, directory: Path, name: str) -> None:
        super().__init__(directory, name, np.dtype(np.uint8))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.block(i, i + 1)[0]

    def block(self, start: int, stop: int) -> list[str]:
        """Texts start..stop-1, read with one read and one decode."""
        if stop <= start:
            return []
        raw = self.read(self.offsets[start], self.offsets[stop])
        return raw.decode("utf-8").split("\n")[:-1]

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), BLOCK):
            yield from self.block(start, min(start + BLOCK, len(self)))

    def chunks(self, size: int, rows: np.ndarray | None = None) -> Iterator[list[str]]:
        """The texts (of `rows`, ascending, default all) in lists of at most `size`."""
        if rows is None:
            for start in range(0, len(self), size):
                yield self.block(start, min(start + size, len(self)))
            return
        for start in range(0, len(rows), size):
            part = np.asarray(rows[start : start + size])
            if len(part):
                texts = self.block(int(part[0]), int(part[-1]) + 1)
                yield [texts[i] for i in (part - part[0]).tolist()]
