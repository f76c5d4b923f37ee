"""The ASGI middleware around every request: the body size limit and the request metrics."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse

from .metrics import Metrics

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class BodyTooLarge(Exception):
    """A request body over `limit` bytes (found while reading it)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is over {limit} bytes")
        self.limit = limit


def too_large_response(limit: int) -> JSONResponse:
    message = f"the request body is over the limit of {limit} bytes (--max-body-bytes)"
    return JSONResponse({"error": message}, 413)


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
                    raise BodyTooLarge(self.max_body_bytes)
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
                response = too_large_response(self.max_body_bytes)
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


__all__ = ["BodyTooLarge", "Guard", "too_large_response"]
