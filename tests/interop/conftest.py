"""OPUS-MT-shaped Marian directories built offline (tests/marian_models.py), one per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from marian_models import build_marian_dir


@pytest.fixture(scope="session")
def marian_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Marian directory with one shared vocabulary (and >>fra<< / >>deu<< language tokens)."""
    return build_marian_dir(tmp_path_factory.mktemp("marian") / "opus-mt-en-fr", separate=False)


@pytest.fixture(scope="session")
def marian_separate_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Marian directory with separate source and target vocabularies."""
    return build_marian_dir(tmp_path_factory.mktemp("marian") / "opus-mt-sep", separate=True)
