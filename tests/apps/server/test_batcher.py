"""The batcher on its own, with a real tiny translator: requests queued together are decoded in
shared batches grouped by options, longest sentences first, cut at the token budget, and each
request gets exactly its own translations back; a cancelled request is skipped; the queue is
bounded."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from qkv.apps.server import Batcher, Pending, QueueFull
from qkv.apps.translator import Translator
from qkv.decode.options import DecodeOptions
from qkv.runtime.runtime_options import RuntimeOptions
from sentences import EN  # tests/sentences.py

SHORT = DecodeOptions(beam=2, max_len_b=6)


class Recording(Translator):
    """A translator that records the source ids of each batch it decodes."""

    calls: list[tuple[list[list[int]], DecodeOptions]]

    def decode(self, job, **kwargs):  # type: ignore[override]
        self.calls.append((list(job.ids), job.options))
        return super().decode(job, **kwargs)


def request(translator: Translator, texts: list[str], options: DecodeOptions, **kwargs) -> Pending:
    """A request of these texts, prepared by the translator."""
    return Pending("en-zh", translator.prepare(texts, options), **kwargs)


@pytest.fixture
def translator(model_dir: Path) -> Recording:
    plain = Translator.load(model_dir)
    recording = Recording(plain.model, plain.tokenizer, RuntimeOptions(batch_tokens=40))
    recording.calls = []
    return recording


def test_queued_requests_share_sorted_batches_and_get_their_own_results(translator: Recording) -> None:
    batcher = Batcher({"en-zh": translator}, max_wait=0.05)  # batches of the translator's 40 tokens
    texts = [EN[0:3], EN[3:4], EN[4:8]]
    jobs = [request(translator, t, SHORT) for t in texts]
    other = request(translator, EN[8:10], SHORT.replace(beam=1))
    for job in [*jobs, other]:
        batcher.submit(job)  # all queued before the worker starts: gathered together
    batcher.start()
    results = [job.future.result(timeout=60) for job in jobs]
    other_results = other.future.result(timeout=60)
    batcher.stop(timeout=60)

    encode = translator.tokenizer.encode_src
    shared = [ids for ids, options in translator.calls if options == SHORT]
    assert sorted(x for batch in shared for x in batch) == sorted(encode(EN[0:8]))  # one group
    lengths = [len(x) for batch in shared for x in batch]
    assert lengths == sorted(lengths, reverse=True)  # longest first, across requests
    assert len(shared) > 1  # cut at the token budget
    for batch in shared:
        longest = max(len(x) for x in batch) + 1
        assert len(batch) == 1 or len(batch) * longest <= 40
    greedy = [x for ids, options in translator.calls if options.beam == 1 for x in ids]
    assert sorted(greedy) == sorted(encode(EN[8:10]))  # other options: a group of their own

    alone = Translator(translator.model, translator.tokenizer)
    for job_texts, got in zip(texts, results, strict=True):
        want = alone.translate_detailed(job_texts, SHORT)
        assert [r.text for r in got] == [r.text for r in want]
    assert [r.text for r in other_results] == alone.translate(EN[8:10], SHORT.replace(beam=1))


def test_a_cancelled_request_is_not_decoded_and_the_queue_is_bounded(translator: Recording) -> None:
    batcher = Batcher({"en-zh": translator}, max_queue=2)
    gone, kept = request(translator, [EN[0]], SHORT), request(translator, [EN[1]], SHORT)
    batcher.submit(gone)
    batcher.submit(kept)
    with pytest.raises(QueueFull):
        batcher.submit(request(translator, [EN[2]], SHORT))
    gone.future.cancel()  # its caller gave up (a timeout)
    batcher.start()
    assert [r.text for r in kept.future.result(timeout=60)] == translator.translate([EN[1]], SHORT)
    batcher.stop(timeout=60)
    decoded = [ids for batch, _ in translator.calls for ids in batch]
    assert translator.encode([EN[0]])[0] not in decoded


def test_a_traced_job_runs_alone_on_the_decoding_thread_in_its_turn(translator: Recording) -> None:
    """The explain view's search goes through the batcher: its function runs on the worker thread
    (one model, one thread), cheapest first among what was gathered, not when cancelled, and its
    error fails that job alone."""
    ran: list[tuple[str, str]] = []

    def traced(name: str, fail: bool = False):
        def run(t: Translator) -> str:
            ran.append((name, threading.current_thread().name))
            if fail:
                raise ValueError("no trace")
            return f"{name}: {t.translate([EN[0]], SHORT)[0]}"
        return run

    large = request(translator, [EN[1]], SHORT.replace(beam=4, max_len_b=40), traced=traced("large"))
    jobs = [
        large,
        request(translator, [EN[1]], SHORT, traced=traced("small")),
        request(translator, [EN[1]], SHORT, traced=traced("gone")),
        request(translator, [EN[1]], SHORT, traced=traced("failing", fail=True)),
        request(translator, [EN[2]], SHORT),
    ]
    batcher = Batcher({"en-zh": translator}, max_wait=0.05)
    for job in jobs:
        batcher.submit(job)
    jobs[2].future.cancel()
    batcher.start()
    assert large.future.result(timeout=60) == f"large: {translator.translate([EN[0]], SHORT)[0]}"
    with pytest.raises(ValueError, match="no trace"):
        jobs[3].future.result(timeout=60)
    assert [r.text for r in jobs[4].future.result(timeout=60)] == translator.translate([EN[2]], SHORT)
    batcher.stop(timeout=60)
    assert [name for name, _ in ran] == ["small", "failing", "large"]
    assert {thread for _, thread in ran} == {"qkv-decoder"}


class SteppingIn(Translator):
    """A translator that submits `arrivals` to the batcher at step `at` of the first batch it
    decodes, and records, for each of them, the first batch's steps when it was answered."""

    def decode(self, job, *, abandoned=None, **kwargs):  # type: ignore[override]
        first = not self.steps
        if first:
            asked = abandoned

            def abandoned(row: int) -> bool:
                self.steps.append(row)
                if len(self.steps) == self.at:
                    for job in self.arrivals:
                        job.future.add_done_callback(lambda _: self.answered.append(len(self.steps)))
                        self.batcher.submit(job)
                return asked(row)

        return super().decode(job, abandoned=abandoned, **kwargs)


def stepping_in(
    model_dir: Path, large: DecodeOptions, arrivals: list[Pending], requests: int = 1
) -> SteppingIn:
    """Decode `requests` large requests in one round (one batch) while `arrivals` come."""
    plain = Translator.load(model_dir)
    t = SteppingIn(plain.model, plain.tokenizer)
    t.steps, t.answered, t.at, t.arrivals = [], [], 10, arrivals
    t.batcher = Batcher({"en-zh": t})
    jobs = [request(plain, [EN[0]], large) for _ in range(requests)]
    for job in jobs:
        t.batcher.submit(job)
    t.batcher.start()
    got = [job.future.result(timeout=120) for job in jobs]
    t.batcher.stop(timeout=120)
    alone = Translator(plain.model, plain.tokenizer).translate([EN[0]], large)
    assert all([r.text for r in g] == alone for g in got)
    return t


def test_a_small_request_steps_in_between_the_steps_of_a_large_one(model_dir: Path) -> None:
    large = DecodeOptions(beam=4, min_len=300, max_len_b=300)  # 4 x 300: 1,200 decode tokens
    small = request(Translator.load(model_dir), [EN[1]], SHORT)  # 2 x 6: 12, under a quarter
    t = stepping_in(model_dir, large, [small])
    # answered before the large batch's next step, and the large one went on after it
    assert t.answered == [10]
    assert len(t.steps) > 100
    assert [r.text for r in small.future.result()] == t.translate([EN[1]], SHORT)


def test_a_request_as_large_waits_for_the_round_and_is_batched_after_it(model_dir: Path) -> None:
    large = DecodeOptions(beam=4, min_len=300, max_len_b=300)
    similar = request(Translator.load(model_dir), [EN[1]], large.replace(min_len=250))  # 4 x 300
    t = stepping_in(model_dir, large, [similar], requests=4)  # a round of 4 such requests
    assert t.answered == [len(t.steps)]  # after the large one's last step


def test_rounds_stepping_in_take_at_most_half_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from qkv.apps.server import batcher

    clock = [100.0]
    monkeypatch.setattr(batcher.time, "perf_counter", lambda: clock[0])
    r = batcher._Round(1000)
    clock[0] += 1.0
    r.stepped_in = 0.5  # half of the round's second so far
    assert r.may_step_in()
    r.stepped_in = 0.51
    assert not r.may_step_in()
