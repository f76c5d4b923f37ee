"""Worker processes (`map_in_workers(..., processes=True)` and `ForkedWorkers`): forked, one torch
thread each, results in job order, the same decoding as one process, and a failure raised instead of a
hang."""

from __future__ import annotations

import copy
import os
from concurrent.futures.process import BrokenProcessPool

import pytest
import torch

from qkv.decode.search import greedy
from qkv.runtime.packed import pack_linear_weights, packing_available
from qkv.runtime.workers import ForkedWorkers, can_fork, map_in_workers
from tiny_models import batch, random_sources, tiny_model

pytestmark = pytest.mark.skipif(not can_fork(), reason="worker processes need fork")


def test_processes_are_forked_with_one_thread_each_and_answer_in_order() -> None:
    parent = os.getpid()

    def where(x: int) -> tuple[int, int, int]:
        return x * x, os.getpid(), torch.get_num_threads()

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.randn(256, 256) @ torch.randn(256, 256)  # the parent's OpenMP pool runs
        seen = map_in_workers(where, [3, 1, 2, 5], workers=2, processes=True)
        assert torch.get_num_threads() == 2  # the caller's count is untouched
    finally:
        torch.set_num_threads(before)
    assert [square for square, _, _ in seen] == [9, 1, 4, 25]
    pids = {pid for _, pid, _ in seen}
    assert parent not in pids and 1 <= len(pids) <= 2
    assert {threads for _, _, threads in seen} == {1}  # two would hang GNU OpenMP after a fork


@pytest.mark.skipif(not packing_available(), reason="this torch build has no oneDNN packed linear")
def test_packed_model_in_worker_processes_decodes_as_one_process() -> None:
    model = tiny_model(d_model=64, d_ff=128)
    packed = pack_linear_weights(copy.deepcopy(model))
    batches = [batch(random_sources(4, seed=s, max_len=9)) for s in range(4)]
    alone = [[h.tokens for h in greedy(model, b, max_len=12)] for b in batches]

    def decode(b: torch.Tensor) -> list[list[int]]:
        return [h.tokens for h in greedy(packed, b, max_len=12)]

    assert map_in_workers(decode, batches, workers=2, processes=True) == alone


def _exit_on_one(x: int) -> int:
    if x == 1:
        os._exit(3)  # a worker killed mid-job (out of memory, a signal)
    return x


def _raise(x: int) -> int:
    raise ValueError(f"job {x} is bad")


def test_a_failing_job_raises_in_the_caller() -> None:
    with pytest.raises(BrokenProcessPool):
        map_in_workers(_exit_on_one, [0, 1, 2], workers=2, processes=True)
    with pytest.raises(ValueError, match="job 0 is bad"):
        map_in_workers(_raise, [0, 1], workers=2, processes=True)
    with pytest.raises(ValueError, match="workers"):
        map_in_workers(_raise, [0, 1], workers=0, processes=True)


def test_forked_workers_fork_once_and_serve_many_calls() -> None:
    """ForkedWorkers keeps its processes: a second map runs in the same ones, fn (a closure, which does
    not pickle) comes from the fork, and a worker that dies breaks that map only."""
    parent, offset = os.getpid(), 10

    def where(x: int) -> tuple[int, int, int]:
        return x + offset, os.getpid(), torch.get_num_threads()

    with ForkedWorkers(where, workers=2) as workers:
        first = workers.map([3, 1, 2, 5])
        second = workers.map([7, 8])
        assert [y for y, _, _ in first] == [13, 11, 12, 15] and [y for y, _, _ in second] == [17, 18]
        pids = {pid for _, pid, _ in first + second}
        assert parent not in pids and 1 <= len(pids) <= 2  # the same processes both times
        assert {threads for _, _, threads in first + second} == {1}
    with ForkedWorkers(_exit_on_one, workers=2) as dying:
        with pytest.raises(BrokenProcessPool):
            dying.map([0, 1, 2])
        assert dying.map([0, 2]) == [0, 2]  # forked afresh
    with pytest.raises(ValueError, match="workers"):
        ForkedWorkers(where, workers=0)
