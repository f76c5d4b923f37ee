"""Decoding algorithms over ids: greedy, beam search and sampling (`search`), ensembles,
and the decoding options as one value (`DecodeOptions`)."""

from .search import (
    Hypothesis,
    attention_weights,
    beam_search,
    filter_logits,
    greedy,
    length_penalty,
    sample,
)

__all__ = [
    "Hypothesis",
    "attention_weights",
    "beam_search",
    "filter_logits",
    "greedy",
    "length_penalty",
    "sample",
]
