"""LibreTranslate's API, for its existing clients: /translate, /languages, /frontend/settings.

    POST /translate      {"q": "Hello" | [...], "source": "en", "target": "de", "format": "text",
                         "alternatives": 2, "api_key": ...}, JSON or form
    GET  /languages      [{"code": "en", "name": "English", "targets": ["de"]}]
    GET  /frontend/settings   what LibreTranslate's web page asks for
    POST /translate_file {file: .txt or .html, source, target, api_key} (multipart)
                         -> {"translatedFileUrl": ".../download_file/NAME"}
    GET  /download_file/NAME   the translated file (kept 10 minutes)

A text is cut into the sentences of each line (`qkv serve --split lines`: each line is one), which
are decoded with the server's decoding options and joined again with the text's own spacing and
line breaks (`qkv.apps.documents`). With `"format": "html"`, the text of the HTML is translated
and its markup kept (`qkv.apps.html`). Source "auto"
picks the one language served into the target; qkv detects no languages, so there is no /detect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.datastructures import UploadFile

from ..bodies import Asked, MultipartFields, body_doc, served_pair
from ..files import SUFFIXES, content_disposition
from ..sentences import hypothesis, split, translate_pieces
from ..service import LANGUAGE_NAMES, HTTPError, ServedModel, Service, ServiceDep

router = APIRouter(tags=["LibreTranslate"])


class LibreTranslateRequest(BaseModel):
    """LibreTranslate's /translate fields (others are ignored, as LibreTranslate does)."""

    q: str | list[str] = Field(description="the text, or a list of texts")
    source: str = Field(description='source language code, or "auto"')
    target: str = Field(description="target language code")
    format: Literal["text", "html"] = "text"
    alternatives: int = Field(0, ge=0, description="how many alternative translations")
    api_key: str | None = None


LibreAsked = Annotated[Asked, served_pair(LibreTranslateRequest, form=True, libre=True)]


@router.post(
    "/translate",
    openapi_extra=body_doc(
        LibreTranslateRequest, "application/json", "application/x-www-form-urlencoded"
    ),
)
async def libretranslate(request: Request, svc: ServiceDep, asked: LibreAsked) -> JSONResponse:
    """Translate `q` (a string, or a list of strings) as LibreTranslate does: JSON or form
    body; each text cut into sentences and joined again; `alternatives` asks for the next best
    translations."""
    req, model = asked.body, asked.model
    items = [req.q] if isinstance(req.q, str) else req.q
    texts, alternatives, warnings = await _translate_texts(
        request, svc, model, items, req.format, req.alternatives
    )
    one = isinstance(req.q, str)
    answer: dict[str, Any] = {"translatedText": texts[0] if one else texts}
    if req.alternatives:
        answer["alternatives"] = alternatives[0] if one else alternatives
    if req.source == "auto":
        detected = {"confidence": 100.0, "language": model.source}
        answer["detectedLanguage"] = detected if one else [detected] * len(items)
    if warnings:  # a sentence cut to --max-src-tokens (not in LibreTranslate's answer)
        answer["warnings"] = warnings
    return JSONResponse(answer)


async def _translate_texts(
    request: Request,
    svc: Service,
    model: ServedModel,
    items: list[str],
    kind: str,
    alternatives: int = 0,
) -> tuple[list[str], list[list[str]], list[str]]:
    """Each text (kind "text" or "html") translated sentence by sentence in one job, its
    `alternatives` next best translations, and a warning for each sentence cut."""
    svc.check_size(items)
    pieces = [split(item, kind, svc.split, model.source) for item in items]
    nbest = alternatives + 1
    o = svc.options.replace(nbest=nbest, beam=max(svc.options.beam, nbest))
    done = await translate_pieces(request, svc, model, pieces, o)
    both = list(zip(pieces, done.texts, strict=True))
    texts = [p.join([r.text for r in d]) for p, d in both]
    others = [[hypothesis(p, d, k) for k in range(1, nbest)] for p, d in both]
    return texts, others, done.warnings


@router.post("/translate_file")
async def translate_file(request: Request, svc: ServiceDep, form: MultipartFields) -> JSONResponse:
    """Translate an uploaded .txt or .html file (multipart fields `file`, `source`, `target`,
    `api_key`) as /translate translates text or HTML; the answer names where to download the
    translation (`translatedFileUrl`), kept for 10 minutes."""
    upload = form.get("file")
    if not isinstance(upload, UploadFile) or not upload.filename:
        raise HTTPError(400, "Invalid request: missing file parameter")
    name = Path(upload.filename).name
    suffix = Path(name).suffix.lower()
    if suffix not in SUFFIXES:
        raise HTTPError(400, f"{name}: translate .txt or .html files, not {suffix or 'these'}")
    try:
        text = (await upload.read()).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise HTTPError(400, f"{name} is not UTF-8 text: {e.reason} at byte {e.start}") from None
    source, target = form.get("source"), form.get("target")
    if not isinstance(source, str) or not isinstance(target, str):
        raise HTTPError(400, "Invalid request: missing source or target parameter")
    model = svc.resolve(source, target)
    kind = "text" if suffix == ".txt" else "html"
    [translated], _, warnings = await _translate_texts(request, svc, model, [text], kind)
    if svc.draining:  # the link would be dead at once: the file goes with the process
        raise HTTPError(
            503, f"the server is stopping: {name} could not be downloaded from it; send it again"
        )
    stored = svc.files.put(name, translated.encode("utf-8"), _client(request))
    url = f"{request.base_url}download_file/{quote(stored, safe='')}"
    answer: dict[str, Any] = {"translatedFileUrl": url}
    if warnings:  # the file's text, cut into sentences: "text 0, sentence j"
        answer["warnings"] = warnings
    return JSONResponse(answer)


@router.get("/download_file/{name}")
async def download_file(name: str, svc: ServiceDep) -> Response:
    """A file /translate_file translated, while it is kept."""
    data = svc.files.get(name)
    if data is None:
        raise HTTPError(404, "no such file: it expired (10 minutes) or was never made")
    filename = name.split(".", 1)[1]
    return Response(
        data,
        media_type=SUFFIXES[Path(filename).suffix.lower()],
        headers={"Content-Disposition": content_disposition(filename)},
    )


def _client(request: Request) -> str:
    """Whose file it is: the client's address (one API key serves every client, so the key
    tells none apart; behind a proxy, uvicorn takes the address from X-Forwarded-For)."""
    return request.client.host if request.client else ""


@router.get("/languages")
async def languages(svc: ServiceDep) -> list[dict[str, Any]]:
    """The source languages, each with the targets it is served into."""
    sources: dict[str, list[str]] = {}
    for m in svc.served.values():
        sources.setdefault(m.source, []).append(m.target)
    return [
        {"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": sorted(targets)}
        for code, targets in sorted(sources.items())
    ]


@router.get("/frontend/settings", include_in_schema=False)
async def frontend_settings(svc: ServiceDep) -> dict[str, Any]:
    first = next(iter(svc.served.values()))
    return {
        "charLimit": svc.limits.max_chars,
        "frontendTimeout": int(svc.limits.timeout * 1000),
        "apiKeys": svc.api_key is not None,
        "keyRequired": svc.api_key is not None,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": sorted(SUFFIXES),
        "language": {
            "source": {"code": first.source, "name": LANGUAGE_NAMES.get(first.source, "")},
            "target": {"code": first.target, "name": LANGUAGE_NAMES.get(first.target, "")},
        },
    }
