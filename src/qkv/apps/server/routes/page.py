"""The page and the API docs, served by qkv itself (no CDN): GET / (static/index.html), the
page's files under /static, GET /docs (Swagger UI) with its files under /docs-assets."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent.parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/")
async def page() -> FileResponse:
    return FileResponse(STATIC / "index.html")


@router.get("/docs")
async def docs() -> Response:
    """Swagger UI from the swagger-ui-bundle package, so that it needs no internet."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="qkv — API docs",
        swagger_js_url="/docs-assets/swagger-ui-bundle.js",
        swagger_css_url="/docs-assets/swagger-ui.css",
        swagger_favicon_url="/static/favicon.svg",
    )


def mount_files(app: FastAPI) -> None:
    """/static and /docs-assets: mounted on the app itself (a router's mounts are not included
    with it)."""
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs-assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
