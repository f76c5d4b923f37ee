"""Reading and cleaning parallel text: the raw material of a translation model.

A parallel corpus is two lists of sentences where line i of the source translates line i of the
target. Everything here works on plain Python strings; tokenization happens later.
"""

from __future__ import annotations

import codecs
import gzip
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

StrPath = str | os.PathLike[str]


class DataError(ValueError):
    """A problem with the user's data (missing file, bad encoding, misaligned lines, ...)."""


def iter_lines(path: StrPath) -> Iterator[str]:
    """The lines of a UTF-8 text file (gzip-compressed if its name ends in `.gz`), one at a time.

    Only the line terminator ("\\n" or "\\r\\n") and a UTF-8 byte order mark at the start of the
    file are removed; other whitespace is kept as is. Lines are split on "\\n" alone, so
    characters such as U+2028 inside a sentence never break the alignment.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                if number == 1:
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                yield _decode(raw.rstrip(b"\n").removesuffix(b"\r"), path, number)
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DataError(f"{path}: not a valid gzip file ({e})") from None


def read_lines(path: StrPath) -> list[str]:
    """All the lines of a text file (see `iter_lines`)."""
    return list(iter_lines(path))


def _decode(raw: bytes, path: Path, number: int) -> str:
    """Decode one line as UTF-8, naming the file and the line when it is not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}:{number}: invalid UTF-8 ({e.reason} at byte {e.start})") from None


@dataclass
class ParallelCorpus:
    """Aligned sentence pairs: `src[i]` translates to `tgt[i]`."""

    src: list[str]
    tgt: list[str]

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise DataError(f"source has {len(self.src)} sentences but target has {len(self.tgt)}")

    def __len__(self) -> int:
        return len(self.src)


def iter_parallel(src_path: StrPath, tgt_path: StrPath) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of two line-aligned files, one at a time; a DataError when
    their line counts differ (found when the shorter one ends)."""
    src, tgt = iter_lines(src_path), iter_lines(tgt_path)
    n = 0
    for n, s in enumerate(src, start=1):
        t = next(tgt, None)
        if t is None:
            n_src, n_tgt = n + sum(1 for _ in src), n - 1
            break
        yield s, t
    else:
        n_src, n_tgt = n, n + sum(1 for _ in tgt)
    if n_src != n_tgt:
        raise DataError(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}")


def load_parallel(src_path: StrPath, tgt_path: StrPath) -> ParallelCorpus:
    """Load a corpus stored as two line-aligned files, one per language."""
    pairs = list(iter_parallel(src_path, tgt_path))
    return ParallelCorpus([s for s, _ in pairs], [t for _, t in pairs])


def iter_tsv(path: StrPath) -> Iterator[tuple[str, str]]:
    """The pairs of a file of `source<TAB>target` lines, one at a time."""
    for number, line in enumerate(iter_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(
                f"{path}:{number}: expected source<TAB>target, found {len(fields) - 1} tabs"
            )
        yield fields[0], fields[1]


def load_tsv(path: StrPath) -> ParallelCorpus:
    """Load a corpus stored as one `source<TAB>target` pair per line."""
    pairs = list(iter_tsv(path))
    return ParallelCorpus([s for s, _ in pairs], [t for _, t in pairs])


@dataclass
class CleanReport:
    """How many pairs `clean` kept, and how many it dropped for each reason (each counted once)."""

    kept: int
    empty: int
    too_long: int
    ratio: int

    def __str__(self) -> str:
        total = self.kept + self.empty + self.too_long + self.ratio
        return (
            f"kept {self.kept} of {total} pairs (dropped {self.empty} empty, "
            f"{self.too_long} too long, {self.ratio} over the length ratio)"
        )


def clean(
    corpus: ParallelCorpus,
    max_len: int | None = None,
    max_ratio: float | None = None,
    length: Callable[[str], int] = len,
) -> tuple[ParallelCorpus, CleanReport]:
    """Drop pairs that would hurt training; return the kept pairs (in order) and a report.

    A pair is dropped, for the first reason that applies, when
      - either side is empty or whitespace only,
      - either side is longer than `max_len`,
      - the longer side is more than `max_ratio` times the shorter one (a likely misalignment).
    Lengths are measured with `length`: characters by default, or e.g. a subword-token counter.
    The input corpus is left untouched.
    """
    if max_len is not None and max_len < 1:
        raise DataError(f"max_len must be at least 1, got {max_len}")
    if max_ratio is not None and max_ratio < 1:
        raise DataError(f"max_ratio must be at least 1, got {max_ratio}")
    src, tgt = [], []
    report = CleanReport(kept=0, empty=0, too_long=0, ratio=0)
    for s, t in zip(corpus.src, corpus.tgt, strict=True):
        if not s.strip() or not t.strip():
            report.empty += 1
            continue
        ls, lt = length(s), length(t)
        if max_len is not None and max(ls, lt) > max_len:
            report.too_long += 1
        elif max_ratio is not None and max(ls, lt) > max_ratio * min(ls, lt):
            report.ratio += 1
        else:
            src.append(s)
            tgt.append(t)
            report.kept += 1
    return ParallelCorpus(src, tgt), report
