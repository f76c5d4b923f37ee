"""`qkv translate` and `qkv evaluate` on a tiny random model directory, in-process (and once as a process)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qkv import Transformer, TransformerConfig
from qkv.apps.cli import main
from qkv.apps.commands.translate_command import RESTART_LINES
from qkv.apps.evaluate import tokenize_lowercase
from qkv.apps.translator import Translator
from qkv.data.tokenizer import SubwordTokenizer
from qkv.decode.options import DecodeOptions
from qkv.modeldir import save_model_dir
from qkv.runtime.process import tcmalloc_library
from qkv.runtime.runtime_options import RuntimeOptions
from sentences import EN, ZH  # tests/sentences.py

FAST = ["--beam", "2", "--max-len-a", "0.5", "--max-len-b", "4"]  # short outputs keep the tests fast
FAST_OPTIONS = DecodeOptions(beam=2, max_len_a=0.5, max_len_b=4)  # the same, in Python


def set_stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))


def test_translate_keeps_one_line_per_line(model_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    lines = [EN[0], "", ZH[1], "   ", " ".join(EN) * 40, ZH[2] + "\r", ""]  # a long line; a CRLF line; an empty last
    set_stdin(monkeypatch, "\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="1 of 7 input lines are longer than 1023 subword tokens"):
        assert main(["translate", "--model", str(model_dir), *FAST]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n")
    outputs = out[:-1].split("\n")
    assert len(outputs) == len(lines)
    assert outputs[1] == outputs[3] == outputs[6] == "" and all(outputs[i] for i in (0, 2, 4, 5))
    with pytest.warns(UserWarning):
        expected = Translator.load(model_dir).translate([line.removesuffix("\r") for line in lines],
                                                        FAST_OPTIONS)
    assert outputs == [e.replace("\n", " ").replace("\r", " ") for e in expected]


def test_translate_split_sentences_and_html(model_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--split sentences: each line's sentences translated and the line written back with its own
    spacing; --format html: the document's text translated, its markup kept."""
    t = Translator.load(model_dir).translate(EN[:3], FAST_OPTIONS)
    set_stdin(monkeypatch, f"{EN[0]}  {EN[1]}\n\n{EN[2]}\n")
    assert main(["translate", "--model", str(model_dir), *FAST, "--split", "sentences"]) == 0
    assert capsys.readouterr().out == f"{t[0]}  {t[1]}\n\n{t[2]}\n"
    set_stdin(monkeypatch, f'<p class="x">{EN[0]} <b>{EN[1]}</b></p>\n<pre>{EN[2]}</pre>\n')
    assert main(["translate", "--model", str(model_dir), *FAST, "--format", "html"]) == 0
    assert capsys.readouterr().out == f'<p class="x">{t[0]} <b>{t[1]}</b></p>\n<pre>{EN[2]}</pre>\n'
    set_stdin(monkeypatch, "a\n")
    assert main(["translate", "--model", str(model_dir), "--split", "sentences", "--nbest", "2"]) == 2
    assert "use --split lines" in capsys.readouterr().err


def test_translate_html_of_10000_nested_elements(model_dir: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Nesting far past Python's recursion limit (1,000) is read, translated and written back."""
    [t] = Translator.load(model_dir).translate([EN[0]], FAST_OPTIONS)
    (tmp_path / "deep.html").write_text("<div>" * 10_000 + EN[0] + "</div>" * 10_000 + "\n")
    args = ["translate", "--model", str(model_dir), *FAST, "--format", "html"]
    assert main([*args, "--input", str(tmp_path / "deep.html")]) == 0
    assert capsys.readouterr().out == "<div>" * 10_000 + t + "</div>" * 10_000 + "\n"


def test_translate_input_file_nbest(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text(f"{ZH[0]}\n\n{EN[1]}\n", encoding="utf-8")
    args = ["translate", "--model", str(model_dir), "--input", str(tmp_path / "in.txt"), *FAST]
    assert main([*args, "--nbest", "2"]) == 0
    rows = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 1, 2, 2]  # the empty line has one (empty) hypothesis
    assert float(rows[0][2]) >= float(rows[1][2]) and rows[2][1:] == ["", "0.0000"]
    assert main([*args, "--sample", "--top-k", "5", "--seed", "1"]) == 0
    assert len(capsys.readouterr().out.split("\n")) == 4
    assert main([*args, "--nbest", "3"]) == 2  # nbest > beam: a user error, one line
    assert "nbest=3" in capsys.readouterr().err


def test_translate_quantize_int8(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text("\n".join(EN[:3]) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(model_dir), "--input", str(tmp_path / "in.txt"), "--quantize", "int8",
                 *FAST]) == 0
    expected = Translator.load(model_dir, RuntimeOptions(quantize="int8")).translate(EN[:3], FAST_OPTIONS)
    assert capsys.readouterr().out.splitlines() == expected
    with pytest.raises(ValueError, match="choose from"):
        RuntimeOptions(quantize="int4")


def test_translate_with_an_ensemble(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--model A --model B` decodes with the two models' averaged probabilities (what `Translator.load([A, B])`
    gives, with other scores than A alone); models with different tokenizers are refused."""
    tokenizer = SubwordTokenizer.load(model_dir)
    torch.manual_seed(1)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=tokenizer.src_vocab_size, d_model=48, n_heads=4,
                                   dropout=0.0, attention_dropout=0.0)
    other = save_model_dir(tmp_path / "other", Transformer(cfg), tokenizer)
    (tmp_path / "in.txt").write_text("\n".join(EN[:4]) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(model_dir), "--model", str(other), "--input", str(tmp_path / "in.txt"),
                 *FAST]) == 0
    out = capsys.readouterr().out.splitlines()
    ensemble = Translator.load([model_dir, other]).translate_detailed(EN[:4], FAST_OPTIONS)
    alone = Translator.load(model_dir).translate_detailed(EN[:4], FAST_OPTIONS)
    assert out == [t.text for t in ensemble]
    assert [t.score for t in ensemble] != pytest.approx([t.score for t in alone])  # B's probabilities count
    with pytest.raises(ValueError, match="attention weights come from one model"):
        Translator.load([model_dir, other]).translate_detailed(EN[:1], attention=True)
    stranger = tmp_path / "stranger"
    save_model_dir(stranger, Transformer(cfg.replace(src_vocab_size=400)),
                   SubwordTokenizer.train(EN, EN, stranger, vocab_size=400))
    with pytest.raises(ValueError, match="different tokenizers"):
        Translator.load([model_dir, stranger])


def test_translate_as_a_process_reads_and_writes_utf8(model_dir: Path) -> None:
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    env.pop("PYTHONIOENCODING", None)
    text = f"{ZH[3]}\n\n{EN[2]}\n"
    run = subprocess.run([sys.executable, "-m", "qkv", "translate", "--model", str(model_dir), *FAST],
                         input=text.encode("utf-8"), capture_output=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr.decode()
    outputs = run.stdout.decode("utf-8").split("\n")
    assert len(outputs) == 4 and outputs[1] == outputs[3] == "" and outputs[0]
    assert "translated 3 lines" in run.stderr.decode()


def test_a_long_file_restarts_translate_with_tcmalloc_and_a_short_input_does_not(
    model_dir: Path, tmp_path: Path
) -> None:
    """On the CPU, --input of RESTART_LINES lines restarts `qkv translate` with tcmalloc where it
    is installed (it says so); the translations are those of the same lines through stdin."""
    env = {k: v for k, v in os.environ.items() if k not in ("QKV_RESTARTED_WITH", "LD_PRELOAD")}
    path = tmp_path / "long.txt"
    path.write_text("\n".join([EN[2], *[""] * (RESTART_LINES - 2), ZH[3]]) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "qkv", "translate", "--model", str(model_dir), *FAST]
    long = subprocess.run(
        [*command, "--input", str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert long.returncode == 0, long.stderr
    assert ("allocator: tcmalloc" in long.stderr) == (tcmalloc_library() is not None)
    outputs = long.stdout.split("\n")
    short = subprocess.run(
        command, input=f"{EN[2]}\n{ZH[3]}\n", capture_output=True, text=True, env=env, timeout=120
    )
    assert short.returncode == 0 and "allocator" not in short.stderr
    assert [outputs[0], outputs[RESTART_LINES - 1]] == short.stdout.splitlines()
    assert f"translated {RESTART_LINES} lines" in long.stderr


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_the_translating_commands_turn_cudnn_attention_off(
    command: str, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuDNN's attention builds a graph per shape on CUDA (bf16 decoding 2.5-10x slower)."""
    calls = []
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", calls.append)
    (tmp_path / "src.en").write_text(EN[0] + "\n", encoding="utf-8")
    files = {"translate": ["--input"], "evaluate": ["--ref", str(tmp_path / "src.en"), "--src"]}
    assert main([command, "--model", str(model_dir), *files[command], str(tmp_path / "src.en"),
                 *FAST]) == 0
    assert calls == [False]


def test_evaluate_files(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "src.zh").write_text("\n".join(ZH[:4]) + "\n", encoding="utf-8")
    (tmp_path / "ref.en").write_text("\n".join(EN[:4]) + "\n", encoding="utf-8")
    (tmp_path / "ref.tok.en").write_text("\n".join(tokenize_lowercase(s, "en") for s in EN[:4]) + "\n")
    args = ["evaluate", "--model", str(model_dir), "--src", str(tmp_path / "src.zh"), "--ref", str(tmp_path / "ref.en")]
    assert main([*args, *FAST, "--output", str(tmp_path / "hyp.en")]) == 0
    out = capsys.readouterr().out
    assert "BLEU|nrefs:1|case:mixed|eff:no|tok:13a" in out and "chrF2|" in out and "tokenized" not in out
    assert len((tmp_path / "hyp.en").read_text(encoding="utf-8").split("\n")) == 5
    assert main([*args, *FAST, "--tok-ref", str(tmp_path / "ref.tok.en"), "--lang", "en"]) == 0
    assert "tok:none" in capsys.readouterr().out
    assert main([*args, *FAST, "--tok-ref", str(tmp_path / "ref.tok.en")]) == 2  # which Moses language?
    assert "--lang" in capsys.readouterr().err
    (tmp_path / "ref.en").write_text("one line\n")
    assert main([*args, *FAST]) == 2
    assert "4 lines" in capsys.readouterr().err


def test_evaluate_a_named_corpus_finds_the_tokenized_references(model_dir: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "multi30k"
    (root / "tok").mkdir(parents=True)
    for lang, lines in (("en", EN[:3]), ("de", ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen.", "Eine Frau singt."])):
        with gzip.open(root / f"test_2016_flickr.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        (root / "tok" / f"test_2016_flickr.lc.norm.tok.{lang}").write_text(
            "\n".join(tokenize_lowercase(s, lang) for s in lines) + "\n", encoding="utf-8")
    args = ["evaluate", "--model", str(model_dir), "--corpus", "multi30k", "--pair", "en-de",
            "--data-dir", str(tmp_path)]
    assert main([*args, *FAST]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[0].startswith("BLEU|") and "tok:none" in out[2] and "Moses" in out[2]
    assert main([*args[:-2], "--data-dir", str(tmp_path / "elsewhere"), *FAST]) == 2
    assert "not found" in capsys.readouterr().err


def test_evaluate_scores_a_lowercase_model_case_insensitively(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A model whose tokenizer lowercases writes lowercase: `evaluate` scores it as sacreBLEU does with
    lowercase=True against the same hypotheses (written with --output)."""
    from qkv.apps.evaluate import bleu, chrf

    directory = tmp_path / "lc"
    tokenizer = SubwordTokenizer.train(EN, ZH, directory, vocab_size=500, lowercase=True)
    torch.manual_seed(0)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=tokenizer.src_vocab_size, dropout=0.0, attention_dropout=0.0)
    save_model_dir(directory, Transformer(cfg), tokenizer)
    refs = [s.upper() for s in EN[:4]]
    (tmp_path / "src.zh").write_text("\n".join(ZH[:4]) + "\n", encoding="utf-8")
    (tmp_path / "ref.en").write_text("\n".join(refs) + "\n", encoding="utf-8")
    assert main(["evaluate", "--model", str(directory), "--src", str(tmp_path / "src.zh"), "--ref",
                 str(tmp_path / "ref.en"), "--output", str(tmp_path / "hyp.en"), *FAST]) == 0
    out = capsys.readouterr().out
    hyps = (tmp_path / "hyp.en").read_text(encoding="utf-8").split("\n")[:4]
    lowered = [r.lower() for r in refs]
    expected_bleu, expected_chrf = bleu(hyps, lowered, "en")[0], chrf(hyps, lowered)[0]
    assert "BLEU|nrefs:1|case:lc" in out and "chrF2|nrefs:1|case:lc" in out
    assert f"= {expected_bleu.score:.2f}" in out and f"= {expected_chrf.score:.2f}" in out


@pytest.mark.slow
def test_translate_with_a_captured_step_gives_the_same_translations(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--capture: the decoder's step compiled (runtime.captured); the same lines out, and the
    decoding path on stderr says so. Greedy: two compiled programs (the batch, and the one row
    left when the others end); beams compile their own (tests/runtime/test_captured.py)."""
    lines = [EN[0], ZH[1], f"{EN[2]} {EN[3]}"]
    set_stdin(monkeypatch, "\n".join(lines) + "\n")
    greedy = ["--beam", "1", *FAST[2:]]
    assert main(["translate", "--model", str(model_dir), *greedy, "--capture"]) == 0
    out, err = capsys.readouterr()
    assert "the decoding step captured" in err
    options = dataclasses.replace(FAST_OPTIONS, beam=1)
    assert out.splitlines() == Translator.load(model_dir).translate(lines, options)
