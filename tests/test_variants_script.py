"""benchmarks/variants.py runs a table end to end at a tiny budget: the trainer, the translator and
the markdown table it prints (the real runs take up to ~2 CPU hours per table)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_heads_table_runs_at_two_updates(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "variants.py"), "heads", "--steps", "2",
         "--n-test", "4", "--threads", "1", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0] == "### heads" and any(line.startswith("machine: ") for line in lines)
    assert "2 updates per variant (equal updates)" in run.stdout
    rows = [line for line in lines if line.startswith("| synthetic |")]
    assert [row.split(" | ")[1] for row in rows] == ["1-heads", "2-heads", "4-heads", "8-heads"]
    saved = json.loads((tmp_path / "heads.json").read_text())
    assert [r["steps"] for r in saved] == [2] * 4
    assert len({r["params"] for r in saved}) == 1  # equal parameters for any number of heads
