"""`qkv serve`: model directories behind HTTP, for existing clients, scripts and people.

    from qkv.apps.server import create_app, load_models, serve
    serve(create_app(load_models(["runs/en-de"])), port=8000)

`create_app` (app.py) assembles the middleware, the error handlers, one router per API (routes/)
and the lifespan; one decoding thread (batcher.py) decodes the sentences of concurrent requests in
shared batches.

Details: docs/architecture.md, "The server" (every module and endpoint).
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
