"""Beam search, with its step-by-step trace (`BeamStep`). See `decode.search` for the
conventions every search follows.

Each step extends every alive hypothesis of a sentence by every token and ranks the candidates by
their summed log-prob; of the 2 * beam best, those ending in eos among the first `beam` are
finished (scored with the length penalty and kept), and the `beam` best that do not end go on. A
sentence is done at its maximum length (where eos is forced), or once it has `beam` finished
hypotheses and its best alive hypothesis, scored as if it ended now, no longer beats the beam-th
best finished one. (Stopping at `beam` finished hypotheses alone, as fairseq does, lets early
low-scoring endings fill the quota and cut off a better hypothesis that is still growing.) Because
an eos is accepted only from the first `beam` candidates and the alive hypothesis is compared at
the same length, beam 1 is exactly greedy decoding, ids and score. A sentence's hypotheses are
returned sorted by score, at most `nbest`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .interface import Decodable
from .largest import top_k
from .rows import Abandoned, Hypothesis, Rows, constrain, kept_rows, length_penalty


@dataclass
class BeamStep:
    """What one step of beam search did for one sentence (what `beam_search`'s `trace` gets).

    candidates: the 2 * beam best extensions, best first: (tokens so far, summed log-prob).
    ended: those among the first `beam` that end with eos now, scored with the length penalty.
    kept: the `beam` best that do not end, which go on: (tokens so far, summed log-prob).
    done: the sentence's search ends at this step (its best alive hypothesis can no longer beat
        the `beam` finished ones, or it reached its length limit): `kept` goes no further.
    """

    step: int
    sentence: int
    candidates: list[tuple[list[int], float]]
    ended: list[Hypothesis]
    kept: list[tuple[list[int], float]]
    done: bool = False


class _Finished:
    """The finished hypotheses of each sentence, and what decides when a sentence is done: the
    number finished and the beam-th best finished score, for the alive sentences (Ba,)."""

    def __init__(self, batch: int, beam: int, alpha: float, device: torch.device) -> None:
        self.beam, self.alpha = beam, alpha
        self.hypotheses: list[list[Hypothesis]] = [[] for _ in range(batch)]
        self.last: dict[int, list[Hypothesis]] = {}  # input row -> those ended at the last step
        self.count = torch.zeros(batch, dtype=torch.long, device=device)  # (Ba,)
        self.kth_best = torch.full((batch,), float("-inf"), device=device)  # (Ba,)

    def add(self, rows: Rows, sentence: Tensor, top: Tensor, origin: Tensor, ends: Tensor) -> None:
        """Keep the candidates `ends` (Ba, beam) marks: they end with eos at this step."""
        self.last = {}
        if not ends.any():
            return
        s, c = ends.nonzero(as_tuple=True)
        for i, toks, lp in zip(
            sentence[s].tolist(), rows.generated(origin[s, c]), top[s, c].tolist(), strict=True
        ):
            hypothesis = Hypothesis(toks, lp, lp / length_penalty(len(toks) + 1, self.alpha))
            self.hypotheses[i].append(hypothesis)
            self.last.setdefault(i, []).append(hypothesis)
        self.count += ends.sum(dim=1)
        for row in s.unique().tolist():
            hyps = self.hypotheses[int(sentence[row])]
            if len(hyps) >= self.beam:
                scores = sorted((h.score for h in hyps), reverse=True)
                self.kth_best[row] = scores[self.beam - 1]

    def can_go_on(self, scores: Tensor, step: int) -> Tensor:
        """(Ba,) whether a sentence needs more steps: fewer than `beam` finished, or its best
        alive hypothesis (scores (Ba, beam)), scored as if it ended now, beats the beam-th best."""
        best = scores.max(dim=1).values  # the alive hypotheses are in slot order, not by rank
        can_win = best / length_penalty(step + 1, self.alpha) > self.kth_best
        return (self.count < self.beam) | can_win

    def keep(self, rows: Tensor) -> None:
        """Only the alive sentences `rows` go on."""
        self.count, self.kth_best = self.count[rows], self.kth_best[rows]

    def drop(self, sentence: Tensor, rows: Tensor) -> None:
        """The sentences of `sentence` not in `rows` are abandoned: no hypotheses."""
        for i in set(sentence.tolist()) - set(sentence[rows].tolist()):
            self.hypotheses[i] = []
        self.keep(rows)


def _trace(
    trace: Callable[[BeamStep], None],
    rows: Rows,
    step: int,
    sentence: Tensor,
    candidates: tuple[Tensor, Tensor, Tensor],
    ended: _Finished,
    go_on: Tensor,
    alive: Tensor,
) -> None:
    """Hand `trace` one BeamStep per alive sentence (Ba): candidates are (summed log-probs, rows
    extended, tokens), each (Ba, C), best first; go_on (Ba, beam) the ones kept; alive (Ba,)
    whether the sentence goes on."""
    top, origin, tokens = candidates
    for b, i in enumerate(sentence.tolist()):
        ranked = [
            ([*prefix, token], score)
            for prefix, token, score in zip(
                rows.generated(origin[b]), tokens[b].tolist(), top[b].tolist(), strict=True
            )
        ]
        kept = sorted((ranked[c] for c in go_on[b].tolist()), key=lambda c: -c[1])
        done = not bool(alive[b])
        trace(BeamStep(step, i, ranked, ended.last.get(i, []), kept, done))


def _best_extensions(scores: Tensor, logp: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The k best one-token extensions of each sentence's hypotheses, best first: summed
    log-probs, the slot of the hypothesis each extends, the token, each (Ba, k').

    scores (Ba, n): the hypotheses' summed log-probs; logp (Ba * n, V): their next-token log-probs.
    """
    Ba, n = scores.shape
    V = logp.size(-1)
    candidates = (scores[:, :, None] + logp.view(Ba, n, V)).view(Ba, n * V)  # (Ba, n V)
    top, index = top_k(candidates, min(k, n * V))  # (Ba, k')
    return top, index // V, index % V


def _continuing(is_eos: Tensor, parent: Tensor, beam: int, n: int) -> Tensor:
    """Which candidates go on (Ba, beam): the first `beam` that do not end, by rank, placed (from
    the second step, n == beam) in the slots that keep the cache rows they extend, where
    possible. is_eos, parent (Ba, C): whether each candidate ends, the slot it extends."""
    go_on = is_eos.to(torch.uint8).argsort(dim=1, stable=True)[:, :beam]
    if n == beam:
        go_on = go_on.gather(1, _in_place_order(parent.gather(1, go_on)))
    return go_on


def _in_place_order(parent: Tensor) -> Tensor:
    """An order of each sentence's n continuing hypotheses in its n beam slots that leaves as many
    as possible in the slot of the hypothesis they extend, so that the cache reorder copies only the
    rest.

    parent (Ba, n): the slot each hypothesis extends, hypotheses by rank. The first-ranked child of
    each parent takes its parent's slot; the other children fill the slots of parents without
    children, in rank order. Returns (Ba, n): for each slot, the rank of the hypothesis it holds.
    """
    n = parent.size(1)
    per_parent = F.one_hot(parent, n)  # (Ba, n hyps, n slots)
    # (Ba, n) first child
    first = per_parent.cumsum(dim=1).gather(2, parent[:, :, None]).squeeze(2) == 1
    taken = (per_parent * first[:, :, None]).sum(dim=1) > 0  # (Ba, n slots) held by a first child
    free = taken.to(torch.uint8).argsort(dim=1, stable=True)  # free slots first, in order
    later = first.to(torch.uint8).argsort(dim=1, stable=True)  # later children first, by rank
    # (Ba, n) slot of each
    slot = torch.where(first, parent, torch.empty_like(parent).scatter_(1, later, free))
    return torch.empty_like(slot).scatter_(
        1, slot, torch.arange(n, device=slot.device).expand_as(slot)
    )


@torch.inference_mode()
def beam_search(
    model: Decodable,
    src: Tensor,
    beam: int = 4,
    alpha: float = 0.6,
    nbest: int = 1,
    max_len: int | Tensor | None = None,
    min_len: int = 0,
    use_cache: bool = True,
    abandoned: Abandoned | None = None,
    trace: Callable[[BeamStep], None] | None = None,
) -> list[list[Hypothesis]]:
    """Beam search (the module docstring). src (B, S) -> for each row, its `nbest` best finished
    hypotheses, best first ([] for a row `abandoned` dropped). `trace`, where given, gets a
    `BeamStep` per sentence and step: the candidates ranked, what ended, the beam kept."""
    if beam < 1 or not 1 <= nbest <= beam:
        raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={beam}, nbest={nbest}")
    if src.size(0) == 0:
        return []
    rows = Rows(model, src, use_cache, max_len)
    limit = rows.limit  # (B,)
    device = src.device
    sentence = torch.arange(src.size(0), device=device)  # (Ba,) input row of each alive sentence
    # (Ba, n) summed log-probs of the alive hypotheses
    scores = torch.zeros(src.size(0), 1, device=device)
    ended = _Finished(src.size(0), beam, alpha, device)
    for step in range(int(limit.max()) + 1):
        Ba, n = scores.shape  # n = 1 at the first step (bos only), then beam
        keep = kept_rows(abandoned, sentence)
        if keep is not None:
            ended.drop(sentence, keep)
            if keep.numel() == 0:
                break
            rows.reorder((keep[:, None] * n + torch.arange(n, device=device)).view(-1), keep)
            sentence, scores, Ba = sentence[keep], scores[keep], keep.numel()
        logp = constrain(
            rows.log_probs(), step, limit[sentence].repeat_interleave(n), min_len, rows.cfg
        )
        top, parent, tokens = _best_extensions(scores, logp, 2 * beam)  # (Ba, C), best first
        origin = torch.arange(Ba, device=device)[:, None] * n + parent  # (Ba, C) row extended
        is_eos = tokens == rows.cfg.eos_id
        ended.add(rows, sentence, top, origin, is_eos[:, :beam] & top[:, :beam].isfinite())
        go_on = _continuing(is_eos, parent, beam, n)  # (Ba, beam)
        kept = top.gather(1, go_on), origin.gather(1, go_on), tokens.gather(1, go_on)
        alive = ended.can_go_on(kept[0], step) & (step < limit[sentence])  # (Ba,)
        if trace is not None:
            _trace(trace, rows, step, sentence, (top, origin, tokens), ended, go_on, alive)
        scores, origin, tokens = kept
        keep = None  # every sentence goes on: beams only move within their sentence
        if not alive.all():
            keep = alive.nonzero().squeeze(1)  # finished sentences leave the batch
            if keep.numel() == 0:
                break
            ended.keep(keep)
            sentence, scores, origin, tokens = (t[keep] for t in (sentence, scores, origin, tokens))
        rows.reorder(origin.view(-1), keep)
        rows.append(tokens.view(-1))
    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in ended.hypotheses]
