"""What every search shares: a hypothesis and its score, the length limits, and the rows being
decoded (their prefixes, their model state, the next-token log-probabilities). The conventions:
docs/search.md, "Conventions shared by all searches"."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import TransformerConfig
from ..model.masks import padding_mask
from .interface import Decodable
from .options import DEFAULT_MAX_LEN_B


@dataclass
class Hypothesis:
    """One output sequence: generated ids (eos excluded), log P(tokens + eos), penalized score."""

    tokens: list[int]
    logprob: float
    score: float


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(L) = ((5 + L) / 6) ** alpha; L counts the generated tokens including eos."""
    return ((5 + length) / 6) ** alpha


def max_lengths(
    model: Decodable, src: Tensor, max_len: int | Tensor | None, memory: Tensor | None
) -> Tensor:
    """Per-row cap on generated tokens (eos not counted): (B,) LongTensor on src's device.

    None means source length + 50 with an encoder (length = non-pad ids of `src`, eos included) and
    50 without one. The model's `max_target_positions` caps it so that every position can be placed.
    """
    cfg = model.config
    B = src.size(0)
    if max_len is None:
        given = (
            (src != cfg.pad_id).sum(1) if memory is not None else torch.zeros(B, device=src.device)
        )
        max_len = given + DEFAULT_MAX_LEN_B
    lengths = torch.as_tensor(max_len, device=src.device).long().expand(B).clone()  # (B,)
    positions = model.max_target_positions()
    if positions is not None:
        first = 1 + (0 if memory is not None else src.size(1))  # positions taken by bos (+ prompt)
        lengths.clamp_(max=positions - first)
    if (lengths < 0).any():
        raise ValueError(f"max_len must be >= 0 (and a prompt must fit in {positions} positions)")
    return lengths


Abandoned = Callable[[int], bool]  # input row -> drop it now (docs/search.md, the conventions)


def kept_rows(abandoned: Abandoned | None, sentence: Tensor) -> Tensor | None:
    """Positions in `sentence` (the input rows being decoded) of the rows to keep, or None when
    all are kept (`abandoned` is None or says no to each)."""
    if abandoned is None:
        return None
    gone = [abandoned(i) for i in sentence.tolist()]
    if not any(gone):
        return None
    return torch.tensor(
        [k for k, g in enumerate(gone) if not g], dtype=torch.long, device=sentence.device
    )


class Rows:
    """The rows being decoded: their prefixes, their model state, and the next-token log-probs."""

    def __init__(
        self, model: Decodable, src: Tensor, use_cache: bool, max_len: int | Tensor | None
    ) -> None:
        if model.training:
            raise ValueError("decoding needs model.eval() (dropout would make it random)")
        cfg = self.cfg = model.config
        self.model = model
        bos = torch.full((src.size(0), 1), cfg.bos_id, dtype=torch.long, device=src.device)
        self.memory_mask: Tensor | None = padding_mask(src, cfg.pad_id)  # (B, 1, 1, S)
        # (B, S, D): one row per sentence, shared by its R / B rows;
        # None: src is a prompt to continue
        self.memory = model.encode(src, self.memory_mask)
        if self.memory is None:
            if (src == cfg.pad_id).any():
                raise ValueError("prompts in one batch must have the same length (no padding)")
            self.memory_mask = None
            self.ys = torch.cat([bos, src], dim=1)  # (R, 1 + P)
        else:
            self.ys = bos  # (R, 1)
        self.limit = max_lengths(model, src, max_len, self.memory)  # (B,)
        self.start = self.ys.size(1)  # generated tokens begin at this column
        # the decoder is fed at most start + max_len positions: the last token, eos, is not fed back
        longest = int(self.limit.max())
        self.cache = model.new_cache(capacity=self.start + longest) if use_cache else None

    def log_probs(self) -> Tensor:
        """log P(next token | prefix) for every row: (R, V), float32."""
        new = self.ys if self.cache is None else self.ys[:, self.cache.length :]  # all, or uncached
        logits = self.model.decode(new, self.memory, self.memory_mask, self.cache)  # (R, T, V)
        return F.log_softmax(logits[:, -1].float(), dim=-1)

    def generated(self, index: Tensor) -> list[list[int]]:
        """The tokens generated so far by rows `index` (N,)."""
        return self.ys[index, self.start :].tolist()

    def reorder(self, rows: Tensor, sources: Tensor | None = None) -> None:
        """Keep rows `rows` (R',), in that order (beam back-pointers; dropping finished rows).

        sources (B',): the sentences kept, when some leave the batch; `rows` must then be theirs, in
        consecutive groups in that order. None: no sentence leaves (the memory stays as it is).
        """
        self.ys = self.ys.index_select(0, rows)
        if self.cache is not None:
            self.cache.reorder(rows, sources)
        if self.memory is not None and self.memory_mask is not None and sources is not None:
            self.memory = self.memory.index_select(0, sources)
            self.memory_mask = self.memory_mask.index_select(0, sources)

    def append(self, tokens: Tensor) -> None:
        """Extend every row's prefix by its token: tokens (R,)."""
        self.ys = torch.cat([self.ys, tokens[:, None]], dim=1)


def constrain(
    logp: Tensor, step: int, max_len: Tensor, min_len: int, cfg: TransformerConfig
) -> Tensor:
    """Forbid pad and bos; forbid eos before min_len; allow only eos once a row reaches max_len.

    logp (R, V) is changed in place and returned; max_len (R,). A forced eos keeps its model
    log-prob.
    """
    eos_logp = logp[:, cfg.eos_id].clone()  # (R,)
    logp[:, [cfg.pad_id, cfg.bos_id]] = float("-inf")
    if step < min_len:
        logp[:, cfg.eos_id] = float("-inf")
    at_max = step >= max_len  # (R,)
    if at_max.any():
        logp[at_max] = float("-inf")
        logp[at_max, cfg.eos_id] = eos_logp[at_max]
    return logp
