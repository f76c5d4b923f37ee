"""docs/figures/architecture.png against the model it draws: the classes it names are qkv's (or
torch's), each N× frame holds one layer's sub-layers (each with its Add & Norm, as many as the
layer has `SublayerConnection`s), every sub-layer has its residual path, and the legend names every
colour."""

from __future__ import annotations

import re

from matplotlib.patches import FancyBboxPatch
from torch import nn

import qkv.model
from qkv import Transformer, TransformerConfig
from qkv.apps.figures.architecture import COLOURS, draw_architecture
from qkv.model.layers import SublayerConnection


def boxes_and_frames(ax) -> tuple[list[tuple[float, float, str]], list[tuple[float, ...]]]:
    """The figure's boxes (x, bottom y, label) and its frames (left, right, bottom, top)."""
    patches = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    frames = [p for p in patches if p.get_facecolor()[3] == 0]  # drawn unfilled: the N× frames
    labels = {(round(t.get_position()[0], 3), round(t.get_position()[1], 3)): t.get_text()
              for t in ax.texts}  # fmt: skip
    boxes = []
    for p in patches:
        if p in frames:
            continue
        centre = (round(p.get_x() + p.get_width() / 2, 3), round(p.get_y() + p.get_height() / 2, 3))
        boxes.append((p.get_x(), p.get_y(), labels[centre]))
    spans = [(f.get_x(), f.get_x() + f.get_width(), f.get_y(), f.get_y() + f.get_height())
             for f in frames]  # fmt: skip
    return boxes, spans


def test_the_architecture_figure_draws_the_model_s_layers() -> None:
    fig, _ = draw_architecture()
    [ax] = fig.axes
    texts = [t.get_text() for t in ax.texts]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    named = set(re.findall(r"\b(?:[A-Z][a-z]+){2,}\b", " ".join(texts + legend)))
    assert {"EncoderLayer", "DecoderLayer", "MultiHeadedAttention"} <= named
    assert all(hasattr(qkv.model, n) or hasattr(nn, n) for n in named), named - set(dir(qkv.model))

    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=16))
    layers = (model.encoder.layers[0], model.decoder.layers[0])
    sublayers = {type(layer).__name__: sum(isinstance(m, SublayerConnection)
                                           for m in layer.modules()) for layer in layers}  # fmt: skip
    boxes, frames = boxes_and_frames(ax)
    assert len(frames) == 2
    for (left, right, low, high), name in zip(sorted(frames), ("EncoderLayer", "DecoderLayer"),
                                              strict=True):  # fmt: skip
        assert f"N×\n{name}" in texts
        inside = [label for bx, by, label in sorted(boxes, key=lambda b: b[1])
                  if left < bx < right and low < by < high]  # fmt: skip
        assert len(inside) == 2 * sublayers[name]  # a sub-layer, then its Add & Norm
        assert inside[1::2] == ["Add & Norm"] * sublayers[name]
        assert all(label != "Add & Norm" for label in inside[::2])

    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(dashed) == sum(sublayers.values())  # a residual path round every sub-layer
    assert all(colour_text in legend for _, _, colour_text in COLOURS.values())
