"""The demo reports exact-match accuracy per digit count (1 to 6 digits), and
short numbers are tested at all (every 1- and 2-digit number)."""

from __future__ import annotations

from pathlib import Path

import pytest

import qkv.apps.demo as demo
from qkv.apps.cli import main


def test_run_demo_reports_accuracy_per_digit_count_over_all_short_numbers(tmp_path: Path) -> None:
    result = demo.run_demo(
        tmp_path / "demo", steps=4, n_test=40, synthetic_max_value=9999, synthetic_train=400,
        synthetic_valid=20, valid_every=4,
    )
    assert sorted(result.by_digits) == [1, 2, 3, 4]
    assert result.by_digits[1][1] == 10 and result.by_digits[2][1] == 90  # all of them
    assert sum(total for _, total in result.by_digits.values()) == len(result.examples) == 140
    assert {len(src.replace(" ", "")) for src, _, _ in result.examples[:4]} == {1, 2, 3, 4}


def test_demo_command_prints_the_per_digit_table(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    by_digits = {1: (10, 10), 2: (89, 90), 3: (100, 100), 4: (99, 100), 5: (100, 100), 6: (98, 100)}
    fake = demo.DemoResult(tmp_path, 0.99, [("4 0", "forty", "forty")], 1.0, by_digits)
    monkeypatch.setattr(demo, "run_demo", lambda *a, **k: fake)
    assert main(["demo", "--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "1 digit   100.0%  (10/10)" in out
    assert "2 digits   98.9%  (89/90)" in out
    assert "6 digits   98.0%  (98/100)" in out


def test_demo_refuses_a_non_empty_directory_that_is_not_a_run(tmp_path: Path, capsys) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["demo", "--out", str(out), "--steps", "2"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"
