"""`qkv demo`: the README's main job. The suite checks accuracy on a shorter run of the same pipeline; the
full demo's time and accuracy are reported in the README (measured, not asserted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qkv.apps.cli import main
from qkv.apps.demo import DemoResult
from qkv.apps.translator import Translator
from shared_corpora import SHARED_DATA


def test_short_demo_learns_held_out_numbers(short_demo: DemoResult) -> None:
    result = short_demo
    # 600 updates learn the held-out 3- and 4-digit numbers; the short, irregular ones need the full demo
    long = [result.by_digits[d] for d in (3, 4)]
    assert sum(c for c, _ in long) / sum(t for _, t in long) >= 0.9, result.by_digits
    src, _, ref = result.examples[0]
    assert Translator.load(result.out_dir).translate([src]) == [ref]  # a normal model directory (beam 4)


def test_demo_command_reports_accuracy_and_location(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d"
    assert main(["demo", "--out", str(out), "--steps", "10"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^accuracy: \d+\.\d%", text, re.MULTILINE)
    assert f"model saved to {out}" in text
    assert main(["demo", "--out", str(out), "--steps", "10"]) == 2  # never overwrites a run


DATA = SHARED_DATA


@pytest.mark.data
@pytest.mark.skipif(not (DATA / "multi30k").is_dir(), reason="Multi30k is not in ../shared/data")
def test_language_demo_trains_scores_and_draws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`qkv demo --corpus multi30k --download`'s pipeline on a tiny model and 3 updates, its data
    downloaded into an empty folder (from a file:// mirror of the official files): its sacreBLEU
    is sacreBLEU's own on the saved model's translations (beam 4); the attention maps are drawn."""
    import dataclasses

    import sacrebleu

    from qkv.apps.demo import LANGUAGE_DECODING, run_language_demo
    from qkv.data.named import CORPORA, MULTI30K, load_named
    from qkv.decode.options import DecodeOptions

    mirror = dataclasses.replace(MULTI30K, url=lambda rel: (DATA / "multi30k" / rel).as_uri())
    monkeypatch.setitem(CORPORA, "multi30k", mirror)
    tiny = {"d_model": 32, "d_ff": 64, "n_heads": 2, "n_encoder_layers": 1, "n_decoder_layers": 1}
    result = run_language_demo(
        tmp_path / "m", tmp_path / "data", test_sentences=12, vocab_size=400, max_steps=3,
        model=tiny, download=True,
    )
    assert result.steps == 3
    fetched = {p.relative_to(tmp_path / "data" / "multi30k").as_posix()
               for p in (tmp_path / "data").rglob("*") if p.is_file()}
    assert {"train.en.gz", "test_2016_flickr.de.gz", "tok/test_2016_flickr.lc.norm.tok.de"} <= fetched
    test = load_named("multi30k", "test_2016_flickr", "en", "de", DATA)
    assert DecodeOptions(beam=4, alpha=0.6) == LANGUAGE_DECODING
    hyps = Translator.load(result.out_dir).translate(test.src[:12], LANGUAGE_DECODING)
    want = sacrebleu.corpus_bleu(hyps, [test.tgt[:12]], lowercase=True).score
    assert result.bleu == pytest.approx(want)
    assert [e[1] for e in result.examples] == hyps[:8]
    assert {p.name for p in result.figures} >= {"attention.json", "cross_layer1_heads.png"}
    with pytest.raises(ValueError, match="leaves no time to train"):
        run_language_demo(tmp_path / "n", DATA, minutes=1)
