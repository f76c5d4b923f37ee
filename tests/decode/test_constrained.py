"""Lexically constrained beam search against its oracles.

Oracles: plain beam search (a sentence without constraints is searched exactly as `beam_search`
does, ids and scores); an exhaustive search (with a beam as wide as every hypothesis, the best
output is the best-scoring sequence that holds the constraints, found by enumerating them all and
scoring each by teacher forcing); each sentence decoded alone (batching changes nothing); and the
constraints themselves (each output holds each).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from qkv.decode import beam_search
from qkv.decode.constrained import Progress, constrained_beam_search, holds, search_width
from qkv.decode.rows import length_penalty
from tiny_models import batch, random_sources, tiny_model

EOS = 3


def test_progress_follows_the_constraints_token_by_token() -> None:
    constraints = [[7, 8, 9], [5]]
    p = Progress()
    assert p.advancing(constraints) == {7, 5} and p.met(constraints) == 0
    p = p.after(7, constraints).after(8, constraints)
    assert p.partial == (0, 2) and p.met(constraints) == 2 and p.advancing(constraints) == {9}
    broken = p.after(5, constraints)  # breaks off the first, meets the second
    assert broken.held == 0b10 and broken.partial is None and broken.met(constraints) == 1
    done = p.after(9, constraints).after(5, constraints)
    assert done.complete(constraints) and done.met(constraints) == 4
    assert holds([1, 7, 8, 9, 5], constraints) and not holds([7, 8, 5, 9], constraints)
    # 4 constraint tokens: 5 banks of at least 2 hypotheses each; none: the beam
    assert search_width(5, constraints) == 10 and search_width(12, constraints) == 12
    assert search_width(5, []) == 5


def test_without_constraints_it_is_beam_search() -> None:
    model = tiny_model()
    src = batch(random_sources(6, seed=3))
    for beam, nbest in [(1, 1), (4, 2)]:
        plain = beam_search(model, src, beam=beam, nbest=nbest, alpha=0.6)
        constrained = constrained_beam_search(model, src, [[]] * 6, beam, 0.6, nbest)
        for p, c in zip(plain, constrained, strict=True):
            assert [h.tokens for h in p] == [h.tokens for h in c]
            assert [h.score for h in p] == pytest.approx([h.score for h in c], abs=1e-5)


def test_every_output_holds_its_constraints_and_batching_changes_nothing() -> None:
    model = tiny_model(seed=2)
    sources = random_sources(5, seed=4)
    constraints = [[[10, 11]], [], [[20], [30, 31, 32]], [[12], [12]], [[39, 38]]]
    together = constrained_beam_search(model, batch(sources), constraints, beam=5, nbest=2)
    for source, wanted, hyps in zip(sources, constraints, together, strict=True):
        assert len(hyps) == 2 and all(holds(h.tokens, wanted) for h in hyps)
        alone = constrained_beam_search(model, batch([source]), [wanted], beam=5, nbest=2)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]
    free = beam_search(model, batch(sources[1:2]), beam=5)[0][0]
    assert together[1][0].tokens == free.tokens


def _sequence_score(model, src, tokens, alpha) -> float:
    """log P(tokens + eos | src) by one teacher-forced pass, with the length penalty."""
    ys = torch.tensor([[2, *tokens]])
    memory = model.encode(src, None)
    logp = model.decode(ys, memory, None).log_softmax(-1)[0]  # (T, V)
    total = sum(logp[t, tok].item() for t, tok in enumerate([*tokens, EOS]))
    return total / length_penalty(len(tokens) + 1, alpha)


@torch.inference_mode()
def test_a_beam_as_wide_as_every_hypothesis_finds_the_best_constrained_sequence() -> None:
    """Vocabulary of 4 words (4..7), outputs of at most 3 tokens: 84 sequences, a beam of 64 keeps
    every hypothesis, so the result is the exhaustive argmax over the sequences holding [6, 5]."""
    model = tiny_model(seed=5, src_vocab_size=8)
    src = torch.tensor([[4, 5, 6, EOS]])
    wanted = [[6, 5]]
    (hyps,) = constrained_beam_search(model, src, [wanted], beam=64, alpha=1.0, max_len=3)
    sequences = [list(s) for n in range(4) for s in itertools.product(range(4, 8), repeat=n)]
    scored = [(_sequence_score(model, src, s, 1.0), s) for s in sequences if holds(s, wanted)]
    best_score, best = max(scored)
    assert hyps[0].tokens == best and hyps[0].score == pytest.approx(best_score, abs=1e-4)


def test_a_constraint_that_cannot_fit_still_gives_an_output_ranked_after_those_that_hold() -> None:
    model = tiny_model(seed=1)
    src = batch(random_sources(1, seed=6))
    (hyps,) = constrained_beam_search(model, src, [[[9, 9, 9, 9]]], beam=3, max_len=2, nbest=1)
    assert len(hyps) == 1 and len(hyps[0].tokens) <= 2 and not holds(hyps[0].tokens, [[9] * 4])


def test_an_abandoned_row_gets_nothing_and_the_others_go_on() -> None:
    model = tiny_model(seed=2)
    sources = random_sources(3, seed=7)
    constraints = [[[10]], [[11]], [[12]]]
    kept = constrained_beam_search(model, batch(sources), constraints, beam=4,
                                   abandoned=lambda i: i == 1)
    full = constrained_beam_search(model, batch(sources), constraints, beam=4)
    assert kept[1] == [] and [h.tokens for h in kept[0]] == [h.tokens for h in full[0]]
    assert [h.tokens for h in kept[2]] == [h.tokens for h in full[2]]


def test_bad_constraints_are_refused() -> None:
    model = tiny_model()
    src = batch(random_sources(2))
    with pytest.raises(ValueError, match="constraints for 1 rows"):
        constrained_beam_search(model, src, [[[5]]])
    with pytest.raises(ValueError, match="non-empty list"):
        constrained_beam_search(model, src, [[[]], []])


def test_a_constraint_that_starts_a_word_ends_one() -> None:
    """Tokens 20..39 continue a word (`joins`): none follows constraint [10] (10 starts a word);
    without `joins` the search does put one there, so the rule is what changes it."""
    model = tiny_model(seed=3)
    sources = random_sources(12, seed=9)
    joins = torch.zeros(40, dtype=torch.bool)
    joins[20:] = True
    wanted = [[[10]]] * len(sources)

    def after_term(hyps: list) -> list[int | None]:
        out = []
        for (h,) in hyps:
            k = h.tokens.index(10)
            out.append(h.tokens[k + 1] if k + 1 < len(h.tokens) else None)
        return out

    free = after_term(constrained_beam_search(model, batch(sources), wanted, beam=4))
    assert any(t is not None and t >= 20 for t in free)
    kept = constrained_beam_search(model, batch(sources), wanted, beam=4, joins=joins)
    assert all(holds(h.tokens, [[10]]) for (h,) in kept)
    assert not any(t is not None and t >= 20 for t in after_term(kept))
    joining = [[[25]]] * len(sources)  # a constraint that joins the word before it: no rule
    assert constrained_beam_search(model, batch(sources), joining, beam=4, joins=joins) == \
        constrained_beam_search(model, batch(sources), joining, beam=4)


def test_the_widest_sentence_leaving_first_narrows_the_batch() -> None:
    """Row 0 (4 constraint tokens: width 10) reaches its limit first; rows 1 and 2 (none: the
    beam, 4) go on in a narrower batch, end at different steps, and end as beam search ends them."""
    model = tiny_model(seed=2)
    sources = random_sources(3, seed=11)
    got = constrained_beam_search(model, batch(sources), [[[10, 11, 12, 13]], [], []], beam=4,
                                  max_len=torch.tensor([5, 8, 30]))
    assert holds(got[0][0].tokens, [[10, 11, 12, 13]])
    for row, limit in ((1, 8), (2, 30)):
        alone = beam_search(model, batch(sources[row : row + 1]), beam=4, max_len=limit)[0]
        assert got[row][0].tokens == alone[0].tokens


def test_a_translation_that_holds_its_terms_is_kept() -> None:
    """search_with_constraints: beam search first; only a row whose best lacks a term is searched
    again with its constraints."""
    from qkv.decode.constrained import search_with_constraints

    model = tiny_model(seed=2)
    src = batch(random_sources(2, seed=4))
    plain = beam_search(model, src, beam=4)
    own = plain[0][0].tokens[1:3]  # already in row 0's translation
    got = search_with_constraints(model, src, [[own], [[10, 11]]], 4)
    assert got[0][0].tokens == plain[0][0].tokens and got[0][0].score == plain[0][0].score
    assert holds(got[1][0].tokens, [[10, 11]]) and not holds(plain[1][0].tokens, [[10, 11]])


def test_a_constrained_search_writes_at_most_the_plain_length_and_its_terms(monkeypatch) -> None:
    """A row searched again under its constraints may write at most the plain translation's tokens,
    its constraint tokens and LENGTH_SLACK more (a given max_len lower than that still holds); a
    length penalty would otherwise reward rambling before the forced term."""
    import qkv.decode.constrained as constrained

    model = tiny_model(seed=2)
    src = batch(random_sources(3, seed=4))
    plain = beam_search(model, src, beam=4, alpha=1.5)
    terms = [[[10, 11]], [[12], [13, 14]], []]
    assert not any(holds(p[0].tokens, t) for p, t in zip(plain, terms, strict=True) if t)
    limits = []
    search = constrained.constrained_beam_search

    def recorded(*args: object, max_len: torch.Tensor, **kwargs: object) -> object:
        limits.append(max_len.tolist())
        return search(*args, max_len=max_len, **kwargs)

    monkeypatch.setattr(constrained, "constrained_beam_search", recorded)
    got = constrained.search_with_constraints(model, src, terms, 4, alpha=1.5)
    caps = [len(plain[r][0].tokens) + n + constrained.LENGTH_SLACK for r, n in ((0, 2), (1, 3))]
    assert limits == [caps]
    for row, cap in zip((0, 1), caps, strict=True):
        assert holds(got[row][0].tokens, terms[row]) and len(got[row][0].tokens) <= cap
    constrained.search_with_constraints(model, src, terms, 4, max_len=6, alpha=1.5)
    assert limits[1] == [min(6, c) for c in caps]
