"""int8 dynamic quantization: every linear layer becomes int8, the float model is untouched, outputs stay close
to float32 (per-row weight scales), and cached decoding still equals recomputation on the quantized model."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from qkv import Transformer
from qkv.decode import greedy
from qkv.runtime.quantize import quantize_int8
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
