"""Decoding algorithms over ids: greedy, beam search and sampling (`search`), ensembles,
and the decoding options as one value (`DecodeOptions`)."""

from .search import (
    Hypothesis,
    beam_search,
    cross_attention,
    filter_logits,
    greedy,
    length_penalty,
    sample,
)

__all__ = [
    "Hypothesis",
    "beam_search",
    "cross_attention",
    "filter_logits",
    "greedy",
    "length_penalty",
    "sample",
]
