"""General-domain pairs mixed into a translation run (`mix_src`, `mix_tgt`, `mix_ratio`), so that a
model adapted to a domain keeps what it knew: every epoch holds the run's pairs and a sample of the
general pairs drawn afresh, `mix_ratio` of the epoch's pairs in all (0.2: one pair in five is a
general one). The sample of an epoch comes from (seed, epoch) alone, so a resumed epoch draws the
same pairs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.corpus import clean, load_parallel
from ..data.tokenizer import SubwordTokenizer
from .prepared_data import filter_long
from .recipe import TrainConfig

log = logging.getLogger("qkv.train")
MIX_KEY = 2  # the first int of the seed of a mixed sample (no other draw starts with it)


@dataclass
class GeneralPairs:
    """The general pairs' ids, and how many of them each epoch mixes in."""

    src: list[list[int]]
    tgt: list[list[int]]
    per_epoch: int

    def sample(self, seed: int, epoch: int) -> tuple[list[list[int]], list[list[int]]]:
        """The general pairs of `epoch`: drawn without replacement (all of them, shuffled, as many
        times as it takes when an epoch needs more than there are)."""
        if self.per_epoch == 0:
            return [], []
        rng = np.random.default_rng([MIX_KEY, seed, epoch])
        n, rounds = len(self.src), -(-self.per_epoch // len(self.src))
        order = np.concatenate([rng.permutation(n) for _ in range(rounds)])[: self.per_epoch]
        return [self.src[i] for i in order], [self.tgt[i] for i in order]


class Joined(Sequence[list[int]]):
    """The id sequences of `first` (the run's pairs, mapped or listed), then those of `rest` (the
    epoch's general pairs), as one sequence; `lengths` as the batch sampler reads them."""

    def __init__(self, first: Sequence[list[int]], rest: list[list[int]]) -> None:
        self.first, self.rest = first, rest
        first_lengths = getattr(first, "lengths", None)
        if first_lengths is None:
            first_lengths = np.fromiter(map(len, first), dtype=np.int64, count=len(first))
        rest_lengths = np.fromiter(map(len, rest), dtype=np.int64, count=len(rest))
        self.lengths = np.concatenate([first_lengths, rest_lengths])

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self.first)
        return self.first[i] if i < n else self.rest[i - n]


def per_epoch(n_pairs: int, ratio: float) -> int:
    """How many general pairs make `ratio` of an epoch of `n_pairs` of the run's own pairs."""
    return round(ratio / (1.0 - ratio) * n_pairs)


def load_general(cfg: TrainConfig, tokenizer: SubwordTokenizer, n_pairs: int) -> GeneralPairs:
    """The general pairs of cfg.mix_src and cfg.mix_tgt, cleaned, encoded and filtered as the
    training pairs are; a ValueError when none is left."""
    assert cfg.mix_src is not None and cfg.mix_tgt is not None
    corpus, report = clean(load_parallel(cfg.mix_src, cfg.mix_tgt))
    log.info("general pairs to mix in: %s", report)
    src, tgt = tokenizer.encode_src(corpus.src), tokenizer.encode_tgt(corpus.tgt)
    keep, _, _ = filter_long(src, tgt, cfg.max_len, cfg.max_ratio)
    if not keep:
        raise ValueError(f"no general pairs left in {cfg.mix_src} + {cfg.mix_tgt} after cleaning")
    general = GeneralPairs([src[i] for i in keep], [tgt[i] for i in keep], 0)
    general.per_epoch = per_epoch(n_pairs, cfg.mix_ratio)
    log.info(
        "mixing %d of %d general pairs into each epoch of %d pairs (mix_ratio %g)",
        general.per_epoch,
        len(keep),
        n_pairs,
        cfg.mix_ratio,
    )
    return general


__all__ = ["GeneralPairs", "Joined", "load_general", "per_epoch"]
