"""Documents around the translator: a paragraph cut into sentences and joined again with its own
spacing and line breaks.

    pieces = split_sentences("Hello there.  How are you?\nFine.", "en")
    pieces.sentences                     # ['Hello there.', 'How are you?', 'Fine.']
    pieces.join(["Hallo.", "Wie geht's?", "Gut."])   # 'Hallo.  Wie geht's?\nGut.'

Each line is its own piece of text; within a line, sentences are found by `sentencex` (Wikimedia's
maintained splitter: rules for some 240 languages and a fallback for the others, Chinese 。！？
included). On paragraphs of Multi30k and Tatoeba test sentences it gives back 93-100% of them
exactly, pysbd (22 languages, unmaintained) 95-100% (benchmarks/splitters.py, docs/results.md).
The whitespace around each sentence is kept as it was, so an input of 50 sentences in one line
comes back as 50 translations in one line, and blank lines stay blank.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sentencex

LINE_BREAK = re.compile(r"(\r\n|\n|\r)")
SPLITS = ("sentences", "lines")  # the ways to cut a text: `split_sentences`, `split_lines`


@dataclass(frozen=True)
class Pieces:
    """A text as (before, sentence, after) triples that concatenate back to it; whitespace
    between two sentences belongs to the first one's `after`. A sentence is empty only in the
    one triple of a text of whitespace alone."""

    parts: tuple[tuple[str, str, str], ...]

    @property
    def sentences(self) -> list[str]:
        return [sentence for _, sentence, _ in self.parts]

    def join(self, translations: Sequence[str]) -> str:
        """The text with each sentence replaced by its translation, spacing kept."""
        if len(translations) != len(self.parts):
            raise ValueError(f"{len(translations)} translations for {len(self.parts)} sentences")
        return "".join(b + t + a for (b, _, a), t in zip(self.parts, translations, strict=True))

    def text(self) -> str:
        return self.join(self.sentences)


def split_lines(text: str) -> Pieces:
    """Each line a sentence (blank lines and the line breaks kept around them)."""
    return _pieces(text, lambda line: [line])


def split_sentences(text: str, lang: str) -> Pieces:
    """Sentences of each line, as `sentencex` finds them for language `lang` (an ISO code; an
    unknown one gets its fallback rules)."""
    return _pieces(text, lambda line: list(sentencex.segment(lang, line)))


def _pieces(text: str, segment: Callable[[str], list[str]]) -> Pieces:
    """Pieces of `text`: its lines, each cut by `segment(line) -> [chunks that concatenate back
    to it]`, each chunk's surrounding whitespace set apart; whitespace-only chunks join the
    neighbouring sentence (or, with none, stay as text of their own with no sentence)."""
    parts: list[list[str]] = []
    pending = ""  # whitespace not yet attached to a sentence
    for chunk in _chunks(text, segment):
        core = chunk.strip()
        if not core:
            pending += chunk
            continue
        start = chunk.index(core)
        parts.append([pending + chunk[:start], core, chunk[start + len(core) :]])
        pending = ""
    if pending and not parts:
        return Pieces(((pending, "", ""),))
    if pending:
        parts[-1][2] += pending
    return Pieces(tuple((b, s, a) for b, s, a in parts))


def _chunks(text: str, segment: Callable[[str], list[str]]) -> list[str]:
    """The lines of `text` cut by `segment`, and the line breaks between them."""
    chunks: list[str] = []
    for piece in LINE_BREAK.split(text):
        if not piece:
            continue
        if LINE_BREAK.fullmatch(piece):
            chunks.append(piece)
        else:
            chunks.extend(segment(piece))
    return chunks


__all__ = ["SPLITS", "Pieces", "split_lines", "split_sentences"]
