"""The HTTP application: a LibreTranslate-compatible API, qkv's native API, metrics and the page.

    app = create_app(load_models(["runs/en-de"]))     # then serve(app, port=8000)

This module assembles the parts: the middleware (guard.py), the error handlers, one `APIRouter` per
API (routes/) and the lifespan; what the endpoints share is one `Service` (service.py) on
`app.state.service`. Every error is {"error": "..."} with LibreTranslate's status codes. Decoding
runs on the `Batcher`'s thread, never on the event loop, bounded before it starts and dropped at
the next step once past its time limit or once its client has gone.

Details: docs/architecture.md, "The server" (the modules and endpoints); docs/reliability.md,
"Serving" (the status codes, limits and faults).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...decode.options import DecodeOptions
from ..glossary import Glossary
from .bodies import first_error
from .guard import BodyTooLarge, Guard, too_large_response
from .limits import Limits
from .routes import explain, libretranslate, native, ops, page
from .service import HTTPError, ServedModel, Service, Stopped


def create_app(
    models: list[ServedModel],
    *,
    limits: Limits | None = None,
    options: DecodeOptions | None = None,
    api_key: str | None = None,
    max_wait: float = 0.005,
    batching: bool = True,
    cors_origins: list[str] | None = None,
    split: str = "sentences",
    glossary: Glossary | None = None,
) -> FastAPI:
    """The server for these models. options: the decoding defaults (LibreTranslate requests use
    them as they are; native requests override fields). max_wait, batching: see `Batcher` (its
    batches: each translator's `runtime.batch_tokens`). cors_origins: web pages of these origins
    ("*": any) may call the APIs from a browser, as LibreTranslate's web clients do; none by
    default. split: how /translate cuts a text, "sentences" (of each line) or "lines".
    glossary: terms every translation uses where its source has them (`apps.glossary`)."""
    limits = limits or Limits()
    options = options or DecodeOptions()
    svc = Service.create(
        models, limits, options, api_key, max_wait, batching, split, glossary
    )
    app = FastAPI(
        title="qkv",
        summary="Translation with a Transformer: LibreTranslate-compatible and native APIs",
        lifespan=_lifespan,
        docs_url=None,
    )
    app.state.service = svc
    # `serve` abandons the work left when out of time to drain: how many requests it fails
    app.state.abandon = svc.abandon
    app.state.drain = svc.drain  # and tells it when the drain starts
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(Guard, max_body_bytes=limits.max_body_bytes, metrics=svc.metrics)
    for exception, handler in _HANDLERS.items():
        app.add_exception_handler(exception, handler)
    for api in (libretranslate, native, ops, page, explain):
        app.include_router(api.router)
    page.mount_files(app)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    svc: Service = app.state.service
    svc.start()
    yield
    await svc.stop()  # after the requests in flight are answered


# --- errors, each answered as {"error": "..."} ----------------------------------------------------
async def _error(request: Request, e: HTTPError) -> JSONResponse:
    return JSONResponse({"error": e.message}, e.status, headers=e.headers)


async def _too_large(request: Request, e: BodyTooLarge) -> JSONResponse:
    return too_large_response(e.limit)


async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
    return JSONResponse({"error": first_error(e.errors())}, 400)


async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
    return JSONResponse({"error": str(e.detail)}, e.status_code, headers=e.headers)


async def _fault(request: Request, e: Exception) -> JSONResponse:
    """Any other exception: Starlette logs it (and re-raises it to the server) after this answer."""
    return JSONResponse({"error": "internal server error"}, 500)


_HANDLERS: dict[type[Exception], Callable[..., Awaitable[JSONResponse]]] = {
    Exception: _fault,
    HTTPError: _error,
    BodyTooLarge: _too_large,
    RequestValidationError: _invalid,
    StarletteHTTPException: _http,
}

__all__ = ["HTTPError", "Limits", "ServedModel", "Stopped", "create_app"]
