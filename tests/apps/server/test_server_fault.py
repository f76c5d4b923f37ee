"""A fault of the server itself is answered as JSON like every other error, in process."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from qkv.apps.server import ServedModel, create_app
from qkv.apps.translator import Translator


def test_an_unexpected_exception_is_a_json_500_and_the_server_goes_on(model_dir: Path) -> None:
    app = create_app([ServedModel("en", "de", Translator.load(model_dir))])
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/v1/info").status_code == 200
        limits, app.state.service.limits = app.state.service.limits, None  # a broken service
        got = client.get("/v1/info")
        assert got.status_code == 500
        assert got.json() == {"error": "internal server error"}
        app.state.service.limits = limits
        assert client.get("/v1/info").status_code == 200


def test_a_file_translated_while_the_server_stops_gets_no_dead_download_link(
    model_dir: Path,
) -> None:
    """SIGTERM's drain (`Service.drain`, what `serve` calls): /translate_file answers 503
    instead of a /download_file link that dies with the process; /translate still answers."""
    app = create_app([ServedModel("en", "de", Translator.load(model_dir))])
    fields = {"source": "en", "target": "de"}
    with TestClient(app) as client:
        upload = {"file": ("notes.txt", b"1 2\n")}
        assert client.post("/translate_file", data=fields, files=upload).status_code == 200
        app.state.drain()
        r = client.post("/translate_file", data=fields, files=upload)
        assert r.status_code == 503 and "the server is stopping" in r.json()["error"]
        assert client.post("/translate", data={**fields, "q": "1 2"}).status_code == 200
