"""Measure and decide (qkv.runtime.measure): the candidates take turns, and one rule picks."""

from __future__ import annotations

import pytest

from qkv.runtime import measure
from qkv.runtime.measure import alternate, fastest


def test_alternate_calls_the_runs_in_turn_after_a_warm_up_round() -> None:
    calls: list[str] = []

    def run(name: str):
        return lambda: calls.append(name) or len(calls)

    timed = alternate({"a": run("a"), "b": run("b")}, repeats=3)
    assert calls == ["a", "b"] * 4  # one warm-up round, then three timed ones
    assert [len(t.rounds) for t in timed.values()] == [3, 3]
    assert (timed["a"].result, timed["b"].result) == (7, 8)  # each run's last call
    assert all(t.seconds >= 0 and t.calls == 1 for t in timed.values())


def test_fastest_keeps_the_default_on_a_tie_and_within_the_margin() -> None:
    assert fastest({"default": {1: 1.0}, "other": {1: 1.0}}) == "default"
    assert fastest({"default": {1: 1.0}, "other": {1: 0.99}}) == "other"
    assert fastest({"default": {1: 1.0}, "other": {1: 0.95}}, margin=0.9) == "default"
    assert fastest({"default": {1: 1.0}, "other": {1: 0.9}}, margin=0.9) == "other"
    # times divided by the best at each row count: 1 row and 32 rows weigh alike
    both = {"default": {1: 1.0, 32: 10.0}, "other": {1: 2.0, 32: 4.0}}
    assert fastest(both) == "other"  # sums 1 + 2.5 against 2 + 1


def test_a_verdict_is_keyed_by_the_flags_its_kernels_need_and_the_code_that_made_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A verdict saved on a CPU with VNNI (or by other runtime code, whose paths and checks may
    differ) is not read back on one without it (or by this code): the keys differ."""
    shapes = [(8, 16), (8, 16), (16, 8)]
    avx2 = {"avx2", "fma"}
    with_vnni = avx2 | {"avx512f", "avx512_vnni"}
    assert measure.cache_key(shapes, avx2) != measure.cache_key(shapes, with_vnni)
    assert measure.cache_key(shapes, avx2) == measure.cache_key(shapes, avx2 | {"sse4_2"})
    assert "8x16*2 16x8*1" in measure.cache_key(shapes, avx2)
    before = measure.cache_key(shapes, avx2)
    monkeypatch.setattr(measure, "_code_digest", lambda: "other code")
    assert measure.cache_key(shapes, avx2) != before
