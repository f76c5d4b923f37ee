"""int8 dynamic quantization: every linear layer becomes int8, the float model is untouched, outputs stay close
to float32 (per-row weight scales), and cached decoding still equals recomputation on the quantized model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from qkv import Transformer
from qkv.decode import greedy
from qkv.runtime import quantize
from qkv.runtime.prepare import prepare_for_decoding
from qkv.runtime.quantize import quantize_int8
from qkv.runtime.runtime_options import RuntimeOptions
from tiny_models import batch, random_sources, tiny_config, tiny_model


def test_every_linear_becomes_int8_and_the_float_model_is_left_alone() -> None:
    model = Transformer(tiny_config()).eval()
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    quantized = quantize_int8(model)
    assert sum(type(m) is DynamicInt8Linear for m in quantized.modules()) == n_linear  # generator included
    assert not any(type(m) is nn.Linear for m in quantized.modules())
    assert sum(type(m) is nn.Linear for m in model.modules()) == n_linear
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert quantize_int8(model, inplace=True) is model and not any(type(m) is nn.Linear for m in model.modules())


def test_int8_logits_are_close_and_cached_decoding_equals_recomputation() -> None:
    model = tiny_model(d_model=64, d_ff=128)  # a random model whose hypotheses end at varied lengths
    quantized = quantize_int8(model)
    src = batch(random_sources(6, seed=1, max_len=9))  # (B, S)
    tgt = torch.randint(4, 40, (6, 7))
    with torch.no_grad():
        ref, got = model(src, tgt), quantized(src, tgt)  # (B, T, V)
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9
    assert not torch.equal(got, ref)  # it did quantize
    cached = greedy(quantized, src, max_len=12)
    recomputed = greedy(quantized, src, max_len=12, use_cache=False)
    assert [h.tokens for h in cached] == [h.tokens for h in recomputed]


def test_quantization_needs_the_cpu() -> None:
    model = Transformer(tiny_config()).to("meta")
    with pytest.raises(ValueError, match="on the CPU"):
        quantize_int8(model)


ONEDNN = "onednn" in quantize.int8_engines()


def test_the_default_library_stays_unless_another_is_faster_by_the_margin() -> None:
    fbgemm = {1: 1.0, 32: 10.0}
    level = {"fbgemm": fbgemm, "onednn": {1: 0.95, 32: 9.5}}  # 5% faster: within the margin
    assert quantize.choose_engine(level) == "fbgemm"
    faster = {"fbgemm": fbgemm, "onednn": {1: 0.85, 32: 8.5}}
    assert quantize.choose_engine(faster) == "onednn"
    # times relative to the best at each row count, summed: 2x faster on 32 rows does not buy
    # 3x slower on one row (fbgemm 1 + 2, onednn 3 + 1), it buys 1.2x slower (1.2 + 1)
    mixed = {"fbgemm": fbgemm, "onednn": {1: 3.0, 32: 5.0}}
    assert quantize.choose_engine(mixed) == "fbgemm"
    mixed["onednn"] = {1: 1.2, 32: 5.0}
    assert quantize.choose_engine(mixed) == "onednn"
    assert quantize.choose_engine({"qnnpack": fbgemm}) == "qnnpack"


@pytest.mark.skipif(not ONEDNN, reason="needs torch's oneDNN int8 library (x86)")
def test_the_measured_library_is_kept_per_cpu_and_shape(tmp_path: Path) -> None:
    cache = tmp_path / "verdicts.json"
    layers = [nn.Linear(32, 64), nn.Linear(64, 32)]
    calls: list[tuple[str, int]] = []

    def timer(engine: str, rows: int) -> float:
        calls.append((engine, rows))
        return {"fbgemm": 2.0, "onednn": 1.0}[engine]

    assert quantize.faster_int8_engine(layers, (1, 32), timer, cache) == "onednn"
    assert sorted(calls) == [("fbgemm", 1), ("fbgemm", 32), ("onednn", 1), ("onednn", 32)]
    calls.clear()
    assert quantize.faster_int8_engine(layers, (1, 32), timer, cache) == "onednn"  # kept
    assert not calls
    assert quantize.faster_int8_engine(layers, (24, 768), timer, cache) == "onednn"  # new rows
    assert len(calls) == 4
    assert quantize.faster_int8_engine(layers[:1], (1, 32), timer, cache) == "onednn"  # new shapes
    assert len(calls) == 8


@pytest.mark.skipif(not ONEDNN, reason="needs torch's oneDNN int8 library (x86)")
def test_a_library_whose_outputs_are_wrong_here_is_never_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """oneDNN's copies made 1% off (as a product that saturates would be): however fast it
    measures, fbgemm is kept, and oneDNN is not even timed."""
    layers = [nn.Linear(32, 64), nn.Linear(64, 32)]
    assert quantize.agreeing_engines(layers, ["fbgemm", "onednn"]) == ["fbgemm", "onednn"]
    real = quantize.quantize_int8

    def off(model: nn.Module, *args: object, engine: str | None = None) -> nn.Module:
        out = real(model, *args, engine=engine)
        if engine == "onednn":
            for m in out.modules():
                if hasattr(m, "int8_engine"):
                    m.register_forward_hook(lambda _m, _x, y: y * 1.01)
        return out

    monkeypatch.setattr(quantize, "quantize_int8", off)
    timed: list[str] = []

    def timer(engine: str, rows: int) -> float:
        timed.append(engine)
        return {"fbgemm": 2.0, "onednn": 1.0}[engine]

    assert quantize.faster_int8_engine(layers, (1, 32), timer, tmp_path / "v.json") == "fbgemm"
    assert "onednn" not in timed


@pytest.mark.skipif(not ONEDNN, reason="needs torch's oneDNN int8 library (x86)")
def test_both_libraries_compute_the_same_int8_model() -> None:
    model = tiny_model(d_model=64, d_ff=128)
    a, b = quantize_int8(model, engine="fbgemm"), quantize_int8(model, engine="onednn")
    assert {m.int8_engine for m in b.modules() if hasattr(m, "int8_engine")} == {"onednn"}
    src = batch(random_sources(6, seed=1, max_len=9))
    tgt = torch.randint(4, 40, (6, 7))
    with torch.no_grad():
        x, y = a(src, tgt), b(src, tgt)
    assert torch.allclose(x, y, atol=1e-5, rtol=1e-5)  # the same quantization, float rounding apart
    assert [h.tokens for h in greedy(a, src, max_len=12)] == [
        h.tokens for h in greedy(b, src, max_len=12)
    ]
    timer = quantize.time_int8_layers([nn.Linear(64, 128)] * 3, ["fbgemm", "onednn"], repeats=2)
    assert timer("onednn", 8) > 0 and timer("onednn", 8) == timer("onednn", 8)  # measured once


def test_each_group_of_layers_gets_the_library_measured_for_its_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engines = quantize.int8_engines()
    many, few = engines[-1], engines[0]  # onednn and fbgemm on x86
    monkeypatch.setattr(
        quantize,
        "faster_int8_engine",
        lambda layers, rows: many if rows == quantize.MANY_ROWS else few,
    )
    model = prepare_for_decoding(tiny_model(), RuntimeOptions(precision="fp32", quantize="int8"))
    chosen = {n: m.int8_engine for n, m in model.named_modules() if hasattr(m, "int8_engine")}
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert len(chosen) == len([m for m in tiny_model().modules() if type(m) is nn.Linear])
    for name, engine in chosen.items():
        many_rows = name.startswith("encoder.") or name.endswith("cross_attn.kv_proj")
        assert engine == (many if many_rows else few), name
    note = quantize.int8_engine_note(model)
    assert note.startswith("; torch's int8 layers: ") and few in note and many in note
    assert quantize.int8_engine_note(tiny_model()) == ""
