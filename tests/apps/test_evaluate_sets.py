"""`qkv evaluate` on several test sets in one call: one table, a row per test set.

Oracle: each row holds the scores `qkv.apps.evaluate.score` gives the set's own translations
(Translator.translate) against its references, as `qkv evaluate` of that set alone does.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from qkv.apps.cli import main
from qkv.apps.evaluate import score
from qkv.apps.translator import Translator
from qkv.decode.options import DecodeOptions
from sentences import EN  # tests/sentences.py

FAST = ["--beam", "2", "--max-len-a", "0.5", "--max-len-b", "4"]
FAST_OPTIONS = DecodeOptions(beam=2, max_len_a=0.5, max_len_b=4)


def write(path: Path, lines: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(f"{line}\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return str(path)


def table_rows(out: str) -> dict[str, list[str]]:
    """The rows of the table `qkv evaluate` printed (cells apart by two spaces or more), by test
    set name."""
    lines = out.splitlines()
    assert re.split(r"\s{2,}", lines[0])[:4] == ["test set", "sentences", "BLEU", "chrF2"]
    rows = {}
    for line in lines[1:]:
        if ": " in line:  # the signatures below the table
            break
        name, *cells = re.split(r"\s{2,}", line)
        rows[name] = cells
    return rows


def test_two_test_sets_in_one_call_print_one_table(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    translator = Translator.load(model_dir)
    own = translator.translate(EN[:3], FAST_OPTIONS)
    domain = (write(tmp_path / "domain.en", EN[:3]), write(tmp_path / "domain.ref", own))
    general = (write(tmp_path / "general.en", EN[3:8]), write(tmp_path / "general.ref", EN[3:8]))
    argv = [
        "evaluate",
        "--model",
        str(model_dir),
        *FAST,
        "--src",
        domain[0],
        "--ref",
        domain[1],
        "--src",
        general[0],
        "--ref",
        general[1],
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    mine = score(own, own, "")
    expected = score(translator.translate(EN[3:8], FAST_OPTIONS), EN[3:8], "")
    assert rows == {
        domain[0]: ["3", f"{mine.bleu.score:.2f}", "100.00"],
        general[0]: ["5", f"{expected.bleu.score:.2f}", f"{expected.chrf.score:.2f}"],
    }
    assert rows[general[0]][2] != "100.00"  # a row of its own, not a copy of the first
    assert out.splitlines()[-2] == f"BLEU: {expected.signatures['bleu']}"
    assert out.splitlines()[-1] == f"chrF2: {expected.signatures['chrf']}"
    # one set: sacreBLEU's lines, as before
    assert (
        main(
            ["evaluate", "--model", str(model_dir), *FAST, "--src", general[0], "--ref", general[1]]
        )
        == 0
    )
    alone = capsys.readouterr().out.splitlines()
    assert alone[0] == expected.bleu.format(signature=expected.signatures["bleu"])


def test_files_and_corpus_splits_in_one_table(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files and two splits of a named corpus: a row each, tokenized BLEU where the split has
    official tokenized references ("-" elsewhere)."""
    data = tmp_path / "data"
    write(data / "multi30k" / "val.en.gz", EN[:2])
    write(data / "multi30k" / "val.de.gz", EN[:2])
    write(data / "multi30k" / "test_2016_flickr.en.gz", EN[2:5])
    write(data / "multi30k" / "test_2016_flickr.de.gz", EN[2:5])
    write(data / "multi30k" / "tok" / "test_2016_flickr.lc.norm.tok.de", EN[2:5])
    src, ref = write(tmp_path / "mine.en", EN[5:7]), write(tmp_path / "mine.de", EN[5:7])
    argv = [
        "evaluate",
        "--model",
        str(model_dir),
        *FAST,
        "--src",
        src,
        "--ref",
        ref,
        "--corpus",
        "multi30k",
        "--pair",
        "en-de",
        "--data-dir",
        str(data),
        "--split",
        "val",
        "--split",
        "test_2016_flickr",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert list(rows) == [src, "multi30k val", "multi30k test_2016_flickr"]
    assert [row[0] for row in rows.values()] == ["2", "2", "3"]
    assert rows[src][3] == "-" and rows["multi30k val"][3] == "-"
    assert rows["multi30k test_2016_flickr"][3] != "-"
    assert out.splitlines()[-1].startswith("tok BLEU: ")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--src", "{a}"], "give one --ref for each --src: 2 --src, 1 --ref"),
        (["--src", "{a}", "--ref", "{a}", "--output", "{out}"], "--output takes one test set"),
        (
            ["--src", "{a}", "--ref", "{a}", "--tok-ref", "{a}", "--lang", "en"],
            "--tok-ref goes with one test set, not 2",
        ),
    ],
)
def test_several_test_sets_refuse_what_takes_one_in_one_line(
    model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    message: str,
) -> None:
    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model is loaded after the checks")

    monkeypatch.setattr(Translator, "load", no_load)
    a = write(tmp_path / "a.en", EN[:2])
    extra = [arg.format(a=a, out=tmp_path / "hyp") for arg in extra]
    assert main(["evaluate", "--model", str(model_dir), "--src", a, "--ref", a, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("qkv evaluate: error: ") and err.count("\n") == 1, err
    assert message in err
    assert not (tmp_path / "hyp").exists()
