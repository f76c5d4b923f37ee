"""Decoding: greedy, beam search and sampling over ids (`search`), and text in, text out (`Translator`)."""

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
