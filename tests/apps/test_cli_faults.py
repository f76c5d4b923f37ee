"""Bad input and faults at `qkv translate` and `qkv evaluate` give one clear line (exit 2), never
a traceback; output is written as it is made, so that an interrupted run keeps its finished lines.

In-process through `main([...])`, except where a real pipe or a full device is the point.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qkv.apps.cli import main
from qkv.apps.translator import Translator
from qkv.data.tokenizer import SubwordTokenizer
from qkv.decode.options import DecodeOptions
from sentences import EN, ZH  # tests/sentences.py

FAST = ["--beam", "2", "--max-len-a", "0.5", "--max-len-b", "4"]  # short outputs keep the tests fast
FAST_OPTIONS = DecodeOptions(beam=2, max_len_a=0.5, max_len_b=4)
BOM = "\ufeff"


def without_path_line(err: str) -> str:
    """stderr without the line that says which decoding path was chosen (qkv.runtime.choice)."""
    return "".join(line for line in err.splitlines(True) if not line.startswith("decoding path: "))


def one_error_line(err: str, command: str = "translate") -> str:
    """The one line of a user error; fails on a traceback or on more than one line."""
    err = without_path_line(err)
    assert "Traceback" not in err, err
    assert err.startswith(f"qkv {command}: error: ") and err.count("\n") == 1, err
    return err


def run(argv: list[str]) -> int | str:
    """main(argv), or "interrupted" where a KeyboardInterrupt escapes it, so that a
    failing check does not stop the test session."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        return "interrupted"


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


def refuse_to_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any model load fail the test: the check under test must come first."""
    def load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the bad argument was refused")
    monkeypatch.setattr(Translator, "load", load)


# --- 6. output as it is made -------------------------------------------------------------------------------------
def test_ctrl_c_keeps_the_translations_already_written(model_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Each chunk's lines are written, in input order, as soon as they are done: Ctrl-C during a later chunk
    leaves them on stdout, says how many were written, and exits 130 without a
    traceback."""
    lines = [*EN, *ZH]
    source = write(tmp_path / "in.txt", lines)
    args = ["translate", "--model", str(model_dir), "--input", source, *FAST, "--batch-tokens", "8"]
    calls = []
    search = Translator._run_search

    def interrupted_search(self: Translator, batch: object) -> object:
        calls.append(1)
        if len(calls) == 8:  # a line alone per batch (each is longer than 8 tokens): the 8th line's batch
            raise KeyboardInterrupt
        return search(self, batch)

    monkeypatch.setattr(Translator, "_run_search", interrupted_search)
    assert run(args) == 130
    captured = capsys.readouterr()
    written = captured.out.splitlines()
    assert 0 < len(written) < 8  # the chunks before the interrupted one
    expected = Translator.load(model_dir).translate(lines, FAST_OPTIONS)
    assert written == expected[: len(written)]
    assert captured.err.splitlines()[-1] == (
        f"qkv translate: interrupted ({len(written)} of {len(lines)} translations written to standard output)")
    assert "Traceback" not in captured.err


def test_evaluate_checks_its_output_path_before_loading_the_model(model_dir: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    src = write(tmp_path / "src.en", EN[:3])
    ref = write(tmp_path / "ref.en", EN[:3])
    args = ["evaluate", "--model", str(model_dir), "--src", src, "--ref", ref, *FAST, "--output"]
    refuse_to_load(monkeypatch)
    for output, message in ((tmp_path / "no" / "such" / "dir" / "hyp", "there is no folder"),
                            (tmp_path, "is a directory"), (Path(ref), "is an input file")):
        assert run([*args, str(output)]) == 2
        assert message in one_error_line(capsys.readouterr().err, "evaluate")
    assert (tmp_path / "ref.en").read_text(encoding="utf-8") == "".join(f"{s}\n" for s in EN[:3])  # untouched
    assert not (tmp_path / "no").exists()


def test_evaluate_streams_its_output_file(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--output gets each translation as it is made (the file is there, complete, after the run); an existing
    file is replaced only once decoding starts."""
    src = write(tmp_path / "src.en", EN[:4])
    ref = write(tmp_path / "ref.en", EN[:4])
    hyp = tmp_path / "hyp.en"
    assert main(["evaluate", "--model", str(model_dir), "--src", src, "--ref", ref, *FAST, "--output", str(hyp),
                 "--batch-tokens", "8"]) == 0
    assert hyp.read_text(encoding="utf-8").splitlines() == Translator.load(model_dir).translate(EN[:4], FAST_OPTIONS)
    assert "BLEU|" in capsys.readouterr().out
    if os.path.exists("/dev/full"):  # a full disk: one line, no scores
        assert run(["evaluate", "--model", str(model_dir), "--src", src, "--ref", ref, *FAST, "--output",
                    "/dev/full"]) == 2
        captured = capsys.readouterr()
        assert "cannot write to /dev/full: No space left on device" in one_error_line(captured.err, "evaluate")
        assert "BLEU" not in captured.out


# --- 10. a byte order mark ---------------------------------------------------------------------------------------
def test_a_byte_order_mark_is_dropped_from_every_input(model_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    lines = [EN[0], ZH[1]]
    tokenizer = SubwordTokenizer.load(model_dir)
    assert tokenizer.encode_src([BOM + lines[0]]) != tokenizer.encode_src(lines[:1])  # a BOM changes the source
    expected = Translator.load(model_dir).translate(lines, FAST_OPTIONS)
    plain = ["translate", "--model", str(model_dir), *FAST]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(("\n".join([BOM + lines[0], lines[1]]) + "\n")
                                                                  .encode("utf-8")), encoding="utf-8"))
    assert main(plain) == 0
    assert capsys.readouterr().out.splitlines() == expected
    source = write(tmp_path / "bom.txt", [BOM + lines[0], lines[1]])
    assert main([*plain, "--input", source]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    # evaluate: a BOM in the sources and in the references changes neither the translations nor the scores
    ref = write(tmp_path / "ref.en", EN[:2])
    evaluate = ["evaluate", "--model", str(model_dir), *FAST]
    assert main([*evaluate, "--src", write(tmp_path / "src.txt", lines), "--ref", ref]) == 0
    without_bom = capsys.readouterr().out
    bom_ref = write(tmp_path / "bom_ref.en", [BOM + EN[0], EN[1]])
    assert main([*evaluate, "--src", source, "--ref", bom_ref, "--output", str(tmp_path / "hyp")]) == 0
    assert capsys.readouterr().out == without_bom
    assert (tmp_path / "hyp").read_text(encoding="utf-8").splitlines() == expected


# --- 13. empty input, broken model directories -------------------------------------------------------------------
def test_evaluate_with_empty_files_is_one_line(model_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    empty = write(tmp_path / "empty", [])
    assert run(["evaluate", "--model", str(model_dir), "--src", empty, "--ref", empty, *FAST]) == 2
    assert "no sentences to evaluate" in one_error_line(capsys.readouterr().err, "evaluate")


def test_translator_load_of_no_directory_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="no model directory given"):
        Translator.load([])


def _broken(model_dir: Path, tmp_path: Path, name: str) -> Path:
    """A copy of the model directory with one fault."""
    broken = tmp_path / name
    shutil.copytree(model_dir, broken)
    if name == "no-tokenizer-json":
        (broken / "tokenizer.json").unlink()
    elif name == "no-spm-model":
        (broken / "spm.model").unlink()
    elif name == "garbage-spm-model":
        (broken / "spm.model").write_bytes(b"not a sentencepiece model")
    elif name == "truncated-spm-model":
        data = (broken / "spm.model").read_bytes()
        (broken / "spm.model").write_bytes(data[: len(data) // 2])
    elif name == "tokenizer-json-without-joint":
        (broken / "tokenizer.json").write_text('{"model_type": "unigram"}')
    elif name == "truncated-tokenizer-json":
        (broken / "tokenizer.json").write_text('{"joint": tr')
    elif name == "no-config":
        (broken / "config.json").unlink()
    elif name == "not-a-directory":
        shutil.rmtree(broken)
        broken.write_text("a file\n")
    elif name == "absent":
        shutil.rmtree(broken)
    return broken


@pytest.mark.parametrize("fault", ["no-tokenizer-json", "no-spm-model", "garbage-spm-model", "truncated-spm-model",
                                   "tokenizer-json-without-joint", "truncated-tokenizer-json", "no-config",
                                   "not-a-directory", "absent"])
def test_a_broken_model_directory_is_one_line(model_dir: Path, tmp_path: Path, fault: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    broken = _broken(model_dir, tmp_path, fault)
    source = write(tmp_path / "in.txt", EN[:1])
    assert run(["translate", "--model", str(broken), "--input", source, *FAST]) == 2
    assert str(broken) in one_error_line(capsys.readouterr().err)  # names the directory (or its file)


# --- 9. beam and vocabulary --------------------------------------------------------------------------------------
def test_a_beam_beyond_the_vocabulary_is_refused_naming_its_size(model_dir: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`--beam 100000` tried to allocate 480 GB on a 414-token model; now it is refused before decoding."""
    vocab = Translator.load(model_dir).target_vocab_size
    source = write(tmp_path / "in.txt", EN[:2])
    assert run(["translate", "--model", str(model_dir), "--input", source, "--beam", "100000"]) == 2
    err = one_error_line(capsys.readouterr().err)
    assert f"beam 100000 is larger than the model's target vocabulary of {vocab} tokens" in err


# --- 14. devices, input and output faults ------------------------------------------------------------------------
@pytest.mark.parametrize("device, message", [
    ("bogus", "unknown device 'bogus'"),
    ("cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count()}", "cuda"),
    ("cuda:-1", "device"),
    ("meta", "holds no data"),
])
def test_an_unusable_device_is_one_line_before_any_work(tmp_path: Path, device: str, message: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    refuse_to_load(monkeypatch)
    absent = str(tmp_path / "absent")  # reading it would fail differently
    for command in (["translate", "--input", absent], ["evaluate", "--src", absent, "--ref", absent]):
        assert run([*command, "--model", absent, "--device", device]) == 2
        err = one_error_line(capsys.readouterr().err, command[0])
        assert message in err and "absent" not in err


def test_bad_input_paths_and_a_closed_stdin_are_one_line(model_dir: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    refuse_to_load(monkeypatch)
    translate = ["translate", "--model", str(model_dir), *FAST]
    for path, message in ((tmp_path, "is a directory"), (tmp_path / "absent.txt", "not found")):
        assert run([*translate, "--input", str(path)]) == 2
        assert message in one_error_line(capsys.readouterr().err)
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
    assert run([*translate, "--input", str(tmp_path / "latin1.txt")]) == 2
    assert "invalid UTF-8" in one_error_line(capsys.readouterr().err)
    monkeypatch.setattr(sys, "stdin", None)  # `qkv translate <&-`
    assert run(translate) == 2
    assert "standard input is closed" in one_error_line(capsys.readouterr().err)


def test_a_closed_or_full_stdout_is_one_line(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    source = write(tmp_path / "in.txt", EN[:2])
    args = ["translate", "--model", str(model_dir), "--input", source, *FAST]

    class Full(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, data: object) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(Full(), buffer_size=4), encoding="utf-8"))
    assert run(args) == 2
    assert "cannot write to standard output: No space left on device" in one_error_line(capsys.readouterr().err)
    monkeypatch.setattr(sys, "stdout", None)  # `qkv translate >&-`: checked before the model loads
    refuse_to_load(monkeypatch)
    assert run(args) == 2
    assert "standard output is closed" in one_error_line(capsys.readouterr().err)


def _run_process(model_dir: Path, tmp_path: Path, stdout: int) -> subprocess.CompletedProcess[bytes]:
    source = write(tmp_path / "in.txt", [*EN, *ZH])
    return subprocess.run([sys.executable, "-m", "qkv", "translate", "--model", str(model_dir), "--input", source,
                           *FAST], stdout=stdout, stderr=subprocess.PIPE, timeout=120)


def test_a_closed_pipe_stops_quietly_as_unix_tools_do(model_dir: Path, tmp_path: Path) -> None:
    """`qkv translate ... | head -1` once head has exited: no traceback, no "Exception ignored", and the
    exit status of a process ended by SIGPIPE (128 + 13)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line
    try:
        done = _run_process(model_dir, tmp_path, write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and without_path_line(done.stderr.decode()) == "", done.stderr.decode()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_device_is_one_line_as_a_process(model_dir: Path, tmp_path: Path) -> None:
    """`qkv translate ... > /dev/full`: one line and exit 2, with nothing more at the interpreter's exit."""
    with open("/dev/full", "wb") as full:
        done = _run_process(model_dir, tmp_path, full.fileno())
    assert done.returncode == 2
    err = without_path_line(done.stderr.decode())
    assert err == "qkv translate: error: cannot write to standard output: No space left on device\n"


def test_evaluate_downloads_a_missing_named_split_when_asked(model_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The missing-data message offers --download, and `qkv evaluate` has it."""
    from qkv.data import named

    argv = ["evaluate", "--model", str(model_dir), "--corpus", "multi30k", "--pair", "en-de",
            "--split", "val", "--data-dir", str(tmp_path), *FAST]
    assert run(argv) == 2
    assert "--download" in one_error_line(capsys.readouterr().err, "evaluate")
    fetched = []

    def fake_download(url: str, dest: Path, sha256: str) -> Path:  # the network, replaced
        fetched.append(Path(dest).relative_to(tmp_path).as_posix())
        lines = EN[:2] if "tok/" in url or ".en" in url else ["Ein Hund.", "Eine Katze."]
        data = "".join(f"{line}\n" for line in lines).encode()
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        Path(dest).write_bytes(gzip.compress(data) if str(dest).endswith(".gz") else data)
        return Path(dest)

    monkeypatch.setattr(named, "download", fake_download)
    assert run([*argv, "--download"]) == 0
    assert fetched == ["multi30k/val.en.gz", "multi30k/val.de.gz", "multi30k/tok/val.lc.norm.tok.de"]
    assert "BLEU" in capsys.readouterr().out
