"""`qkv figures`: every figure is drawn (at small sizes) as a valid PNG, and the numbers it states hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from qkv.apps.cli import main
from qkv.apps.figures import ALL_FIGURES, crossover_length, layer_flops, make_figures

ROOT = Path(__file__).resolve().parents[2]


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    with Image.open(path) as image:
        image.verify()  # the whole file decodes
    with Image.open(path) as image:
        assert image.format == "PNG" and min(image.size) >= 200, (path, image.size)


def test_every_figure_is_drawn_as_a_png(tmp_path: Path) -> None:
    lines: list[str] = []
    paths = make_figures(tmp_path, small=True, report=lines.append)  # trains a tiny demo model too
    assert [p.name for p in paths] == [f"{name}.png" for name in ALL_FIGURES]
    for path in paths:
        assert_png(path)
    assert sum(str(p) in " ".join(lines) for p in paths) == len(paths)  # one summary line each
    again = make_figures(tmp_path / "again", small=True, only=["norms", "rope_score"], report=lines.append)
    for path in again:  # seeded: the same figure, byte for byte
        assert path.read_bytes() == (tmp_path / path.name).read_bytes(), path.name


def test_the_committed_figures_are_small_valid_pngs() -> None:
    committed = ROOT / "docs" / "figures"
    for name in ALL_FIGURES:
        assert_png(committed / f"{name}.png")
        assert (committed / f"{name}.png").stat().st_size < 150_000  # small files


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["figures", "--out", str(tmp_path), "--small", "--only", "masks", "temperature"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["masks.png", "temperature.png"]
    assert "masks.png" in capsys.readouterr().out
    assert main(["figures", "--out", str(tmp_path), "--demo-model", str(tmp_path / "none")]) == 2
    assert "is not a model directory" in capsys.readouterr().err


def test_score_flops_reach_the_linear_flops_at_2d_plus_d_ff() -> None:
    d, d_ff = 512, 2048
    assert crossover_length(d, d_ff) == 3072
    linear, scores = layer_flops(3072, d, d_ff)  # one qkv EncoderLayer, counted by torch's FlopCounterMode
    assert linear == scores == 4 * 3072**2 * d  # Q K^T and A V: 2 L^2 d each
    short_linear, short_scores = layer_flops(512, d, d_ff)
    assert short_linear == 2 * 512 * (4 * d * d + 2 * d * d_ff)  # W^Q, W^K, W^V, W^O; W_1, W_2
    assert short_linear == 6 * short_scores


def test_concepts_page_names_tests_that_exist() -> None:
    """Every `test_...` that docs/concepts.md names is a test function of the suite."""
    import re

    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(test_\w+)`", page))
    defined = {m for path in (ROOT / "tests").rglob("test_*.py")
               for m in re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M)}
    assert len(named) >= 10 and named <= defined, sorted(named - defined)
    for name in ALL_FIGURES:  # and every figure is on the page
        assert f"figures/{name}.png" in page, name
