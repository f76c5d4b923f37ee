"""Fixtures for the decoding tests (the tiny models themselves are in tiny_models.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and lose a lot when another process holds a core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
