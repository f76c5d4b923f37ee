"""`qkv figures`: every figure is drawn (at small sizes) as a valid PNG, and the numbers it states hold."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from qkv.apps.cli import main
from qkv.apps.figures import ALL_FIGURES, make_figures
from qkv.apps.figures.attention_figures import NORMS, draw_norms
from qkv.apps.figures.cost import crossover_length, layer_flops
from qkv.apps.figures.position_figures import (
    draw_rope_score,
    offset_steps,
    rises,
    sinusoid_at,
    sinusoid_dot,
    sinusoid_rows,
)
from qkv.model.positions import relative_position_bucket

ROOT = Path(__file__).resolve().parents[2]


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    with Image.open(path) as image:
        image.verify()  # the whole file decodes
    with Image.open(path) as image:
        assert image.format == "PNG" and min(image.size) >= 200, (path, image.size)


@pytest.mark.slow
def test_every_figure_is_drawn_as_a_png(tmp_path: Path) -> None:
    lines: list[str] = []
    paths = make_figures(tmp_path, small=True, report=lines.append)  # trains a tiny demo model too
    assert [p.name for p in paths] == [f"{name}.png" for name in ALL_FIGURES]
    for path in paths:
        assert_png(path)
    assert sum(str(p) in " ".join(lines) for p in paths) == len(paths)  # one summary line each
    again = make_figures(
        tmp_path / "again", small=True, only=["norms", "rope_score"], report=lines.append
    )
    for path in again:  # seeded: the same figure, byte for byte
        assert path.read_bytes() == (tmp_path / path.name).read_bytes(), path.name


def test_the_committed_figures_are_small_valid_pngs() -> None:
    committed = ROOT / "docs" / "figures"
    for name in ALL_FIGURES:
        assert_png(committed / f"{name}.png")
        assert (committed / f"{name}.png").stat().st_size < 150_000  # small files


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["figures", "--out", str(tmp_path), "--small", "--only", "masks", "temperature"]) == 0
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["masks.png", "temperature.png"]
    assert "masks.png" in capsys.readouterr().out
    assert main(["figures", "--out", str(tmp_path), "--demo-model", str(tmp_path / "none")]) == 2
    assert "is not a model directory" in capsys.readouterr().err


def test_score_flops_reach_the_linear_flops_at_2d_plus_d_ff() -> None:
    d, d_ff = 512, 2048
    assert crossover_length(d, d_ff) == 3072
    linear, scores = layer_flops(
        3072, d, d_ff
    )  # one qkv EncoderLayer, counted by torch's FlopCounterMode
    assert linear == scores == 4 * 3072**2 * d  # Q K^T and A V: 2 L^2 d each
    short_linear, short_scores = layer_flops(512, d, d_ff)
    assert short_linear == 2 * 512 * (4 * d * d + 2 * d * d_ff)  # W^Q, W^K, W^V, W^O; W_1, W_2
    assert short_linear == 6 * short_scores


def test_concepts_page_names_tests_that_exist() -> None:
    """Every `test_...` that docs/concepts.md names is a test function of the suite."""
    import re

    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(test_\w+)`", page))
    defined = {
        m
        for path in (ROOT / "tests").rglob("test_*.py")
        for m in re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M)
    }
    assert len(named) >= 10 and named <= defined, sorted(named - defined)
    for name in ALL_FIGURES:  # and every figure is on the page
        assert f"figures/{name}.png" in page, name


def test_sinusoid_dot_has_shoulders_before_it_first_rises_at_44() -> None:
    """sinusoid_dot.png: f(k) = PE(p) . PE(p + k) = sum_i cos(w_i k) (the float64 oracle, summed
    over the 256 frequencies w_i = 10000^(-2i/512)); the ripples below k = 44 are shoulders (the
    fall slows, never turns); f first rises at 44 by 0.012, then again at 50, 56, 62."""
    f = sinusoid_dot(512, 120)
    w = 10000.0 ** (-np.arange(256) * 2 / 512)
    oracle = np.cos(np.outer(np.arange(121), w)).sum(axis=1)
    assert np.abs(f.double().numpy() - oracle).max() < 1e-3
    step = offset_steps(f)
    assert rises(f)[:4] == [44, 50, 56, 62]
    assert [int(k) + 1 for k in np.flatnonzero(np.diff(oracle) > 0)[:4]] == [44, 50, 56, 62]
    assert (
        abs(float(step[43]) - (oracle[44] - oracle[43])) < 1e-3 and 0.005 < float(step[43]) < 0.02
    )
    assert bool((step[:43] < 0).all())
    shoulders = [7, 13, 19, 25, 31, 38]  # local peaks of the step, all below 0
    assert all(
        step[k - 2] < step[k - 1] > step[k] and -0.4 < step[k - 1] < -0.03 for k in shoulders
    )


def test_sinusoidal_dots_lie_on_the_formula() -> None:
    """sinusoidal.png: the lines (the formula at real p) pass through qkv's table at integer p."""
    pe = sinusoid_rows(100, 128).numpy()
    for dim in (0, 1, 10, 20, 40, 41):
        assert abs(sinusoid_at(np.arange(100), dim, 128) - pe[:, dim]).max() < 1e-6


def test_rope_colours_are_centred_at_zero() -> None:
    fig, _ = draw_rope_score(small=True)
    norm = fig.axes[0].images[0].norm
    assert norm(0.0) == 0.5 and norm.vmin < 0 < norm.vmax  # white (the middle of RdBu) is 0


def test_norms_panels_are_labelled_with_integer_features() -> None:
    fig, _ = draw_norms(small=True)
    assert all(ax.get_ylabel() for ax in fig.axes[:4])
    assert all(float(x).is_integer() for x in fig.axes[0].get_xticks())


def test_norms_figure_draws_the_four_norms_its_caption_reads() -> None:
    """norms.png is cited for InstanceNorm and RMSNorm too: both are drawn, and the caption's
    numbers are the figure's (consistency with docs/concepts.md)."""
    fig, summary = draw_norms(small=True)
    for ax in fig.axes[2:4]:
        assert [t.get_text() for t in ax.get_legend().get_texts()] == list(NORMS)
    found = re.findall(r"(\w+): batch ([\d.]+), last token ([\d.]+)", summary)
    changes = {name: (batch, last) for name, batch, last in found}
    page = " ".join((ROOT / "docs" / "concepts.md").read_text(encoding="utf-8").split())
    caption = page[page.index("**BatchNorm, InstanceNorm, LayerNorm, RMSNorm**") :]
    for name, phrase in (("BatchNorm", "moves by up to {}"), ("InstanceNorm", "by up to {}")):
        assert phrase.format(changes[name][0]) in caption, name
    assert f"(up to {changes['InstanceNorm'][1]})" in caption
    assert changes["BatchNorm"][1] == changes["InstanceNorm"][1]  # one sentence: the same axis
    for name in ("LayerNorm", "RMSNorm"):
        assert changes[name] == ("0.00", "0.00")


def test_t5_buckets_are_exact_to_8_bidirectional_and_16_causal() -> None:
    """The caption of relative_positions.png: distances with a bucket of their own."""
    distance = torch.arange(200)
    for bidirectional, exact in ((True, 8), (False, 16)):
        rel = distance if bidirectional else -distance
        buckets = relative_position_bucket(rel, bidirectional, num_buckets=32, max_distance=128)
        assert buckets[:exact].unique().numel() == exact
        assert buckets[exact] == buckets[exact + 1]  # the first shared bucket
