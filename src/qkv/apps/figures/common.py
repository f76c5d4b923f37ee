"""What every figure shares: the PNG resolution, the padding id, a seeded block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

DPI = 100
PAD = 0


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """torch's global generator seeded inside the block and restored after it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
