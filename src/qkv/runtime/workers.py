"""Batches decoded side by side on worker threads: throughput mode (CTranslate2's `inter_threads`).

PyTorch runs each operation on all of its intra-op threads, and a decoder step is a few hundred
small operations: the threads meet at the end of every one of them, and at batch 1 most operations
are too small to split at all. Workers instead decode *different* batches at the same time, each on
its own share of the cores. This works with threads, not processes, because torch's intra-op thread
count belongs to the calling thread (`torch.set_num_threads` in a worker sets it for that worker's
operations, OpenMP and MKL alike) and its kernels release the GIL; the model's weights are shared,
not copied.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


def map_in_workers(fn: Callable[[T], R], jobs: Sequence[T], workers: int = 1) -> list[R]:
    """[fn(job) for job in jobs], computed by `workers` threads that each give torch an equal share
    (at least one) of its current intra-op threads. Results come back in job order.

    fn must not change shared state: decoding functions qualify (the model is read-only in eval mode
    and every call makes its own cache).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1 or len(jobs) <= 1:
        return [fn(job) for job in jobs]
    total = torch.get_num_threads()
    share = max(1, total // workers)
    try:
        with ThreadPoolExecutor(
            min(workers, len(jobs)), initializer=torch.set_num_threads, initargs=(share,)
        ) as pool:
            return list(pool.map(fn, jobs))
    finally:
        torch.set_num_threads(total)  # also the count that threads started later begin with


__all__ = ["map_in_workers"]
