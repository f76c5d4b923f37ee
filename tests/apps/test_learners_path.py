"""docs/learners_path.py, which regenerates the learner's path from the model `qkv demo` trains:
its pieces run here on the tiny model (the script itself trains, so the suite does not run it), and
the pages it committed agree with each other: one sentence, one translation, one machine."""

from __future__ import annotations

import importlib.util
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
