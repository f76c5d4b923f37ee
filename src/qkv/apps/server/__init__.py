"""`qkv serve`: model directories behind HTTP, for existing clients, scripts and people.

    app.py      `create_app`: the middleware, the error handlers, the routers, the lifespan
    routes/     the endpoints, one APIRouter per API: libretranslate.py (/translate, /languages),
                native.py (/v1/translate: scores, n-best, attention, alignment; /v1/info),
                ops.py (/health, /metrics), page.py (the page, /docs)
    service.py  what the endpoints share (`Service`): the models, limits, API key, decoding lanes
    bodies.py   reading and checking request bodies (JSON or form)
    guard.py    the middleware: the body size limit and the request metrics
    limits.py   what one request may ask for (the serve options' defaults)
    batcher.py  one decoding thread: the sentences of concurrent requests in shared batches
    metrics.py  Prometheus counters, gauges and histograms
    run.py      loading the models (with their language pairs) and running uvicorn
    static/     the page: HTML, JS and CSS, served by qkv (no CDN)

Serving a model directory:

    from qkv.apps.server import create_app, load_models, serve
    serve(create_app(load_models(["runs/en-de"])), port=8000)
"""

from __future__ import annotations

import importlib
from typing import Any

# Each name from its module, imported on first use: `qkv`'s other commands build the serve
# parser (Limits' defaults) without loading FastAPI.
_HOME = {
    "Batcher": "batcher",
    "Pending": "batcher",
    "QueueFull": "batcher",
    "Limits": "limits",
    "ServedModel": "service",
    "create_app": "app",
    "load_models": "run",
    "serve": "run",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
