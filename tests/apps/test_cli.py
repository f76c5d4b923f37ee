"""The command line, run in-process."""

from __future__ import annotations

import re

import pytest

from qkv.apps.cli import main


def test_params_prints_paper_sized_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["params", "--preset", "base", "--vocab", "37000"]) == 0
    printed = int(re.search(r"([\d,]+) parameters", capsys.readouterr().out).group(1).replace(",", ""))
    assert abs(printed - 65e6) / 65e6 < 0.05  # the paper's Table 3: 65M for base
