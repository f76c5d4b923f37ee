"""The default decoding path (qkv.runtime.choice): the fastest measured path among those the CPU
supports, under what the user fixed; timings and CPU flags injected, so nothing here is timed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from qkv.runtime.choice import (
    candidates,
    choose_decoding_path,
    step_shapes,
    time_greedy_steps,
    with_plain_rows,
)
from qkv.runtime.measure import fastest
from qkv.runtime.packed import packing_available
from qkv.runtime.runtime_options import RuntimeOptions
from tiny_models import tiny_model

BF16 = {"avx512f", "avx512_bf16"}
AVX2 = {"avx2", "fma"}
needs_packing = pytest.mark.skipif(
    not (packing_available(torch.float32) and packing_available(torch.bfloat16)),
    reason="this torch build or CPU packs no float32 and bf16 weights",
)


def fake_measure(times: dict[tuple[str, bool], tuple[float, float]]):
    calls = []

    def measure(shapes, paths):
        calls.append(list(paths))
        return {p: dict(zip((1, 32), times[p], strict=True)) for p in paths}

    return measure, calls


def test_step_shapes_are_the_decoders_linear_layers_and_the_output_projection() -> None:
    model = tiny_model()
    shapes = step_shapes(model)
    cfg = model.config
    assert (cfg.d_model, cfg.target_vocab_size) in shapes  # the output projection
    assert (cfg.d_model, cfg.d_ff) in shapes and (cfg.d_ff, cfg.d_model) in shapes
    assert shapes.count((cfg.d_ff, cfg.d_model)) == cfg.n_decoder_layers  # not the encoder's


@needs_packing
def test_candidates_follow_the_flags_and_the_users_settings() -> None:
    assert candidates("auto", None, AVX2) == [("fp32", False), ("fp32", True)]
    assert candidates("auto", None, BF16) == [
        ("fp32", False), ("fp32", True), ("bf16", False), ("bf16", True)
    ]
    assert candidates("auto", False, BF16) == [("fp32", False), ("bf16", False)]
    assert candidates("fp32", True, BF16) == [("fp32", True)]
    with pytest.warns(UserWarning, match="emulated"):  # bf16 asked for where it is not native
        assert candidates("bf16", None, AVX2) == [("bf16", False), ("bf16", True)]


def test_packed_weights_take_one_row_plain_where_plain_decodes_one_row_faster() -> None:
    timings = {
        ("fp32", False): {1: 1.0, 32: 4.0},
        ("fp32", True): {1: 1.5, 32: 2.0},
        ("bf16", False): {1: 3.0, 32: 2.5},
        ("bf16", True): {1: 2.0, 32: 2.2},  # its plain twin is slower at one row: no third path
    }
    paths = with_plain_rows(timings)
    assert set(paths) == {(p, k, 0) for p, k in timings} | {("fp32", True, 1)}
    assert paths["fp32", True, 1] == {1: 1.0, 32: 2.0}  # the twin at one row, packed at 32
    assert fastest(paths) == ("fp32", True, 1)
    del timings["fp32", False]  # only measured twins count
    assert fastest(with_plain_rows(timings)) == ("fp32", True, 0)


def test_fastest_weighs_one_row_and_32_rows_alike() -> None:
    timings = {
        ("fp32", False): {1: 1.0, 32: 4.0},
        ("fp32", True): {1: 1.5, 32: 2.0},  # 1.5 + 1.0: the least sum of ratios to the best
        ("bf16", False): {1: 3.0, 32: 2.5},
    }
    assert fastest(timings) == ("fp32", True)
    timings["bf16", False] = {1: 1.0, 32: 2.0}
    assert fastest(timings) == ("bf16", False)


@needs_packing
def test_choice_is_measured_once_and_cached_per_cpu_and_shape(tmp_path: Path) -> None:
    model, cache = tiny_model(), tmp_path / "paths.json"
    times = {("fp32", False): (1.0, 9.0), ("fp32", True): (2.0, 3.0),
             ("bf16", False): (0.5, 8.0), ("bf16", True): (0.6, 1.0)}
    measure, calls = fake_measure(times)
    path = choose_decoding_path(model, "cpu", flags=BF16, measure=measure, cache=cache)
    # bf16 plain decodes one row faster (0.5 against 0.6 s), packed 32 rows: packed, one row plain
    assert (path.precision, path.pack, path.plain_rows) == ("bf16", True, 1)
    assert "measured now" in path.why and "(plain for one row)" in path.why
    assert "bf16 packed 600.00 / 1000.00 ms" in path.why  # the times behind the choice, printed
    again = choose_decoding_path(model, "cpu", flags=BF16, measure=measure, cache=cache)
    assert (again.precision, again.pack, again.plain_rows) == ("bf16", True, 1)
    assert "measured before" in again.why
    assert len(calls) == 1  # the second load read the verdict
    # a CPU without native bf16 has another key (and cannot take the cached bf16 verdict)
    path = choose_decoding_path(model, "cpu", flags=AVX2, measure=measure, cache=cache)
    assert (path.precision, path.pack) == ("fp32", True) and len(calls) == 2
    assert len(json.loads(cache.read_text())) == 2


@needs_packing
def test_the_users_settings_are_kept_and_a_bad_cache_is_measured_again(tmp_path: Path) -> None:
    model, cache = tiny_model(), tmp_path / "paths.json"
    times = {("fp32", False): (1.0, 1.0), ("fp32", True): (2.0, 2.0),
             ("bf16", False): (0.5, 0.5), ("bf16", True): (0.6, 0.6)}
    measure, calls = fake_measure(times)
    fixed = choose_decoding_path(model, "cpu", "fp32", True, BF16, measure, cache)
    assert (fixed.precision, fixed.pack, calls) == ("fp32", True, [])  # nothing left open
    path = choose_decoding_path(model, "cpu", "fp32", None, BF16, measure, cache)
    assert (path.precision, path.pack) == ("fp32", False) and calls == [[("fp32", False),
                                                                         ("fp32", True)]]
    cache.write_text("{not json")
    path = choose_decoding_path(model, "cpu", "auto", None, BF16, measure, cache)
    assert (path.precision, path.pack) == ("bf16", False) and len(calls) == 2


def test_time_greedy_steps_returns_a_time_per_path_and_row_count_and_leaves_the_model() -> None:
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    timings = time_greedy_steps(model, [("fp32", False)], steps=2, repeats=1)
    assert set(timings) == {("fp32", False)} and set(timings["fp32", False]) == {1, 32}
    assert all(t > 0 for t in timings["fp32", False].values())
    after = model.state_dict()  # the paths decode copies: the model is not prepared in place
    assert all(torch.equal(before[k], after[k]) for k in before) and model.training == tiny_model().training


def test_a_path_whose_hypotheses_are_wrong_here_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packed path made wrong (its weights moved): it decodes, and is not among the timed."""
    from qkv.runtime import choice

    real = choice.prepare_for_decoding

    def wrong(model: torch.nn.Module, runtime: RuntimeOptions) -> torch.nn.Module:
        out = real(model, runtime.replace(pack=False))
        if runtime.pack:
            with torch.no_grad():
                for p in out.parameters():
                    p.add_(0.1 * torch.randn_like(p))
        return out

    paths = [("fp32", False), ("fp32", True)]
    assert set(time_greedy_steps(tiny_model(), paths, steps=2, repeats=1)) == set(paths)
    monkeypatch.setattr(choice, "prepare_for_decoding", wrong)
    assert set(time_greedy_steps(tiny_model(), paths, steps=2, repeats=1)) == {("fp32", False)}


@pytest.mark.parametrize(
    ("precision", "cudnn", "warned"), [("bf16", True, 1), ("bf16", False, 0), ("fp32", True, 0)]
)
def test_bf16_on_cuda_with_cudnn_attention_on_says_how_to_turn_it_off(
    monkeypatch: pytest.MonkeyPatch, precision: str, cudnn: bool, warned: int
) -> None:
    monkeypatch.setattr("qkv.runtime.choice.resolve_precision", lambda setting, device: setting)
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: cudnn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = choose_decoding_path(tiny_model(), "cuda", precision)
    assert (path.precision, path.pack) == (precision, False)
    assert sum("cudnn_attention=False" in str(w.message) for w in caught) == warned
