"""Ensembles against hand computations: the mean of the members' probabilities from full forward passes, one
member == that model, cached == uncached search."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from qkv.decode import beam_search, greedy
from qkv.decode.ensemble import Ensemble
from qkv.decode.search import Hypothesis
from qkv.model import padding_mask
from tiny_models import batch, random_sources, tiny_model


def members() -> list:
    """Two differently shaped random models over one vocabulary (d_model 32 and 48)."""
    return [tiny_model(seed=0), tiny_model(seed=1, d_model=48, n_heads=4, d_ff=96, n_decoder_layers=1)]


def test_next_token_distribution_is_the_mean_of_the_members_probabilities() -> None:
    models = members()
    src = batch(random_sources(3, seed=2))
    tgt = torch.tensor([[2, 5, 9, 7], [2, 4, 4, 4], [2, 30, 11, 6]])
    mask = padding_mask(src, 0)
    with torch.no_grad():
        probs = [F.softmax(m.decode(tgt, m.encode(src, mask), mask), dim=-1) for m in models]  # each (B, T, V)
        want = torch.log((probs[0] + probs[1]) / 2)
        ensemble = Ensemble(models).eval()
        got = ensemble.decode(tgt, ensemble.encode(src, mask), mask)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(probs[0], probs[1], atol=1e-2)  # the members do disagree


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_cached_search_equals_recomputation_and_one_member_equals_its_model(search: str) -> None:
    models = members()
    src = batch(random_sources(6, seed=3))

    def run(model, **kw) -> list[list[Hypothesis]]:  # the hypotheses of each sentence
        if search == "greedy":
            return [[h] for h in greedy(model, src, **kw)]
        return beam_search(model, src, beam=3, nbest=2, **kw)

    def ids(result: list[list[Hypothesis]]) -> list[list[list[int]]]:
        return [[h.tokens for h in hyps] for hyps in result]

    ensemble = Ensemble(models).eval()
    cached, full = run(ensemble), run(ensemble, use_cache=False)
    assert ids(cached) == ids(full)
    torch.testing.assert_close(torch.tensor([h.score for r in cached for h in r]),
                               torch.tensor([h.score for r in full for h in r]), atol=1e-4, rtol=1e-5)
    assert ids(run(Ensemble(models[:1]).eval())) == ids(run(models[0]))
    assert ids(cached) != ids(run(models[0]))  # the second member changes the outputs


def test_members_must_share_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="share their tokenizer"):
        Ensemble([tiny_model(seed=0), tiny_model(seed=1, src_vocab_size=50)])
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([])
