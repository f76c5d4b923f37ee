"""The explain view: one sentence's beam search step by step and every attention map.

    GET  /explain      the view (static/explain.html)
    POST /v1/explain   {"text": "Hello", "beam": 4, "source": "en", "target": "zh", "api_key": ...}
                       -> {steps, source_tokens, target_tokens, maps, translation}

steps: per step of the beam search (`apps.trace.traced_search`) the candidates (subword pieces,
summed log-prob), those that ended there (with their length-penalised score), those kept, and
whether the search ended there. maps: every layer's and head's attention of the best hypothesis
of that search (`Translator.translation_of(..., maps=True)`): encoder [layer][head][S][S],
decoder [layer][head][T][T], cross [layer][head][T][S]. Floats are rounded to 3 decimals.

One sentence at a time, within the server's limits (characters, beam, decoded tokens, and at most
MAX_SOURCE_TOKENS source tokens: 413 over it), decoded by the server's decoding thread as a traced
request (`batcher.Pending.traced`): queued, timed out and answered as /translate's requests are.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ....decode.beam import BeamStep
from ....decode.options import DecodeOptions, option_names
from ...trace import traced_search
from ...translator import Translator
from ..bodies import Asked, body_doc, given_options, served_pair, with_options
from ..service import HTTPError, ServiceDep
from .page import STATIC

router = APIRouter(tags=["qkv"])

MAX_SOURCE_TOKENS = 200  # the sentence explained, in subwords (eos excluded)
DIGITS = 3  # the floats of the answer


class _ExplainBody(BaseModel):
    """One sentence to explain; unset options take the server's."""

    model_config = ConfigDict(strict=True, extra="forbid")
    text: str = Field(description="one sentence")
    source: str | None = Field(None, description="source language (optional with one pair)")
    target: str | None = Field(None, description="target language (optional with one pair)")
    api_key: str | None = None


# and the decoding options of metadata "explain" (`decode.options.option`): beam, alpha
ExplainRequest = with_options("ExplainRequest", _ExplainBody, "explain")
ExplainAsked = Annotated[Asked, served_pair(ExplainRequest)]


@router.get("/explain", include_in_schema=False)
async def explain_page() -> FileResponse:
    return FileResponse(STATIC / "explain.html")


@router.post("/v1/explain", openapi_extra=body_doc(ExplainRequest, "application/json"))
async def explain(request: Request, svc: ServiceDep, asked: ExplainAsked) -> JSONResponse:
    """One sentence's beam search step by step and all its attention maps (see the module)."""
    req, model = asked.body, asked.model
    text = req.text.strip()
    if not text:
        raise HTTPError(400, "give a sentence to explain")
    svc.check_size([text])
    searched = {name: getattr(svc.options, name) for name in option_names("group", "search")}
    try:  # one beam search: the server's search fields, the request's changes; nbest 1
        o = DecodeOptions(**searched).replace(**given_options(req))
    except ValueError as e:
        raise HTTPError(400, str(e)) from None
    pending = svc.check_options(model, o, [text], terms=False)  # beam, decoded tokens: the limits
    [ids] = pending.job.ids
    if len(ids) > MAX_SOURCE_TOKENS:
        message = f"the sentence has {len(ids)} tokens; /v1/explain takes {MAX_SOURCE_TOKENS}"
        raise HTTPError(413, message)
    pending.traced = functools.partial(_explain, ids=ids, options=o)
    return JSONResponse(await svc.translate(request, pending))


def _explain(translator: Translator, ids: list[int], options: DecodeOptions) -> dict[str, Any]:
    """The answer of /v1/explain for a sentence's source ids (a traced request: the decoding
    thread runs it)."""
    # one search: its steps, and the maps of the best hypothesis it found
    steps, hyps = traced_search(translator, ids, options)
    t = translator.translation_of(ids, hyps[:1], maps=True)
    pieces = translator.tokenizer.tgt_vocabulary()
    eos = translator.tokenizer.eos_id

    def spelled(tokens: list[int]) -> list[str]:
        return ["</s>" if i == eos else pieces[i] for i in tokens]

    maps = t.attention_maps
    return {
        "steps": [_step(s, spelled) for s in steps],
        "source_tokens": t.source_tokens or [],
        "target_tokens": t.target_tokens or [],
        "maps": {
            kind: [] if maps is None else [_rounded(m) for m in getattr(maps, kind)]
            for kind in ("encoder", "decoder", "cross")
        },
        "translation": t.text,
        "score": round(t.score, DIGITS),
        "beam": options.beam,
        "alpha": options.alpha,
    }


def _step(s: BeamStep, spelled: Any) -> dict[str, Any]:
    """One step of the lattice; hypotheses of log-prob -inf (none can be: at the length limit only
    eos is allowed) are left out, as JSON has no infinity."""
    return {
        "step": s.step,
        "candidates": [
            {"tokens": spelled(tokens), "logprob": round(lp, DIGITS)}
            for tokens, lp in s.candidates
            if math.isfinite(lp)
        ],
        "ended": [
            {
                "tokens": spelled(h.tokens),
                "logprob": round(h.logprob, DIGITS),
                "score": round(h.score, DIGITS),
            }
            for h in s.ended
        ],
        "kept": [
            {"tokens": spelled(tokens), "logprob": round(lp, DIGITS)}
            for tokens, lp in s.kept
            if math.isfinite(lp)
        ],
        "done": s.done,
    }


def _rounded(weights: Any) -> Any:
    """A layer's maps (H, Q, K) as nested lists rounded to DIGITS."""
    return weights.double().mul(10**DIGITS).round().div(10**DIGITS).tolist()
