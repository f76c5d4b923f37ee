"""docs/learners_path.py, which regenerates the learner's path from the model `qkv demo` trains:
its pieces run here on the tiny model (the script itself trains, so the suite does not run it), and
the pages it committed agree with each other: one sentence, one translation, one machine."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from qkv.apps.translator import Translator
from qkv.decode.options import DecodeOptions
from qkv.runtime.runtime_options import RuntimeOptions

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("learners_path", DOCS / "learners_path.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    return Translator.load(model_dir, RuntimeOptions(precision="fp32", pack=False))


def test_the_decoding_page_traces_the_sentence_greedy_and_with_beam_4(script, translator) -> None:
    page = script.decoding_page(translator)
    for beam in (1, 4):
        [want] = translator.translate([script.SENTENCE], DecodeOptions(beam=beam))
        assert f"--trace --beam {beam}     # qkv translate --beam {beam}: {want}\n" in page
        assert f"beam {beam}, length penalty alpha 0.6" in page
    assert page.count(f"source: {script.SENTENCE}") == 2
    assert "Made by `python docs/learners_path.py`" in page and "torch " in page


def test_the_walkthrough_page_reads_the_greedy_translation(script, translator) -> None:
    page = script.walkthrough_page(translator)
    [want] = translator.translate([script.SENTENCE], DecodeOptions(beam=1))
    assert page.startswith(f'# Walk-through: one sentence through the Transformer\n\n"{script.SENTENCE}" → "{want}"')  # fmt: skip
    assert "## 1. Tokens and ids" in page and "Decoder layer 2 (DecoderLayer)" in page
    assert "figures/architecture.png" in page


def test_the_machine_is_named(script) -> None:
    line = script.machine()
    assert "threads (flags:" in line and "torch " in line and "Python " in line


def test_consistency_the_committed_pages_agree_on_sentence_translation_machine(script) -> None:
    """Consistency checks of the committed pages (the script made them from one model): the
    greedy trace's best hypothesis is the walk-through's translation, and both name one machine."""
    decoding = (DOCS / "decoding.md").read_text(encoding="utf-8")
    walk = (DOCS / "walkthrough.md").read_text(encoding="utf-8")
    greedy = re.search(r"--beam 1: (.+)\n", decoding).group(1)
    assert walk.split("\n")[2].startswith(f'"{script.SENTENCE}" → "{greedy}"')
    assert f"source: {script.SENTENCE}" in decoding
    machines = [re.search(r"Made by .* on: (.+?)\. A demo", " ".join(p.split())).group(1)
                for p in (decoding, walk)]  # fmt: skip
    assert machines[0] == machines[1]


def demo_attention_readings() -> dict[str, list[str]]:
    """The numbers the demo_attention.png captions read, computed from the maps the figure plots
    (docs/figures/demo_attention.json), as the English and the Chinese captions write them."""
    maps = json.loads((DOCS / "figures" / "demo_attention.json").read_text(encoding="utf-8"))
    rows = {}  # output word -> (its source tokens, its row)
    for m in maps:
        for token, row in zip(m["target_tokens"], m["weights"], strict=True):
            rows.setdefault(token.strip("▁"), []).append((m["source_tokens"], row))
    spelled = {"four": "4", "fifty": "5", "two": "2", "nine": "9", "three": "3", "eight": "8"}
    for word, digit in spelled.items():  # a word that spells one digit looks at that digit
        [(src, row)] = rows[word]
        assert src[row.index(max(row))] == f"▁{digit}", word
    one = [f"{w} {max(rows[w][0][1]):.2f}" for w in spelled]
    eight_src, eight = rows["eight"][0]
    before_eight = eight[eight_src.index("▁8") - 1]
    seventeen_src, seventeen = rows["seventeen"][0]
    on_1, on_7 = (seventeen[seventeen_src.index(d)] for d in ("▁1", "▁7"))
    hundred = rows["hundred"][0][1][-1]
    thousand = [w for _, row in rows["thousand"] for w in row[1:]]  # after the first digit
    hyphen_src, hyphen = rows["-"][0]
    ends = [row[-1] for src, row in rows["</s>"]]
    spread, final = (f"{min(v):.2f}–{max(v):.2f}" for v in (thousand, ends))
    on_2 = hyphen[hyphen_src.index("▁2")]
    return {
        "en": [", ".join(one), f"({before_eight:.2f} on the\n0 before it)",
               f"puts {on_1:.2f} on the 1 and {on_7:.2f} on the 7",
               f"hundred puts {hundred:.2f} on",
               f"thousand spreads {spread} over", f"hyphen puts {hyphen[-1]:.2f} on `</s>` and "
               f"{on_2:.2f} on the\n2", f"the final `</s>` {final} on the source"],
        "zh": ["、".join(one), f"另有 {before_eight:.2f} 落在它前面的 0 上",
               f"在 1 上放 {on_1:.2f}、在 7 上放 {on_7:.2f}", f"hundred 把 {hundred:.2f} 放在",
               f"thousand 把 {spread} 分散", f"连字符把 {hyphen[-1]:.2f} 放在 `</s>` 上、{on_2:.2f} 放在 2",
               f"在源端 `</s>` 上为 {final}"],
    }  # fmt: skip


def test_consistency_the_demo_attention_captions_read_the_maps_the_figure_plots() -> None:
    readings = demo_attention_readings()
    pages = {"en": (DOCS / "concepts.md", "**Cross-attention of the demo model**"),
             "zh": (DOCS / "zh" / "concepts.md", "**演示模型的交叉注意力**")}  # fmt: skip
    for language, (page, title) in pages.items():
        text = page.read_text(encoding="utf-8")
        start = text.index(title)
        caption = text[start : text.index("\n\n", start)]
        for reading in readings[language]:
            assert reading in caption, (language, reading)
