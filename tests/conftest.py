"""Shared test fixtures. Tests run on CPU in float32 with one intra-op thread: tiny models gain nothing from
more, and one thread does not slow down many-fold when another process competes for the cores (OpenMP
threads spin while they wait): the suite runs its files in one process per core (pytest-xdist,
pyproject.toml's addopts; `-n 0` for one process), and what several files need is made once. On a machine with a GPU the tests see none (CUDA_VISIBLE_DEVICES is emptied
before torch first asks), so that `device: auto` resolves to the CPU there as in CI and the oracles'
tolerances are the CPU's."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import torch
from filelock import FileLock

from qkv.apps.demo import DemoResult, run_demo

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # subprocesses inherit it
T = TypeVar("T")


def pytest_configure(config: pytest.Config) -> None:
    """OpenMP threads that wait for work sleep instead of spinning (OMP_WAIT_POLICY=PASSIVE), in
    every process that loads OpenMP after this point: pytest-xdist's workers, started later, and
    the `qkv` subprocesses. A spinning thread takes a core another process of the run needs."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with a `slow` test first, each file's tests in their own order: pytest-xdist hands
    files to its workers in this order (`--no-loadscope-reorder`, pyproject.toml), so the long
    ones start early and the quick ones fill the end (no worker idle while another finishes a
    long file)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(scope="session", autouse=True)
def _decoding_paths_in_a_temporary_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The default decoding path (qkv.runtime.choice) is measured into a cache of the tests' own,
    never the user's (subprocesses inherit it)."""
    os.environ["QKV_CACHE_DIR"] = str(tmp_path_factory.mktemp("qkv-cache"))


@pytest.fixture(scope="session", autouse=True)
def _float32_packed_is_the_fastest_path(
    _decoding_paths_in_a_temporary_cache: None,
) -> Iterator[None]:
    """In this process, the measured default path is float32 with packed weights, so that tests
    compare against float32 oracles whatever this CPU's timings (session-wide: models that
    fixtures of any scope load see it too); tests/runtime/test_choice.py checks the choice itself,
    with timings of its own. Its verdicts are cached under keys of their own: a `qkv` subprocess
    measures real timings into the same file, and its verdict (plain weights for batches, say)
    would otherwise be this process's too, the oracles' numbers then differing in the last bits."""
    from qkv.runtime import choice

    def fp32_packed_first(model: object, paths: list[tuple[str, bool]]) -> choice.Timings:
        rank = {("fp32", True): 1.0, ("fp32", False): 2.0}
        return {p: {rows: rank.get(p, 3.0) for rows in choice.ROWS} for p in paths}

    key = choice.cache_key
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(choice, "time_greedy_steps", fp32_packed_first)
        patch.setattr(choice, "cache_key", lambda *a: f"{key(*a)} | the tests' own timings")
        yield


@pytest.fixture(autouse=True)
def _seed_and_one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], T]) -> T:
    """make(folder) once per test run: with pytest-xdist's worker processes, the first to ask makes
    it under a file lock in the folder they share, and the others read what it saved (a pickle)."""
    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # the run's folder, above each worker's own
    with FileLock(str(root / f"{name}.lock")):
        saved = root / f"{name}.pickle"
        if saved.exists():
            return pickle.loads(saved.read_bytes())
        (root / name).mkdir(exist_ok=True)
        value = make(root / name)
        saved.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def short_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    """The demo's number task trained briefly (600 updates on 5,000 numbers up to 9999), its model
    directory and its 300 test translations (200 held out, every 1- and 2-digit number): trained once
    per test run for the tests that need a model that has learned something (they only read it)."""
    def train(folder: Path) -> DemoResult:
        return run_demo(folder / "demo", steps=600, n_test=200, synthetic_max_value=9999,
                        synthetic_train=5000)

    return made_once(tmp_path_factory, "short-demo", train)
