"""Search over a model's next-token distribution: greedy, beam search and sampling. Ids in, ids out.

    hyps = run(model, src, DecodeOptions(beam=5))   # the one entry: what the options say
    hyps = run(model, src, options, max_len, seed=3, abandoned=gave_up)

Every function takes a model in eval mode (any `decode.interface.Decodable`) and a batch of inputs,
and returns one result per row:

    with an encoder (Transformer, Ensemble):
                  src (B, S) source ids, each ending with eos, right-padded with pad;
                  the output starts from bos.
    without (DecoderOnly: `encode` gives no memory):
                  src (B, P) prompt ids, all rows of the same length (no padding mask);
                  the output starts from [bos] + prompt and only the new tokens are returned.

The loop is the one of the paper's inference: encode the source once, then feed one token at a time
to `model.decode(step_ids (R, 1), memory, memory_mask, cache)`, whose `DecoderCache` keeps the
self-attention keys/values of the prefix and the cross-attention keys/values of the memory (computed
at the first step). The memory keeps one row per sentence: the beams of a sentence are consecutive
rows that share it. `cache.reorder(rows, sources)` follows beam search's back-pointers and also
drops the rows of finished sentences, so a finished sentence costs nothing. With `use_cache=False`
every step recomputes the whole prefix; the cache is a pure speed-up and both give the same ids.

Conventions shared by all searches:
* Returned tokens are the ids after bos up to eos, eos excluded. Pad and bos are never generated.
* Lengths count generated tokens without eos: eos is forbidden before `min_len` and forced at
  `max_len` (default: source length + 50, the length of `src` rows counting their eos; for a
  decoder-only model, 50 new tokens). `model.max_target_positions()` caps `max_len` so that every
  position can be placed.
* `abandoned(i) -> bool`, where given, is asked between steps about each input row still being
  decoded: True drops the row (its caller gave up, e.g. a server request past its deadline); the
  others go on. A dropped row gets no hypothesis (None from greedy and sample, [] from beam search).
* `logprob` is log P(tokens + eos | input) under the model (natural log, sum over the steps); the
  score applies GNMT's length penalty (Wu et al., 2016), as "length penalty alpha" in the paper's
  section 6.1:

      score = logprob / lp(L),    lp(L) = ((5 + L) / 6) ** alpha,    L = len(tokens) + 1 (with eos)

Results do not depend on the batch: each row's computation is independent of the other rows (up to
floating-point rounding in batched matrix products), and sentences leave the batch once finished.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import TransformerConfig
from ..data.batching import pad_sequences
from ..model import AttentionWeights, Transformer
from ..model.masks import padding_mask
from .interface import Decodable
from .options import DEFAULT_MAX_LEN_B, DecodeOptions


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


Abandoned = Callable[[int], bool]  # input row -> drop it now (see the module docstring)


def _dropped(abandoned: Abandoned | None, sentence: Tensor) -> Tensor | None:
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


class _Rows:
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


def _constrain(
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


def _single_path(
    model: Decodable,
    src: Tensor,
    pick: Callable[[Tensor], Tensor],
    max_len: int | Tensor | None,
    min_len: int,
    alpha: float,
    use_cache: bool,
    abandoned: Abandoned | None = None,
) -> list[Hypothesis | None]:
    """Decode one hypothesis per row; `pick` chooses each next token: log-probs (R, V) -> (R,)."""
    if src.size(0) == 0:
        return []
    rows = _Rows(model, src, use_cache, max_len)
    limit = rows.limit  # (B,)
    sentence = torch.arange(src.size(0), device=src.device)  # (R,) input row of each decoded row
    logprob = torch.zeros(src.size(0), device=src.device)  # (R,)
    out: list[Hypothesis | None] = [None] * src.size(0)
    for step in range(int(limit.max()) + 1):
        keep = _dropped(abandoned, sentence)
        if keep is not None:
            if keep.numel() == 0:
                break
            rows.reorder(keep, keep)
            sentence, logprob = sentence[keep], logprob[keep]
        logp = _constrain(rows.log_probs(), step, limit[sentence], min_len, rows.cfg)  # (R, V)
        tokens = pick(logp)  # (R,)
        logprob = logprob + logp.gather(1, tokens[:, None]).squeeze(1)
        done = tokens == rows.cfg.eos_id  # (R,)
        if done.any():
            ended = done.nonzero().squeeze(1)
            for i, toks, lp in zip(
                sentence[ended].tolist(),
                rows.generated(ended),
                logprob[ended].tolist(),
                strict=True,
            ):
                out[i] = Hypothesis(toks, lp, lp / length_penalty(len(toks) + 1, alpha))
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            rows.reorder(keep, keep)
            sentence, logprob, tokens = sentence[keep], logprob[keep], tokens[keep]
        rows.append(tokens)
    return out  # None only for abandoned rows: eos is forced at max_len


@torch.inference_mode()
def greedy(
    model: Decodable,
    src: Tensor,
    max_len: int | Tensor | None = None,
    min_len: int = 0,
    alpha: float = 0.6,
    use_cache: bool = True,
    abandoned: Abandoned | None = None,
) -> list[Hypothesis | None]:
    """The most probable token at every step. src (B, S) -> B hypotheses (None: abandoned).

    Scores use the length penalty `alpha`.
    """
    return _single_path(
        model, src, lambda logp: logp.argmax(-1), max_len, min_len, alpha, use_cache, abandoned
    )


def filter_logits(
    logits: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> Tensor:
    """logits (R, V) / temperature, -inf outside the top_k tokens and outside the top_p nucleus.

    top_k: keep the k most probable tokens (0: all; ties with the k-th are kept). top_p: keep the
    smallest set of most probable tokens whose probability mass reaches top_p (Holtzman et al.,
    2020; 1.0: all), measured on the distribution left by top_k.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if top_k < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need top_k >= 0 and 0 < top_p <= 1, got top_k={top_k}, top_p={top_p}")
    logits = logits / temperature
    if 0 < top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (R, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (R, V)
        probs = sorted_logits.softmax(dim=-1)
        # mass of the tokens ranked higher
        mass_before = F.pad(probs.cumsum(dim=-1)[:, :-1], (1, 0))
        drop_sorted = mass_before >= top_p  # the nucleus already holds top_p without this token
        # back to vocabulary order
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@torch.inference_mode()
def sample(
    model: Decodable,
    src: Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    max_len: int | Tensor | None = None,
    min_len: int = 0,
    alpha: float = 0.6,
    use_cache: bool = True,
    abandoned: Abandoned | None = None,
) -> list[Hypothesis | None]:
    """Draw each next token from the model's distribution, reshaped by `filter_logits`.

    src (B, S) -> B hypotheses (None: abandoned). The draws come from a `torch.Generator` seeded
    with `seed`, so a seed fixes the output for a given batch. The returned logprob and score are
    those of the unfiltered model distribution.
    """
    generator = torch.Generator(device=src.device).manual_seed(seed)

    def pick(logp: Tensor) -> Tensor:
        probs = filter_logits(logp, temperature, top_k, top_p).softmax(dim=-1)  # (R, V)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return _single_path(model, src, pick, max_len, min_len, alpha, use_cache, abandoned)


@dataclass
class BeamStep:
    """What one step of beam search did for one sentence (what `beam_search`'s `trace` gets).

    candidates: the 2 * beam best extensions, best first: (tokens so far, summed log-prob).
    ended: those among the first `beam` that end with eos now, scored with the length penalty.
    kept: the `beam` best that do not end, which go on: (tokens so far, summed log-prob).
    """

    step: int
    sentence: int
    candidates: list[tuple[list[int], float]]
    ended: list[Hypothesis]
    kept: list[tuple[list[int], float]]


class _Finished:
    """The finished hypotheses of each sentence, and what decides when a sentence is done: the
    number finished and the beam-th best finished score, for the alive sentences (Ba,)."""

    def __init__(self, batch: int, beam: int, alpha: float, device: torch.device) -> None:
        self.beam, self.alpha = beam, alpha
        self.hypotheses: list[list[Hypothesis]] = [[] for _ in range(batch)]
        self.last: dict[int, list[Hypothesis]] = {}  # input row -> those ended at the last step
        self.count = torch.zeros(batch, dtype=torch.long, device=device)  # (Ba,)
        self.kth_best = torch.full((batch,), float("-inf"), device=device)  # (Ba,)

    def add(self, rows: _Rows, sentence: Tensor, top: Tensor, origin: Tensor, ends: Tensor) -> None:
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
    rows: _Rows,
    step: int,
    sentence: Tensor,
    top: Tensor,
    origin: Tensor,
    tokens: Tensor,
    ended: _Finished,
    go_on: Tensor,
) -> None:
    """Hand `trace` one BeamStep per alive sentence (Ba): top, origin, tokens (Ba, C) are the
    candidates best first; go_on (Ba, beam) the ones kept."""
    for b, i in enumerate(sentence.tolist()):
        prefixes = rows.generated(origin[b])
        candidates = [
            ([*prefix, token], score)
            for prefix, token, score in zip(
                prefixes, tokens[b].tolist(), top[b].tolist(), strict=True
            )
        ]
        kept = sorted((candidates[c] for c in go_on[b].tolist()), key=lambda c: -c[1])
        trace(BeamStep(step, i, candidates, ended.last.get(i, []), kept))


def _best_extensions(scores: Tensor, logp: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The k best one-token extensions of each sentence's hypotheses, best first: summed
    log-probs, the slot of the hypothesis each extends, the token, each (Ba, k').

    scores (Ba, n): the hypotheses' summed log-probs; logp (Ba * n, V): their next-token log-probs.
    """
    Ba, n = scores.shape
    V = logp.size(-1)
    candidates = (scores[:, :, None] + logp.view(Ba, n, V)).view(Ba, n * V)  # (Ba, n V)
    top, index = candidates.topk(min(k, n * V), dim=1)  # (Ba, k')
    return top, index // V, index % V


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
    """Beam search. src (B, S) -> for each row, its `nbest` best finished hypotheses, best first
    ([] for a row `abandoned` dropped). `trace`, where given, gets a `BeamStep` per sentence and
    step: the candidates ranked, the hypotheses that ended, the beam kept.

    Each step extends every alive hypothesis of a sentence by every token and ranks the candidates
    by their summed log-prob; of the 2 * beam best, those ending in eos among the first `beam` are
    finished (scored with the length penalty and kept), and the `beam` best that do not end go on.
    A sentence is done at its maximum length (where eos is forced), or once it has `beam` finished
    hypotheses and its best alive hypothesis, scored as if it ended now, no longer beats the
    beam-th best finished one. (Stopping at `beam` finished hypotheses alone, as fairseq does, lets
    early low-scoring endings fill the quota and cut off a better hypothesis that is still growing.)
    Because an eos is accepted only from the first `beam` candidates and the alive hypothesis is
    compared at the same length, beam 1 is exactly greedy decoding, ids and score. The returned list
    of a sentence is sorted by score; at most `nbest`.
    """
    if beam < 1 or not 1 <= nbest <= beam:
        raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={beam}, nbest={nbest}")
    if src.size(0) == 0:
        return []
    rows = _Rows(model, src, use_cache, max_len)
    limit = rows.limit  # (B,)
    device = src.device
    sentence = torch.arange(src.size(0), device=device)  # (Ba,) input row of each alive sentence
    # (Ba, n) summed log-probs of the alive hypotheses
    scores = torch.zeros(src.size(0), 1, device=device)
    ended = _Finished(src.size(0), beam, alpha, device)
    for step in range(int(limit.max()) + 1):
        Ba, n = scores.shape  # n = 1 at the first step (bos only), then beam
        keep = _dropped(abandoned, sentence)
        if keep is not None:
            ended.drop(sentence, keep)
            if keep.numel() == 0:
                break
            rows.reorder((keep[:, None] * n + torch.arange(n, device=device)).view(-1), keep)
            sentence, scores, Ba = sentence[keep], scores[keep], keep.numel()
        logp = _constrain(
            rows.log_probs(), step, limit[sentence].repeat_interleave(n), min_len, rows.cfg
        )
        top, parent, tokens = _best_extensions(scores, logp, 2 * beam)  # (Ba, C), best first
        origin = torch.arange(Ba, device=device)[:, None] * n + parent  # (Ba, C) row extended
        is_eos = tokens == rows.cfg.eos_id
        ended.add(rows, sentence, top, origin, is_eos[:, :beam] & top[:, :beam].isfinite())
        # first `beam` non-eos, by rank
        go_on = is_eos.to(torch.uint8).argsort(dim=1, stable=True)[:, :beam]
        if n == beam:  # in the slots that keep the cache rows they extend, where possible
            go_on = go_on.gather(1, _in_place_order(parent.gather(1, go_on)))
        if trace is not None:
            _trace(trace, rows, step, sentence, top, origin, tokens, ended, go_on)
        scores, origin, tokens = (
            top.gather(1, go_on),
            origin.gather(1, go_on),
            tokens.gather(1, go_on),
        )
        alive = ended.can_go_on(scores, step) & (step < limit[sentence])  # (Ba,)
        keep = None  # every sentence goes on: beams only move within their sentence
        if not alive.all():
            keep = alive.nonzero().squeeze(1)  # finished sentences leave the batch
            if keep.numel() == 0:
                break
            ended.keep(keep)
            sentence, scores, origin, tokens = (
                sentence[keep],
                scores[keep],
                origin[keep],
                tokens[keep],
            )
        rows.reorder(origin.view(-1), keep)
        rows.append(tokens.view(-1))
    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in ended.hypotheses]


def run(
    model: Decodable,
    src: Tensor,
    options: DecodeOptions,
    max_len: int | Tensor | None = None,
    *,
    seed: int | None = None,
    use_cache: bool = True,
    abandoned: Abandoned | None = None,
) -> list[list[Hypothesis]]:
    """Decode src (B, S) as `options` say: sampled, greedy (beam 1) or beam search. For each row,
    its hypotheses, best first (`options.nbest` at most; [] for a row `abandoned` dropped).

    max_len: per-row caps (see `max_lengths`); the caller computes them from the options and the
    source lengths. seed: the sampling seed of this batch (default options.seed).
    """
    o = options
    common = {"max_len": max_len, "min_len": o.min_len, "alpha": o.alpha, "use_cache": use_cache}
    if o.sampling:
        seed = o.seed if seed is None else seed
        drawn = sample(
            model, src, o.temperature, o.top_k, o.top_p, seed, abandoned=abandoned, **common
        )
        return [[h] if h else [] for h in drawn]
    if o.beam == 1:
        best = greedy(model, src, abandoned=abandoned, **common)
        return [[h] if h else [] for h in best]
    return beam_search(model, src, o.beam, nbest=o.nbest, abandoned=abandoned, **common)


@torch.inference_mode()
def attention_weights(
    model: Transformer, src: Tensor, outputs: list[list[int]]
) -> list[AttentionWeights]:
    """Every layer's and head's attention weights for given outputs, computed by teacher forcing.

    src (B, S); outputs: B lists of generated ids (eos excluded). Returns one `AttentionWeights`
    per row, its maps cut to that row's lengths, without the batch dimension, float32 on the CPU:
    encoder (H, S_i, S_i), decoder (H, T_i, T_i), cross (H, T_i, S_i), with S_i the source length of
    row i (its eos included) and T_i = len(tokens) + 1 decoder positions: position t reads bos
    (t = 0) or output token t - 1 and predicted output token t (the last predicted eos).
    Recomputing with one forward pass keeps decoding itself on the fast path, and gives the weights
    of the incremental decoder.
    """
    cfg = model.config
    tgt = pad_sequences([[cfg.bos_id, *toks] for toks in outputs], cfg.pad_id)  # (B, T)
    tgt = tgt.to(src.device)
    mask = padding_mask(src, cfg.pad_id)
    weights = AttentionWeights()
    model.decoder(tgt, model.encode(src, mask, weights), mask, weights=weights)
    src_lengths = (src != cfg.pad_id).sum(1).tolist()

    def cut(maps: list[Tensor], i: int, queries: int, keys: int) -> list[Tensor]:
        return [w[i, :, :queries, :keys].float().cpu().clone() for w in maps]  # (H, T_q, T_k)

    rows = []
    for i, tokens in enumerate(outputs):
        S, T = src_lengths[i], len(tokens) + 1
        rows.append(
            AttentionWeights(
                encoder=cut(weights.encoder, i, S, S),
                decoder=cut(weights.decoder, i, T, T),
                cross=cut(weights.cross, i, T, S),
            )
        )
    return rows


__all__ = [
    "Hypothesis",
    "attention_weights",
    "beam_search",
    "filter_logits",
    "greedy",
    "length_penalty",
    "max_lengths",
    "sample",
]
