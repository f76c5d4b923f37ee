"""Search over a model's next-token distribution: greedy, beam search and sampling. Ids in, ids out.

    hyps = run(model, src, DecodeOptions(beam=5))   # the one entry: what the options say

Every caller (translator, server, generate) goes through `run`. Greedy decoding and sampling are
here, beam search in `decode.beam`, what every search shares in `decode.rows`. Each search takes a
model in eval mode (any `decode.interface.Decodable`) and returns one result per input row: the
tokens after bos up to eos (eos excluded), log P(tokens + eos) and a length-penalized score.

A new decoding algorithm goes in three places: its function here, its field(s) in `DecodeOptions`
(decode/options.py) and its branch in `run` (docs/architecture.md, "Where to add a thing").

Details: docs/search.md, "One entry: search.run" and "Conventions shared by all searches".
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.batching import pad_sequences
from ..model import AttentionWeights, Transformer
from ..model.masks import padding_mask
from .beam import BeamStep, beam_search
from .constrained import Constraints, search_with_constraints
from .interface import Decodable
from .largest import first_max_index
from .options import DEFAULT_MAX_LEN_B, DecodeOptions
from .rows import (
    Abandoned,
    Hypothesis,
    Rows,
    constrain,
    kept_rows,
    length_penalty,
    max_lengths,
)


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
    rows = Rows(model, src, use_cache, max_len)
    limit = rows.limit  # (B,)
    sentence = torch.arange(src.size(0), device=src.device)  # (R,) input row of each decoded row
    logprob = torch.zeros(src.size(0), device=src.device)  # (R,)
    out: list[Hypothesis | None] = [None] * src.size(0)
    for step in range(int(limit.max()) + 1):
        keep = kept_rows(abandoned, sentence)
        if keep is not None:
            if keep.numel() == 0:
                break
            rows.reorder(keep, keep)
            sentence, logprob = sentence[keep], logprob[keep]
        logp = constrain(rows.log_probs(), step, limit[sentence], min_len, rows.cfg)  # (R, V)
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
    return _single_path(model, src, most_probable, max_len, min_len, alpha, use_cache, abandoned)


def most_probable(logp: Tensor) -> Tensor:
    """Each row's most probable token, the first of a tie, as `argmax` gives it: (R, V) -> (R,).
    Found block by block (`decode.largest`): ATen's CPU `argmax` and `max` are slow."""
    return first_max_index(logp)


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


def run(
    model: Decodable,
    src: Tensor,
    options: DecodeOptions,
    max_len: int | Tensor | None = None,
    *,
    seed: int | None = None,
    use_cache: bool = True,
    abandoned: Abandoned | None = None,
    constraints: list[Constraints] | None = None,
    joins: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Decode src (B, S) as `options` say: sampled, greedy (beam 1) or beam search. For each row,
    its hypotheses, best first (`options.nbest` at most; [] for a row `abandoned` dropped).

    max_len: per-row caps (see `max_lengths`); the caller computes them from the options and the
    source lengths. seed: the sampling seed of this batch (default options.seed). constraints:
    token sequences each row's output must contain (`decode.constrained.search_with_constraints`:
    beam search, constrained where the best hypothesis lacks a term), and
    joins, the tokens that continue a word, so that a constraint starting a word ends one.
    """
    o = options
    common = {"max_len": max_len, "min_len": o.min_len, "alpha": o.alpha, "use_cache": use_cache}
    if constraints is not None and any(constraints):
        if not o.beam_search:
            raise ValueError("constraints need beam search, not sampling")
        return search_with_constraints(
            model,
            src,
            constraints,
            o.beam,
            nbest=o.nbest,
            abandoned=abandoned,
            joins=joins,
            **common,
        )
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


__all__ = [  # with what the searches share (rows.py) and beam search (beam.py), for callers
    "DEFAULT_MAX_LEN_B",
    "Abandoned",
    "BeamStep",
    "Hypothesis",
    "attention_weights",
    "beam_search",
    "filter_logits",
    "greedy",
    "length_penalty",
    "max_lengths",
    "most_probable",
    "run",
    "sample",
]
