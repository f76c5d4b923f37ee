"""`qkv figures`: every idea of the paper as a picture, drawn from qkv's own modules.

    qkv figures --out docs/figures              all figures (about a minute on 2 CPU cores)
    qkv figures --out /tmp/f --small            smaller sizes and a quickly trained demo model
    qkv figures --out /tmp/f --demo-model DIR   the cross-attention of a model you trained

Each `draw_*` function builds one matplotlib `Figure` (no pyplot, no global state) from the real
classes of `qkv.model` and returns it with a one-line summary of what it measured; `make_figures`
saves them as small PNGs. Everything is seeded, so the pictures are the same on every run except
the measured times of `complexity.png`. docs/concepts.md explains each picture.
"""

from __future__ import annotations

import io
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure
from PIL import Image

from .attention_figures import (
    draw_masks,
    draw_nadaraya_watson,
    draw_norms,
    draw_scaling,
    draw_temperature,
)
from .common import DPI, seeded
from .cost import draw_complexity, draw_schedule
from .demo_figure import demo_attention_maps, draw_demo_attention, train_demo_model
from .position_figures import (
    draw_relative_positions,
    draw_rope_score,
    draw_sinusoid_dot,
    draw_sinusoidal,
)

# --- the command ------------------------------------------------------------------------------

FIGURES: dict[str, Callable[[bool], tuple[Figure, str]]] = {
    "sinusoidal": draw_sinusoidal,
    "sinusoid_dot": draw_sinusoid_dot,
    "rope_score": draw_rope_score,
    "relative_positions": draw_relative_positions,
    "masks": draw_masks,
    "scaling": draw_scaling,
    "temperature": draw_temperature,
    "norms": draw_norms,
    "nadaraya_watson": draw_nadaraya_watson,
    "complexity": draw_complexity,
    "schedule": draw_schedule,
}
DEMO_FIGURE = "demo_attention"
ALL_FIGURES = (*FIGURES, DEMO_FIGURE)


def save(fig: Figure, path: Path) -> None:
    """A small PNG: 256 colours at most (plots have few), no version stamp (the same figure gives
    the same bytes)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, format="png")
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(256).save(path, format="PNG", optimize=True)


def make_figures(
    out_dir: str | Path,
    small: bool = False,
    demo_model: str | Path | None = None,
    only: list[str] | None = None,
    report: Callable[[str], None] = print,
) -> list[Path]:
    """Draw the figures (all, or those named in `only`) into out_dir as NAME.png; returns the
    paths. The demo figure uses `demo_model` or, without one, a model trained here."""
    names = list(ALL_FIGURES if only is None else only)
    unknown = sorted(set(names) - set(ALL_FIGURES))
    if unknown:
        raise ValueError(f"unknown figures {unknown}; choose from {list(ALL_FIGURES)}")
    if demo_model is not None and not Path(demo_model).is_dir():
        raise ValueError(f"--demo-model {demo_model} is not a model directory")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        start = time.perf_counter()
        with seeded(0):
            if name != DEMO_FIGURE:
                fig, summary = FIGURES[name](small)
            elif demo_model is not None:
                fig, summary = draw_demo_attention(demo_attention_maps(Path(demo_model)))
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    report("training a demo model for the cross-attention figure ...")
                    model = train_demo_model(Path(tmp) / "demo", small)
                    fig, summary = draw_demo_attention(demo_attention_maps(model))
        path = out / f"{name}.png"
        save(fig, path)
        paths.append(path)
        report(f"{path} ({time.perf_counter() - start:.1f} s): {summary}")
    return paths


__all__ = ["ALL_FIGURES", "DEMO_FIGURE", "FIGURES", "make_figures", "save"]
