"""Lexically constrained beam search: every output contains given token sequences (a glossary's
target terms), by dynamic beam allocation (Post & Vilar, 2018), batched.

    hyps = search_with_constraints(model, src, [[[12, 7]], []], 5)   # row 0 must hold 12 7

`search_with_constraints` (what `search.run` and a glossary use) runs beam search first and the
constrained search only for the rows whose best translation lacks a term, each capped at the plain
translation's tokens + its constraint tokens + LENGTH_SLACK: without that cap a length penalty lets
the hypotheses that ramble before placing a forced term win. Hypotheses are grouped in banks by the
constraint tokens they have met, and the width is filled round-robin over the banks, so those that
place the terms compete with their own kind, not with unconstrained ones whose scores are higher.

Details: docs/search.md, "Constrained decoding (glossaries)".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .beam import _best_extensions, _Finished, beam_search
from .interface import Decodable
from .rows import Abandoned, Hypothesis, Rows, constrain, kept_rows

Constraints = list[list[int]]  # one sentence's: token sequences its output must contain
MIN_PER_BANK = 2  # the fewest hypotheses a bank may hold (`search_width`)
LENGTH_SLACK = 4  # tokens a constrained translation may add past the plain one's and its terms'


@dataclass(frozen=True)
class Progress:
    """Where a hypothesis is in its sentence's constraints: a bit per constraint it holds,
    (constraint, tokens matched) of the one it is in the middle of, if any, and the constraint its
    last token completed (-1: none)."""

    held: int = 0
    partial: tuple[int, int] | None = None
    completed: int = -1

    def after(self, token: int, constraints: Constraints) -> Progress:
        """The progress after writing `token`: it goes on with the constraint it is in, or
        (breaking that one off) starts one it does not hold."""
        if self.partial is not None:
            c, matched = self.partial
            if constraints[c][matched] == token:
                return self._matched(c, matched + 1, constraints)
        for c, sequence in enumerate(constraints):
            if not self.held >> c & 1 and sequence[0] == token:
                return self._matched(c, 1, constraints)
        return Progress(self.held)

    def _matched(self, c: int, matched: int, constraints: Constraints) -> Progress:
        if matched == len(constraints[c]):
            return Progress(self.held | 1 << c, completed=c)
        return Progress(self.held, (c, matched))

    def advancing(self, constraints: Constraints) -> set[int]:
        """The tokens that would meet one more constraint token."""
        if self.partial is not None:
            c, matched = self.partial
            return {constraints[c][matched]}
        return {s[0] for c, s in enumerate(constraints) if not self.held >> c & 1}

    def met(self, constraints: Constraints) -> int:
        """Constraint tokens met: the bank of a hypothesis."""
        held = sum(len(s) for c, s in enumerate(constraints) if self.held >> c & 1)
        return held + (self.partial[1] if self.partial is not None else 0)

    def complete(self, constraints: Constraints) -> bool:
        return self.held == (1 << len(constraints)) - 1


def holds(tokens: list[int], constraints: Constraints, joins: list[bool] | None = None) -> bool:
    """Whether `tokens` contains every constraint as a contiguous run (given `joins`, one that
    starts a word also ends one: no joining token after it)."""

    def at(s: list[int], i: int) -> bool:
        if tokens[i : i + len(s)] != s:
            return False
        end = i + len(s)
        return joins is None or joins[s[0]] or end == len(tokens) or not joins[tokens[end]]

    return all(any(at(s, i) for i in range(len(tokens) - len(s) + 1)) for s in constraints)


def _check(constraints: list[Constraints], batch: int, beam: int, nbest: int) -> None:
    if beam < 1 or not 1 <= nbest <= beam:
        raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={beam}, nbest={nbest}")
    if len(constraints) != batch:
        raise ValueError(f"constraints for {len(constraints)} rows, but the batch has {batch}")
    for row in constraints:
        if any(not s or not all(isinstance(t, int) for t in s) for s in row):
            raise ValueError("each constraint is a non-empty list of token ids")


# a candidate: (summed log-prob, slot of the hypothesis it extends, token, its progress)
_Candidate = tuple[float, int, int, Progress]


def _banked(
    candidates: list[_Candidate], constraints: Constraints, beam: int, eos: int
) -> tuple[list[_Candidate], list[_Candidate]]:
    """The candidates that end now: those with eos among the `beam` best of their bank (with one
    bank, `beam_search`'s rule); and the `beam` that go on, taken round-robin over the banks,
    fullest bank first (finite scores before -inf ones)."""
    ranked = sorted(candidates, key=lambda c: -c[0])
    seen: dict[int, int] = {}
    keys = []
    for score, _, _, progress in ranked:
        bank = progress.met(constraints)
        rank = seen[bank] = seen.get(bank, -1) + 1
        keys.append((score == float("-inf"), rank, -bank))
    ending = [
        c for c, k in zip(ranked, keys, strict=True) if c[2] == eos and not k[0] and k[1] < beam
    ]
    order = sorted(range(len(ranked)), key=lambda k: keys[k])
    return ending, [ranked[k] for k in order if ranked[k][2] != eos][:beam]


def _candidates(
    base: list[tuple[float, int, int]],
    extra: list[tuple[float, int, int]],
    progress: list[Progress],
    constraints: Constraints,
    eos: int,
) -> list[_Candidate]:
    """The base candidates and the finite extra ones not among them, with their progress."""
    merged, seen = list(base), {(slot, token) for _, slot, token in base}
    for score, slot, token in extra:
        if score != float("-inf") and (slot, token) not in seen:
            merged.append((score, slot, token))
            seen.add((slot, token))
    return [
        (score, slot, token, p if token == eos else p.after(token, constraints))
        for score, slot, token in merged
        for p in (progress[slot],)
    ]


def _extra(
    logp: Tensor,
    scores: list[list[float]],
    progress: list[Progress],
    todo: list[Constraints],
    eos: int,
) -> list[list[tuple[float, int, int]]]:
    """For each sentence (Ba) with constraints: each alive hypothesis's best next token and the
    tokens that advance its constraints (eos, once it holds them all), as (summed log-prob, slot,
    token). logp (Ba * n, V)."""
    n = len(scores[0])
    best = logp.argmax(dim=-1).tolist()  # (Ba * n,)
    wanted = [
        [
            (j, t)
            for j in range(n)
            for t in {best[b * n + j], *(progress[b * n + j].advancing(c) or {eos})}
        ]
        if c
        else []
        for b, c in enumerate(todo)
    ]
    rows = [b * n + j for b, w in enumerate(wanted) for j, _ in w]
    cols = [t for w in wanted for _, t in w]
    values = logp[rows, cols].tolist() if rows else []
    out, k = [], 0
    for b, w in enumerate(wanted):
        out.append([(scores[b][j] + values[k + i], j, t) for i, (j, t) in enumerate(w)])
        k += len(w)
    return out


def _keep_sentences(rows: Rows, keep: Tensor, n: int, progress: list[Progress]) -> list[Progress]:
    """Keep only the sentences `keep` (Ba',) of the rows (n hypotheses each): their progress."""
    slots = (keep[:, None] * n + torch.arange(n, device=keep.device)).view(-1)
    rows.reorder(slots, keep)
    return [progress[r] for r in slots.tolist()]


def _constrain_terms(
    logp: Tensor,
    progress: list[Progress],
    todo: list[Constraints],
    before_limit: Tensor,
    eos: int,
    joins: tuple[Tensor, list[bool]] | None,
) -> None:
    """In logp (Ba * n, V), in place: no eos for a hypothesis missing a constraint before its
    length limit (before_limit (Ba * n,) bool), and (given joins) no joining token after a term."""
    n = len(progress) // len(todo)
    incomplete = [not p.complete(todo[r // n]) for r, p in enumerate(progress)]
    logp[torch.tensor(incomplete, device=logp.device) & before_limit, eos] = float("-inf")
    if joins is not None:
        _end_words(logp, progress, todo, *joins)


def _end_words(
    logp: Tensor,
    progress: list[Progress],
    todo: list[Constraints],
    joins: Tensor,
    flags: list[bool],
) -> None:
    """Forbid the joining tokens (joins (V,) bool on logp's device; flags: the same as a list)
    after the last token of a constraint that starts a word, in logp (Ba * n, V), in place."""
    n = len(progress) // len(todo)
    starts_word = [
        p.completed >= 0 and not flags[todo[r // n][p.completed][0]] for r, p in enumerate(progress)
    ]
    if any(starts_word):
        rows = torch.tensor(starts_word, device=logp.device)
        logp.masked_fill_(rows[:, None] & joins, float("-inf"))


def search_width(beam: int, constraints: Constraints) -> int:
    """The hypotheses a sentence keeps: the beam, and at least MIN_PER_BANK per bank (with a few
    slots for many banks, each bank holds one hypothesis and the best ways to place the terms are
    pruned by whichever reached a bank first)."""
    banks = 1 + sum(len(s) for s in constraints)
    return max(beam, MIN_PER_BANK * banks) if constraints else beam


def _choose(
    logp: Tensor,
    scores: Tensor,
    progress: list[Progress],
    todo: list[Constraints],
    beam: int,
    eos: int,
) -> tuple[tuple[Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor], list[Progress]]:
    """One step for every alive sentence (Ba, n hypotheses each; logp (Ba * n, V)), each keeping
    its width of hypotheses (`search_width`): the candidates that end as (summed log-probs, rows
    extended, a mask of the real ones), each (Ba, E); those that go on as (summed log-probs, rows
    extended, tokens), each (Ba, W) with W the widest, and their progress. A sentence with fewer
    candidates than W fills its slots with -inf copies of its first."""
    widths = [search_width(beam, c) for c in todo]
    n, slots = scores.size(1), max(widths)
    top, parent, tokens = _best_extensions(scores, logp, 2 * slots)  # (Ba, C), best first
    extra = _extra(logp, scores.tolist(), progress, todo, eos)
    ending, going = [], []
    for b, (t, p, k) in enumerate(zip(top.tolist(), parent.tolist(), tokens.tolist(), strict=True)):
        width = widths[b]
        base = list(zip(t, p, k, strict=True))[: 2 * width]
        mine = progress[b * n : (b + 1) * n]
        ends, on = _banked(_candidates(base, extra[b], mine, todo[b], eos), todo[b], width, eos)
        on += [(float("-inf"), *on[0][1:])] * (slots - len(on))
        ending.append([(s, b * n + j, True) for s, j, _, _ in ends])
        going.append([(s, b * n + j, k, q) for s, j, k, q in on])
    most = max(len(row) for row in ending)
    ending = [row + [(float("-inf"), 0, False)] * (most - len(row)) for row in ending]
    device = scores.device

    def column(table: list, c: int, dtype: torch.dtype) -> Tensor:
        return torch.tensor([[x[c] for x in row] for row in table], dtype=dtype, device=device)

    ended = tuple(column(ending, c, d) for c, d in enumerate((torch.float, torch.long, torch.bool)))
    kept = tuple(column(going, c, d) for c, d in enumerate((torch.float, torch.long, torch.long)))
    return ended, kept, [c[3] for row in going for c in row]  # type: ignore[return-value]


@torch.inference_mode()
def constrained_beam_search(
    model: Decodable,
    src: Tensor,
    constraints: list[Constraints],
    beam: int = 4,
    alpha: float = 0.6,
    nbest: int = 1,
    max_len: int | Tensor | None = None,
    min_len: int = 0,
    use_cache: bool = True,
    abandoned: Abandoned | None = None,
    joins: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Beam search whose outputs hold each row's constraints (docs/search.md, "Constrained decoding
    (glossaries)"; joins: see `_end_words`): src (B, S) -> each row's `nbest` best, those holding
    all first ([]: dropped)."""
    _check(constraints, src.size(0), beam, nbest)
    if src.size(0) == 0:
        return []
    rows = Rows(model, src, use_cache, max_len)
    limit, device, eos = rows.limit, src.device, rows.cfg.eos_id
    sentence = torch.arange(src.size(0), device=device)  # (Ba,) input row of each alive sentence
    scores = torch.zeros(src.size(0), 1, device=device)  # (Ba, n) summed log-probs
    progress = [Progress()] * src.size(0)  # (Ba * n,)
    ended = _Finished(src.size(0), beam, alpha, device)
    flags = None if joins is None else joins.tolist()
    words = None if joins is None else (joins.to(device), flags)
    for step in range(int(limit.max()) + 1):
        n = scores.size(1)
        keep = kept_rows(abandoned, sentence)
        if keep is not None:
            ended.drop(sentence, keep)
            if keep.numel() == 0:
                break
            progress = _keep_sentences(rows, keep, n, progress)
            sentence, scores = sentence[keep], scores[keep]
        todo = [constraints[i] for i in sentence.tolist()]
        row_limit = limit[sentence].repeat_interleave(n)  # (Ba * n,)
        logp = constrain(rows.log_probs(), step, row_limit, min_len, rows.cfg)
        _constrain_terms(logp, progress, todo, step < row_limit, eos, words)
        (top, origin, ends), kept, progress = _choose(logp, scores, progress, todo, beam, eos)
        ended.add(rows, sentence, top, origin, ends)
        alive = ended.can_go_on(kept[0], step) & (step < limit[sentence])  # (Ba,)
        scores, origin, tokens = kept
        keep = None
        if not alive.all():
            keep = alive.nonzero().squeeze(1)  # finished sentences leave the batch
            if keep.numel() == 0:
                break
            ended.keep(keep)
            w = scores.size(1)  # the widest alive sentence's width
            progress = [progress[b * w + j] for b in keep.tolist() for j in range(w)]
            sentence, scores, origin, tokens = (t[keep] for t in (sentence, scores, origin, tokens))
        rows.reorder(origin.view(-1), keep)
        rows.append(tokens.view(-1))
    return _best_holding(ended.hypotheses, constraints, flags, nbest)


def _best_holding(
    hypotheses: list[list[Hypothesis]],
    constraints: list[Constraints],
    flags: list[bool] | None,
    nbest: int,
) -> list[list[Hypothesis]]:
    """Each row's `nbest` best hypotheses, those that hold all its constraints first."""
    def order(i: int) -> Callable[[Hypothesis], tuple[bool, float]]:
        return lambda h: (holds(h.tokens, constraints[i], flags), h.score)

    return [sorted(hyps, key=order(i), reverse=True)[:nbest] for i, hyps in enumerate(hypotheses)]


def search_with_constraints(
    model: Decodable,
    src: Tensor,
    constraints: list[Constraints],
    beam: int,
    max_len: int | Tensor | None = None,
    joins: Tensor | None = None,
    abandoned: Abandoned | None = None,
    **search: object,
) -> list[list[Hypothesis]]:
    """Beam search, then `constrained_beam_search` for the rows whose best hypothesis lacks one
    of its constraints, each at most that hypothesis's length + its constraint tokens +
    LENGTH_SLACK: a sentence whose translation already holds its terms keeps it, ids and scores.
    `search`: alpha, nbest, min_len, use_cache."""
    hyps = beam_search(model, src, beam, max_len=max_len, abandoned=abandoned, **search)
    flags = None if joins is None else joins.tolist()
    redo = [
        i
        for i, (h, c) in enumerate(zip(hyps, constraints, strict=True))
        if c and h and not holds(h[0].tokens, c, flags)
    ]
    if redo:
        index = torch.tensor(redo, device=src.device)
        cap = torch.tensor(
            [len(hyps[i][0].tokens) + sum(map(len, constraints[i])) + LENGTH_SLACK for i in redo],
            device=src.device,
        )
        given = max_len[index] if isinstance(max_len, Tensor) else max_len
        limit = cap if given is None else torch.minimum(torch.as_tensor(given).to(cap), cap)
        dropped = None if abandoned is None else (lambda r: abandoned(redo[r]))
        again = constrained_beam_search(
            model,
            src[index],
            [constraints[i] for i in redo],
            beam,
            max_len=limit,
            abandoned=dropped,
            joins=joins,
            **search,
        )
        for i, h in zip(redo, again, strict=True):
            hyps[i] = h
    return hyps


__all__ = [
    "LENGTH_SLACK",
    "Constraints",
    "Progress",
    "constrained_beam_search",
    "holds",
    "search_width",
    "search_with_constraints",
]
