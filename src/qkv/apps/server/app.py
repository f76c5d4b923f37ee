"""The HTTP application: a LibreTranslate-compatible API, qkv's native API, metrics and the page.

    POST /translate      LibreTranslate: {"q": "Hello" | [...], "source": "en", "target": "de",
                         "format": "text", "alternatives": 2, "api_key": ...}, JSON or form
    GET  /languages      LibreTranslate: [{"code": "en", "name": "English", "targets": ["de"]}]
                         (source "auto" picks the one language served into the target; qkv
                         detects no languages, so there is no /detect)
    POST /v1/translate   native: {"text": "Hello" | [...], "beam": 5, "alpha": 0.6, "nbest": 3,
                         "attention": true, "alignment": true} -> scores, n-best, attention
    GET  /v1/info        the pairs, the decoding defaults and the limits (the page reads it)
    GET  /health         {"status": "ok", ...}
    GET  /metrics        Prometheus text format
    GET  /               the page;  /docs: OpenAPI docs

Every error is {"error": "..."} with LibreTranslate's status codes: 400 a bad request (naming the
field), 403 a missing or wrong API key, 413 a request over a limit (naming it), 503 a full queue
(with Retry-After) or a server that stopped before answering, 504 a request over the time limit.
Request bodies are read and checked here; decoding runs on the `Batcher`'s thread, never on the
event loop. A request's decoding is bounded before it starts (`Limits`: output tokens, beam, and
their product over its sentences) and while it runs: past its time limit, or once its client has
gone, it is dropped from its batch at the next decoding step.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...data.tokenizer import check_unicode
from ...decode.options import DecodeOptions
from ..translator import DEFAULT_BATCH_TOKENS, Translation, Translator
from .batcher import Batcher, Job, QueueFull
from .limits import Limits
from .metrics import Metrics

STATIC = Path(__file__).parent / "static"
DISCONNECT_POLL = 0.25  # seconds between checks that a waiting request's client is still there
LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "digits": "Digits", "en": "English",
    "es": "Spanish", "fr": "French", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ru": "Russian", "tr": "Turkish",
    "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


@dataclass(frozen=True)
class ServedModel:
    """A translator and the language pair it serves."""

    source: str
    target: str
    translator: Translator

    @property
    def pair(self) -> str:
        return f"{self.source}-{self.target}"


class HTTPError(Exception):
    """An error answered as {"error": message} with this status."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class BodyTooLarge(Exception):
    """A request body over max_body_bytes (found while reading it)."""


# --- request bodies ------------------------------------------------------------------------------
class LibreTranslateRequest(BaseModel):
    """LibreTranslate's /translate fields (others are ignored, as LibreTranslate does)."""

    q: str | list[str] = Field(description="the text, or a list of texts; lines are sentences")
    source: str = Field(description='source language code, or "auto"')
    target: str = Field(description="target language code")
    format: Literal["text", "html"] = "text"
    alternatives: int = Field(0, ge=0, description="how many alternative translations")
    api_key: str | None = None


class NativeRequest(BaseModel):
    """qkv's /v1/translate: each text is one sentence; unset options take the server's."""

    model_config = ConfigDict(strict=True, extra="forbid")
    text: str | list[str] = Field(description="a sentence or a list of sentences")
    source: str | None = Field(None, description="source language (optional with one pair)")
    target: str | None = Field(None, description="target language (optional with one pair)")
    beam: int | None = Field(None, description="beam size; 1 is greedy decoding")
    alpha: float | None = Field(None, description="length penalty ((5 + len) / 6) ** alpha")
    nbest: int = Field(1, description="hypotheses returned per sentence (<= beam)")
    max_len_a: float | None = None
    max_len_b: int | None = None
    min_len: int | None = None
    attention: bool = Field(False, description="return the cross-attention and the tokens")
    alignment: bool = Field(False, description="return the hard word alignment")
    api_key: str | None = None


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


def _body_doc(model: type[BaseModel], *types: str) -> dict[str, Any]:
    """OpenAPI text for a body the handler reads itself."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {t: {"schema": schema} for t in types}}}


# --- the application -----------------------------------------------------------------------------
def create_app(
    models: list[ServedModel],
    *,
    limits: Limits | None = None,
    options: DecodeOptions | None = None,
    api_key: str | None = None,
    max_wait: float = 0.005,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    batching: bool = True,
    cors_origins: list[str] | None = None,
) -> FastAPI:
    """The server for these models. options: the decoding defaults (LibreTranslate requests use
    them as they are; native requests override fields). max_wait, batch_tokens, batching: see
    `Batcher`. cors_origins: web pages of these origins ("*": any) may call the APIs from a
    browser, as LibreTranslate's web clients do; none by default."""
    limits = limits or Limits()
    options = options or DecodeOptions()
    served = {m.pair: m for m in models}
    if len(served) != len(models):
        raise ValueError(f"two models serve the same pair: {[m.pair for m in models]}")
    metrics = Metrics()
    lanes = [  # decoding threads: short requests, long ones (limits.long_request_tokens)
        Batcher(
            {pair: m.translator for pair, m in served.items()},
            max_queue=limits.max_queue,
            max_wait=max_wait,
            batch_tokens=batch_tokens,
            batching=batching,
            on_batch=metrics.observe_batch,
        )
        for _ in range(2)
    ]
    metrics.queue_depth.set_function(lambda: sum(lane.depth for lane in lanes))
    check_options = _option_checks(limits)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for lane in lanes:
            lane.start()
        yield
        for lane in lanes:  # after the requests in flight are answered
            await asyncio.to_thread(lane.stop)

    app = FastAPI(
        title="qkv",
        summary="Translation with a Transformer: LibreTranslate-compatible and native APIs",
        lifespan=lifespan,
        docs_url=None,
    )
    # `serve` abandons the work left when out of time to drain: how many requests it fails
    app.state.abandon = lambda error: sum(lane.abandon(error) for lane in lanes)
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(Guard, max_body_bytes=limits.max_body_bytes, metrics=metrics)
    _add_docs(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(HTTPError)
    async def _error(request: Request, e: HTTPError) -> JSONResponse:
        return JSONResponse({"error": e.message}, e.status, headers=e.headers)

    @app.exception_handler(BodyTooLarge)
    async def _too_large(request: Request, e: BodyTooLarge) -> JSONResponse:
        return _too_large_response(limits.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": _first_error(e.errors())}, 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(e.detail)}, e.status_code, headers=e.headers)

    # --- helpers shared by the endpoints -------------------------------------------------------
    def check_key(request: Request, given: Any) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        if not given and header[:7].lower() == "bearer ":
            given = header[7:].strip()
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), api_key.encode()):
            raise HTTPError(403, "Invalid API key")

    def resolve(source: str | None, target: str | None) -> ServedModel:
        pairs = ", ".join(served)
        if source is None and target is None and len(served) == 1:
            return next(iter(served.values()))
        if source is None or target is None:
            raise HTTPError(400, f"give source and target; this server translates {pairs}")
        if source == "auto":
            candidates = [m for m in served.values() if m.target == target]
            if len(candidates) == 1:
                return candidates[0]
            raise HTTPError(400, f"source auto: no single pair into {target!r}; served: {pairs}")
        model = served.get(f"{source}-{target}")
        if model is None:
            raise HTTPError(400, f"{source}-{target} is not served; this server translates {pairs}")
        return model

    def check_size(texts: list[str]) -> None:
        try:
            check_unicode(texts)
        except ValueError as e:
            raise HTTPError(400, str(e)) from None
        if len(texts) > limits.max_sentences:
            raise HTTPError(
                413,
                f"the request has {len(texts)} sentences; the limit is {limits.max_sentences} "
                "(--max-sentences)",
            )
        chars = sum(len(t) for t in texts)
        if chars > limits.max_chars:
            raise HTTPError(
                413,
                f"the request has {chars} characters; the limit is {limits.max_chars} "
                "(--max-chars)",
            )

    async def translate(request: Request, job: Job, work: int) -> list[Translation]:
        try:
            future = lanes[work > limits.long_request_tokens].submit(job)
        except QueueFull as e:
            message = f"the server is busy: {e}; retry in a moment"
            raise HTTPError(503, message, {"Retry-After": "1"}) from None
        try:
            return await _answer(request, future, limits.timeout)
        except asyncio.TimeoutError:
            message = f"the translation took longer than {limits.timeout:g} s (--timeout)"
            raise HTTPError(504, message) from None
        except Stopped as e:
            raise HTTPError(503, str(e), {"Retry-After": "1"}) from None
        except Exception as e:
            raise HTTPError(500, f"translation failed: {e}") from None

    # --- LibreTranslate ------------------------------------------------------------------------
    @app.post(
        "/translate",
        tags=["LibreTranslate"],
        openapi_extra=_body_doc(
            LibreTranslateRequest, "application/json", "application/x-www-form-urlencoded"
        ),
    )
    async def libretranslate(request: Request) -> JSONResponse:
        """Translate `q` (a string, or a list of strings) as LibreTranslate does: JSON or form
        body; each line of a text is a sentence; `alternatives` asks for the next best
        translations."""
        fields = await _read_fields(request)
        check_key(request, fields.get("api_key"))
        req = _validate(LibreTranslateRequest, fields, libre=True)
        if req.format != "text":
            raise HTTPError(400, f"format {req.format!r} is not supported; use text")
        model = resolve(req.source, req.target)
        items = [req.q] if isinstance(req.q, str) else req.q
        lines = [item.split("\n") for item in items]
        flat = [line for item in lines for line in item]
        check_size(flat)
        nbest = req.alternatives + 1
        o = options.replace(nbest=nbest, beam=max(options.beam, nbest))
        job, work = check_options(model, o, flat)
        results = iter(await translate(request, job, work))
        texts, alternatives = [], []
        for item in lines:
            done = [next(results) for _ in item]
            texts.append("\n".join(r.text for r in done))
            alternatives.append(
                [
                    "\n".join(r.nbest[k][0] if k < len(r.nbest) else r.text for r in done)
                    for k in range(1, nbest)
                ]
            )
        one = isinstance(req.q, str)
        answer: dict[str, Any] = {"translatedText": texts[0] if one else texts}
        if req.alternatives:
            answer["alternatives"] = alternatives[0] if one else alternatives
        if req.source == "auto":
            detected = {"confidence": 100.0, "language": model.source}
            answer["detectedLanguage"] = detected if one else [detected] * len(items)
        return JSONResponse(answer)

    @app.get("/languages", tags=["LibreTranslate"])
    async def languages() -> list[dict[str, Any]]:
        """The source languages, each with the targets it is served into."""
        sources: dict[str, list[str]] = {}
        for m in served.values():
            sources.setdefault(m.source, []).append(m.target)
        return [
            {"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": sorted(targets)}
            for code, targets in sorted(sources.items())
        ]

    @app.get("/frontend/settings", tags=["LibreTranslate"], include_in_schema=False)
    async def frontend_settings() -> dict[str, Any]:
        first = next(iter(served.values()))
        return {
            "charLimit": limits.max_chars,
            "frontendTimeout": int(limits.timeout * 1000),
            "apiKeys": api_key is not None,
            "keyRequired": api_key is not None,
            "suggestions": False,
            "filesTranslation": False,
            "supportedFilesFormat": [],
            "language": {
                "source": {"code": first.source, "name": LANGUAGE_NAMES.get(first.source, "")},
                "target": {"code": first.target, "name": LANGUAGE_NAMES.get(first.target, "")},
            },
        }

    # --- native --------------------------------------------------------------------------------
    @app.post(
        "/v1/translate",
        tags=["qkv"],
        openapi_extra=_body_doc(NativeRequest, "application/json"),
        responses={200: {"model": NativeResponse}},
    )
    async def native(request: Request) -> JSONResponse:
        """Translate sentences with these decoding options; on request, each sentence's
        cross-attention (best hypothesis, last layer, averaged over heads) with its subword
        tokens, and its hard word alignment. The numbers are `Translator.translate_detailed`'s."""
        fields = await _read_fields(request, form=False)
        check_key(request, fields.get("api_key"))
        req = _validate(NativeRequest, fields)
        model = resolve(req.source, req.target)
        texts = [req.text] if isinstance(req.text, str) else req.text
        check_size(texts)
        changes = {
            name: getattr(req, name)
            for name in ("beam", "alpha", "max_len_a", "max_len_b", "min_len")
            if getattr(req, name) is not None
        }
        try:
            o = options.replace(nbest=req.nbest, **changes)
        except ValueError as e:
            raise HTTPError(400, str(e)) from None
        job, work = check_options(model, o, texts, req.attention, req.alignment)
        results = await translate(request, job, work)
        return JSONResponse(
            {
                "source": model.source,
                "target": model.target,
                "translations": [_native(r, req.attention, req.alignment) for r in results],
            }
        )

    @app.get("/v1/info", tags=["qkv"])
    async def info() -> dict[str, Any]:
        """The pairs served, the decoding defaults, the limits, whether a key is needed."""
        return {
            "pairs": [
                {"source": m.source, "target": m.target, "name": _pair_name(m)}
                for m in served.values()
            ],
            "defaults": {"beam": options.beam, "alpha": options.alpha},
            "limits": {
                "max_chars": limits.max_chars,
                "max_sentences": limits.max_sentences,
                "max_beam": limits.max_beam,
                "max_output_tokens": limits.max_output_tokens,
                "max_decode_tokens": limits.max_decode_tokens,
                "timeout": limits.timeout,
            },
            "api_key_required": api_key is not None,
        }

    @app.get("/health", tags=["qkv"])
    async def health() -> dict[str, Any]:
        return {"status": "ok", "pairs": list(served), "queue": sum(lane.depth for lane in lanes)}

    @app.get("/metrics", tags=["qkv"])
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    return app


class Stopped(Exception):
    """The server stopped before this request was answered."""


def _option_checks(limits: Limits) -> Callable[..., tuple[Job, int]]:
    """The check of a request's decoding options and the work they ask for, before it starts:
    the check returns the request's Job and that work (beam x output length limits, summed over
    the sentences)."""

    def check(
        model: ServedModel,
        o: DecodeOptions,
        texts: list[str],
        attention: bool = False,
        alignment: bool = False,
    ) -> tuple[Job, int]:
        if o.beam > limits.max_beam:
            raise HTTPError(
                400, f"beam {o.beam} is over this server's limit of {limits.max_beam} (--max-beam)"
            )
        vocab = model.translator.target_vocab_size
        if o.beam > vocab:
            raise HTTPError(400, f"beam {o.beam} is larger than the target vocabulary ({vocab})")
        for name in ("max_len_b", "min_len"):
            if getattr(o, name) > limits.max_output_tokens:
                raise HTTPError(
                    400,
                    f"{name} {getattr(o, name)} is over this server's limit of "
                    f"{limits.max_output_tokens} output tokens (--max-output-tokens)",
                )
        ids = model.translator.encode(texts)
        work = o.beam * sum(o.max_output_length(len(x)) for x in ids)
        if work > limits.max_decode_tokens:
            raise HTTPError(
                413,
                f"the request may decode {work} tokens (beam {o.beam} x the output length limit "
                f"of each sentence); the limit is {limits.max_decode_tokens} "
                "(--max-decode-tokens): send fewer sentences, a smaller beam or max_len_b",
            )
        return Job(model.pair, texts, o, attention, alignment, ids), work

    return check


async def _answer(request: Request, future: Future[list[Translation]], timeout: float) -> Any:
    """The future's result, waited for at most `timeout` seconds while the client is connected;
    otherwise the future is cancelled (the batcher drops its sentences at the next step) and
    TimeoutError raised. The batcher's `Stopped` comes through as it is."""
    deadline = time.monotonic() + timeout
    waiting = asyncio.wrap_future(future)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise asyncio.TimeoutError
            done, _ = await asyncio.wait({waiting}, timeout=min(left, DISCONNECT_POLL))
            if done:
                return waiting.result()
            if await request.is_disconnected():
                raise asyncio.TimeoutError  # nobody is left to answer
    finally:
        future.cancel()  # no effect once it has its result


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


async def _read_fields(request: Request, form: bool = True) -> dict[str, Any]:
    """The request's fields: a JSON object, or (form=True) form fields and query parameters, a
    field given more than once as a list."""
    body = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if form and kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        data = await request.form()
        fields: dict[str, Any] = {}
        for source in (request.query_params, data):
            for key in source:
                values = [v for v in source.getlist(key) if isinstance(v, str)]
                fields[key] = values[0] if len(values) == 1 else values
        return fields
    if not body.strip() and form:
        return {key: request.query_params[key] for key in request.query_params}
    try:
        fields = json.loads(body)
    except RecursionError:
        raise HTTPError(400, "malformed JSON body: nested too deeply") from None
    except ValueError as e:  # also UnicodeDecodeError, and an integer of over 4300 digits
        raise HTTPError(400, f"malformed JSON body: {e}") from None
    if not isinstance(fields, dict):
        raise HTTPError(400, f"the body must be a JSON object, got {type(fields).__name__}")
    return fields


def _validate(model: type[BaseModel], fields: dict[str, Any], libre: bool = False) -> Any:
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        errors = e.errors()
        if libre and errors[0]["type"] == "missing":
            missing = errors[0]["loc"][0]
            raise HTTPError(400, f"Invalid request: missing {missing} parameter") from None
        raise HTTPError(400, _first_error(errors)) from None


def _first_error(errors: Any) -> str:
    """'field: message' of the first pydantic error (the body's own name left out)."""
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    # a union (str | list[str]) reports each member; name the field once
    loc = [part for part in loc if part not in ("str", "list[str]")]
    where = ".".join(loc) or "body"
    message = first.get("msg", "invalid")
    if first.get("type") == "missing":
        message = "missing"
    elif first.get("type") == "extra_forbidden":
        message = "unknown field"
    return f"{where}: {message}"


def _too_large_response(limit: int) -> JSONResponse:
    message = f"the request body is over the limit of {limit} bytes (--max-body-bytes)"
    return JSONResponse({"error": message}, 413)


def _add_docs(app: FastAPI) -> None:
    """/docs: Swagger UI from the swagger-ui-bundle package, so that it needs no internet."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs-assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> Response:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="qkv — API docs",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/static/favicon.svg",
        )


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Guard:
    """ASGI middleware: the body size limit (413 from Content-Length before anything is read, or
    while reading), and the request metrics (count by endpoint and status, latency, in flight)."""

    def __init__(self, app: Any, max_body_bytes: int, metrics: Metrics) -> None:
        self.app, self.max_body_bytes, self.metrics = app, max_body_bytes, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        received = 0

        async def counted_receive() -> MutableMapping[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge
            return message

        async def watched_send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            length = dict(scope["headers"]).get(b"content-length", b"0")
            if not length.isdigit():
                response = JSONResponse({"error": "Content-Length is not a number"}, 400)
                await response(scope, receive, watched_send)
            elif int(length) > self.max_body_bytes:
                response = _too_large_response(self.max_body_bytes)
                await response(scope, receive, watched_send)
            else:
                await self.app(scope, counted_receive, watched_send)
        finally:
            self.metrics.in_flight.dec()
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or _endpoint_of(scope["path"])
            self.metrics.observe_request(endpoint, status, time.perf_counter() - start)


def _endpoint_of(path: str) -> str:
    """A metrics label for paths without a route of their own (a bounded set of values)."""
    for prefix in ("/static", "/docs-assets"):
        if path.startswith(prefix + "/"):
            return prefix
    return "other"


__all__ = ["HTTPError", "Limits", "ServedModel", "create_app"]
