"""A tiny model can memorise 100 real Multi30k pairs: the training loss goes to near zero."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest

from qkv.train import Trainer, load_train_config
from shared_corpora import SHARED_DATA

SHARED = SHARED_DATA


@pytest.mark.slow
@pytest.mark.data
def test_tiny_model_overfits_100_multi30k_pairs(tmp_path: Path) -> None:
    if not (SHARED / "multi30k" / "train.de.gz").is_file():
        pytest.skip(f"Multi30k not found under {SHARED}")
    for lang in ("de", "en"):
        with gzip.open(SHARED / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(100)]
        (tmp_path / f"train.{lang}").write_text("".join(lines), encoding="utf-8")
    cfg = load_train_config(None, {
        "train_src": str(tmp_path / "train.de"), "train_tgt": str(tmp_path / "train.en"),
        "preset": "tiny", "model": {"dropout": 0.0, "attention_dropout": 0.0}, "vocab_size": 400,
        "label_smoothing": 0.0, "max_tokens": 1000, "schedule": "constant", "lr": 3e-3, "warmup": 20,
        "max_steps": 400, "valid_every": 400, "log_every": 25, "tensorboard": False, "threads": 1})
    result = Trainer(cfg, tmp_path / "run").train()
    with open(tmp_path / "run" / "log.csv") as f:
        losses = [float(r["train_loss"]) for r in csv.DictReader(f)]
    assert losses[0] > 3.0  # it started from chance level (log 400 ≈ 6)
    assert losses[-1] < 0.05, losses  # and memorised the pairs: under 0.05 nats per token
    assert result.step == 400
