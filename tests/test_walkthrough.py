"""docs/walkthrough.md is what its code prints (regenerated here and compared), and a model the
page cannot show is refused in one line (`qkv explain` on a model directory: tests/apps/test_trace.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from qkv import Transformer, TransformerConfig
from qkv.apps.explain import walkthrough

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_committed_walkthrough_is_what_the_code_prints() -> None:
    spec = importlib.util.spec_from_file_location("walkthrough_page", DOCS / "walkthrough.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.render() == (DOCS / "walkthrough.md").read_text(encoding="utf-8")


def test_a_model_the_page_cannot_show_is_refused() -> None:
    cfg = TransformerConfig.preset("tiny", src_vocab_size=20, positional="rope")
    with pytest.raises(ValueError, match=r"scaled dot-product scores \(temperature 1\), sinusoidal"):
        walkthrough(Transformer(cfg), [4, 3], [2, 5], ["w"] * 20, ["w"] * 20)
    hot = TransformerConfig.preset("tiny", src_vocab_size=20, attention_temperature=2.0)
    with pytest.raises(ValueError, match="temperature 1"):
        walkthrough(Transformer(hot), [4, 3], [2, 5], ["w"] * 20, ["w"] * 20)


@pytest.mark.parametrize("norm_first", [False, True])
def test_every_step_equals_the_models_own_modules(norm_first: bool) -> None:
    """The page recomputes each sub-layer by hand; it checks each against the module and the
    logits against `model.decode` (an AssertionError otherwise), post-norm and pre-norm alike."""
    torch.manual_seed(0)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=20, norm_first=norm_first,
                                   dropout=0.0, attention_dropout=0.0)
    lines = walkthrough(Transformer(cfg), [4, 5, 3], [2, 6, 7], ["w"] * 20, ["w"] * 20)
    assert any("Logits" in line for line in lines)
