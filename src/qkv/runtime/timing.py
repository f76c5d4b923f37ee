"""Timing a call: warm-up calls, then timed rounds; the median and the best second per call.

    timing = time_calls(lambda: model(src, tgt), repeats=5)
    timing.seconds, timing.best_seconds     # median and fastest seconds per call
    time_calls(fn, 7, min_seconds=0.02)     # rounds of as many calls as fill 20 ms

A call that queues work on a GPU must synchronize before it returns. Standard library only, so the
benchmark scripts load this file alone in processes that never import torch
(benchmarks/common.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """What `time_calls` measured. `rounds` holds each round's seconds per call; `wall_seconds` is
    the wall-clock time of all timed rounds together; `result` is the last call's return value."""

    rounds: list[float]
    calls: int
    wall_seconds: float
    result: Any

    @property
    def seconds(self) -> float:
        """The median round's seconds per call."""
        return statistics.median(self.rounds)

    @property
    def best_seconds(self) -> float:
        """The fastest round's seconds per call."""
        return min(self.rounds)


def time_calls(
    run: Callable[[], Any],
    repeats: int,
    *,
    warmup: int = 1,
    calls: int = 1,
    min_seconds: float = 0.0,
) -> Timing:
    """`warmup` untimed calls of `run`, then `repeats` timed rounds of `calls` calls each.

    With `min_seconds` > 0, untimed calls after the warm-up count how many calls fill
    `min_seconds` (at least one), and each round makes that many calls instead of `calls`: a call
    too short for the clock is timed in a round long enough to time.
    """
    result = None
    for _ in range(warmup):
        result = run()
    if min_seconds > 0:
        start, calls = time.perf_counter(), 0
        while calls == 0 or time.perf_counter() - start < min_seconds:
            result = run()
            calls += 1
    rounds = []
    start = time.perf_counter()
    for _ in range(repeats):
        begin = time.perf_counter()
        for _ in range(calls):
            result = run()
        rounds.append((time.perf_counter() - begin) / calls)
    return Timing(rounds, calls, time.perf_counter() - start, result)
