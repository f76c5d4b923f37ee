"""`qkv attention` (attention.json and the PNG heatmaps), `qkv translate --alignment`, and the plots' fonts."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure

from qkv.apps import plots
from qkv.apps.cli import main
from qkv.apps.translator import Translator
from qkv.decode.alignment import word_index
from qkv.decode.options import DecodeOptions
from sentences import EN, ZH  # tests/sentences.py

FAST = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "6"]  # a random model rarely stops by itself
FAST_OPTIONS = DecodeOptions(beam=1, max_len_a=0, max_len_b=6)
PNG = b"\x89PNG\r\n\x1a\n"


def check_record(record: dict, translation) -> None:
    """The shapes [layer][head][query][key], the rows' sums, and the last layer's head-averaged cross-attention
    against the Translator's."""
    S, T = len(record["source_tokens"]), len(record["target_tokens"])
    assert record["source_tokens"] == translation.source_tokens and record["source_tokens"][-1] == "</s>"
    assert record["target_tokens"] == translation.target_tokens and record["target_tokens"][-1] == "</s>"
    assert record["target_input_tokens"] == ["<s>", *record["target_tokens"][:-1]]
    for kind, (queries, keys) in {"encoder": (S, S), "decoder": (T, T), "cross": (T, S)}.items():
        maps = torch.tensor(record[kind], dtype=torch.float64)  # (L, H, queries, keys)
        assert maps.shape == (2, 4, queries, keys)  # the tiny preset: 2 layers, 4 heads
        torch.testing.assert_close(maps.sum(-1), torch.ones(2, 4, queries, dtype=torch.float64), atol=1e-5, rtol=0)
    decoder = torch.tensor(record["decoder"])
    assert (decoder.triu(diagonal=1) == 0).all()  # position t sees positions <= t only
    cross = torch.tensor(record["cross"], dtype=torch.float32)
    torch.testing.assert_close(cross[-1].mean(0), translation.attention, atol=2e-6, rtol=0)


def test_attention_writes_the_json_and_the_heatmaps(model_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["attention", "--model", str(model_dir), "--out", str(out), *FAST, EN[0]]) == 0
    assert "heatmaps" in capsys.readouterr().out
    record = json.loads((out / "attention.json").read_text(encoding="utf-8"))
    translation = Translator.load(model_dir).translate_detailed([EN[0]], FAST_OPTIONS, attention=True)[0]
    assert record["source"] == EN[0] and record["translation"] == translation.text
    check_record(record, translation)
    names = {p.name for p in out.glob("*.png")}
    assert names == {f"{kind}_{part}.png" for kind in ("cross", "encoder", "decoder")
                     for part in ("layers", "layer1_heads", "layer2_heads")}
    for name in names:
        assert (out / name).read_bytes().startswith(PNG)


def test_several_sentences_give_a_list_and_a_folder_each_and_one_font_warning(
        model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plots, "cjk_font", lambda: None)  # no CJK font: the Chinese tokens are labelled by index
    lines = tmp_path / "in.txt"
    lines.write_text(f"{ZH[0]}\n\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["attention", "--model", str(model_dir), "--out", str(out), "--input", str(lines), *FAST]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warned == [f"qkv attention: warning: {plots.NO_FONT}"]  # once, however many figures
    records = json.loads((out / "attention.json").read_text(encoding="utf-8"))
    translations = Translator.load(model_dir).translate_detailed([ZH[0], ""], FAST_OPTIONS, attention=True)
    assert [r["source"] for r in records] == [ZH[0], ""]
    check_record(records[0], translations[0])
    assert records[1]["source_tokens"] == records[1]["target_tokens"] == records[1]["cross"] == []
    assert len(list((out / "1").glob("*.png"))) == 9
    assert not (out / "2").exists()  # an empty line: nothing to draw


def test_attention_refuses_bad_arguments(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out")
    lines = tmp_path / "in.txt"
    lines.write_text(EN[0] + "\n", encoding="utf-8")
    assert main(["attention", "--model", str(model_dir), "--out", out, "--input", str(lines), EN[1]]) == 2
    assert main(["attention", "--model", str(model_dir), "--out", out]) == 2
    assert main(["attention", "--model", str(model_dir), "--model", str(model_dir), "--out", out, EN[0]]) == 2
    assert main(["attention", "--model", str(model_dir), "--out", str(lines), EN[0]]) == 2  # a file, not a folder
    errors = [e for e in capsys.readouterr().err.splitlines() if not e.startswith("decoding path: ")]
    assert len(errors) == 4 and all(e.startswith("qkv attention: error: ") for e in errors)
    assert "--input FILE" in errors[0] and "--input FILE" in errors[1] and "one model" in errors[2]
    assert "not a folder" in errors[3]


def test_without_a_cjk_font_tokens_are_labelled_by_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plots, "cjk_font", lambda: None)
    fig = Figure()
    ax = fig.subplots()
    with pytest.warns(UserWarning, match="labelled by their indices.*fonts-noto-cjk"):
        plots.heatmap(ax, [[0.5, 0.5], [1.0, 0.0]], ["▁四千", "零"], ["▁a", "b"])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]  # indices, never empty boxes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["▁a", "b"]  # the default font draws these


@pytest.mark.skipif(plots.cjk_font() is None, reason="no CJK font installed (Debian: fonts-noto-cjk)")
def test_with_a_cjk_font_chinese_tokens_are_drawn_as_characters() -> None:
    labels, font = plots.tick_labels(["▁四千", "零", "▁a"])
    assert labels == ["▁四千", "零", "▁a"] and plots.cjk_font() in font["fontfamily"]
    fig = Figure()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns of every glyph missing from the fonts
        plots.heatmap(fig.subplots(), [[1.0, 0.0, 0.0]], labels, ["五"])
        fig.savefig(io.BytesIO(), format="png")


def test_translate_alignment_writes_word_pairs_after_a_tab(model_dir: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    texts = [EN[2], "", ZH[2]]
    lines = tmp_path / "in.txt"
    lines.write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(model_dir), "--input", str(lines), "--alignment", *FAST]) == 0
    out = capsys.readouterr().out.splitlines()
    translations = Translator.load(model_dir).translate_detailed(texts, FAST_OPTIONS, alignment=True)
    assert out == [f"{t.text}\t{' '.join(f'{s}-{j}' for s, j in t.alignment)}" for t in translations]
    assert out[1] == "\t"
    for t in translations:
        if t.target_tokens:  # one link per target word, source words in range
            assert [j for _, j in t.alignment] == list(range(max(word_index(t.target_tokens[:-1])) + 1))
            assert all(0 <= s <= max(word_index(t.source_tokens[:-1])) for s, _ in t.alignment)
    assert main(["translate", "--model", str(model_dir), "--input", str(lines), "--alignment", "--nbest", "2",
                 "--beam", "2"]) == 2
    assert "--nbest 1" in capsys.readouterr().err
