"""`python -m benchmarks.finetune_speed` runs end to end in its quick mode (a tiny OPUS-MT-shaped model, a few
updates): `qkv train --init_from` and the Hugging Face loop each in their own process, on the same
batches. Oracle: with dropout 0 the first update's loss per token is one function of the same weights
and the same batch, so qkv's (its log.csv) and transformers' (the loop's) agree; a loop given other
batches, or another objective, would not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_quick_run_times_both_on_the_same_batches_and_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "finetune-speed.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.finetune_speed",
            "--quick",
            "--corpus",
            "synthetic",
            "--dropout",
            "0",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| qkv train --init_from |" in run.stdout and "|  HF transformers loop |" in run.stdout
    saved = json.loads(out.read_text())
    assert saved["benchmark"] == "finetune-speed"
    assert saved["machine"]["cpu"] and "cpu_flags" in saved["machine"]
    assert {"python", "torch", "transformers"} <= set(saved["versions"])
    setup, summary = saved["setup"], saved["summary"]
    assert setup["shape"]["vocab"] == 2000 and setup["label_smoothing"] == 0.1
    assert [r["engine"] for r in saved["runs"]] == ["qkv", "hf"]
    for run_ in saved["runs"]:
        assert run_["timed_target_tokens"] == setup["timed_target_tokens"] > 0
        assert run_["tokens_per_second"] > 0 and run_["peak_rss_mb"] > 100  # torch alone is more
        assert len(run_["update_seconds"]) == 3  # 1 warm-up + 2 timed updates
    qkv_loss, hf_loss = (summary[e]["first_update_loss"] for e in ("qkv", "hf"))
    assert qkv_loss == pytest.approx(hf_loss, rel=1e-5)
    assert summary["speedup"] == pytest.approx(
        summary["qkv"]["tokens_per_second"] / summary["hf"]["tokens_per_second"]
    )
    assert set(summary) >= {"qkv_peak_rss_gib", "meets_speedup_target", "meets_rss_target"}
