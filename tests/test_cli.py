"""The command line, run in-process."""

from __future__ import annotations

import pytest

from qkv.cli import main


def test_params_prints_paper_sized_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["params", "--preset", "base", "--vocab", "37000"]) == 0
    out = capsys.readouterr().out
    assert "63,082,496 parameters" in out  # within 3% of the paper's 65M (tests/model checks the formula)
