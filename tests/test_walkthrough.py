"""The walk-through (`qkv.apps.walkthrough`): every step equals the model's own modules, every layer
is on the page with one head's matrices in full, and a model the page cannot show is refused in one
line (`qkv explain` on a model directory: tests/apps/test_trace.py; docs/walkthrough.md, made by
docs/learners_path.py: tests/apps/test_learners_path.py)."""

from __future__ import annotations

import pytest
import torch

from qkv import Transformer, TransformerConfig
from qkv.apps.walkthrough import walkthrough


def test_a_model_the_page_cannot_show_is_refused() -> None:
    cfg = TransformerConfig.preset("tiny", src_vocab_size=20, positional="rope")
    with pytest.raises(
        ValueError, match=r"scaled dot-product scores \(temperature 1\), sinusoidal"
    ):
        walkthrough(Transformer(cfg), [4, 3], [2, 5], ["w"] * 20, ["w"] * 20)
    hot = TransformerConfig.preset("tiny", src_vocab_size=20, attention_temperature=2.0)
    with pytest.raises(ValueError, match="temperature 1"):
        walkthrough(Transformer(hot), [4, 3], [2, 5], ["w"] * 20, ["w"] * 20)


@pytest.mark.parametrize("norm_first", [False, True])
def test_every_step_equals_the_models_own_modules(norm_first: bool) -> None:
    """The page recomputes each sub-layer by hand; it checks each against the module and the
    logits against `model.decode` (an AssertionError otherwise), post-norm and pre-norm alike."""
    torch.manual_seed(0)
    cfg = TransformerConfig.preset(
        "tiny", src_vocab_size=20, norm_first=norm_first, dropout=0.0, attention_dropout=0.0
    )
    lines = walkthrough(Transformer(cfg), [4, 5, 3], [2, 6, 7], ["w"] * 20, ["w"] * 20)
    assert any("Logits" in line for line in lines)


def test_every_layer_and_one_heads_matrices_are_on_the_page() -> None:
    torch.manual_seed(0)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=20, n_encoder_layers=3,
                                   n_decoder_layers=2, dropout=0.0, attention_dropout=0.0)  # fmt: skip
    words = [f"w{i}" for i in range(20)]
    page = "\n".join(walkthrough(Transformer(cfg), [4, 5, 3], [2, 6, 7], words, words))
    titles = [line for line in page.splitlines() if line.startswith("## ")]
    for n in (1, 2, 3):
        assert any(f"Encoder layer {n} (EncoderLayer)" in t for t in titles)
    assert any("Decoder layer 2 (DecoderLayer)" in t for t in titles)
    assert [t.split(".")[0] for t in titles] == [f"## {i}" for i in range(1, len(titles) + 1)]
    assert "PositionwiseFeedForward" in page and "b_Q" in page and "LayerNorm β" in page
    assert "The vocabulary is joint" in page and "`▁`" in page
    lines = page.splitlines()
    weights = lines.index("softmax: weights, head 1  (3, 3)")  # the encoder's: 3 rows of 3
    rows = [[float(v) for v in line.split()[1:]] for line in lines[weights + 2 : weights + 5]]
    assert all(abs(sum(r) - 1) < 0.02 for r in rows) and lines[weights + 2].split()[0] == "w4"
    cross = [
        i for i, line in enumerate(lines) if line.startswith("softmax: weights, head 1  (3, 3)")
    ]
    assert len(cross) == 3 and lines[cross[2] + 2].split()[0] == "w2→w6"  # read→writes
