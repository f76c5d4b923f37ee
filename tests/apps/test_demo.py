"""`qkv demo`: the README's main job. The suite checks accuracy on a shorter run of the same pipeline; the
full demo's time and accuracy are reported in the README (measured, not asserted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qkv.apps.cli import main
from qkv.apps.demo import DemoResult
from qkv.apps.translator import Translator


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
