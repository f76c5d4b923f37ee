"""Shared test fixtures. Tests run on CPU in float32 with one intra-op thread: tiny models gain nothing from
more, and one thread does not slow down many-fold when another process competes for the cores (OpenMP
threads spin while they wait)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
