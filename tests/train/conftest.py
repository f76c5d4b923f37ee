"""A tiny, fast training recipe on the synthetic corpus, shared by the training tests."""

from __future__ import annotations

from typing import Any

import pytest

from qkv.train import TrainConfig, load_train_config


def tiny_recipe(**overrides: Any) -> TrainConfig:
    base: dict[str, Any] = {
        "corpus": "synthetic", "synthetic_train": 400, "synthetic_valid": 20, "synthetic_max_value": 9999,
        "preset": "tiny", "model": {"d_model": 32, "d_ff": 64, "n_heads": 2},
        "vocab_size": 60, "max_tokens": 400, "warmup": 10, "lr": 3e-3, "schedule": "inverse_sqrt",
        "valid_every": 3, "log_every": 1, "valid_bleu": False, "valid_metric": "loss", "tensorboard": False,
        "threads": 1, "max_steps": 6,
    }
    model = {**base.pop("model"), **overrides.pop("model", {})}
    return load_train_config(None, {**base, **overrides, "model": model})


@pytest.fixture
def recipe() -> Any:
    return tiny_recipe
