"""The decoding trace: its best finished hypothesis is the translation (text and score), beam 1
traces greedy decoding, the kept hypotheses are candidates of their step, and the printed trace
names what ended with its length-penalised score."""

from __future__ import annotations

from pathlib import Path

import pytest

from qkv.apps.trace import format_trace, trace_translation
from qkv.apps.translator import Translator
from qkv.decode.options import DecodeOptions
from sentences import EN  # tests/sentences.py


@pytest.mark.parametrize("beam", [1, 3])
def test_the_trace_ends_in_the_translation(model_dir: Path, beam: int) -> None:
    translator = Translator.load(model_dir)
    options = DecodeOptions(beam=beam, max_len_b=8, min_len=2)
    steps = trace_translation(translator, EN[0], options)
    [want] = translator.translate_detailed([EN[0]], options)
    finished = [h for s in steps for h in s.ended]
    best = max(finished, key=lambda h: h.score)
    assert translator.tokenizer.decode_tgt([best.tokens])[0] == want.text
    assert best.score == pytest.approx(want.score, abs=1e-5)
    for s in steps:
        assert len(s.kept) <= beam and all(k in s.candidates for k in s.kept)
    text = format_trace(steps, translator, options)
    assert text.count("\nstep ") == len(steps) and "ended  score" in text
    assert f"finished hypotheses, best score first:\n  {best.score:8.3f}" in text


def test_a_traced_search_gives_the_translation_and_maps_of_translate_detailed(
    model_dir: Path,
) -> None:
    """What /v1/explain answers from one search equals `translate_detailed`'s text, score and
    attention maps (each layer's weights, encoder, decoder and cross)."""
    import torch

    from qkv.apps.trace import traced_search

    translator = Translator.load(model_dir)
    options = DecodeOptions(beam=3, max_len_b=8, min_len=2, nbest=1)
    [ids] = translator.encode([EN[1]])
    steps, hyps = traced_search(translator, ids, options)
    got = translator.translation_of(ids, hyps[:1], maps=True)
    [want] = translator.translate_detailed([EN[1]], options, attention_maps=True)
    assert steps and (got.text, got.tokens) == (want.text, want.tokens)
    assert got.score == pytest.approx(want.score, abs=1e-5)
    assert got.target_tokens == want.target_tokens and got.source_tokens == want.source_tokens
    assert got.attention_maps is not None and want.attention_maps is not None
    for kind in ("encoder", "decoder", "cross"):
        for a, b in zip(getattr(got.attention_maps, kind), getattr(want.attention_maps, kind),
                        strict=True):
            torch.testing.assert_close(a, b)
    assert translator.translation_of(ids, hyps[:1]).attention_maps is None


def test_sampling_is_not_traced(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="greedy and beam search"):
        trace_translation(Translator.load(model_dir), EN[0], DecodeOptions(sampling=True, nbest=1))


def test_translate_trace_from_the_command_line(model_dir: Path, tmp_path: Path, capsys) -> None:
    from qkv.apps.cli import main

    (tmp_path / "in.txt").write_text(f"{EN[0]}\n{EN[1]}\n", encoding="utf-8")
    args = ["translate", "--model", str(model_dir), "--input", str(tmp_path / "in.txt"),
            "--beam", "2", "--max-len-b", "6", "--trace"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("source: ") == 2 and out.count("finished hypotheses, best score first:") == 2
    assert main([*args, "--split", "sentences"]) == 2
    assert "--trace shows the search of each line" in capsys.readouterr().err


def test_qkv_explain_prints_every_step(model_dir: Path, tmp_path: Path, capsys) -> None:
    from qkv.apps.cli import main

    assert main(["explain", "--model", str(model_dir), EN[0]]) == 0
    out = capsys.readouterr().out
    steps = [line.split(".")[0] for line in out.splitlines() if line.startswith("## ")]
    assert steps == [f"## {i}" for i in range(1, len(steps) + 1)] and len(steps) >= 12
    assert "softmax: weights" in out and "next token" in out
    assert main(["explain", "--model", str(model_dir), EN[0], "--out", str(tmp_path / "p.md")]) == 0
    assert (tmp_path / "p.md").read_text(encoding="utf-8") == out


@pytest.mark.parametrize("beam", [1, 4])
def test_the_demo_models_trace_ends_in_qkv_translate(short_demo, beam: int, capsys) -> None:
    """On the trained demo model, the trace of `qkv translate --trace --beam N` ends in the
    translation `qkv translate --beam N` writes (docs/decoding.md shows these traces)."""
    from qkv.apps.cli import main
    from qkv.runtime.runtime_options import RuntimeOptions

    model = str(short_demo.out_dir)
    translator = Translator.load(model, RuntimeOptions(precision="fp32", pack=True))
    options = DecodeOptions(beam=beam)
    for number in ("7 0 3 8", "4 0 5 2", "9 1 7"):
        steps = trace_translation(translator, number, options)
        best = max((h for s in steps for h in s.ended), key=lambda h: h.score)
        [want] = translator.translate([number], options)
        assert translator.tokenizer.decode_tgt([best.tokens])[0] == want
    greedy = translator.translate(["4 0 5 2"], DecodeOptions(beam=1))[0]
    assert main(["explain", "--model", model, "4 0 5 2"]) == 0  # the walk-through of it
    assert capsys.readouterr().out.startswith(f"# 4 0 5 2 → {greedy}\n")
