"""`qkv serve` over HTTP, against a real server process: the LibreTranslate and native shapes, their
numbers against `Translator.translate_detailed` run here with the same options, every limit and
error code, metrics, and 32 concurrent requests against the same requests one at a time."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.error import HTTPError

import httpx
import pytest
from libretranslatepy import LibreTranslateAPI
from server_process import KEY, SERVED, Server

from qkv.apps.translator import Translator
from sentences import EN  # tests/sentences.py

AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    return Translator.load(model_dir)


def lt(server: Server, **fields: object) -> httpx.Response:
    return server.client.post("/translate", json={"source": "en", "target": "zh", "api_key": KEY,
                                                   **fields})


def native(server: Server, **fields: object) -> httpx.Response:
    return server.client.post("/v1/translate", json=fields, headers=AUTH)


def test_languages_lists_the_pair(server: Server) -> None:
    r = server.client.get("/languages")
    assert r.status_code == 200
    assert r.json() == [{"code": "en", "name": "English", "targets": ["zh"]}]


def test_libretranslate_string_and_list_q_equal_the_translator(server: Server, translator: Translator) -> None:
    expected = translator.translate_detailed(EN[:3], SERVED)
    one = lt(server, q=EN[0], format="text")
    assert one.status_code == 200, one.text
    assert one.json() == {"translatedText": expected[0].text}
    many = lt(server, q=EN[:3])
    assert many.json() == {"translatedText": [t.text for t in expected]}


def test_libretranslate_alternatives_are_the_nbest(server: Server, translator: Translator) -> None:
    [t] = translator.translate_detailed([EN[1]], SERVED.replace(beam=3, nbest=3))
    r = lt(server, q=EN[1], alternatives=2)
    assert r.json() == {"translatedText": t.text, "alternatives": [t.nbest[1][0], t.nbest[2][0]]}
    r = lt(server, q=[EN[1]], alternatives=2)
    assert r.json() == {"translatedText": [t.text], "alternatives": [[t.nbest[1][0], t.nbest[2][0]]]}


def test_libretranslate_lines_are_sentences(server: Server, translator: Translator) -> None:
    expected = translator.translate(EN[:2], SERVED)
    r = lt(server, q=f"{EN[0]}\n{EN[1]}")
    assert r.json()["translatedText"] == "\n".join(expected)


def test_libretranslate_splits_a_paragraph_into_sentences_and_keeps_its_spacing(
    server: Server, translator: Translator
) -> None:
    """Three sentences on a line (two spaces after the first), a blank line, a fourth: each
    sentence translated alone, the spacing and line breaks as they were; alternatives alike."""
    t = translator.translate_detailed(EN[:4], SERVED.replace(nbest=2))
    r = lt(server, q=f"{EN[0]}  {EN[1]} {EN[2]}\n\n{EN[3]}\n", alternatives=1)
    assert r.json() == {
        "translatedText": f"{t[0].text}  {t[1].text} {t[2].text}\n\n{t[3].text}\n",
        "alternatives": [f"{t[0].nbest[1][0]}  {t[1].nbest[1][0]} {t[2].nbest[1][0]}\n\n"
                         f"{t[3].nbest[1][0]}\n"],
    }


def test_libretranslate_html_keeps_the_markup(server: Server, translator: Translator) -> None:
    t = translator.translate(EN[:3], SERVED)
    html = f'<div class="a"><p>{EN[0]} <b>{EN[1]}</b></p><code>x = 1</code><p>{EN[2]}</p></div>'
    r = lt(server, q=html, format="html")
    assert r.status_code == 200, r.text
    want = f'<div class="a"><p>{t[0]} <b>{t[1]}</b></p><code>x = 1</code><p>{t[2]}</p></div>'
    assert r.json() == {"translatedText": want}


def test_translate_file_then_download_it(server: Server, translator: Translator) -> None:
    t = translator.translate(EN[:4], SERVED)
    files = {
        "notes.txt": (f"{EN[0]} {EN[1]}\n\n{EN[2]}\n", f"{t[0]} {t[1]}\n\n{t[2]}\n"),
        "page.html": (f"<h1>{EN[3]}</h1><pre>{EN[0]}</pre>", f"<h1>{t[3]}</h1><pre>{EN[0]}</pre>"),
    }
    for name, (content, want) in files.items():
        fields = {"source": "en", "target": "zh", "api_key": KEY}
        r = server.client.post("/translate_file", data=fields,
                               files={"file": (name, content.encode())})
        assert r.status_code == 200, r.text
        url = r.json()["translatedFileUrl"]
        assert url.startswith(server.url + "/download_file/") and url.endswith(name)
        got = server.client.get(url)
        assert got.status_code == 200 and got.text == want
        assert got.headers["content-disposition"] == f'attachment; filename="{name}"'
    fields = {"source": "en", "target": "zh", "api_key": KEY}
    for name, data, message in [("a.pdf", b"%PDF", "translate .txt or .html"),
                                ("a.txt", b"\xff\xfe", "is not UTF-8 text")]:
        r = server.client.post("/translate_file", data=fields, files={"file": (name, data)})
        assert r.status_code == 400 and message in r.json()["error"]
    assert server.client.get("/download_file/nope.a.txt").status_code == 404


def test_libretranslate_form_bodies(server: Server, translator: Translator) -> None:
    expected = translator.translate_detailed([EN[2]], SERVED.replace(nbest=2))[0]
    fields = {"q": EN[2], "source": "en", "target": "zh", "api_key": KEY, "alternatives": "1"}
    urlencoded = server.client.post("/translate", data=fields)
    assert urlencoded.status_code == 200, urlencoded.text
    assert urlencoded.json() == {"translatedText": expected.text, "alternatives": [expected.nbest[1][0]]}
    multipart = server.client.post("/translate", data=fields, files={"unused": ("a.txt", b"x")})
    assert multipart.json() == urlencoded.json()


def test_libretranslates_own_python_client_works_unchanged(
    server: Server, translator: Translator
) -> None:
    """libretranslatepy, the client LibreTranslate's authors publish (form bodies through urllib)."""
    client = LibreTranslateAPI(server.url, api_key=KEY)
    assert client.translate(EN[4], "en", "zh", timeout=60) == translator.translate([EN[4]], SERVED)[0]
    assert client.languages(timeout=60) == [{"code": "en", "name": "English", "targets": ["zh"]}]
    with pytest.raises(HTTPError) as refused:
        LibreTranslateAPI(server.url).translate(EN[4], "en", "zh", timeout=60)
    assert refused.value.code == 403


def test_source_auto_picks_the_one_pair_into_the_target(server: Server, translator: Translator) -> None:
    r = lt(server, q=EN[3], source="auto")
    assert r.json() == {"translatedText": translator.translate([EN[3]], SERVED)[0],
                        "detectedLanguage": {"confidence": 100.0, "language": "en"}}


def test_native_equals_translate_detailed(server: Server, translator: Translator) -> None:
    """Texts, scores, n-best, tokens, attention and alignment: the numbers of the translator."""
    texts = [EN[4], EN[5], ""]
    options = SERVED.replace(beam=3, alpha=1.0, nbest=2)
    expected = translator.translate_detailed(texts, options, attention=True, alignment=True)
    r = native(server, text=texts, beam=3, alpha=1.0, nbest=2, attention=True, alignment=True)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["source"], body["target"]) == ("en", "zh")
    for got, want in zip(body["translations"], expected, strict=True):
        assert got["text"] == want.text
        assert got["score"] == want.score
        assert got["nbest"] == [{"text": t, "score": s} for t, s in want.nbest]
        assert got["source_tokens"] == (want.source_tokens or [])
        assert got["target_tokens"] == (want.target_tokens or [])
        assert got["attention"] == ([] if want.attention is None else want.attention.tolist())
        assert got["alignment"] == [list(p) for p in want.alignment or []]
    first = body["translations"][0]
    assert len(first["attention"]) == len(first["target_tokens"])
    assert len(first["attention"][0]) == len(first["source_tokens"])


def test_native_split_translates_each_sentence_of_a_paragraph(
    server: Server, translator: Translator
) -> None:
    expected = translator.translate(EN[:3], SERVED)
    body = native(server, text=[f"{EN[0]} {EN[1]}", EN[2]], split="sentences").json()
    assert [t["text"] for t in body["translations"]] == expected
    r = native(server, text="a", split="words")
    assert r.status_code == 400 and "split" in r.json()["error"]


def test_native_plain_request_has_no_attention(server: Server, translator: Translator) -> None:
    [want] = translator.translate_detailed([EN[6]], SERVED.replace(beam=1))
    body = native(server, text=EN[6], beam=1).json()
    assert body["translations"] == [{"text": want.text, "score": want.score,
                                     "nbest": [{"text": want.text, "score": want.score}]}]


@pytest.mark.parametrize(
    ("request_kwargs", "status", "message"),
    [
        ({"content": b'{"text": "a", ', "headers": {**AUTH, "Content-Type": "application/json"}},
         400, "malformed JSON"),
        ({"json": ["a"], "headers": AUTH}, 400, "must be a JSON object"),
        ({"content": b'{"text": ["a", "4 0 \\ud800"]}', "headers": AUTH}, 400,
         "texts[1] holds a lone surrogate"),
        ({"content": b"[" * 3000 + b"]" * 3000, "headers": AUTH}, 400, "nested too deeply"),
        ({"content": b'{"text": "a", "beam": ' + b"9" * 5000 + b"}", "headers": AUTH}, 400,
         "malformed JSON body: Exceeds the limit"),
        ({"json": {"text": "a", "beam": "4"}, "headers": AUTH}, 400, "beam"),
        ({"json": {"text": 5}, "headers": AUTH}, 400, "text"),
        ({"json": {"text": "a", "beam_size": 4}, "headers": AUTH}, 400, "beam_size: unknown field"),
        ({"json": {"beam": 4}, "headers": AUTH}, 400, "text: missing"),
        ({"json": {"text": "a", "nbest": 5, "beam": 4}, "headers": AUTH}, 400, "nbest"),
        ({"content": b'{"text": "a", "alpha": 1e400}', "headers": AUTH}, 400, "alpha"),  # inf
        ({"json": {"text": "a", "beam": 7}, "headers": AUTH}, 400, "--max-beam"),
        ({"json": {"text": "a", "source": "de", "target": "en"}, "headers": AUTH}, 400, "en-zh"),
        # the key first, then the fields, then the pair (bodies.served_pair)
        ({"json": {"text": "a", "beam_size": 4, "source": "de", "target": "en"}, "headers": AUTH},
         400, "beam_size: unknown field"),
        ({"json": {"text": "a", "source": "de", "target": "en"}}, 403, "Invalid API key"),
        ({"json": {"text": "a"}}, 403, "Invalid API key"),
        ({"json": {"text": "a"}, "headers": {"Authorization": "Bearer nope"}}, 403, "Invalid API key"),
        ({"json": {"text": ["a"] * 41}, "headers": AUTH}, 413, "--max-sentences"),
        ({"json": {"text": ["a" * 301, "b" * 300]}, "headers": AUTH}, 413, "--max-chars"),
        ({"json": {"text": "a" * 7000}, "headers": AUTH}, 413, "--max-body-bytes"),
    ],
)
def test_native_errors_name_the_field_or_limit(
    server: Server, request_kwargs: dict, status: int, message: str
) -> None:
    r = server.client.post("/v1/translate", **request_kwargs)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"q": "a", "source": "en", "target": "de", "api_key": KEY}, 400, "en-zh"),
        ({"q": "a", "source": "en", "target": "de", "api_key": KEY, "format": "xml"}, 400,
         "format"),
        ({"source": "en", "target": "de", "api_key": KEY}, 400, "missing q parameter"),
        ({"q": "a", "source": "en", "target": "de"}, 403, "Invalid API key"),
        ({"source": "en", "target": "zh", "api_key": KEY}, 400, "missing q parameter"),
        ({"q": "a", "source": "en", "target": "zh", "api_key": KEY, "format": "xml"}, 400, "format"),
        ({"q": "a", "source": "en", "target": "zh", "api_key": KEY, "alternatives": -1}, 400,
         "alternatives"),
        ({"q": "a", "source": "en", "target": "zh"}, 403, "Invalid API key"),
        ({"q": "a", "source": "en", "target": "zh", "api_key": "nope"}, 403, "Invalid API key"),
        ({"q": "a\n" * 41, "source": "en", "target": "zh", "api_key": KEY}, 413, "--max-sentences"),
        ({"q": ["x" * 601], "source": "en", "target": "zh", "api_key": KEY}, 413, "--max-chars"),
    ],
)
def test_libretranslate_errors(server: Server, fields: dict, status: int, message: str) -> None:
    r = server.client.post("/translate", json=fields)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]


def test_a_body_without_content_length_is_limited_while_read(server: Server) -> None:
    def chunks():  # a chunked upload: no Content-Length to refuse it by
        for _ in range(10):
            yield b" " * 1000

    r = server.client.post("/v1/translate", content=chunks(), headers=AUTH)
    assert r.status_code == 413
    assert "--max-body-bytes" in r.json()["error"]


def test_the_key_in_a_bearer_header_serves_libretranslate_too(server: Server) -> None:
    r = server.client.post("/translate", json={"q": "a", "source": "en", "target": "zh"},
                           headers=AUTH)
    assert r.status_code == 200


def test_web_pages_of_the_allowed_origin_may_call_the_api(server: Server) -> None:
    """--cors https://example.org: a browser's preflight and request from that origin pass; other
    origins get no CORS header (their browser keeps the answer from the page)."""
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    allowed = server.client.options("/translate", headers={"Origin": "https://example.org", **preflight})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://example.org"
    r = server.client.get("/languages", headers={"Origin": "https://example.org"})
    assert r.headers["access-control-allow-origin"] == "https://example.org"
    other = server.client.get("/languages", headers={"Origin": "https://elsewhere.example"})
    assert "access-control-allow-origin" not in other.headers


def test_unknown_path_is_a_json_error(server: Server) -> None:
    r = server.client.get("/nope")
    assert r.status_code == 404
    assert "error" in r.json()


def test_health_docs_and_openapi(server: Server) -> None:
    assert server.client.get("/health").json()["status"] == "ok"
    paths = server.client.get("/openapi.json").json()["paths"]
    assert {"/translate", "/languages", "/v1/translate", "/health"} <= set(paths)
    docs = server.client.get("/docs")
    assert docs.status_code == 200
    assets = re.findall(r'(?:src|href)="(/docs-assets/[^"]+)"', docs.text)
    assert assets  # Swagger UI from qkv itself, no CDN
    for path in assets:
        assert server.client.get(path).status_code == 200


def test_concurrent_requests_equal_the_same_requests_one_at_a_time(server: Server) -> None:
    """32 requests of varied sentences and options, sent at once, get the answers they get one at
    a time: the same texts, n-best lists, tokens and alignments, and the same scores and attention
    up to float32 rounding (batched matrix products round differently for other shapes); and the
    server did batch sentences of different requests together."""
    requests = []
    for i in range(32):
        texts = [EN[(i + k) % len(EN)][: 10 + 3 * i % 40] for k in range(1 + i % 3)]
        if i % 8 == 3:  # LibreTranslate: the server's options
            requests.append(("/translate", {"q": texts if i % 16 == 3 else texts[0], "source": "en",
                                            "target": "zh", "api_key": KEY, "alternatives": i % 2}))
        else:
            requests.append(("/v1/translate", {"text": texts, "beam": [1, 4, 4][i % 3],
                                               "nbest": 1 + (i % 3 == 2), "attention": i % 5 == 0,
                                               "max_len_b": 6 + i % 7}))

    def send(request: tuple[str, dict]) -> dict:
        r = server.client.post(request[0], json=request[1], headers=AUTH)
        assert r.status_code == 200, r.text
        return r.json()

    alone = [send(r) for r in requests]
    batches_before = _metric(server, "qkv_batch_sentences_count")
    with ThreadPoolExecutor(32) as pool:
        together = list(pool.map(send, requests, timeout=120))
    batches = _metric(server, "qkv_batch_sentences_count") - batches_before
    assert_same(together, alone)
    assert batches < 32  # sentences of different requests shared batches


def assert_same(got: object, want: object, where: str = "") -> None:
    """Equal, except that floats may differ by float32 rounding."""
    if isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


def test_metrics_count_requests_sentences_and_tokens(server: Server) -> None:
    native(server, text=[EN[7], EN[8]])
    server.client.post("/v1/translate", json={"text": ["a"] * 41}, headers=AUTH)
    text = server.client.get("/metrics").text
    assert _metric(server, 'qkv_requests_total{endpoint="/v1/translate",status="200"}') >= 1
    assert _metric(server, 'qkv_requests_total{endpoint="/v1/translate",status="413"}') >= 1
    assert _metric(server, 'qkv_sentences_total{pair="en-zh"}') >= 2
    assert _metric(server, 'qkv_target_tokens_total{pair="en-zh"}') >= 2
    for name in ("qkv_request_seconds_bucket", "qkv_queue_depth", "qkv_requests_in_flight",
                 "qkv_source_tokens_total"):
        assert name in text


def _metric(server: Server, sample: str) -> float:
    """The value of one sample line of /metrics."""
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{sample} not in /metrics")
