"""Documents through the HTTP APIs, in process: HTML with alternatives, CDATA and deep nesting,
files with names beyond ASCII, HTML on the native API, and each client's share of the store of
translated files. Each answer is checked against the translator and `HtmlDocument` run here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from server_process import SERVED
from starlette.testclient import TestClient

from qkv.apps.html import HtmlDocument
from qkv.apps.server import ServedModel, create_app
from qkv.apps.server.files import FileStore, content_disposition
from qkv.apps.translator import Translator
from sentences import EN  # tests/sentences.py

PAGE = f'<div><p>{EN[0]} <a href="/x">{EN[1]}</a></p><p>{EN[2]}</p></div>'


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    return Translator.load(model_dir)


@pytest.fixture(scope="module")
def client(translator: Translator) -> Iterator[TestClient]:
    app = create_app([ServedModel("en", "zh", translator)], options=SERVED)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def lt(client: TestClient, **fields: object):
    return client.post("/translate", json={"source": "en", "target": "zh", **fields})


def expected(translator: Translator, html: str, k: int = 0) -> str:
    """The page with each sentence's k-th best translation, by a fresh `HtmlDocument`."""
    page = HtmlDocument(html, "en")
    done = translator.translate_detailed(page.sentences, SERVED.replace(nbest=k + 1))
    return page.join([r.nbest[k][0] for r in done])


def test_html_with_alternatives_joins_each_from_the_page_as_sent(
    client: TestClient, translator: Translator
) -> None:
    r = lt(client, q=PAGE, format="html", alternatives=1)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "translatedText": expected(translator, PAGE),
        "alternatives": [expected(translator, PAGE, 1)],
    }


def test_a_cdata_section_in_html_stays_untranslated(client: TestClient) -> None:
    r = lt(client, q=f"<p>{EN[0]} <![CDATA[3 4]]></p>", format="html")
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"].endswith("<![CDATA[3 4]]></p>")


def test_html_nested_1400_deep_is_translated(client: TestClient, translator: Translator) -> None:
    """1,400 nested inline elements, 9,800 characters (under --max-chars): the recursion limit
    is 1,000."""
    html = "<i>" * 1400 + EN[3] + "</i>" * 1400
    r = lt(client, q=html, format="html")
    assert r.status_code == 200, r.text
    [t] = translator.translate([EN[3]], SERVED)
    assert r.json() == {"translatedText": "<i>" * 1400 + t + "</i>" * 1400}


@pytest.mark.parametrize(
    ("name", "disposition"),
    [
        ("中文.txt", "attachment; filename=\"__.txt\"; filename*=UTF-8''%E4%B8%AD%E6%96%87.txt"),
        ("a b#?;%.txt", 'attachment; filename="a b#?;%.txt"'),
    ],
)
def test_a_file_of_any_name_downloads_under_its_name(
    client: TestClient, translator: Translator, name: str, disposition: str
) -> None:
    """The URL holds the name percent-encoded; Content-Disposition names it in UTF-8 (RFC 5987
    `filename*`) beside an ASCII stand-in (RFC 6266) unless it is plain ASCII."""
    r = client.post(
        "/translate_file",
        data={"source": "en", "target": "zh"},
        files={"file": (name, EN[4].encode())},
    )
    assert r.status_code == 200, r.text
    url = r.json()["translatedFileUrl"]
    assert url.endswith("." + quote(name, safe=""))
    got = client.get(url)
    assert got.status_code == 200, got.text
    assert got.text == translator.translate([EN[4]], SERVED)[0]
    assert got.headers["content-disposition"] == disposition


def test_quotes_and_backslashes_stay_out_of_the_quoted_name() -> None:
    assert content_disposition('x"y\\z.html') == (
        "attachment; filename=\"x_y_z.html\"; filename*=UTF-8''x%22y%5Cz.html"
    )


def test_native_html_keeps_the_markup_with_scores_and_nbest(
    client: TestClient, translator: Translator
) -> None:
    """/v1/translate with format html: each text a document, as /translate answers it; its score
    the sum of its sentences'; its n-best the documents of each sentence's k-th best."""
    texts = [PAGE, "<p>" + EN[5] + "</p>"]
    r = client.post("/v1/translate", json={"text": texts, "format": "html", "nbest": 2})
    assert r.status_code == 200, r.text
    for got, html in zip(r.json()["translations"], texts, strict=True):
        page = HtmlDocument(html, "en")
        done = translator.translate_detailed(page.sentences, SERVED.replace(nbest=2))
        assert got["text"] == expected(translator, html)
        assert got["score"] == pytest.approx(sum(d.score for d in done), rel=1e-5)
        assert [n["text"] for n in got["nbest"]] == [expected(translator, html, k) for k in (0, 1)]
        assert got["nbest"][1]["score"] == pytest.approx(sum(d.nbest[1][1] for d in done), rel=1e-5)
    r = client.post("/v1/translate", json={"text": PAGE, "format": "html", "attention": True})
    assert r.status_code == 400 and "format html" in r.json()["error"]
    r = client.post("/v1/translate", json={"text": PAGE, "format": "xml"})
    assert r.status_code == 400 and "format" in r.json()["error"]


def test_each_client_keeps_its_share_of_the_translated_files(translator: Translator) -> None:
    """A client sending many files pushes out its own, never another's: the store's oldest file
    of the client holding the most goes."""
    app = create_app([ServedModel("en", "zh", translator)], options=SERVED)
    app.state.service.files = FileStore(keep_files=4)
    fields = {"source": "en", "target": "zh"}

    def send(c: TestClient, i: int) -> str:
        r = c.post("/translate_file", data=fields, files={"file": (f"{i}.txt", EN[i].encode())})
        assert r.status_code == 200, r.text
        return r.json()["translatedFileUrl"]

    busy = TestClient(app, client=("10.0.0.2", 5000))  # the first one runs the app's lifespan
    with TestClient(app, client=("10.0.0.1", 5000)) as quiet:
        kept = send(quiet, 0)
        flood = [send(busy, i) for i in range(1, 9)]
        assert quiet.get(kept).status_code == 200
        assert [busy.get(url).status_code for url in flood] == [404] * 5 + [200] * 3
