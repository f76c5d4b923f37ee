"""Greedy, beam search and sampling against hand computations and equivalences.

Oracles: a prefix -> distribution table whose beam search is worked out by hand; teacher-forced full forward
passes (the log-prob of a hypothesis, independently of the search); greedy decoding (beam 1, top-k 1); the
same search without the cache, one sentence at a time, and in shuffled order.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from qkv import DecoderOnly, Transformer
from qkv.decode import attention_weights, beam_search, filter_logits, greedy, length_penalty, sample
from qkv.decode.beam import _in_place_order
from qkv.decode.search import BeamStep, Hypothesis, most_probable
from qkv.model import AttentionWeights, padding_mask
from tiny_models import V, batch, random_sources, tiny_config, tiny_model

EOS, A, B = 3, 4, 5


class TableModel(nn.Module):
    """A stand-in for a Transformer whose next-token distribution is a table of the generated prefix."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]]) -> None:
        super().__init__()
        self.config = tiny_config()
        self.table = table

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        return torch.zeros(src.size(0), src.size(1), 1)  # (B, S, 1): unused

    def decode(self, tgt_ids: Tensor, memory: Tensor, memory_mask: Tensor | None = None,
               cache: None = None) -> Tensor:
        logits = torch.full((*tgt_ids.shape, V), math.log(1e-12))  # (B, T, V); only the last position is read
        for row, prefix in enumerate(tgt_ids[:, 1:].tolist()):
            for token, p in self.table[tuple(prefix)].items():
                logits[row, -1, token] = math.log(p)
        return logits

    def max_target_positions(self) -> None:
        return None


TABLE = {  # worked example: beam 2 finds [B] (p = .36), greedy ends with [A, A] (p = .12)
    (): {A: 0.6, B: 0.4},
    (A,): {A: 0.4, B: 0.35, EOS: 0.25},
    (B,): {EOS: 0.9, A: 0.05, B: 0.05},
    (A, A): {EOS: 0.5, A: 0.3, B: 0.2},
    (A, B): {EOS: 0.6, A: 0.2, B: 0.2},
}


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_search_matches_the_hand_computation(alpha: float) -> None:
    """Step 1 ranks B.eos (.36) > AA (.24) > AB (.21) > A.eos (.15): B.eos is finished and kept while AA and
    AB go on; step 2 finishes AB.eos (.126) and AA.eos (.12): the sentence has 2 finished hypotheses."""
    model = TableModel(TABLE).eval()
    src = torch.tensor([[7, 8, EOS]])
    hyps = beam_search(model, src, beam=2, alpha=alpha, nbest=2, use_cache=False)[0]
    assert [h.tokens for h in hyps] == [[B], [A, B]]
    for h, p in zip(hyps, [0.36, 0.6 * 0.35 * 0.6], strict=True):
        assert h.logprob == pytest.approx(math.log(p), abs=1e-5)
        assert h.score == pytest.approx(math.log(p) / ((5 + len(h.tokens) + 1) / 6) ** alpha, abs=1e-5)
    (g,) = greedy(model, src, alpha=alpha, use_cache=False)
    assert g.tokens == [A, A] and g.logprob == pytest.approx(math.log(0.6 * 0.4 * 0.5), abs=1e-5)


def test_the_trace_shows_the_hand_computation_step_by_step() -> None:
    """The worked example, as `trace` sees it: step 0 ranks A (.6) over B (.4) and keeps both;
    step 1 ranks B.eos (.36), AA (.24), AB (.21), A.eos (.15): B.eos ends, AA and AB are kept;
    step 2 ends AB.eos (.126) and AA.eos (.12), with their length-penalised scores."""
    steps: list[BeamStep] = []
    model = TableModel(TABLE).eval()
    hyps = beam_search(model, torch.tensor([[7, 8, EOS]]), beam=2, alpha=1.0, nbest=2,
                       use_cache=False, trace=steps.append)[0]
    assert [(s.step, s.sentence) for s in steps] == [(0, 0), (1, 0), (2, 0)]
    first, second, third = steps
    assert [(c, round(math.exp(p), 4)) for c, p in first.candidates[:2]] == [([A], 0.6), ([B], 0.4)]
    assert [c for c, _ in first.kept] == [[A], [B]] and first.ended == []
    ranked = [(c, round(math.exp(p), 4)) for c, p in second.candidates[:4]]
    assert ranked == [([B, EOS], 0.36), ([A, A], 0.24), ([A, B], 0.21), ([A, EOS], 0.15)]
    assert [h.tokens for h in second.ended] == [[B]]
    assert [c for c, _ in second.kept] == [[A, A], [A, B]]
    assert sorted(h.tokens for h in third.ended) == [[A, A], [A, B]]
    for h in third.ended:
        assert h.score == pytest.approx(h.logprob / length_penalty(len(h.tokens) + 1, 1.0))
    assert [h.tokens for h in hyps] == [[B], [A, B]]


EARLY_ENDINGS = {  # beam 2: two poor endings ([] .06, [A] .027) are found before the best one, [A, A] (.77)
    (): {A: 0.9, EOS: 0.06, B: 0.04},
    (A,): {A: 0.95, EOS: 0.03, B: 0.02},
    (B,): {EOS: 0.5, A: 0.3, B: 0.2},
    (A, A): {EOS: 0.9, A: 0.06, B: 0.04},
    (A, B): {EOS: 0.5, A: 0.3, B: 0.2},
    (A, A, A): {EOS: 0.9, A: 0.1},
    (A, A, B): {EOS: 0.9, A: 0.1},
}


def test_early_poor_endings_do_not_cut_off_a_better_hypothesis() -> None:
    """After step 1 the sentence already has 2 finished hypotheses, but the alive A A (.855) beats both:
    the search goes on and returns [A, A] (p .7695); stopping at `beam` finished ones would return []."""
    model = TableModel(EARLY_ENDINGS).eval()
    hyps = beam_search(model, torch.tensor([[7, EOS]]), beam=2, alpha=0.0, nbest=2, use_cache=False)[0]
    assert [h.tokens for h in hyps] == [[A, A], []]
    assert hyps[0].logprob == pytest.approx(math.log(0.9 * 0.95 * 0.9), abs=1e-5)


def teacher_forced_logprob(model: Transformer, src: list[int], tokens: list[int]) -> float:
    """log P(tokens + eos | src) from one full forward pass, in float64."""
    tgt = torch.tensor([[2, *tokens, EOS]])
    with torch.no_grad():
        logits = model(torch.tensor([src]), tgt[:, :-1])  # (1, T, V)
    logp = torch.log_softmax(logits.double(), dim=-1)
    return logp[0].gather(1, tgt[0, 1:, None]).sum().item()


def test_beam_scores_are_summed_logprobs_with_the_gnmt_length_penalty() -> None:
    model, alpha = tiny_model(), 0.6
    sources = random_sources(6)
    for src, hyps in zip(sources, beam_search(model, batch(sources), beam=2, alpha=alpha, nbest=2), strict=True):
        assert len(hyps) == 2 and hyps[0].tokens != hyps[1].tokens and hyps[0].score >= hyps[1].score
        for h in hyps:
            logprob = teacher_forced_logprob(model, src, h.tokens)
            assert h.logprob == pytest.approx(logprob, abs=1e-4)
            assert h.score == pytest.approx(logprob / ((5 + len(h.tokens) + 1) / 6) ** alpha, abs=1e-4)
    assert length_penalty(1, 0.6) == 1.0 and length_penalty(7, 1.0) == 2.0


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_1_equals_greedy_exactly(alpha: float) -> None:
    model = tiny_model()
    src = batch(random_sources(32))
    beams = beam_search(model, src, beam=1, alpha=alpha)
    assert [[b] for b in greedy(model, src, alpha=alpha)] == beams  # ids, logprob and score, bit for bit
    assert len({len(b[0].tokens) for b in beams}) > 5  # the hypotheses end at many different steps


def nbest_ids(results: list[list[Hypothesis]] | list[Hypothesis]) -> list:
    return [[h.tokens for h in r] if isinstance(r, list) else r.tokens for r in results]


SEARCHES = {
    "greedy": lambda model, src, **kw: greedy(model, src, **kw),
    "beam4": lambda model, src, **kw: beam_search(model, src, beam=4, nbest=4, **kw),
    "sample": lambda model, src, **kw: sample(model, src, top_p=0.9, seed=3, **kw),
}


@pytest.mark.parametrize("search", SEARCHES)
def test_cache_is_a_pure_speed_up(search: str) -> None:
    model = tiny_model(norm_first=True)
    src = batch(random_sources(16))
    cached = SEARCHES[search](model, src)
    assert nbest_ids(SEARCHES[search](model, src, use_cache=False)) == nbest_ids(cached)


@pytest.mark.parametrize("search", ["greedy", "beam4"])
def test_output_does_not_depend_on_batch_size_or_order(search: str) -> None:
    model, sources = tiny_model(), random_sources(32)
    alone = [SEARCHES[search](model, batch([s]))[0] for s in sources]
    by_length = sorted(range(32), key=lambda i: len(sources[i]))
    shuffled = torch.randperm(32, generator=torch.Generator().manual_seed(0)).tolist()
    for order in (by_length, shuffled):
        together = SEARCHES[search](model, batch([sources[i] for i in order]))
        assert nbest_ids(together) == nbest_ids([alone[i] for i in order])
        scores = [r[0].score if isinstance(r, list) else r.score for r in together]
        expected = [alone[i][0].score if isinstance(alone[i], list) else alone[i].score for i in order]
        assert scores == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("search", SEARCHES)
def test_abandoned_rows_leave_at_the_next_step_and_the_others_are_unchanged(search: str) -> None:
    """Rows 1 and 4 are abandoned after 3 steps (a caller gave up): they get no hypothesis, are
    asked about no more, and the other rows' outputs equal those of the search without them
    (sampling's draws depend on the batch)."""
    model, sources = tiny_model(), random_sources(6)
    src = batch(sources)
    forced = {"min_len": 12, "max_len": 12}  # every row decodes 12 steps
    plain = SEARCHES[search](model, src, **forced)
    asked: list[int] = []

    def abandoned(i: int) -> bool:
        asked.append(i)
        return i in (1, 4) and len(asked) > 3 * 6

    result = SEARCHES[search](model, src, abandoned=abandoned, **forced)
    assert [i for i, r in enumerate(result) if not r] == [1, 4]
    kept = [0, 2, 3, 5]
    if search != "sample":  # the draws depend on the batch
        assert nbest_ids([result[i] for i in kept]) == nbest_ids([plain[i] for i in kept])
    assert asked.count(1) == 4 and asked.count(0) == 13  # steps 0-3, then gone; 0-12


def test_continuing_hypotheses_stay_in_their_parents_slots_where_they_can() -> None:
    """Beam search orders each sentence's continuing hypotheses so that the cache copies as few rows as possible:
    every parent with children keeps its best-ranked child in its own slot, which is the most rows that can stay."""
    parent = torch.randint(0, 5, (200, 5), generator=torch.Generator().manual_seed(0))  # (Ba, n) by rank
    order = _in_place_order(parent)
    assert torch.equal(order.sort(dim=1).values, torch.arange(5).expand(200, 5))  # a permutation of the ranks
    placed = parent.gather(1, order)  # (Ba, n slots) the parent of the hypothesis in each slot
    stay = placed == torch.arange(5)
    for row in range(200):
        ranks = parent[row].tolist()
        assert int(stay[row].sum()) == len(set(ranks))
        for p in set(ranks):
            assert int(order[row, p]) == ranks.index(p)  # the best-ranked child of p sits in slot p
        later = [int(order[row, slot]) for slot in range(5) if not stay[row, slot]]
        assert later == sorted(later)  # the other children fill the free slots in rank order


def test_lengths_pad_and_bos() -> None:
    model = tiny_model(ending=False)
    sources = random_sources(8)
    src = batch(sources)
    for hyp, s in zip(greedy(model, src), sources, strict=True):  # default: source length (with eos) + 50
        assert len(hyp.tokens) <= len(s) + 50 and not {0, 2} & set(hyp.tokens)
    assert max(len(h.tokens) - len(s) for h, s in zip(greedy(model, src), sources, strict=True)) == 50
    for hyps in beam_search(model, src, beam=3, nbest=3, min_len=5, max_len=5):
        assert [len(h.tokens) for h in hyps] == [5, 5, 5]
    limits = torch.arange(8)
    assert [len(h.tokens) for h in greedy(model, src, min_len=20, max_len=limits)] == limits.tolist()


def test_learned_positions_cap_the_output_length() -> None:
    model = tiny_model(ending=False, positional="learned", max_positions=16)
    for hyps in beam_search(model, batch(random_sources(4)), beam=2, min_len=100):
        assert len(hyps[0].tokens) == 15  # bos and 15 tokens fill the 16 positions; eos is predicted at the last


def test_sampling_is_seeded_and_top_k_1_is_greedy() -> None:
    model = tiny_model()
    src = batch(random_sources(16))
    first, again = sample(model, src, seed=1), sample(model, src, seed=1)
    assert first == again
    assert nbest_ids(sample(model, src, seed=2)) != nbest_ids(first)
    assert sample(model, src, top_k=1, temperature=0.7, seed=5) == greedy(model, src)


def test_top_p_keeps_the_minimal_nucleus() -> None:
    probs = torch.tensor([[0.0625, 0.5, 0.1875, 0.25]])  # sorted: .5, .25, .1875, .0625
    logits = probs.log()

    def kept(**kwargs: float) -> list[bool]:
        return filter_logits(logits, **kwargs).isfinite()[0].tolist()

    assert kept(top_p=0.49) == [False, True, False, False]  # .5 reaches .49
    assert kept(top_p=0.51) == [False, True, False, True]  # .5 + .25
    assert kept(top_p=0.74) == [False, True, False, True]
    assert kept(top_p=0.76) == [False, True, True, True]  # .5 + .25 + .1875
    assert kept(top_p=0.95) == [True] * 4
    assert kept(top_p=1.0) == [True] * 4
    assert kept(top_k=2) == [False, True, False, True]
    assert kept(top_k=3, top_p=0.51) == [False, True, False, False]  # top-p after top-k: .5 / .9375 > .51
    torch.testing.assert_close(filter_logits(logits, temperature=2.0), logits / 2)
    with pytest.raises(ValueError, match="temperature"):
        filter_logits(logits, temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        filter_logits(logits, top_p=0.0)


def test_the_cache_is_allocated_once_at_the_longest_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """The self-attention buffers are sized for bos (+ prompt) + max_len fed positions, once, and never grow
    (the default capacity, 64, would have grown at 70)."""
    from qkv.model import KVCache

    grown: list[int] = []
    original = KVCache._grow

    def record(self: KVCache, k: Tensor, v: Tensor, capacity: int) -> None:
        grown.append(capacity)
        original(self, k, v, capacity)

    monkeypatch.setattr(KVCache, "_grow", record)
    model = tiny_model(ending=False)
    layers = len(model.decoder.layers)
    greedy(model, batch(random_sources(3)), min_len=70, max_len=70)
    assert grown == [71] * layers
    grown.clear()
    beam_search(model, batch(random_sources(3)), beam=4, min_len=70, max_len=70)
    assert grown == [71] * layers
    grown.clear()
    greedy(DecoderOnly(tiny_config()).eval(), torch.randint(4, V, (2, 6)), min_len=9, max_len=9)
    assert grown == [16] * layers  # bos + 6 prompt tokens + 9 fed


def test_decoder_only_prompts() -> None:
    torch.manual_seed(0)
    model = DecoderOnly(tiny_config()).eval()
    prompts = torch.randint(4, V, (5, 6))
    for search in SEARCHES.values():
        cached = search(model, prompts, max_len=12)
        assert nbest_ids(search(model, prompts, max_len=12, use_cache=False)) == nbest_ids(cached)
    (hyp,) = greedy(model, prompts[:1], min_len=12, max_len=12)
    ids = torch.cat([torch.tensor([[2]]), prompts[:1]], dim=1)  # [bos] + prompt, then greedy by hand
    with torch.no_grad():
        for _ in range(12):
            logits = model(ids)[0, -1]
            logits[[0, 2, 3]] = float("-inf")  # pad, bos, and eos before min_len
            ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
    assert hyp.tokens == ids[0, 7:].tolist()
    with pytest.raises(ValueError, match="same length"):
        greedy(model, torch.tensor([[5, 6], [5, 0]]))


def test_attention_weights_equal_the_incremental_decoders() -> None:
    model = tiny_model(ending=False)
    sources = random_sources(3)
    src = batch(sources)
    hyps = greedy(model, src, min_len=6, max_len=6)
    maps = attention_weights(model, src, [h.tokens for h in hyps])
    mask = padding_mask(src, 0)
    with torch.no_grad():
        memory, cache = model.encode(src, mask), model.new_cache()
        ys = torch.tensor([[2, *h.tokens] for h in hyps])  # every hypothesis has 6 tokens
        steps = [model.decoder(ys[:, t:t + 1], memory, mask, cache, weights=AttentionWeights())[1] for t in range(7)]
    for layer in range(len(model.decoder.layers)):
        incremental = torch.cat([step.cross[layer] for step in steps], dim=2)  # (B, H, T, S)
        for i, (s, m) in enumerate(zip(sources, maps, strict=True)):
            assert m.cross[layer].shape == (model.config.n_heads, 7, len(s))
            torch.testing.assert_close(m.cross[layer].sum(-1), torch.ones(model.config.n_heads, 7))
            torch.testing.assert_close(m.cross[layer], incremental[i, :, :, : len(s)])
            for t, step in enumerate(steps):  # step t's query sees positions 0..t; later ones get 0
                torch.testing.assert_close(m.decoder[layer][:, t, : t + 1], step.decoder[layer][i, :, 0])
                assert (m.decoder[layer][:, t, t + 1:] == 0).all()


def test_bad_arguments() -> None:
    model = tiny_model()
    src = batch(random_sources(2))
    with pytest.raises(ValueError, match="nbest"):
        beam_search(model, src, beam=2, nbest=3)
    with pytest.raises(ValueError, match="eval"):
        greedy(model.train(), src)


def test_the_most_probable_token_is_argmax_s_the_first_of_a_tie() -> None:
    logp = torch.log_softmax(torch.randn(5, 300, generator=torch.Generator().manual_seed(0)), -1)
    logp[1, [7, 9, 250]] = 0.0  # three tied maxima: the first wins
    logp[2] = -math.inf  # every token forbidden but one
    logp[2, 299] = 0.0
    logp[3, :] = -1.0  # all tied
    got = most_probable(logp)
    assert got.tolist() == logp.argmax(-1).tolist() and got[1] == 7 and got[3] == 0
