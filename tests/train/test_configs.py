"""Every recipe in configs/ loads, validates, and builds the model it describes."""

from __future__ import annotations

from pathlib import Path

import pytest

from qkv.model import count_parameters
from qkv.train import load_train_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_recipe_loads(path: Path) -> None:
    files = {"train_src": "a.txt", "train_tgt": "b.txt"}
    cfg = load_train_config(path, {} if "corpus" in path.read_text() else files)
    model_cfg = cfg.model_config(cfg.vocab_size, cfg.vocab_size)
    assert count_parameters(model_cfg) > 0


def test_paper_recipes_are_the_paper() -> None:
    files = {"train_src": "a.txt", "train_tgt": "b.txt"}
    base = load_train_config(CONFIGS[0].parent / "base.yaml", files)
    m = base.model_config(37000, 37000)
    assert (m.d_model, m.n_heads, m.d_ff, m.dropout, base.warmup, base.schedule) == (512, 8, 2048, 0.1, 4000, "noam")
    assert base.adam_betas == (0.9, 0.98) and base.adam_eps == 1e-9 and base.label_smoothing == 0.1
