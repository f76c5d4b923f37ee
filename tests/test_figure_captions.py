"""Consistency checks: the captions of docs/concepts.md's saved figures against what they plot.

The trained model behind the Multi30k head figures is not part of the repository, so these tests
do not recompute the figures; they read what the figures plot and check that the captions state it.
multi30k_heads.png: the .json beside it (benchmarks/heads.py writes both), checked to draw the same
PNG, and `heads.summary` of it against the caption. The example's maps (`qkv attention` heatmaps):
each cell's colour read back through the colour map, and each row's largest weight against the
caption's count of rows on the aligned (or previous) token.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib import colormaps
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"
CONCEPTS = ROOT / "docs" / "concepts.md"
WORDS = {4: "Four", 12: "twelve"}
SOURCE = ["A", "man", "in", "an", "orange", "hat", "star", "ring", "at", "something", ".", "</s>"]
TARGET = ["Ein", "Mann", "mit", "einem", "orangefarbenen", "Hut", "starrt", "auf", "etwas", "."]
ALIGNED = ["A", "man", "in", "an", "orange", "hat", "star", "at", "something", "."]  # by hand


@pytest.fixture
def heads(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT))  # the benchmarks package
    from benchmarks import heads

    return heads


def caption() -> str:
    text = CONCEPTS.read_text(encoding="utf-8")
    return " ".join(text[text.index("**The heads of a trained translation model**") :].split())


def panels(png: Path) -> tuple[np.ndarray, list[tuple[int, int, int, int]]]:
    """The image (H, W, 3) and the boxes (x0, x1, y0, y1) of its heatmap panels, found by the
    panels' dark frames (rows and columns with more than 250 dark pixels), left to right, top to
    bottom."""
    image = np.asarray(Image.open(png).convert("RGB")).astype(float)
    dark = image.sum(axis=2) < 150

    def lines(counts: np.ndarray) -> list[int]:
        found = [int(i) for i in np.where(counts > 250)[0]]
        return [i for k, i in enumerate(found) if k == 0 or i - found[k - 1] > 2]  # one per line

    ys, xs = lines(dark.sum(axis=1)), lines(dark.sum(axis=0))
    frames_x = [(xs[k], xs[k + 1]) for k in range(0, len(xs) - 1, 2) if xs[k + 1] - xs[k] > 100]
    frames_y = [(ys[k], ys[k + 1]) for k in range(0, len(ys) - 1, 2)]
    return image, [(x0, x1, y0, y1) for y0, y1 in frames_y for x0, x1 in frames_x]


def read_heatmap(image: np.ndarray, box: tuple[int, int, int, int], rows: int, cols: int):
    """A (rows, cols) heatmap's values on viridis's 0–1 scale, from each cell's central pixels."""
    lut = colormaps["viridis"](np.linspace(0, 1, 256))[:, :3] * 255
    x0, x1, y0, y1 = box
    out = np.zeros((rows, cols))
    for r in range(rows):
        for c in range(cols):
            x, y = int(x0 + (c + 0.5) * (x1 - x0) / cols), int(y0 + (r + 0.5) * (y1 - y0) / rows)
            pixel = image[y - 3 : y + 4, x - 3 : x + 4].reshape(-1, 3).mean(axis=0)
            distance = ((lut - pixel) ** 2).sum(axis=1)
            assert distance.min() < 25, (box, r, c)  # a viridis colour: a cell, not a label
            out[r, c] = distance.argmin() / 255
    return out


def test_consistency_the_heads_json_draws_the_saved_figure(heads, tmp_path: Path) -> None:
    data = json.loads((FIGURES / "multi30k_heads.json").read_text(encoding="utf-8"))
    heads.draw(data).savefig(tmp_path / "redrawn.png", dpi=110)
    saved = np.asarray(Image.open(FIGURES / "multi30k_heads.png").convert("RGB")).astype(int)
    redrawn = np.asarray(Image.open(tmp_path / "redrawn.png").convert("RGB")).astype(int)
    assert saved.shape == redrawn.shape
    assert (
        np.abs(saved - redrawn).max() <= 8
    )  # the same text; colours within the 2-decimal rounding


def heads_caption_phrases(s: dict) -> list[str]:
    """What the caption and the map row must say, from `heads.summary`."""
    direction = {1: "next", -1: "previous"}
    shares = [v[0] for v in s["positional"].values()]
    (lo, hi), (best, second) = s["positional_entropy"], list(s["best_alignment"].items())
    out = [
        f"{WORDS[len(s['positional'])]} encoder heads put 0.35 or more",
        f"their entropies are {lo:.2f}–{hi:.2f}",
        f"The other {WORDS[16 - len(s['positional'])]} spread their attention more "
        f"({s['spread_entropy'][0]:.2f}–{s['spread_entropy'][1]:.2f} nats)",
        f"layer {best[0][0]} head {best[0][1]} picks the linked word for {best[1]:.0%}",
        f"layer {second[0][0]} head {second[0][1]} for {second[1]:.0%}",
        "Layer 1 cross heads align worst ({:.2f}–{:.2f})".format(*s["layer_1_alignment"]),
        f"(δ+0, up to {s['decoder_max'][0]:.2f})",
        f"or one before (up to {s['decoder_max'][-1]:.2f})",
        f"{len(shares)} of 16 encoder heads positional ({min(shares):.2f}–{max(shares):.2f} of",
        f"2 cross heads align {second[1]:.0%}–{best[1]:.0%} of linked words".replace("%–", "–"),
    ]
    out += [
        f"layer {l} head {h} on the {direction[offset]} token ({share:.2f})"
        for (l, h), (share, offset) in s["positional"].items()
    ]
    out += [
        f"layer {l} head {h}, which is as sharp as the positional heads ({entropy:.2f}) with "
        f"{share:.2f} on the {direction[offset]} token"
        for (l, h), (share, offset, entropy) in s["sharp_others"].items()
    ]
    return out


def test_consistency_the_heads_caption_states_what_the_json_holds(heads) -> None:
    data = json.loads((FIGURES / "multi30k_heads.json").read_text(encoding="utf-8"))
    text = caption() + " ".join(CONCEPTS.read_text(encoding="utf-8").split())
    missing = [p for p in heads_caption_phrases(heads.summary(data)) if p not in text]
    assert missing == []


def test_consistency_the_example_maps_have_the_rows_the_caption_counts() -> None:
    image, boxes = panels(FIGURES / "multi30k_cross_layer2_heads.png")
    head4 = read_heatmap(image, boxes[3], len(TARGET) + 1, len(SOURCE))  # rows: TARGET, </s>
    on = [SOURCE[int(k)] for k in head4[: len(TARGET) - 1].argmax(axis=1)]  # the 9 words
    hits = [t for t, got, want in zip(TARGET, on, ALIGNED, strict=False) if got == want]
    text = caption()
    assert f"in {len(hits)} of the {len(TARGET) - 1} German words' rows" in text
    assert "(" + ", ".join(f"{t} → {ALIGNED[TARGET.index(t)]}" for t in hits) + ")" in text
    for t, got, want in zip(TARGET, on, ALIGNED, strict=False):
        if got != want:
            assert f"{t} sits on {got} (not {want})" in text or f"{t} on {got} (not {want})" in text
    assert SOURCE[int(head4[len(TARGET) - 1].argmax())] == "</s>"  # the full stop's row
    image, boxes = panels(FIGURES / "multi30k_encoder_layer3_heads.png")
    head2 = read_heatmap(image, boxes[1], len(SOURCE), len(SOURCE))
    back = [int(head2[i].argmax()) == i - 1 for i in range(len(SOURCE))]
    assert f"one token back in {sum(back)} of the {len(SOURCE)} rows" in text
    two_back = [SOURCE[i] for i in range(len(SOURCE)) if int(head2[i].argmax()) == i - 2]
    listed = ", ".join(two_back[:-1]) + " and " + two_back[-1]
    assert f"{listed.replace('</s>', '`</s>`')} look two back" in text
    at_end = [SOURCE[i] for i in range(len(SOURCE)) if int(head2[i].argmax()) >= 10]
    assert f"the first three tokens ({', '.join(at_end)})" in text
