"""Fixtures for the data tests."""

from pathlib import Path

import pytest


@pytest.fixture
def shared_data() -> Path:
    """The read-only corpora in `../shared/data` next to the project root; skips the test when absent."""
    path = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"shared corpora not found at {path}")
    return path
