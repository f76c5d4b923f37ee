"""Decoding: greedy, beam search and sampling over ids (`search`), and text in, text out (`Translator`)."""

from .search import Hypothesis, beam_search, cross_attention, filter_logits, greedy, length_penalty, sample
from .translator import Translation, Translator

__all__ = ["Hypothesis", "Translation", "Translator", "beam_search", "cross_attention", "filter_logits", "greedy",
           "length_penalty", "sample"]
