"""The page of `qkv serve` in headless Chromium (Debian's `chromium`, driven by Playwright with the
system browser; nothing is downloaded): type, translate as you type, see the translation the API
gives, hover a target token and see the source token it attended to most highlighted; the page
fits a phone-sized screen. A screenshot is saved."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import KEY, Server

from sentences import EN  # tests/sentences.py

playwright_api = pytest.importorskip("playwright.sync_api")


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "Debian's chromium is not installed (apt-get install chromium; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs it: a missing browser there is a failure
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    executable = chromium_path()
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_type_translate_hover_and_highlight(server: Server, browser, tmp_path: Path) -> None:
    text = f"{EN[0]} {EN[1]}\n{EN[2]}"  # a paragraph of two sentences, then a line
    expected = server.client.post(
        "/v1/translate",
        json={"text": EN[:3], "nbest": 2, "attention": True},  # the page's defaults
        headers={"Authorization": f"Bearer {KEY}"},
    ).json()["translations"]
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.set_default_timeout(60_000)
    page.goto(server.url + "/")
    page.wait_for_selector("body[data-ready=true]")
    assert page.locator("#pair option").all_inner_texts() == ["English → Chinese"]
    page.fill("#key", KEY)  # the server asks for a key: the page shows the field
    page.locator("#source").press_sequentially(text[:-4])  # typing translates (debounced)
    page.wait_for_selector(".sentence")
    page.locator("#source").press_sequentially(text[-4:])
    page.click("#translate")
    page.wait_for_function(
        "expected => [...document.querySelectorAll('.sentence')].map(s => s.textContent)"
        ".join('|') === expected",
        arg="|".join(t["text"] for t in expected),
    )
    nbest = page.locator("#nbest-table tbody tr")
    assert nbest.count() == len(expected[0]["nbest"])
    first = nbest.nth(0).locator("td").all_inner_texts()
    assert first[1:] == [expected[0]["nbest"][0]["text"], f"{expected[0]['nbest'][0]['score']:.4f}"]

    page.click(".sentence[data-i='1']")  # the second sentence's attention
    attention = expected[1]["attention"]
    assert page.locator(".tgt-token").count() == len(expected[1]["target_tokens"])
    assert page.locator("#heatmap tbody tr").count() == len(attention)
    row = min(1, len(attention) - 1)
    page.hover(f".tgt-token[data-t='{row}']")
    top = max(range(len(attention[row])), key=lambda s: attention[row][s])
    assert page.locator(".src-token.top").get_attribute("data-s") == str(top)
    assert page.locator(".src-token.hl").count() >= 1
    assert page.locator("#heatmap tbody tr.active").get_attribute("data-t") == str(row)
    page.screenshot(path=tmp_path / "serve-page.png", full_page=True)
    assert (tmp_path / "serve-page.png").stat().st_size > 10_000
    page.close()


def test_the_page_fits_a_phone(server: Server, browser) -> None:
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    page.set_default_timeout(60_000)
    page.goto(server.url + "/")
    page.wait_for_selector("body[data-ready=true]")
    page.fill("#key", KEY)
    page.fill("#source", EN[2])
    page.click("#translate")
    page.wait_for_selector(".sentence")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390  # no sideways scrolling: the heatmap scrolls inside its own box
    source, output = page.locator("#source").bounding_box(), page.locator("#output").bounding_box()
    assert output["y"] >= source["y"] + source["height"]  # the panes stack
    page.close()


def test_the_screenshot_script_drives_the_page(model_dir: Path, browser, tmp_path: Path) -> None:
    """What docs/learners_path.py photographs for docs/figures/serve-page.png: the page's
    translations, alternatives and lit source token are the API's."""
    from server_process import PAIR, learners_path, running

    script = learners_path()
    with running(model_dir, "--pair", PAIR, "--max-len-b", "12") as s:
        shown = script.serve_page_screenshot(browser, s.url, tmp_path / "page.png")
        body = {"text": list(script.PAGE_SENTENCES), "beam": 4, "nbest": 3, "attention": True}
        want = s.client.post("/v1/translate", json=body).json()["translations"]
    assert shown["translations"] == [t["text"] for t in want]
    assert shown["alternatives"] == [[n["text"], f"{n['score']:.4f}"] for n in want[0]["nbest"]]
    t = min(2, len(want[0]["target_tokens"]) - 1)
    assert shown["hovered"] == want[0]["target_tokens"][t]
    attention = want[0]["attention"][t]
    assert shown["lit"] == want[0]["source_tokens"][attention.index(max(attention))]
    assert (tmp_path / "page.png").stat().st_size > 10_000
