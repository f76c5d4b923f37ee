"""`qkv attention --out`: a non-empty folder is refused, and --overwrite replaces what an earlier
`qkv attention` wrote there (attention.json and the heatmaps), never the user's other files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from qkv.apps.cli import main
from qkv.apps.commands import attention_command
from sentences import EN  # tests/sentences.py

# a random model rarely stops by itself: a short limit keeps the heatmaps small
FAST = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "3"]


def attention(model_dir: Path, out: Path, *argv: str) -> int:
    return main(["attention", "--model", str(model_dir), "--out", str(out), *FAST, *argv])


def files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_rerun_into_the_same_out_is_refused_or_replaces_only_its_own_files(
    model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    out.mkdir()  # an empty folder is written without --overwrite
    lines = tmp_path / "in.txt"
    lines.write_text(f"{EN[0]}\n{EN[1]}\n", encoding="utf-8")
    assert attention(model_dir, out, "--input", str(lines)) == 0
    assert len(list((out / "2").glob("*.png"))) == 9
    (out / "notes.txt").write_text("mine")
    (out / "1" / "mine.txt").write_text("mine too")
    (out / "3").mkdir()  # a numbered folder of the user's, with a picture of theirs
    (out / "3" / "photo.png").write_bytes(b"mine")
    killed = subprocess.Popen([sys.executable, "-c", ""])  # a run killed while drawing
    killed.wait()
    (out / "2" / f".cross_layers.png.{killed.pid}.tmp").write_bytes(b"half a heatmap")
    before = files(out)
    capsys.readouterr()

    def no_model(*args: object) -> None:
        raise AssertionError("the model loads before --out is checked")

    with monkeypatch.context() as patch:
        patch.setattr(attention_command, "load_translator", no_model)
        assert attention(model_dir, out, EN[2]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"qkv attention: error: --out {out} is not empty")
    assert "--overwrite" in line
    assert files(out) == before

    assert attention(model_dir, out, "--overwrite", EN[2]) == 0
    record = json.loads((out / "attention.json").read_text(encoding="utf-8"))
    assert record["source"] == EN[2]  # one sentence: one object, its PNGs in OUT
    assert len(list(out.glob("*.png"))) == 9
    assert not (out / "2").exists()
    assert sorted(p.name for p in (out / "1").iterdir()) == ["mine.txt"]
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "3" / "photo.png").read_bytes() == b"mine"
    assert not list(out.rglob(".*.tmp"))
