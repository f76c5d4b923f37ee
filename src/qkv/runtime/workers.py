"""Batches decoded side by side: throughput mode (CTranslate2's `inter_threads`).

PyTorch runs each operation on all of its intra-op threads, and a decoder step is a few hundred
small operations: the threads meet at the end of every one of them, and at batch 1 most operations
are too small to split at all. Workers instead decode *different* batches at the same time, each on
its own share of the cores (torch's intra-op thread count belongs to the calling thread or process).

Two kinds of worker:
- threads share the model and everything else; torch's kernels release the GIL, but the Python
  work between them (module calls, the search) holds it, so threads gain where the kernels are
  large (batch 32) and little where the steps are small (batch 1);
- processes (`processes=True`, on systems that fork) are forked from this one and share the model's
  weights copy-on-write: each has its own interpreter and GIL, so the Python work runs side by side
  too. Each runs one torch thread (GNU OpenMP's thread pool does not survive a fork: a forked child
  that asks it for two threads hangs), so give as many workers as cores. Each job's result comes
  back pickled. The fork happens per call, so the calling program should have no other threads at
  work at that moment (a command-line run, not a server).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")

_FORKED_TASK: tuple[Callable[[Any], Any], Sequence[Any]] | None = None  # what forked workers run
_FORK_LOCK = threading.Lock()  # one forked call at a time: the task is a module global


def can_fork() -> bool:
    """Whether this system starts processes by fork (Linux does; Windows and macOS spawn)."""
    return "fork" in multiprocessing.get_all_start_methods()


def map_in_workers(
    fn: Callable[[T], R], jobs: Sequence[T], workers: int = 1, processes: bool = False
) -> list[R]:
    """[fn(job) for job in jobs], computed by `workers` threads that each give torch an equal share
    (at least one) of its current intra-op threads, or by `workers` forked processes of one torch
    thread each. Results come back in job order.

    fn must not change shared state: decoding functions qualify (the model is read-only in eval mode
    and every call makes its own cache). With processes, its results must pickle.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if processes and not can_fork():
        raise ValueError("worker processes need a system that forks (Linux); use threads")
    if workers == 1 or len(jobs) <= 1:
        return [fn(job) for job in jobs]
    if processes:
        return _map_in_processes(fn, jobs, min(workers, len(jobs)))
    total = torch.get_num_threads()
    share = max(1, total // workers)
    try:
        with ThreadPoolExecutor(
            min(workers, len(jobs)), initializer=torch.set_num_threads, initargs=(share,)
        ) as pool:
            return list(pool.map(fn, jobs))
    finally:
        torch.set_num_threads(total)  # also the count that threads started later begin with


def _map_in_processes(fn: Callable[[T], R], jobs: Sequence[T], workers: int) -> list[R]:
    """The forked workers: they inherit fn and the jobs (nothing is pickled on the way in) and
    take job indices one at a time, so a long job does not hold back the others. A worker that
    dies raises BrokenProcessPool here instead of leaving the call waiting."""
    global _FORKED_TASK
    with _FORK_LOCK:
        _FORKED_TASK = (fn, jobs)
        try:
            with ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=torch.set_num_threads,
                initargs=(1,),
            ) as pool:
                return list(pool.map(_run_forked_job, range(len(jobs))))
        finally:
            _FORKED_TASK = None


def _run_forked_job(index: int) -> Any:
    assert _FORKED_TASK is not None, "runs in a worker forked by _map_in_processes"
    fn, jobs = _FORKED_TASK
    return fn(jobs[index])


__all__ = ["can_fork", "map_in_workers"]
