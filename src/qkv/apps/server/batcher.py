"""Batching under load: the sentences of requests that arrive together, decoded in shared batches.

    batcher = Batcher({"en-de": translator}, max_queue=256, max_wait=0.005); batcher.start()
    job = translator.prepare(["Hello."], DecodeOptions())   # encoded once, its work counted
    future = batcher.submit(Pending("en-de", job))          # a concurrent.futures.Future
    translations = future.result()                          # [Translation], in order
    batcher.stop()                                          # finishes what is queued

One thread owns the models. It gathers the requests that arrive within `max_wait` of the oldest,
joins those of one pair and options into one job (`Job.joined`), cheapest job first, and decodes
it in batches of at most `runtime.batch_tokens` padded source tokens, longest sentences first;
each request gets its own translations, which do not depend on what else shared its batch (scores
to float32 rounding). Small requests step in between a large round's steps (`_step_in`), a
request whose caller gave up leaves at the next step, the queue is bounded (QueueFull), and a
traced request (`Pending.traced`, the explain view's search) runs alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from ...data.batching import sorted_batches
from ...decode.options import DecodeOptions
from ..translation import Extras, Job
from ..translator import Translation, Translator

log = logging.getLogger("qkv.serve")
STEP_IN_FROM = 1024  # the work (decode tokens) of a round's largest request that others step into


class QueueFull(Exception):
    """The batcher's queue holds `max_queue` requests; the caller should retry later."""


@dataclass(eq=False)
class Pending:
    """One request waiting for its translations: the `Job` of its sentences (its pair's
    `Translator.prepare`'s) and the future that gets them."""

    pair: str
    job: Job
    # a request decoded alone, by this function of its pair's translator (the explain view's
    # traced search): its future gets what the function returns, not translations
    traced: Callable[[Translator], Any] | None = None
    future: Future[Any] = field(default_factory=Future)
    results: list[Translation | None] = field(init=False)
    waiting: int = field(init=False)  # sentences not yet translated

    def __post_init__(self) -> None:
        self.results = [None] * len(self.job.texts)
        self.waiting = len(self.job.texts)


@dataclass
class BatchStats:
    """What one decoded batch held, for the metrics."""

    pair: str
    sentences: int
    source_tokens: int
    target_tokens: int
    seconds: float
    steps: int = 0  # sentence-steps: each sentence counted at each step it was decoded


class Batcher:
    """A decoding worker thread fed by a bounded queue of `Pending` requests (see the module
    docstring)."""

    def __init__(
        self,
        translators: dict[str, Translator],
        *,
        max_queue: int = 256,
        max_wait: float = 0.005,
        collect_tokens: int | None = None,
        batching: bool = True,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        """max_wait: seconds to wait for more requests after the first (0: take what is there).
        collect_tokens: stop gathering at this many source tokens (default: 4 batches' worth, by
        the translators' largest `runtime.batch_tokens`).
        batching=False: one request at a time, each decoded alone (for comparison)."""
        if max_queue < 1 or max_wait < 0:
            raise ValueError("max_queue must be >= 1 and max_wait >= 0")
        self.translators = translators
        self.max_queue = max_queue
        self.max_wait = max_wait
        largest = max(t.runtime.batch_tokens for t in translators.values())
        self.collect_tokens = collect_tokens or 4 * largest
        self.batching = batching
        self.on_batch = on_batch
        self._queue: deque[Pending] = deque()
        self._running: list[Pending] = []  # the requests being decoded
        self._round = _Round(0)  # the work being decoded, and the rounds stepping into it
        self._submitted = 0  # jobs ever queued (a round looks at the queue when it changed)
        self._cv = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="qkv-decoder", daemon=True)

    @property
    def depth(self) -> int:
        """Requests waiting (not counting the ones being decoded)."""
        return len(self._queue)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Decode what is queued, then end the worker thread."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join(timeout)

    def abandon(self, error: Exception) -> int:
        """Fail every queued and running job with `error`; how many were not yet answered."""
        with self._cv:
            jobs = [*self._queue, *self._running]
            self._queue.clear()
        return sum(_settle(job, exception=error) for job in jobs)

    def submit(self, job: Pending) -> Future[Any]:
        """Queue a request; its future gets the translations. QueueFull when the queue is full."""
        if job.pair not in self.translators:
            raise KeyError(job.pair)
        if not job.job.texts:
            job.future.set_result([])
            return job.future
        with self._cv:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if len(self._queue) >= self.max_queue:
                raise QueueFull(f"{len(self._queue)} requests are waiting (--max-queue)")
            self._queue.append(job)
            self._submitted += 1
            self._cv.notify()
        return job.future

    # --- the worker thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            jobs = self._collect()
            if not jobs:
                return
            self._running = jobs
            self._round = _Round(max(p.job.work for p in jobs), seen=self._submitted)
            try:
                self._decode_safely(jobs)
            finally:
                self._running = []

    def _decode_safely(self, jobs: list[Pending]) -> None:
        try:
            self._decode(jobs)
        except Exception as e:  # a bug, not the caller's mistake: fail these requests only
            log.exception("decoding failed")
            for job in jobs:
                _settle(job, exception=e)

    def _step_in(self) -> None:
        """Between two decoding steps of the running round, when its largest request may decode
        `STEP_IN_FROM` tokens or more (ordinary rounds share batches instead): decode at once, as
        a round of their own, the waiting requests of at most a quarter of its work, while they
        have had at most half the round's time; requests as large wait for the round to end.
        So an ordinary request waits for one step of a large one, not for all of it, and a flood
        of small ones slows a large one by half, never stops it."""
        r = self._round
        if r.work < STEP_IN_FROM or r.inside or r.seen == self._submitted or not self.batching:
            return  # asked at each row of each step; ordinary rounds: later requests share batches
        if not r.may_step_in():
            return
        with self._cv:
            r.seen = self._submitted
            small = [job for job in self._queue if 4 * job.job.work <= r.work]
            for job in small:
                self._queue.remove(job)
        if not small:
            return
        self._running = [*self._running, *small]
        r.inside = True
        begin = time.perf_counter()
        try:
            self._decode_safely(small)
        finally:
            r.inside = False
            r.stepped_in += time.perf_counter() - begin

    def _collect(self) -> list[Pending]:
        """The oldest waiting job and those that arrive within max_wait (up to collect_tokens
        source tokens); [] when stopping with nothing queued."""
        with self._cv:
            while not self._queue and not self._stopping:
                self._cv.wait()
            if not self._queue:
                return []
            jobs = [self._queue.popleft()]
            if not self.batching:
                return jobs
            tokens = _tokens(jobs[0])
            end = time.monotonic() + self.max_wait
            while tokens < self.collect_tokens:
                if not self._queue:
                    left = end - time.monotonic()
                    if left <= 0 or self._stopping:
                        break
                    self._cv.wait(left)
                    continue
                jobs.append(self._queue.popleft())
                tokens += _tokens(jobs[-1])
            return jobs

    def _decode(self, jobs: list[Pending]) -> None:
        """Decode the requests' sentences in shared batches, by (pair, options), cheapest group
        first, longest sentences first within a group; a traced one alone, in its cost's turn."""
        members: dict[tuple[str, DecodeOptions, bool], list[Pending]] = {}
        for p in jobs:  # constrained searches apart: a plain batch stays on the fast path
            if p.traced is None:
                key = (p.pair, p.job.options, bool(p.job.constraints))
                members.setdefault(key, []).append(p)
        parts: list[_Group | Pending] = [
            _Group(pair, self.translators[pair], same) for (pair, _, _), same in members.items()
        ]
        parts += [p for p in jobs if p.traced is not None]
        for part in sorted(parts, key=lambda p: p.job.work):
            if isinstance(part, Pending):
                self._decode_traced(part)
            else:
                self._decode_group(part)

    def _decode_group(self, group: _Group) -> None:
        ids = group.job.ids
        empty = [k for k, x in enumerate(ids) if not x]  # answered without decoding
        batches = sorted_batches(ids, group.translator.runtime.batch_tokens)
        for batch in [empty] * bool(empty) + batches:
            live = [k for k in batch if not group.sentences[k][0].future.done()]
            if live:
                self._decode_batch(group, live)

    def _decode_traced(self, job: Pending) -> None:
        """A traced request, unless its caller gave up; its function's error fails it alone."""
        if job.future.done() or job.traced is None:
            return
        try:
            result = job.traced(self.translators[job.pair])
        except Exception as e:
            _settle(job, exception=e)
            return
        _settle(job, result=result)

    def _decode_batch(self, group: _Group, live: list[int]) -> None:
        """Decode sentences `live` of a group; settle each job whose last sentence this was."""
        owners = [group.sentences[k][0] for k in live]
        steps = 0

        def abandoned(row: int) -> bool:  # asked about each sentence at each step
            nonlocal steps
            steps += 1
            self._step_in()
            return owners[row].future.done()

        wanted = [p.job.extras for p in owners]
        extras = Extras(any(e.attention for e in wanted), any(e.alignment for e in wanted))
        start = time.perf_counter()
        try:
            rows = group.job.rows(live, extras)
            results = group.translator.decode(rows, abandoned=abandoned, workers=1)
        except Exception as e:
            log.exception("decoding failed")
            for job in set(owners):
                _settle(job, exception=e)
            return
        if self.on_batch is not None:
            seconds = time.perf_counter() - start
            done = [r for r in results if r is not None]
            sources = sum(len(group.job.ids[k]) + 1 for k in live)
            targets = sum(len(r.tokens) + 1 for r in done)
            stats = BatchStats(group.pair, len(live), sources, targets, seconds, steps)
            self.on_batch(stats)
        for k, result in zip(live, results, strict=True):
            job, i = group.sentences[k]
            if result is None:  # dropped: its caller gave up
                continue
            job.results[i] = result
            job.waiting -= 1
            if job.waiting == 0:
                _settle(job, result=job.results)


class _Group:
    """The sentences of the gathered requests that share a language pair and decoding options:
    one job, and each of its sentences' (request, index in the request)."""

    def __init__(self, pair: str, translator: Translator, pending: list[Pending]) -> None:
        self.pair, self.translator = pair, translator
        self.sentences = [(p, i) for p in pending for i in range(len(p.job.texts))]
        self.job = Job.joined([p.job for p in pending])


class _Round:
    """The work (decode tokens) of the largest request of the round being decoded, and the time
    that the rounds stepping in between its steps took."""

    def __init__(self, work: int, seen: int = 0) -> None:
        self.work = work
        self.seen = seen  # the batcher's count of queued jobs when it last looked
        self.start = time.perf_counter()
        self.stepped_in = 0.0  # seconds
        self.inside = False  # a round is stepping in now (they do not nest)

    def may_step_in(self) -> bool:
        """Whether the rounds stepping in have had at most half of the time so far."""
        return 2 * self.stepped_in <= time.perf_counter() - self.start


def _tokens(p: Pending) -> int:
    """A request's source tokens, eos counted."""
    return sum(len(x) + 1 for x in p.job.ids)


def _settle(job: Pending, result: Any = None, exception: Exception | None = None) -> bool:
    """Give a job's future its result or exception, unless it has one or its caller gave up on
    it; whether it was given."""
    try:
        if exception is not None:
            job.future.set_exception(exception)
        else:
            job.future.set_result(result)  # type: ignore[arg-type]
    except InvalidStateError:  # cancelled or settled meanwhile
        return False
    return True


__all__ = ["BatchStats", "Batcher", "Pending", "QueueFull"]
