"""A request's texts or HTML documents cut into sentences, translated in one job and put back
together: what /translate, /translate_file and /v1/translate (`"format": "html"`) share.

    pieces = [split(text, "html", svc.split, model.source) for text in texts]
    done = await translate_pieces(request, svc, model, pieces, options)
    pieces[0].join([r.text for r in done.texts[0]])   # the best translation (per text, sentence)
    hypothesis(pieces[0], done.texts[0], 1)             # the next best one
    done.warnings                                       # the sentences cut to --max-src-tokens

A text is cut as `qkv.apps.documents` cuts it (the sentences of each line, or each line whole);
an HTML document as `qkv.apps.html` does (its text in sentences, its markup kept).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request

from ...decode.options import DecodeOptions
from ..documents import Pieces, split_lines, split_sentences
from ..glossary import Glossary
from ..html import HtmlDocument
from ..translator import Translation
from .batcher import Pending
from .service import ServedModel, Service


def split(text: str, kind: str, how: str, lang: str) -> Pieces | HtmlDocument:
    """The sentences of a text (kind "text": cut `how`, "sentences" or "lines") or of an HTML
    document's text (kind "html")."""
    if kind == "html":
        return HtmlDocument(text, lang)
    return split_sentences(text, lang) if how == "sentences" else split_lines(text)


@dataclass(frozen=True)
class Done:
    """The translations of each text's sentences, and what the answer says of those cut."""

    texts: list[list[Translation]]
    warnings: list[str]


def cut_warnings(pending: Pending, model: ServedModel, name: Callable[[int], str]) -> list[str]:
    """A line for each sentence of the job cut to the model's source limit (`Job.cut`), as the
    command line warns; `name` names sentence i of the job in the answer (asked only for those)."""
    room = model.translator.max_src_tokens - 1  # eos takes the last place
    return [
        f"{name(i)} has {n} subword tokens: only its first {room} were translated "
        "(--max-src-tokens)"
        for i, n in sorted(pending.job.cut.items())
    ]


async def translate_texts(
    request: Request,
    svc: Service,
    model: ServedModel,
    texts: list[str],
    options: DecodeOptions,
    name: Callable[[int], str],
    attention: bool = False,
    alignment: bool = False,
    glossary: Glossary | None = None,
) -> tuple[list[Translation], list[str]]:
    """The texts decoded in one job after the service's checks (sentences, characters, decoding
    work), and a warning for each text cut (`name(i)` names text i in the answer): what every
    endpoint that translates does."""
    svc.check_size(texts)
    pending = svc.check_options(model, options, texts, attention, alignment, glossary)
    results = await svc.translate(request, pending)
    return results, cut_warnings(pending, model, name)


async def translate_pieces(
    request: Request,
    svc: Service,
    model: ServedModel,
    pieces: list[Pieces | HtmlDocument],
    options: DecodeOptions,
    glossary: Glossary | None = None,
) -> Done:
    """The translations of each piece's sentences, decoded in one job (`translate_texts`); a
    warning for each sentence cut."""
    counts = [len(p.sentences) for p in pieces]

    def where(k: int) -> str:  # sentence k of the job: which text, which of its sentences
        for i, n in enumerate(counts):
            if k < n:
                return f"text {i}, sentence {k}"
            k -= n
        raise IndexError(k)

    flat = [sentence for p in pieces for sentence in p.sentences]
    results, warnings = await translate_texts(
        request, svc, model, flat, options, where, glossary=glossary
    )
    it = iter(results)
    return Done([[next(it) for _ in range(n)] for n in counts], warnings)


def hypothesis(piece: Pieces | HtmlDocument, done: list[Translation], k: int) -> str:
    """The piece with each sentence's k-th best translation (its best where it has fewer)."""
    return piece.join([r.nbest[k][0] if k < len(r.nbest) else r.text for r in done])


def hypothesis_score(done: list[Translation], k: int) -> float:
    """The sum of the scores of each sentence's k-th best translation (its best where it has
    fewer): the score of a text or document, whose sentences are decoded independently."""
    return sum(r.nbest[k][1] if k < len(r.nbest) else r.score for r in done)


__all__ = [
    "Done", "cut_warnings", "hypothesis", "hypothesis_score", "split", "translate_pieces",
    "translate_texts",
]
