"""Writes docs/walkthrough.md: one sentence through a small encoder-decoder Transformer, step by
step, every shape and number printed by `qkv.apps.explain` from the tensors qkv's modules compute.

    python docs/walkthrough.py            # rewrites docs/walkthrough.md
    qkv explain --model DIR "4 0 5 2"     # the same page for any model directory

The model here is small and untrained, built from a fixed seed in float64, so that the page is the
same on every machine (tests/test_walkthrough.py regenerates it and compares): its numbers show
how the tensors flow, not a good translation. Its vocabulary is a word list, one token per word.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from qkv import Transformer, TransformerConfig
from qkv.apps.explain import walkthrough

PAGE = Path(__file__).with_name("walkthrough.md")
DIAGRAM = Path(__file__).parent / "figures" / "architecture.png"
WORDS = ["<pad>", "<unk>", "<s>", "</s>", *"0123456789",
         "four", "thousand", "fifty", "-", "two", "hundred"]  # fmt: skip
SOURCE = "4 0 5 2"
TARGET = "four thousand fifty - two"
HEADER = f"""# Walk-through: one sentence through the Transformer

"{SOURCE}" → "{TARGET}", through an encoder-decoder Transformer of 2 + 2 layers, d_model 16,
4 heads of 4, d_ff 32, post-norm as in the paper — small so that every number fits on a line. Each
block shows a tensor's shape and the first numbers of its first row, printed by
[`qkv.apps.explain`](../src/qkv/apps/explain.py) from the tensors qkv's own modules compute; what
it computes by hand (scores, softmax, heads joined) is checked against the modules' outputs, and
the logits against `model.decode`. The weights are untrained (a fixed seed), so the numbers show
the flow, not a translation: `qkv explain --model DIR "4 0 5 2"` prints the same page for a trained
model (e.g. `qkv demo`'s). `python docs/walkthrough.py` rewrites this page; a test checks that it
is what the code prints.

![the encoder-decoder, each box named by its qkv class](figures/architecture.png)
"""


def model() -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig.preset(
        "tiny", src_vocab_size=len(WORDS), d_model=16, n_heads=4, d_ff=32,
        n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    return Transformer(cfg).double().eval()


def render() -> str:
    ids = {w: i for i, w in enumerate(WORDS)}
    src = [ids[w] for w in SOURCE.split()] + [ids["</s>"]]
    tgt = [ids["<s>"]] + [ids[w] for w in TARGET.split()]
    return HEADER + "\n" + "\n".join(walkthrough(model(), src, tgt, WORDS, WORDS)) + "\n"


ENCODER = ["TokenEmbedding × √d", "+ SinusoidalPositionalEncoding", "MultiHeadedAttention (self)",
           "SublayerConnection: Add & Norm", "FeedForward", "SublayerConnection: Add & Norm"]
DECODER = ["TokenEmbedding × √d", "+ SinusoidalPositionalEncoding",
           "MultiHeadedAttention (self, causal_mask)", "SublayerConnection: Add & Norm",
           "MultiHeadedAttention (cross)", "SublayerConnection: Add & Norm", "FeedForward",
           "SublayerConnection: Add & Norm", "output_projection (tied) → softmax"]  # fmt: skip


def draw_architecture(path: Path) -> None:
    """The encoder-decoder as boxes named by qkv's classes; the memory goes to cross-attention."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6.4))
    ax.set_axis_off()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, len(DECODER) + 1.6)
    boxes = {}
    for x, title, names in ((0.3, "Encoder × N  (EncoderLayer)", ENCODER),
                            (5.3, "Decoder × N  (DecoderLayer)", DECODER)):  # fmt: skip
        ax.text(x + 2.2, len(DECODER) + 1.1, title, ha="center", fontsize=11, weight="bold")
        for i, name in enumerate(names):
            y = 0.5 + i
            layer = 2 <= i < len(names) - (1 if names is DECODER else 0)
            ax.add_patch(plt.Rectangle((x, y), 4.4, 0.7, fc="#e8f0fe" if layer else "#f3f3f3",
                                       ec="#4a6fa5" if layer else "#888888"))
            ax.text(x + 2.2, y + 0.35, name, ha="center", va="center", fontsize=9)
            if i:
                ax.annotate("", (x + 2.2, y), (x + 2.2, y - 0.3), arrowprops={"arrowstyle": "->"})
            boxes[(x, i)] = y
    top = boxes[(0.3, len(ENCODER) - 1)] + 0.7
    cross = boxes[(5.3, 4)] + 0.35
    ax.annotate("memory", (5.3, cross), (4.7, top), fontsize=9, ha="left",
                arrowprops={"arrowstyle": "->", "color": "#b03a2e"}, color="#b03a2e")
    ax.text(2.5, 0.05, "source ids (B, S)", ha="center", fontsize=9)
    ax.text(7.5, 0.05, "target ids, shifted right (B, T)", ha="center", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    draw_architecture(DIAGRAM)
    print(f"wrote {PAGE} and {DIAGRAM}", file=sys.stderr)
