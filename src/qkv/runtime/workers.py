"""Batches decoded side by side: throughput mode (CTranslate2's `inter_threads`).

A decoder step is a few hundred small operations, each run on all of torch's intra-op threads,
which meet at the end of every one; workers instead decode *different* batches at the same time,
each on its own share of the cores. Threads share everything, but the Python work between the
kernels holds the GIL; processes (`processes=True`, forked, the weights shared copy-on-write) run
it side by side too. `map_in_workers` forks per call, `ForkedWorkers` once for many calls; either
way the calling program should have no other threads at work at the fork (not a server).

Details: docs/architecture.md, "Workers"; the measurements: docs/benchmarks.md, "Speed: qkv,
Hugging Face and CTranslate2".
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")

_INSTALLED: Callable[[Any], Any] | None = None  # what a ForkedWorkers process runs


def can_fork() -> bool:
    """Whether this system starts processes by fork (Linux does; Windows and macOS spawn)."""
    return "fork" in multiprocessing.get_all_start_methods()


def map_in_workers(
    fn: Callable[[T], R], jobs: Sequence[T], workers: int = 1, processes: bool = False
) -> list[R]:
    """[fn(job) for job in jobs], computed by `workers` threads that each give torch an equal share
    (at least one) of its current intra-op threads, or by `workers` forked processes of one torch
    thread each (`ForkedWorkers`, forked for this call). Results come back in job order.

    fn must not change shared state: decoding functions qualify (the model is read-only in eval mode
    and every call makes its own cache). With processes, jobs and results must pickle.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if processes and not can_fork():
        raise ValueError("worker processes need a system that forks (Linux); use threads")
    if workers == 1 or len(jobs) <= 1:
        return [fn(job) for job in jobs]
    if processes:  # forked for this call only
        with ForkedWorkers(fn, min(workers, len(jobs))) as forked:
            return forked.map(jobs)
    total = torch.get_num_threads()
    share = max(1, total // workers)
    try:
        with ThreadPoolExecutor(
            min(workers, len(jobs)), initializer=torch.set_num_threads, initargs=(share,)
        ) as pool:
            return list(pool.map(fn, jobs))
    finally:
        torch.set_num_threads(total)  # also the count that threads started later begin with


class ForkedWorkers:
    """`workers` processes forked from this one at the first `map`, one torch thread each, kept
    for every later `map` until `close` (or the end of the program): `map_in_workers(fn, jobs,
    workers, processes=True)` without a fork per call.

    fn is inherited at the fork, not pickled: it runs on the objects of the moment of the fork,
    so what it reads must not change afterwards (a decoding model in eval mode). Jobs and results
    are pickled; a worker takes them one at a time, so a long job does not hold back the others. A
    worker that dies raises BrokenProcessPool here instead of leaving the call waiting; the next
    `map` forks afresh.
    """

    def __init__(self, fn: Callable[[T], R], workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not can_fork():
            raise ValueError("worker processes need a system that forks (Linux); use threads")
        self.fn, self.workers = fn, workers
        self._pool: ProcessPoolExecutor | None = None

    def map(self, jobs: Sequence[T]) -> list[R]:
        """[fn(job) for job in jobs], in job order, on the workers."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_install,
                initargs=(self.fn,),  # a forked process inherits it: nothing pickled
            )
        try:
            return list(self._pool.map(_run_installed, jobs))
        except BrokenProcessPool:
            self.close()
            raise

    def close(self) -> None:
        """Stop the workers (a later `map` forks new ones)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self) -> ForkedWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _install(fn: Callable[[Any], Any]) -> None:
    global _INSTALLED
    torch.set_num_threads(1)
    _INSTALLED = fn


def _run_installed(job: Any) -> Any:
    assert _INSTALLED is not None, "runs in a process started by ForkedWorkers"
    return _INSTALLED(job)


__all__ = ["ForkedWorkers", "can_fork", "map_in_workers"]
