"""The server's endpoints, one `APIRouter` per API; `create_app` includes each.

    explain.py          GET /explain (the explain view), POST /v1/explain
    libretranslate.py   POST /translate, GET /languages, GET /frontend/settings
    native.py           POST /v1/translate, GET /v1/info
    ops.py              GET /health, GET /metrics
    page.py             GET / (the page), GET /docs; the files under /static and /docs-assets

An endpoint gets what it shares with the others (models, limits, decoding defaults, the API key
check, the decoding lanes, the metrics) as `svc: ServiceDep`, and its body, read and its API key
checked, as `fields: JsonFields` (or `FormFields`, bodies.py); an endpoint whose body names a
pair takes the body validated and the pair's model as `asked` (`served_pair`, bodies.py).
"""
