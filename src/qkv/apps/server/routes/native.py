"""qkv's own API: /v1/translate (scores, n-best, attention, alignment) and /v1/info.

    POST /v1/translate   {"text": "Hello" | [...], "beam": 5, "alpha": 0.6, "nbest": 3,
                         "attention": true, "alignment": true, "glossary": {"dog": "Hund"},
                         "format": "text" | "html"}
                         -> scores, n-best, attention
    GET  /v1/info        the pairs, the decoding defaults and the limits (the page reads it)

Each text is one sentence (`"split": "sentences"`: each text is cut into its sentences, and the
answer has one translation per sentence); with `"format": "html"` each text is an HTML document,
whose text is translated sentence by sentence and markup kept (`qkv.apps.html`, as /translate
does): its answer is the document, with the sum of its sentences' scores, and as n-best the
documents of each sentence's next best translations. The decoding options a request leaves unset
take the server's. Glossary terms (the request's, added to the server's `--glossary`) are used
where the source has them (`apps.glossary`): the translation contains the target term.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ....decode.options import DecodeOptions
from ...documents import split_sentences
from ...glossary import Glossary
from ...translator import Translation
from ..bodies import Asked, body_doc, given_options, served_pair, with_options
from ..sentences import hypothesis, hypothesis_score, split, translate_pieces, translate_texts
from ..service import LANGUAGE_NAMES, HTTPError, ServedModel, Service, ServiceDep

router = APIRouter(tags=["qkv"])


class _NativeBody(BaseModel):
    """qkv's /v1/translate: each text is one sentence; unset options take the server's."""

    model_config = ConfigDict(strict=True, extra="forbid")
    text: str | list[str] = Field(description="a sentence or a list of sentences")
    source: str | None = Field(None, description="source language (optional with one pair)")
    target: str | None = Field(None, description="target language (optional with one pair)")
    attention: bool = Field(False, description="return the cross-attention and the tokens")
    alignment: bool = Field(False, description="return the hard word alignment")
    split: Literal["none", "sentences"] = Field(
        "none", description='"sentences": cut each text into its sentences, translated each'
    )
    format: Literal["text", "html"] = Field(
        "text", description='"html": each text an HTML document, its markup kept'
    )
    glossary: dict[str, str] | None = Field(
        None, description="source term -> target term: used where the source has the term"
    )
    api_key: str | None = None


# and the decoding options of metadata "native" (`decode.options.option`): beam, alpha, nbest, ...
NativeRequest = with_options("NativeRequest", _NativeBody, "native")
NativeAsked = Annotated[Asked, served_pair(NativeRequest)]


class Hypothesis(BaseModel):
    text: str
    score: float


class NativeTranslation(BaseModel):
    text: str
    score: float = Field(description="log-probability with the length penalty")
    nbest: list[Hypothesis]
    source_tokens: list[str] | None = Field(None, description="subwords, eos included")
    target_tokens: list[str] | None = Field(None, description="subwords, eos included")
    attention: list[list[float]] | None = Field(
        None, description="(target tokens, source tokens): last layer, averaged over heads"
    )
    alignment: list[tuple[int, int]] | None = Field(None, description="(source, target) words")


class NativeResponse(BaseModel):
    source: str
    target: str
    translations: list[NativeTranslation]
    warnings: list[str] | None = Field(
        None, description="texts longer than --max-src-tokens: only their start was translated"
    )


@router.post(
    "/v1/translate",
    openapi_extra=body_doc(NativeRequest, "application/json"),
    responses={200: {"model": NativeResponse}},
)
async def native(request: Request, svc: ServiceDep, asked: NativeAsked) -> JSONResponse:
    """Translate sentences with these decoding options; on request, each sentence's
    cross-attention (best hypothesis, last layer, averaged over heads) with its subword
    tokens, and its hard word alignment. The numbers are `Translator.translate_detailed`'s."""
    req, model = asked.body, asked.model
    texts = [req.text] if isinstance(req.text, str) else req.text
    svc.check_size(texts)
    o, terms = _options(svc, req)
    answer: dict[str, Any] = {"source": model.source, "target": model.target}
    if req.format == "html":
        answer["translations"], warnings = await _documents(request, svc, model, texts, o, terms)
    else:
        name = "text"
        if req.split == "sentences":
            texts = [s for text in texts for s in split_sentences(text, model.source).sentences]
            name = "sentence"  # the index of its translation in the answer
        results, warnings = await translate_texts(
            request, svc, model, texts, o, lambda i: f"{name} {i}", req.attention, req.alignment,
            terms,
        )
        answer["translations"] = [_native(r, req.attention, req.alignment) for r in results]
    if warnings:  # as the command line warns
        answer["warnings"] = warnings
    return JSONResponse(answer)


def _options(svc: Service, req: Any) -> tuple[DecodeOptions, Glossary | None]:
    """The request's decoding options (the server's where unset) and glossary; 400 naming the
    option in error, or what `format: html` cannot take."""
    if req.format == "html" and (req.attention or req.alignment or req.split != "none"):
        raise HTTPError(
            400,
            "format html: each document is cut into its sentences and answered whole, so "
            "attention, alignment and split are not taken with it",
        )
    try:
        o = svc.options.replace(**given_options(req))
        terms = None if req.glossary is None else Glossary.from_pairs(req.glossary.items())
    except ValueError as e:
        raise HTTPError(400, str(e)) from None
    return o, terms


async def _documents(
    request: Request,
    svc: Service,
    model: ServedModel,
    texts: list[str],
    o: DecodeOptions,
    terms: Glossary | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each text as an HTML document translated with its markup kept: the document, its score
    (the sum of its sentences') and its n best (each sentence's k-th best); the warnings."""
    pages = [split(text, "html", svc.split, model.source) for text in texts]
    done = await translate_pieces(request, svc, model, pages, o, glossary=terms)
    answers = []
    for page, sentences in zip(pages, done.texts, strict=True):
        nbest = [
            {"text": hypothesis(page, sentences, k), "score": hypothesis_score(sentences, k)}
            for k in range(o.nbest)
        ]
        answers.append({**nbest[0], "nbest": nbest})
    return answers, done.warnings


@router.get("/v1/info")
async def info(svc: ServiceDep) -> dict[str, Any]:
    """The pairs served, the decoding defaults, the limits, whether a key is needed."""
    limits = svc.limits
    return {
        "pairs": [
            {"source": m.source, "target": m.target, "name": _pair_name(m)}
            for m in svc.served.values()
        ],
        "defaults": {"beam": svc.options.beam, "alpha": svc.options.alpha},
        "limits": {
            "max_chars": limits.max_chars,
            "max_sentences": limits.max_sentences,
            "max_beam": limits.max_beam,
            "max_output_tokens": limits.max_output_tokens,
            "max_decode_tokens": limits.max_decode_tokens,
            "timeout": limits.timeout,
        },
        "api_key_required": svc.api_key is not None,
        "glossary_terms": 0 if svc.glossary is None else len(svc.glossary.terms),
    }


def _pair_name(m: ServedModel) -> str:
    return f"{LANGUAGE_NAMES.get(m.source, m.source)} → {LANGUAGE_NAMES.get(m.target, m.target)}"


def _native(r: Translation, attention: bool, alignment: bool) -> dict[str, Any]:
    """One sentence of the native answer."""
    out: dict[str, Any] = {
        "text": r.text,
        "score": r.score,
        "nbest": [{"text": text, "score": score} for text, score in r.nbest],
    }
    if attention or alignment:
        out["source_tokens"] = r.source_tokens or []
        out["target_tokens"] = r.target_tokens or []
    if attention:
        out["attention"] = [] if r.attention is None else r.attention.tolist()
    if alignment:
        out["alignment"] = [list(pair) for pair in r.alignment or []]
    return out
