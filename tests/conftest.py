"""Shared test fixtures. Tests run on CPU in float32 with one intra-op thread: tiny models gain nothing from
more, and one thread does not slow down many-fold when another process competes for the cores (OpenMP
threads spin while they wait). On a machine with a GPU the tests see none (CUDA_VISIBLE_DEVICES is emptied
before torch first asks), so that `device: auto` resolves to the CPU there as in CI and the oracles'
tolerances are the CPU's."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from qkv.apps.demo import DemoResult, run_demo

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # subprocesses inherit it


@pytest.fixture(autouse=True)
def _seed_and_one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def short_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    """The demo's number task trained briefly (600 updates on 5,000 numbers up to 9999), its model
    directory and its 300 test translations (200 held out, every 1- and 2-digit number): trained once
    for the tests that need a model that has learned something."""
    return run_demo(tmp_path_factory.mktemp("demo") / "demo", steps=600, n_test=200,
                    synthetic_max_value=9999, synthetic_train=5000)
