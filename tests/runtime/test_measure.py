"""Measure and decide (qkv.runtime.measure): the candidates take turns, and one rule picks."""

from __future__ import annotations

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
