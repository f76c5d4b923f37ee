"""Glossaries: the user's terms, guaranteed in the translation.

    glossary = Glossary.read("terms.tsv")         # source term TAB target term, one pair a line
    translator.translate(["A dog runs."], glossary=glossary)
    glossary.terms_in("The Red Cross, a cross.")
    # -> [("red cross", "Rotes Kreuz"), ("cross", "Kreuz")]

A source term occurs in a text where it stands as whole words, in any case ("Dog" and "dog" match
"dog"); a term of a script written without spaces (Chinese, Japanese, Thai) matches anywhere.
Longer terms are matched first and a shorter term inside a matched one does not count. Each term
that occurs asks the translation to contain its target term, as the model's target tokenizer
writes that term alone (`SubwordTokenizer.encode_tgt`): a constraint of lexically constrained
beam search (`decode.constrained`), which also keeps a term a whole word (no piece may join its
end, as "Reh" + "ter"). The file is UTF-8 (a byte order mark is dropped); blank lines
and lines starting with '#' are skipped; a bad line is a ValueError naming the file and the line.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..data.tokenizer import SubwordTokenizer
from ..decode.options import DecodeOptions

MAX_TERMS = 10_000  # the most pairs a glossary holds (a request's and a file's alike)
MAX_TERM_CHARS = 200  # the longest term, on either side
_UNSPACED = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class Glossary:
    """Source term -> target term (source terms compared in lower case)."""

    terms: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]], where: str = "glossary") -> Glossary:
        """A glossary of (source, target) pairs; `where` names them in errors. The same source
        term twice with different targets is refused."""
        terms: dict[str, str] = {}
        for n, pair in enumerate(pairs, start=1):
            if len(terms) >= MAX_TERMS:
                raise ValueError(f"{where}: more than {MAX_TERMS} terms")
            if not (isinstance(pair, Sequence) and len(pair) == 2) or isinstance(pair, str):
                raise ValueError(f"{where} entry {n}: expected [source term, target term]")
            source, target = (_term(x, f"{where} entry {n}") for x in pair)
            key = source.lower()
            if terms.get(key, target) != target:
                raise ValueError(
                    f"{where} entry {n}: {source!r} is already {terms[key]!r}, not {target!r}"
                )
            terms[key] = target
        return cls(terms)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Glossary:
        """A glossary from a TSV file: source term TAB target term on each line."""
        try:
            text = Path(path).read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        pairs = []
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 2:
                raise ValueError(f"{path} line {n}: expected 'source term<TAB>target term'")
            pairs.append((parts[0], parts[1]))
        glossary = cls.from_pairs(pairs, where=str(path))
        if not glossary.terms:
            raise ValueError(f"{path}: no terms (each line: source term<TAB>target term)")
        return glossary

    def merged(self, other: Glossary) -> Glossary:
        """This glossary with `other`'s terms added (other's target wins for a shared term)."""
        return Glossary({**self.terms, **other.terms})

    @functools.cached_property
    def _patterns(self) -> list[tuple[str, re.Pattern[str]]]:
        """Each source term and its pattern, longest term first (compiled once)."""
        return [(t, _pattern(t)) for t in sorted(self.terms, key=len, reverse=True)]

    def terms_in(self, text: str) -> list[tuple[str, str]]:
        """The (source term, target term) pairs that occur in `text`, longest term first."""
        found, taken = [], [False] * len(text)
        for source, pattern in self._patterns:
            for match in pattern.finditer(text):
                span = range(match.start(), match.end())
                if not any(taken[i] for i in span):
                    found.append((source, self.terms[source]))
                    for i in span:
                        taken[i] = True
                    break
        return found

    def targets_in(self, text: str) -> list[str]:
        """The target terms `text` asks for, each once (two source terms may share one)."""
        return list(dict.fromkeys(target for _, target in self.terms_in(text)))

    def constraints(self, texts: list[str], tokenizer: SubwordTokenizer) -> list[list[list[int]]]:
        """For each text, the target-token sequences its translation must contain: each target
        term's pieces, without a lone leading "▁" for a term of a script written without spaces
        (inside a Chinese sentence a word has no space before it)."""
        found = [self.targets_in(text) for text in texts]
        targets = sorted({t for row in found for t in row})
        if not targets:
            return [[] for _ in texts]
        ids = dict(zip(targets, tokenizer.encode_tgt(targets), strict=True))
        pieces = tokenizer.tgt_vocabulary() if any(_UNSPACED.match(t) for t in targets) else []
        for target, seq in ids.items():
            if tokenizer.unk_id in seq:
                raise ValueError(f"glossary: the model cannot write the target term {target!r}")
            if _UNSPACED.match(target) and len(seq) > 1 and pieces[seq[0]] == "\u2581":
                ids[target] = seq[1:]
        return [[ids[t] for t in row] for row in found]


def joining_pieces(tokenizer: SubwordTokenizer) -> torch.Tensor:
    """(V,) bool: the target pieces that continue the word before them (no "▁" word-start mark,
    a letter or digit first), which may not follow a term (`decode.constrained`'s `joins`)."""
    pieces = tokenizer.tgt_vocabulary()
    return torch.tensor([not p.startswith("\u2581") and p[:1].isalnum() for p in pieces])


def _term(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: a term must be non-empty text, got {value!r}")
    if len(value) > MAX_TERM_CHARS:
        raise ValueError(f"{where}: a term has at most {MAX_TERM_CHARS} characters")
    return value.strip()


def _pattern(term: str) -> re.Pattern[str]:
    """Whole words, in any case: no word character right before or after the term, where its
    edge is a character of a script written with spaces."""
    before = "" if _UNSPACED.match(term[0]) else r"(?<!\w)"
    after = "" if _UNSPACED.match(term[-1]) else r"(?!\w)"
    return re.compile(before + re.escape(term) + after, re.IGNORECASE)


def check_search(options: DecodeOptions) -> None:
    """A glossary's terms need beam search: a ValueError unless `options` has a beam of 2 or more
    and no sampling."""
    if not options.beam_search or options.beam < 2:
        raise ValueError(
            "a glossary needs beam search with a beam of 2 or more (no sampling): --beam 2+"
        )


__all__ = ["MAX_TERMS", "Glossary", "check_search"]
