"""The explain view of `qkv serve` (GET /explain, POST /v1/explain): one sentence's beam search
step by step, every layer x head of attention, the KV cache; its answer agrees with /v1/translate,
its limits hold, and the view renders in headless Chromium (as test_server_page.py drives it). A
screenshot is saved."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from server_process import KEY, Server
from test_server_page import browser  # noqa: F401  (the module's Chromium fixture)

from sentences import EN  # tests/sentences.py

AUTH = {"Authorization": f"Bearer {KEY}"}
LONG = f"{EN[1]} {EN[2]}"  # 35 source tokens (eos included) with the test model


def explain(server: Server, **body: object) -> dict:
    r = server.client.post("/v1/explain", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()


def config(server: Server) -> tuple[int, int, int]:
    """(encoder layers, decoder layers, heads) as the answer shows them."""
    maps = explain(server, text=EN[0], beam=1)["maps"]
    return len(maps["encoder"]), len(maps["decoder"]), len(maps["encoder"][0])


@pytest.mark.parametrize("beam", [1, 3])
def test_explain_agrees_with_translate(server: Server, beam: int) -> None:
    a = explain(server, text=EN[1], beam=beam)
    expected = server.client.post(
        "/v1/translate", json={"text": EN[1], "beam": beam}, headers=AUTH
    ).json()["translations"][0]
    assert a["translation"] == expected["text"]
    assert a["score"] == pytest.approx(expected["score"], abs=1e-3)
    ended = [h for s in a["steps"] for h in s["ended"]]
    best = max(ended, key=lambda h: h["score"])  # the best finished hypothesis is the translation
    assert best["tokens"] == a["target_tokens"][:-1]
    assert best["score"] == pytest.approx(expected["score"], abs=1e-3)
    assert a["steps"][-1]["done"] or a["steps"][-1]["ended"]
    for s in a["steps"]:
        assert 1 <= len(s["candidates"]) <= 2 * beam
        assert len(s["kept"]) <= beam
    S, T = len(a["source_tokens"]), len(a["target_tokens"])
    for kind, (rows, cols) in {"encoder": (S, S), "decoder": (T, T), "cross": (T, S)}.items():
        for layer in a["maps"][kind]:
            for head in layer:
                assert len(head) == rows and all(len(r) == cols for r in head)
                assert all(abs(sum(r) - 1) < 0.01 for r in head)  # each query's weights sum to 1
                assert all(v == round(v, 3) for r in head for v in r)


def test_explain_limits(server: Server) -> None:
    r = server.client.post("/v1/explain", json={"text": EN[0], "beam": 7}, headers=AUTH)
    assert r.status_code == 400 and "max-beam" in r.json()["error"]
    r = server.client.post("/v1/explain", json={"text": "a " * 250 + "a"}, headers=AUTH)
    assert r.status_code == 413 and "tokens" in r.json()["error"]
    r = server.client.post("/v1/explain", json={"text": "x" * 700}, headers=AUTH)
    assert r.status_code == 413
    r = server.client.post("/v1/explain", json={"text": EN[0]})
    assert r.status_code == 403
    r = server.client.post("/v1/explain", json={"text": ["a", "b"]}, headers=AUTH)
    assert r.status_code == 400
    assert server.client.get("/explain").status_code == 200
    assert 'href="/explain"' in server.client.get("/").text


def test_explain_view_in_chromium(server: Server, browser, tmp_path: Path) -> None:  # noqa: F811
    encoder_layers, decoder_layers, heads = config(server)
    beam = 3
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.set_default_timeout(60_000)
    page.goto(server.url + "/explain")
    page.wait_for_selector("body[data-ready=true]")
    page.fill("#key", KEY)
    page.select_option("#beam", str(beam))
    page.fill("#text", LONG)
    started = time.perf_counter()
    page.click("#explain")
    page.wait_for_selector("body[data-render-ms]")
    seconds = time.perf_counter() - started
    answer = explain(server, text=LONG, beam=beam)
    print(
        f"\nfirst render of the explain view, {len(answer['source_tokens'])} source tokens, "
        f"beam {beam}: {page.get_attribute('body', 'data-render-ms')} ms in the page "
        f"(click to rendered: {seconds * 1000:.0f} ms)"
    )
    assert page.locator(".step-col").count() == len(answer["steps"])
    assert page.locator(".cand.kept").count() >= 1
    assert page.locator(".cand.ended").count() == sum(len(s["ended"]) for s in answer["steps"])
    assert page.locator("#translation").inner_text() == answer["translation"]
    minis = page.locator("canvas.mini")
    assert minis.count() == (encoder_layers + 2 * decoder_layers) * heads
    assert encoder_layers == decoder_layers  # then the count is layers x heads x 3
    minis.nth(minis.count() - 1).click()  # the last layer's last cross-attention head
    page.wait_for_selector("#enlarged-wrap:not([hidden])")
    assert "Cross-attention" in page.inner_text("#enlarged-title")
    size = page.evaluate(
        "[$('enlarged').width, $('enlarged').height]".replace("$", "document.getElementById")
    )
    assert size[0] > 22 * len(answer["source_tokens"]) and size[1] > 22 * len(
        answer["target_tokens"]
    )
    T = len(answer["target_tokens"])
    rows = page.locator(".kv-row")
    assert rows.count() == 2 * decoder_layers
    assert rows.nth(0).locator(".kv-cell.filled").count() == T  # the last step: T columns
    page.fill("#step", "2")  # the slider back to step 2: two columns cached
    page.dispatch_event("#step", "input")
    assert rows.nth(0).locator(".kv-cell.filled").count() == 2
    assert rows.nth(1).locator(".kv-cell.filled").count() == len(answer["source_tokens"])
    page.screenshot(path=tmp_path / "serve-explain.png", full_page=True)
    assert (tmp_path / "serve-explain.png").stat().st_size > 10_000
    page.close()
