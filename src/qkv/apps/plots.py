"""Heatmaps with tokens as tick labels (matplotlib, drawn off screen), and the fonts they need.

    fig = Figure()                                  # matplotlib.figure: no display, no pyplot
    heatmap(fig.subplots(), weights, x_labels=source_tokens, y_labels=target_tokens)
    fig.savefig("cross.png")
    grid(maps, source_tokens, target_tokens, titles=["head 1", ...]).savefig("heads.png")

Tick labels are drawn in a font that has their glyphs: matplotlib's default (DejaVu Sans), falling
back for Chinese, Japanese and Korean to a CJK font found at run time (Noto Sans CJK, WenQuanYi,
Source Han Sans, ...; on Debian `apt-get install fonts-noto-cjk`). When no installed font has a
label's glyphs, the labels of that axis become their indices and a warning says so: a figure never
shows empty boxes.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import font_manager, ft2font
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

# families with Chinese characters, most common first (Linux, then macOS and Windows)
CJK_FAMILIES = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Noto Sans CJK TC",
    "Noto Serif CJK SC",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Droid Sans Fallback",
    "AR PL UMing CN",
    "PingFang SC",
    "Hiragino Sans GB",
    "Microsoft YaHei",
    "SimHei",
    "Arial Unicode MS",
)
# their files, for a font installed after matplotlib cached its list of fonts
CJK_FILE = re.compile(r"cjk|wqy|wenquanyi|sourcehan|droidsansfallback|uming|ukai", re.IGNORECASE)
NO_FONT = (
    "no installed font draws some tokens, which are labelled by their indices instead; for "
    "Chinese, install a CJK font (Debian: apt-get install fonts-noto-cjk)"
)
CELL_INCHES = 0.22  # the side of one cell of a heatmap, up to MAX_PANEL_INCHES per panel
MAX_PANEL_INCHES = 20.0


@functools.cache
def cjk_font() -> str | None:
    """The family name of an installed font with Chinese characters, or None."""
    manager = font_manager.fontManager
    family = _known_cjk_family()
    if family is not None:
        return family
    # a font installed after matplotlib cached its list of fonts: add its file (sans, regular first)
    paths = [p for p in font_manager.findSystemFonts() if CJK_FILE.search(Path(p).name)]
    for path in sorted(paths, key=lambda p: ("Sans" not in p, "Regular" not in p, p)):
        try:
            manager.addfont(path)
        except (OSError, RuntimeError):  # not a readable font
            continue
        return _known_cjk_family() or font_manager.FontProperties(fname=path).get_name()
    return None


def _known_cjk_family() -> str | None:
    installed = {entry.name for entry in font_manager.fontManager.ttflist}
    return next((family for family in CJK_FAMILIES if family in installed), None)


@functools.cache
def _face(family: str | None) -> ft2font.FT2Font:
    """The font file matplotlib draws `family` with (None: the default), without fallbacks."""
    properties = font_manager.FontProperties(family=family)
    return ft2font.FT2Font(str(font_manager.findfont(properties, fallback_to_default=False)))


def _draws(family: str | None, char: str) -> bool:
    return char.isspace() or _face(family).get_char_index(ord(char)) != 0


def tick_labels(labels: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """The labels to draw and the text properties to draw them with.

    Labels the default font draws come back as they are; labels that need a CJK font get it as a
    fallback family. If no installed font draws some character, the labels become their indices
    ("0", "1", ...) and a warning (NO_FONT) says so."""
    labels = [str(label) for label in labels]
    chars = {c for label in labels for c in label}
    missing = sorted(c for c in chars if not _draws(None, c))
    if not missing:
        return labels, {}
    cjk = cjk_font()
    if cjk is not None:
        missing = [c for c in missing if not _draws(cjk, c)]
        if not missing:
            return labels, {"fontfamily": [font_manager.FontProperties().get_name(), cjk]}
    warnings.warn(NO_FONT, stacklevel=3)
    return [str(i) for i in range(len(labels))], {}


def heatmap(
    ax: Axes,
    matrix: Any,
    x_labels: Sequence[str],
    y_labels: Sequence[str],
    *,
    title: str | None = None,
    cmap: str = "viridis",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    fontsize: float = 8,
    annotate: float | None = None,
) -> AxesImage:
    """Draw `matrix` (rows: y_labels, columns: x_labels) on `ax`, one tick label per row and per
    column (x labels longer than 2 characters turned upright). matrix: (len(y_labels),
    len(x_labels)), anything numpy reads (a CPU tensor, an array, nested lists). annotate: write
    every value of at least this much in its cell (two decimals). Returns the image (for a
    colorbar)."""
    data = np.asarray(matrix, dtype=np.float64)
    if data.shape != (len(y_labels), len(x_labels)):
        raise ValueError(
            f"matrix {data.shape} does not match {len(y_labels)} y and {len(x_labels)} x labels"
        )
    image = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    xs, x_font = tick_labels(x_labels)
    ys, y_font = tick_labels(y_labels)
    upright = max(map(len, xs), default=0) > 2  # longer labels would overlap their neighbours
    ax.set_xticks(range(len(xs)), xs, rotation=90 if upright else 0, fontsize=fontsize, **x_font)
    ax.set_yticks(range(len(ys)), ys, fontsize=fontsize, **y_font)
    ax.tick_params(length=0)
    if annotate is not None:
        _write_values(ax, image, data, annotate, fontsize)
    if title is not None:
        ax.set_title(title, fontsize=fontsize + 2)
    return image


def _write_values(
    ax: Axes, image: AxesImage, data: np.ndarray, least: float, fontsize: float
) -> None:
    """Each value >= least written in its cell, black on light colours and white on dark ones."""
    for (row, col), value in np.ndenumerate(data):
        if value >= least:
            red, green, blue, _ = image.cmap(image.norm(value))
            light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5
            ax.text(
                col,
                row,
                f"{value:.2f}",
                ha="center",
                va="center",
                fontsize=fontsize,
                color="black" if light else "white",
            )


def grid(
    matrices: Sequence[Any],
    x_labels: Sequence[str],
    y_labels: Sequence[str],
    titles: Sequence[str],
    *,
    columns: int | None = None,
    suptitle: str | None = None,
) -> Figure:
    """A figure of heatmaps of the same shape, `columns` per row (None: a layout close to a 4:3
    landscape figure), with one colour scale (0 to the largest value)."""
    n = len(matrices)
    cell = min(CELL_INCHES, MAX_PANEL_INCHES / max(len(x_labels), len(y_labels), 1))
    width = max(2.5, cell * len(x_labels) + 1.5)
    height = max(2.5, cell * len(y_labels) + 1.5)
    if columns is None:  # the figure closest to 4:3 landscape, with few empty places
        columns = min(range(1, max(n, 1) + 1), key=lambda c: _layout_cost(n, c, width / height))
    columns = max(1, min(columns, n))
    rows = math.ceil(n / columns)
    # the colour bar takes about an inch; a title needs room for its width
    fig_width = max(columns * width + 1.0, 0.09 * len(suptitle or ""))
    fig = Figure(figsize=(fig_width, rows * height), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    top = max((float(np.max(m)) for m in matrices if np.size(m)), default=1.0)
    for k, (ax, matrix, title) in enumerate(zip(axes.flat, matrices, titles, strict=False)):
        image = heatmap(ax, matrix, x_labels, y_labels, title=title, vmax=top)
        if k % columns:  # tick labels on the left column and the bottom panels only
            ax.tick_params(labelleft=False)
        if k + columns < n:
            ax.tick_params(labelbottom=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    if n:
        fig.colorbar(image, ax=axes, shrink=0.6)
    if suptitle is not None:
        fig.suptitle(suptitle, fontsize=11)
    return fig


def _layout_cost(n: int, columns: int, panel_aspect: float) -> float:
    """How far `columns` columns of n panels (width / height = panel_aspect) are from a 4:3 figure,
    plus the share of empty places."""
    if n == 0:
        return 0.0
    rows = math.ceil(n / columns)
    aspect = columns * panel_aspect / rows
    return abs(math.log(aspect / (4 / 3))) + (rows * columns - n) / n


__all__ = ["cjk_font", "grid", "heatmap", "tick_labels"]
