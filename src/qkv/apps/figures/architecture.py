"""The encoder-decoder drawn as boxes named by qkv's classes (docs/walkthrough.md): the residual
path around every sub-layer, an N× bracket around the layers that repeat (and nothing else), the
shape of the tensor between boxes, and a legend of the colours and arrows."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch

COLOURS = {  # kind -> (face, edge, legend)
    "embed": ("#eeeeee", "#777777", "embedding, positions, output (once per stack)"),
    "attn": ("#fde2c8", "#c0651a", "attention sub-layer (MultiHeadedAttention)"),
    "ffn": ("#d6e6fb", "#3a6db0", "feed-forward sub-layer (PositionwiseFeedForward)"),
    "norm": ("#fff4b8", "#a08a10", "SublayerConnection: LayerNorm(x + sub-layer(x)), post-norm"),
}
BOX_W, BOX_H, STEP = 3.6, 0.62, 1.0
# (label, kind, shape of the tensor it outputs); a sub-layer is followed by its Add & Norm
ENCODER = [
    ("TokenEmbedding × √d_model", "embed", "(B, S, D)"),
    ("+ SinusoidalPositionalEncoding", "embed", "(B, S, D)"),
    ("MultiHeadedAttention (self)", "attn", "(B, S, D); weights (B, H, S, S)"),
    ("Add & Norm", "norm", "(B, S, D)"),
    ("PositionwiseFeedForward", "ffn", "(B, S, D); inside (B, S, d_ff)"),
    ("Add & Norm", "norm", "memory (B, S, D)"),
]
DECODER = [
    ("TokenEmbedding × √d_model", "embed", "(B, T, D)"),
    ("+ SinusoidalPositionalEncoding", "embed", "(B, T, D)"),
    ("MultiHeadedAttention (self, causal_mask)", "attn", "(B, T, D); weights (B, H, T, T)"),
    ("Add & Norm", "norm", "(B, T, D)"),
    ("MultiHeadedAttention (cross)", "attn", "(B, T, D); weights (B, H, T, S)"),
    ("Add & Norm", "norm", "(B, T, D)"),
    ("PositionwiseFeedForward", "ffn", "(B, T, D); inside (B, T, d_ff)"),
    ("Add & Norm", "norm", "(B, T, D)"),
    ("output_projection (= embedding ᵀ)", "embed", "logits (B, T, V)"),
    ("softmax", "embed", "p(next token) (B, T, V)"),
]


def _column(ax, x: float, boxes: list[tuple[str, str, str]], left: bool) -> list[float]:
    """Draw one stack bottom-up from y = 1; returns each box's bottom y."""
    ys = []
    for i, (label, kind, shape) in enumerate(boxes):
        y = 1.0 + i * STEP
        face, edge, _ = COLOURS[kind]
        ax.add_patch(FancyBboxPatch((x, y), BOX_W, BOX_H, boxstyle="round,pad=0.02", fc=face,
                                    ec=edge, lw=1.2))  # fmt: skip
        ax.text(x + BOX_W / 2, y + BOX_H / 2, label, ha="center", va="center", fontsize=8.5)
        ax.annotate("", (x + BOX_W / 2, y + STEP), (x + BOX_W / 2, y + BOX_H),
                    arrowprops={"arrowstyle": "->", "lw": 1})  # fmt: skip
        ax.text(x + BOX_W / 2 + 0.08, y + BOX_H + 0.19, shape, fontsize=6.5, color="#555555")
        ys.append(y)
        if kind in ("attn", "ffn"):  # the residual path: from below the sub-layer to its Add
            _residual(ax, x, y, left)
    return ys


def _residual(ax, x: float, y: float, left: bool) -> None:
    """A dashed path from the arrow into the sub-layer at y, round its side, into the Add & Norm
    box above it."""
    side = x - 0.3 if left else x + BOX_W + 0.3
    edge = x if left else x + BOX_W
    low, high = y - 0.19, y + STEP + BOX_H / 2
    style = {"color": "#2e7d32", "lw": 1.3, "ls": "--"}
    ax.plot([x + BOX_W / 2, side, side], [low, low, high], **style)
    ax.add_patch(FancyArrowPatch((side, high), (edge, high), arrowstyle="->", mutation_scale=9,
                                 **style))  # fmt: skip
    ax.text(side + (-0.05 if left else 0.05), y + BOX_H / 2, "x", color="#2e7d32", fontsize=8,
            ha="right" if left else "left", va="center")  # fmt: skip


def _bracket(ax, x: float, y0: float, y1: float, name: str, left: bool) -> None:
    """The N× frame around the boxes from y0 to y1 (the layer that repeats)."""
    frame = FancyBboxPatch((x - 0.55, y0 - 0.3), BOX_W + 1.1, y1 - y0 + 0.6, fc="none",
                           boxstyle="round,pad=0.05", ec="#444444", lw=1.4)  # fmt: skip
    ax.add_patch(frame)
    tx = x - 0.75 if left else x + BOX_W + 0.75
    ax.text(tx, (y0 + y1) / 2, f"N×\n{name}", ha="right" if left else "left", va="center",
            fontsize=10, weight="bold")  # fmt: skip


def draw_architecture(small: bool = False) -> tuple[Figure, str]:
    fig = Figure(figsize=(11, 9.2))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    ax.set_xlim(-1.8, 13.6)
    ax.set_ylim(-1.6, 12.6)
    enc_x, dec_x = 1.2, 7.0
    enc = _column(ax, enc_x, ENCODER, left=True)
    dec = _column(ax, dec_x, DECODER, left=False)
    _bracket(ax, enc_x, enc[2], enc[5] + BOX_H, "EncoderLayer", left=True)
    _bracket(ax, dec_x, dec[2], dec[7] + BOX_H, "DecoderLayer", left=False)
    memory = (enc_x + BOX_W / 2, enc[5] + STEP)
    ax.add_patch(FancyArrowPatch(memory, (dec_x, dec[4] + BOX_H / 2), arrowstyle="->",
                                 color="#b03a2e", lw=1.6, mutation_scale=12,
                                 connectionstyle="arc3,rad=-0.3"))  # fmt: skip
    ax.text(4.0, enc[5] + STEP + 0.5, "memory: the keys and values\nof every cross-attention",
            color="#b03a2e", fontsize=8, ha="center")  # fmt: skip
    ax.text(enc_x + BOX_W / 2, 0.35, "source ids (B, S)", ha="center", fontsize=9)
    ax.text(dec_x + BOX_W / 2, 0.35, "target ids, shifted right: <s> first (B, T)", ha="center",
            fontsize=9)  # fmt: skip
    ax.annotate(
        "", (enc_x + BOX_W / 2, 1.0), (enc_x + BOX_W / 2, 0.6), arrowprops={"arrowstyle": "->"}
    )
    ax.annotate(
        "", (dec_x + BOX_W / 2, 1.0), (dec_x + BOX_W / 2, 0.6), arrowprops={"arrowstyle": "->"}
    )
    ax.text(enc_x + BOX_W / 2, 12.15, "Encoder", ha="center", fontsize=13, weight="bold")
    ax.text(dec_x + BOX_W / 2, 12.15, "Decoder", ha="center", fontsize=13, weight="bold")
    handles = [Patch(fc=face, ec=edge, label=text) for face, edge, text in COLOURS.values()]
    handles += [
        Line2D(
            [], [], color="black", lw=1, label="the tensor flows up; its shape beside the arrow"
        ),
        Line2D(
            [], [], color="#2e7d32", lw=1.3, ls="--", label="residual path: x skips the sub-layer"
        ),
        Line2D([], [], color="#b03a2e", lw=1.6, label="the encoder's output read by the decoder"),
    ]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=7.5,
              frameon=False)  # fmt: skip
    ax.text(5.3, -0.35, "B batch, S source and T target length, D = d_model, H heads, "
            "V vocabulary; N layers per stack (the paper: 6)", ha="center", fontsize=8)  # fmt: skip
    return fig, f"{len(ENCODER)} encoder and {len(DECODER)} decoder boxes"


__all__ = ["draw_architecture"]
