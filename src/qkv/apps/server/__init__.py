"""`qkv serve`: model directories behind HTTP, for existing clients, scripts and people.

    app.py      the endpoints: LibreTranslate-compatible /translate and /languages, native
                /v1/translate (scores, n-best, attention, alignment), /health, /metrics, the page
    limits.py   what one request may ask for (the serve options' defaults)
    batcher.py  one decoding thread: the sentences of concurrent requests in shared batches
    metrics.py  Prometheus counters, gauges and histograms
    run.py      loading the models (with their language pairs) and running uvicorn
    static/     the page: HTML, JS and CSS, served by qkv (no CDN)

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
    "Job": "batcher",
    "QueueFull": "batcher",
    "Limits": "limits",
    "ServedModel": "app",
    "create_app": "app",
    "load_models": "run",
    "serve": "run",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
