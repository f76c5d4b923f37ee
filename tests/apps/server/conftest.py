"""The server the API and page tests share (one process for the session)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import KEY, PAIR, SERVED, Server, running


@pytest.fixture(scope="session")
def server(model_dir: Path) -> Iterator[Server]:
    """An API key and small limits, so that each limit is reached with small requests; short
    outputs by default (SERVED), so that the random model's translations are quick."""
    with running(
        model_dir, "--pair", PAIR, "--api-key", KEY, "--max-chars", "600", "--max-sentences", "40",
        "--max-body-bytes", "6000", "--max-beam", "6", "--max-wait-ms", "20",
        "--beam", str(SERVED.beam), "--max-len-b", str(SERVED.max_len_b),
        "--cors", "https://example.org",
    ) as s:
        yield s
