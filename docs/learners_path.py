"""Regenerates the learner's path from one model and one sentence: the model `qkv demo` trains and
"4 0 5 2", the sentence of README.md's tour.

    PYTHONPATH=src python docs/learners_path.py [--model DIR]   # default qkv-demo, reused

It trains the demo model once (`qkv demo --out DIR`; about 80 s on 2 CPU cores) and writes, from it:
docs/decoding.md (the greedy and beam-4 traces), docs/walkthrough.md (the sentence through every
layer), docs/figures/demo_attention.png (the cross-attention; the maps it plots in
demo_attention.json), docs/figures/architecture.png, and docs/figures/serve-explain.png and
serve-page.png (the `/explain` view and the page at `/` in headless Chromium, driven by Playwright
with Debian's `chromium`). Each page says which machine
made it: a demo trained on another machine may differ in the last digits. With `--language-model
DIR` (a `qkv demo --corpus multi30k` model) it writes the real-language demo's two figures instead.
tests/apps/test_learners_path.py and tests/apps/server run each piece on a tiny model.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote_plus

import torch

from qkv.apps.figures import save
from qkv.apps.figures.architecture import draw_architecture
from qkv.apps.figures.demo_figure import demo_attention_maps, draw_demo_attention
from qkv.apps.trace import format_trace, trace_translation
from qkv.apps.translator import Translator
from qkv.apps.walkthrough import explain_sentence
from qkv.decode.options import DecodeOptions
from qkv.runtime.runtime_options import RuntimeOptions

DOCS = Path(__file__).resolve().parent
SENTENCE = "4 0 5 2"
PAGE_SENTENCES = (SENTENCE, "1 9 8 4", "3 0 0 7 1 6")  # the serve page's example
LANGUAGE_SENTENCE = "A dog runs in the snow."  # the one `qkv demo --corpus multi30k` suggests
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile")


def machine() -> str:
    """The CPU (lscpu's model name, its cores, the flags that change torch's kernels), torch and
    Python."""
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        name = re.search(r"Model name:\s*(.+)", info).group(1).strip()  # type: ignore[union-attr]
        flags = set(re.search(r"Flags:\s*(.+)", info).group(1).split())  # type: ignore[union-attr]
    except (OSError, subprocess.CalledProcessError, AttributeError):
        pass
    shown = ", ".join(f for f in FLAGS if f in flags) or "none of " + ", ".join(FLAGS)
    return (
        f"{name}, {torch.get_num_threads()} threads (flags: {shown}); torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


def made_by(command: str) -> str:
    return (
        f"Made by `{command}` (the model `qkv demo` trains, float32) on: {machine()}. A demo "
        "trained on another machine or torch build may differ in the last digits."
    )


DECODING_HEAD = """# Decoding, step by step: greedy and beam search on the demo model

`qkv translate --trace` shows how a translation is searched for, one step at a time: the
candidates ranked by their summed log-probability, the hypotheses that end with `</s>` and their
score with the length penalty, the beam that goes on, and when the search stops
([`qkv.apps.trace`](../src/qkv/apps/trace.py), over the `trace=` hook of
[`decode/beam.py`](../src/qkv/decode/beam.py); greedy decoding is beam search with a beam of 1).
Tests: the trace of a worked example by hand
([`test_the_trace_shows_the_hand_computation_step_by_step`](../tests/decode/test_search.py)),
and the best finished hypothesis of a trace is `qkv translate`'s translation, text and score
([`test_the_trace_ends_in_the_translation`](../tests/apps/test_trace.py)).
"""
GREEDY_NOTE = """\
Each step keeps the one most probable token; the second candidate is shown to say by how much it
lost. At the last step `</s>` wins and the sentence ends."""
BEAM_NOTE = """\
Each step ranks the 2 × 4 best extensions of the 4 hypotheses; an extension that ends with
`</s>` among the first 4 is finished and scored log-prob / ((5 + L) / 6) ** α (GNMT's length
penalty, α = 0.6, L counting `</s>`); the 4 best that do not end go on. The search stops when 4
have ended and the best alive hypothesis, scored as if it ended now, can no longer beat the 4th
best finished one, or at the length limit. The best finished hypothesis is the translation."""


def decoding_page(translator: Translator, model: str = "qkv-demo") -> str:
    """docs/decoding.md: the traces of SENTENCE, greedy and beam 4."""
    parts = [DECODING_HEAD, made_by("python docs/learners_path.py")]
    for beam, title, note in ((1, "Greedy (`--beam 1`)", GREEDY_NOTE), (4, "Beam 4", BEAM_NOTE)):
        options = DecodeOptions(beam=beam)
        [text] = translator.translate([SENTENCE], options)
        steps = trace_translation(translator, SENTENCE, options)
        command = f'echo "{SENTENCE}" | qkv translate --model {model} --trace --beam {beam}'
        trace = "\n".join([f"source: {SENTENCE}", format_trace(steps, translator, options)])
        parts += [
            f"## {title}",
            f"```bash\n{command}     # qkv translate --beam {beam}: {text}\n```",
            f"```\n{trace}\n```",
            note,
        ]
    return "\n\n".join(part.strip("\n") for part in parts) + "\n"


WALKTHROUGH_HEAD = """# Walk-through: one sentence through the Transformer

"{sentence}" → "{translation}": the sentence of README.md's tour through the model `qkv demo`
trains ({ne} + {nd} layers, d_model {d}, {h} heads of {dh}, d_ff {ff}, post-norm as in the
paper), its own greedy translation read back as the target (teacher forcing). Each block shows a
tensor's shape and the first numbers of its first row, printed by
[`qkv.apps.walkthrough`](../src/qkv/apps/walkthrough.py) from the tensors qkv's own modules compute;
one head's Q, K, scores and weights are shown in full. What it computes by hand (projections,
scores, softmax, heads joined, each layer) is checked against the modules' outputs, and the logits
against `model.decode`. Rows of every matrix are the queries (the tokens that attend), columns the
keys. `qkv explain --model qkv-demo "{sentence}"` prints the same page for your model.

{made_by}

![the encoder-decoder: every box named by its qkv class, the residual paths, the N× layers, the
tensor shapes](figures/architecture.png)
"""


def walkthrough_page(translator: Translator) -> str:
    text, lines = explain_sentence(translator, SENTENCE)
    cfg = translator.model.config
    head = WALKTHROUGH_HEAD.format(
        sentence=SENTENCE,
        translation=text,
        ne=cfg.n_encoder_layers,
        nd=cfg.n_decoder_layers,
        d=cfg.d_model,
        h=cfg.n_heads,
        dh=cfg.d_model // cfg.n_heads,
        ff=cfg.d_ff,
        made_by=made_by("python docs/learners_path.py"),
    )
    return head + "\n" + "\n".join(lines) + "\n"


def serve(model: Path) -> tuple[subprocess.Popen[str], str]:
    """`qkv serve` on a free loopback port; the process and its address."""
    command = [sys.executable, "-m", "qkv", "serve", "--model", str(model), "--port", "0",
               "--threads", "1", "--precision", "fp32"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for _ in range(200):  # the lines before it says where it listens
        line = process.stdout.readline()
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            return process, found.group(1)
        if not line:
            break
    process.kill()
    raise RuntimeError("qkv serve did not start")


def explain_screenshot(
    browser, url: str, path: Path, beam: int = 4, sentence: str = SENTENCE
) -> dict[str, str]:
    """The `/explain` view of `sentence` (its address `?text=`) in a Playwright browser, one map
    enlarged (the last layer's first cross-attention head) and the translation's path in the lattice
    lit, saved as a PNG. Returns what the page shows: the translation, the enlarged map's title and
    the address."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.set_default_timeout(120_000)
    page.goto(f"{url}/explain?text={quote_plus(sentence)}&beam={beam}")
    page.wait_for_selector("body[data-render-ms]")
    page.locator("canvas.mini[data-kind=cross][data-head='0']").last.click()
    page.wait_for_selector("#enlarged-wrap:not([hidden])")
    page.locator(".cand.best").hover()  # the translation: its path lit
    page.screenshot(path=path, full_page=True)
    shown = {"translation": page.inner_text("#translation"),
             "enlarged": page.inner_text("#enlarged-title"), "url": page.url,
             "address": page.inner_text("#address")}  # fmt: skip
    page.close()
    return shown


def serve_page_screenshot(browser, url: str, path: Path) -> dict[str, object]:
    """The page at `/` translating SENTENCE and two more numbers (beam 4, 3 best), the first
    sentence selected and its third target token (or its last) hovered, saved as a PNG. Returns
    what the page shows: the translations, the alternatives with their scores, the hovered target
    token and the source token lit as its most attended."""
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    page.set_default_timeout(120_000)
    page.goto(url + "/")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#beam", "4")
    page.select_option("#nbest", "3")
    page.fill("#source", "\n".join(PAGE_SENTENCES))
    page.click("#translate")
    count = f"document.querySelectorAll('.sentence').length === {len(PAGE_SENTENCES)}"
    page.wait_for_function(count)
    page.click(".sentence[data-i='0']")
    token = f".tgt-token[data-t='{min(2, page.locator('.tgt-token').count() - 1)}']"
    page.hover(token)
    shown = {
        "translations": page.locator(".sentence").all_inner_texts(),
        "alternatives": [row.locator("td").all_inner_texts()[1:]
                         for row in page.locator("#nbest-table tbody tr").all()],
        "hovered": page.inner_text(token),
        "lit": page.inner_text(".src-token.top"),
    }  # fmt: skip
    page.screenshot(path=path, full_page=True)
    page.close()
    return shown


def demo_model(directory: Path) -> Path:
    """The model `qkv demo` trains, trained here unless `directory` holds one already."""
    if (directory / "model.safetensors").exists():
        print(f"reusing the demo model in {directory}", file=sys.stderr)
        return directory
    subprocess.run([sys.executable, "-m", "qkv", "demo", "--out", str(directory)], check=True)
    return directory


def language_figures(model: Path, chromium: str) -> None:
    """The real-language demo's figures, from one `qkv demo --corpus multi30k` model: its
    cross-attention maps of the first test sentence (the demo draws them) and the `/explain`
    view of LANGUAGE_SENTENCE (the sentence the demo suggests)."""
    from playwright.sync_api import sync_playwright

    figures = DOCS / "figures"
    (figures / "language_demo_cross_layers.png").write_bytes(
        (model / "attention" / "cross_layers.png").read_bytes()
    )
    process, url = serve(model)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            shown = explain_screenshot(
                browser, url, figures / "language-explain.png", sentence=LANGUAGE_SENTENCE
            )
            browser.close()
    finally:
        process.terminate()
        process.wait(60)
    print(f"language-explain.png: {shown}", file=sys.stderr)
    print(made_by("python docs/learners_path.py --language-model DIR"), file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qkv-demo", help="the demo model (trained if absent)")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the browser to drive")
    parser.add_argument(
        "--language-model",
        help="a `qkv demo --corpus multi30k` model: draw only its figures (language_demo_*.png,"
        " language-explain.png)",
    )
    args = parser.parse_args()
    if args.language_model:
        language_figures(Path(args.language_model), args.chromium)
        return
    model = demo_model(Path(args.model))
    translator = Translator.load(model, RuntimeOptions(precision="fp32", pack=False))
    (DOCS / "decoding.md").write_text(decoding_page(translator), encoding="utf-8")
    (DOCS / "walkthrough.md").write_text(walkthrough_page(translator), encoding="utf-8")
    figures = DOCS / "figures"
    maps = demo_attention_maps(model)
    fig, summary = draw_demo_attention(maps)
    save(fig, figures / "demo_attention.png")
    (figures / "demo_attention.json").write_text(json.dumps(maps, indent=1, ensure_ascii=False)
                                                 + "\n", encoding="utf-8")  # fmt: skip
    print(f"demo_attention.png: {summary}", file=sys.stderr)
    save(draw_architecture()[0], figures / "architecture.png")
    from playwright.sync_api import sync_playwright

    process, url = serve(model)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            shown = explain_screenshot(browser, url, figures / "serve-explain.png")
            page = serve_page_screenshot(browser, url, figures / "serve-page.png")
            browser.close()
    finally:
        process.terminate()
        process.wait(60)
    print(f"serve-explain.png: {shown}", file=sys.stderr)
    print(f"serve-page.png: {page}", file=sys.stderr)
    print(made_by("python docs/learners_path.py"), file=sys.stderr)


if __name__ == "__main__":
    main()
