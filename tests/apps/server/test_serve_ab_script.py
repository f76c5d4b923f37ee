"""`python -m benchmarks.serve_ab` end to end on a tiny model, one tree against itself: both servers
answer, the latency pairs and the throughput windows come back as the JSON says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_two_trees_are_served_side_by_side_and_measured_in_pairs(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    command = [sys.executable, "-m", "benchmarks.serve_ab", "--model", str(model_dir),
               "--before", str(ROOT), "--after", str(ROOT), "--requests", "6", "--warmup", "2",
               "--clients", "2", "--windows", "4", "--window-sentences", "6",
               "--json", str(out)]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    latency, throughput = result["latency"], result["throughput"]
    assert latency["requests"] == 6
    low, high = latency["ci95_ms"]
    assert low <= latency["after_minus_before_median_ms"] <= high
    # windows A B B A: two of each, paired in order
    assert len(throughput["before_sentences_per_s"]) == len(throughput["after_sentences_per_s"]) == 2
    assert throughput["pairs"] == 2 and all(r > 0 for r in throughput["after_sentences_per_s"])
    ratios = [b / a for a, b in zip(throughput["before_sentences_per_s"],
                                     throughput["after_sentences_per_s"], strict=True)]  # fmt: skip
    assert throughput["after_over_before_median"] == sum(ratios) / 2
