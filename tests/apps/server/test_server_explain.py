"""The explain view of `qkv serve` (GET /explain, POST /v1/explain): one sentence's beam search
step by step, every layer x head of attention, the KV cache; its answer agrees with /v1/translate,
its limits hold, and the view renders in headless Chromium (as test_server_page.py drives it): an
example sentence filled in, `?text=` in the address, each lattice cell linked to the hypothesis it
extends, labelled maps with their colour scale and values. A screenshot is saved."""

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
    r = server.client.post("/v1/explain", json={"text": "a", "source": "de", "target": "en"},
                           headers=AUTH)
    assert r.status_code == 400 and "en-zh" in r.json()["error"]
    r = server.client.post("/v1/explain", json={"text": "a", "k": 1, "source": "de"}, headers=AUTH)
    assert r.status_code == 400 and "k: unknown field" in r.json()["error"]  # fields before pair
    assert server.client.get("/explain").status_code == 200
    assert 'href="/explain"' in server.client.get("/").text


def test_explain_view_in_chromium(server: Server, browser, tmp_path: Path) -> None:  # noqa: F811
    encoder_layers, decoder_layers, heads = config(server)
    beam = 3
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.set_default_timeout(60_000)
    page.goto(server.url + "/explain")
    page.wait_for_selector("body[data-ready=true]")
    assert page.input_value("#text") == "A man is riding a bike."  # the example of English
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
    assert f"beam={beam}" in page.url and "text=" in page.url
    best = page.locator(".cand.best").get_attribute("data-score")
    assert float(best) == pytest.approx(answer["score"], abs=1e-3)  # the translation's cell
    check_lattice_links(page, answer)
    axes = page.locator(".kind[data-kind=cross] .axes code").all_inner_texts()
    assert axes == [shown(answer["target_tokens"]), shown(answer["source_tokens"])]
    assert page.locator("#scale-maps .scale-ticks span").all_inner_texts()[-1] == "1"
    assert page.locator(".cand.ended").count() == sum(len(s["ended"]) for s in answer["steps"])
    assert page.locator("#translation").inner_text() == answer["translation"]
    minis = page.locator("canvas.mini")
    assert minis.count() == (encoder_layers + 2 * decoder_layers) * heads
    assert encoder_layers == decoder_layers  # then the count is layers x heads x 3
    minis.nth(minis.count() - 1).click()  # the last layer's last cross-attention head
    page.wait_for_selector("#enlarged-wrap:not([hidden])")
    assert "Cross-attention" in page.inner_text("#enlarged-title")
    last = answer["maps"]["cross"][-1][-1]
    written = sum(v >= 0.1 for row in last for v in row)  # the enlarged map writes these values
    assert page.get_attribute("#enlarged", "data-written") == str(written)
    size = page.evaluate(
        "[$('enlarged').width, $('enlarged').height]".replace("$", "document.getElementById")
    )
    assert size[0] > 30 * len(answer["source_tokens"]) and size[1] > 30 * len(
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


def shown(tokens: list[str]) -> str:
    """Tokens as the view writes them: "▁" as a space, a lone "▁" kept."""
    return " ".join(t.replace("\u2581", " ").strip() or "\u2581" for t in tokens)


def check_lattice_links(page, answer: dict) -> None:
    """Every candidate after step 0 names the cell of the previous step it extends: a kept
    hypothesis whose tokens are the candidate's but the last."""
    cells = page.evaluate(
        """() => [...document.querySelectorAll('.cand')].map(c => ({
            id: c.id, parent: c.dataset.parent, kept: c.classList.contains('kept'),
            step: Number(c.closest('.step-col').dataset.step)}))"""
    )
    assert len(cells) == sum(len(s["candidates"]) for s in answer["steps"])
    by_id = {c["id"]: c for c in cells}
    for c in cells:
        step, n = map(int, c["id"].split("-")[1:])
        tokens = answer["steps"][step]["candidates"][n]["tokens"]
        if step == 0:
            assert c["parent"] == ""
            continue
        parent = by_id[c["parent"]]
        p_step, p_n = map(int, parent["id"].split("-")[1:])
        assert p_step == step - 1 and parent["kept"]
        assert answer["steps"][p_step]["candidates"][p_n]["tokens"] == tokens[:-1]


def test_the_address_explains_its_sentence_and_the_screenshot_script_drives_it(
    model_dir: Path,
    browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Without an API key, /explain?text=...&beam=... explains that sentence on load: what
    docs/learners_path.py photographs for docs/figures/serve-explain.png."""
    from server_process import PAIR, learners_path, running

    script = learners_path()
    with running(model_dir, "--pair", PAIR, "--max-len-b", "12") as s:
        shown = script.explain_screenshot(browser, s.url, tmp_path / "explain.png", beam=2)
        want = s.client.post("/v1/explain", json={"text": script.SENTENCE, "beam": 2}).json()
    assert shown["translation"] == want["translation"]
    assert shown["enlarged"].startswith("Cross-attention, layer 2, head 1: row = query")
    assert "text=4+0+5+2" in shown["url"] and "beam=2" in shown["url"]
    assert shown["url"].endswith(shown["address"])  # the hint shows the address it is at
    assert (tmp_path / "explain.png").stat().st_size > 10_000
