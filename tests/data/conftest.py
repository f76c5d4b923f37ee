"""Fixtures for the data tests."""

from pathlib import Path

import pytest

from shared_corpora import SHARED_DATA


@pytest.fixture
def shared_data() -> Path:
    """The read-only corpora in `../shared/data` next to the project root; skips the test when absent."""
    path = SHARED_DATA
    if not path.is_dir():
        pytest.skip(f"shared corpora not found at {path}")
    return path
