"""`qkv serve`: model directories behind HTTP, for existing clients, scripts and people.

    app.py      the endpoints: LibreTranslate-compatible /translate and /languages, native
                /v1/translate (scores, n-best, attention, alignment), /health, /metrics, the page
    batcher.py  one decoding thread: the sentences of concurrent requests in shared batches
    metrics.py  Prometheus counters, gauges and histograms
    run.py      loading the models (with their language pairs) and running uvicorn
    static/     the page: HTML, JS and CSS, served by qkv (no CDN)

    from qkv.apps.server import create_app, load_models, serve
    serve(create_app(load_models(["runs/en-de"])), port=8000)
"""

from .app import Limits, ServedModel, create_app
from .batcher import Batcher, Job, QueueFull
from .run import load_models, serve

__all__ = [
    "Batcher",
    "Job",
    "Limits",
    "QueueFull",
    "ServedModel",
    "create_app",
    "load_models",
    "serve",
]
