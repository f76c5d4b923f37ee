"""Glossaries over HTTP: a native request's terms, the server's --glossary for every request
(LibreTranslate's too), and their errors. Oracle: `Translator.translate_detailed` with the same
glossary and options, run here; and the terms themselves (each appears in the translation)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from server_process import KEY, SERVED, Server, running

from qkv.apps.glossary import Glossary
from qkv.apps.translator import Translator
from sentences import EN  # tests/sentences.py

AUTH = {"Authorization": f"Bearer {KEY}"}
TEXTS = [EN[0], EN[1], "A man and a dog in the park."]


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    return Translator.load(model_dir)


@pytest.fixture(scope="module")
def glossary_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    terms = tmp_path_factory.mktemp("terms") / "terms.tsv"
    terms.write_text("man\t男人\npark\t公园\n", encoding="utf-8")
    with running(model_dir, "--pair", "en-zh", "--api-key", KEY, "--glossary", str(terms),
                 "--beam", str(SERVED.beam), "--max-len-b", str(SERVED.max_len_b)) as s:
        yield s


def test_native_glossary_equals_the_translator(server: Server, translator: Translator) -> None:
    terms = {"man": "男人", "dogs": "狗"}
    r = server.client.post("/v1/translate", json={"text": TEXTS, "glossary": terms}, headers=AUTH)
    assert r.status_code == 200, r.text
    got = [t["text"] for t in r.json()["translations"]]
    g = Glossary.from_pairs(terms.items())
    assert got == translator.translate(TEXTS, SERVED, glossary=g)
    assert "男人" in got[0] and "狗" in got[1] and "男人" in got[2]


@pytest.mark.parametrize(("glossary", "beam", "message"), [
    ({"": "x"}, None, "glossary entry 1: a term must be non-empty text"),
    ("man=男人", None, "glossary: Input should be a valid dictionary"),
    ({"man": "男人"}, 1, "a glossary needs beam search with a beam of 2 or more"),
])
def test_native_glossary_errors(server: Server, glossary: object, beam: int | None,
                                message: str) -> None:
    body = {"text": EN[0], "glossary": glossary, **({"beam": beam} if beam else {})}
    r = server.client.post("/v1/translate", json=body, headers=AUTH)
    assert r.status_code == 400 and message in r.json()["error"], r.text


def test_the_servers_glossary_serves_every_request(glossary_server: Server,
                                                   translator: Translator) -> None:
    server = glossary_server
    g = Glossary.from_pairs([("man", "男人"), ("park", "公园")])
    r = server.client.post("/translate", json={"q": TEXTS, "source": "en", "target": "zh",
                                               "api_key": KEY})
    assert r.status_code == 200, r.text
    got = [t for t in r.json()["translatedText"]]
    assert got == translator.translate(TEXTS, SERVED, glossary=g)
    assert "男人" in got[0] and "男人" in got[2] and "公园" in got[2]
    more = {"dog": "狗", "park": "园"}  # a request's terms are added; its target wins
    r = server.client.post("/v1/translate", json={"text": TEXTS[2], "glossary": more},
                           headers=AUTH)
    merged = g.merged(Glossary.from_pairs(more.items()))
    assert r.json()["translations"][0]["text"] == translator.translate(TEXTS[2:], SERVED,
                                                                       glossary=merged)[0]
    assert server.client.get("/v1/info").json()["glossary_terms"] == 2


def test_requests_with_and_without_terms_batched_together(server: Server,
                                                          translator: Translator) -> None:
    terms = {"man": "男人"}
    bodies = [{"text": TEXTS, "glossary": terms}, {"text": TEXTS}] * 4
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(
            lambda b: server.client.post("/v1/translate", json=b, headers=AUTH), bodies))
    g = Glossary.from_pairs(terms.items())
    expected = [translator.translate(TEXTS, SERVED, glossary=g), translator.translate(TEXTS, SERVED)]
    for k, r in enumerate(answers):
        assert [t["text"] for t in r.json()["translations"]] == expected[k % 2]


def test_the_work_bound_counts_the_constrained_search(server: Server) -> None:
    """40 x "man" at beam 6, max_len_b 512: beam search alone may decode 6 x ~515 x 40 ≈ 124k
    tokens (under --max-decode-tokens, 131,072); with a term in each sentence the constrained
    search (width max(6, 2 x 3) for the 2 pieces of 男人) doubles it: refused before it starts."""
    body = {"text": ["man"] * 40, "beam": 6, "max_len_b": 512, "glossary": {"man": "男人"}}
    r = server.client.post("/v1/translate", json=body, headers=AUTH)
    assert r.status_code == 413 and "--max-decode-tokens" in r.json()["error"], r.text
