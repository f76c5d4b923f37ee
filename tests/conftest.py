"""Shared test fixtures. Tests run on CPU in float32 unless they say otherwise."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads() -> None:
    torch.manual_seed(0)
