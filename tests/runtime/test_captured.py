"""The captured decoding step (TorchInductor) against the readable decoder it replaces: the same
logits step by step (cache growth, beams sharing memory rows, rows leaving, a prefix, padding),
the same hypotheses; int8 (`Int8Linear`) against a float64 computation of its quantization."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from qkv import Transformer
from qkv.config import POSITIONAL
from qkv.decode import beam_search, greedy
from qkv.model.attention import AttentionWeights
from qkv.model.masks import padding_mask
from qkv.runtime import kernels
from qkv.runtime.captured import (
    CAPTURABLE_POSITIONAL,
    CAPTURE_OPTIONS,
    CapturedDecoder,
    Int8Linear,
    capture_decoder,
    capture_refusal,
    int8_linears,
)
from qkv.runtime.int8_choice import (
    choose_kernel,
    choose_onednn,
    int_mm_exact,
    kernel_rows_faster,
    onednn_int8_available,
    onednn_prepack,
    onednn_rows_faster,
    onednn_sums,
    weight_levels,
)
from qkv.runtime.precision import cpu_flags
from qkv.runtime.prepare import prepare_for_decoding
from qkv.runtime.runtime_options import RuntimeOptions
from tiny_models import batch, random_sources, tiny_config, tiny_model

pytestmark = pytest.mark.slow  # each captured model compiles once (seconds)


@pytest.fixture(scope="module")
def models() -> tuple[Transformer, Transformer]:
    """A tiny model whose hypotheses end at varied lengths, readable and captured."""
    model = prepare_for_decoding(tiny_model(d_model=64, d_ff=128, n_kv_heads=2), RuntimeOptions(precision="fp32", pack=False))
    return model, capture_decoder(copy.deepcopy(model))


def assert_steps_equal(plain: Transformer, captured: Transformer, per_source: int = 2) -> None:
    """Nine steps of `per_source` hypotheses for each of 3 padded sources (2: beams sharing memory
    rows; 1: a row each, as greedy decoding has), the cache growing twice and reordered after step
    5: each step's logits equal the readable ones."""
    src = batch(random_sources(3, seed=2, max_len=9))  # padded: (3, S)
    k = per_source
    steps = torch.randint(4, 40, (3 * k, 9), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():  # masks and memory made here, as decoding makes them
        mask = padding_mask(src, plain.config.pad_id)
        memory = plain.encode(src, mask)
        caches = plain.new_cache(capacity=2), captured.new_cache(capacity=2)  # grows twice
        for t in range(steps.size(1)):
            ids = steps[:, t : t + 1]
            want, got = (
                m.decode(ids, memory, mask, c)
                for m, c in zip((plain, captured), caches, strict=True)
            )
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            if t == 4:  # the second source's hypotheses leave; each other's swap places
                rows = torch.tensor([*range(k - 1, -1, -1), *range(3 * k - 1, 2 * k - 1, -1)])
                sources = torch.tensor([0, 2])
                for c in caches:
                    c.reorder(rows, sources)
                steps, memory, mask = steps[rows], memory[sources], mask[sources]
    assert caches[1].length == 9 and caches[1].self_attn[0].keys.shape[2] == 9


def test_captured_steps_equal_the_readable_decoder_through_growth_beams_and_padding(
    models: tuple[Transformer, Transformer],
) -> None:
    plain, captured = models
    assert isinstance(captured.decoder, CapturedDecoder)
    assert_steps_equal(plain, captured)


def test_captured_model_finds_the_same_hypotheses(models: tuple[Transformer, Transformer]) -> None:
    plain, captured = models
    src = batch(random_sources(4, seed=3, max_len=8))
    with torch.inference_mode():
        for s in (src[:1], src):
            assert [h.tokens for h in greedy(captured, s, max_len=14)] == [
                h.tokens for h in greedy(plain, s, max_len=14)
            ]
        ours, theirs = (beam_search(m, src, beam=3, max_len=14) for m in models)
    assert [[h.tokens for h in n] for n in ours] == [[h.tokens for h in n] for n in theirs]
    assert [h[0].score for h in ours] == pytest.approx([h[0].score for h in theirs], abs=1e-4)


def test_the_step_s_attention_with_or_without_the_kernel_equals_the_readable_step(
    models: tuple[Transformer, Transformer],
) -> None:
    """The C++ kernel where it builds (`qkv.runtime.kernels`), TorchInductor's loops otherwise:
    both step as the readable model does, beams sharing memory rows included (the loops on a
    model of one decoder layer: TorchInductor writes the attention's loops for each layer)."""
    assert models[1].decoder.attention_kernel == (kernels.decoding_attention() is not None)
    plain = prepare_for_decoding(
        tiny_model(d_model=64, d_ff=128, n_kv_heads=2, n_decoder_layers=1),
        RuntimeOptions(precision="fp32", pack=False),
    )
    loops = capture_decoder(copy.deepcopy(plain))
    loops.decoder.attention_kernel = False
    for per_source in (2, 1):  # beams sharing memory rows, then one row per source
        assert_steps_equal(plain, loops, per_source)


INT8_SHAPE = dict(d_model=64, d_ff=128, n_decoder_layers=1)  # one layer: half the compilation
INT8_OPTIONS = RuntimeOptions(precision="fp32", quantize="int8", capture=True)


@pytest.fixture(scope="module")
def int8_on_kernel() -> tuple[Transformer, Transformer]:
    """An int8 model captured with its step's layers on qkv's kernel (not measured), and its
    float32 eager twin: no program yet."""
    if kernels.int8_linear() is None:
        pytest.skip("qkv's int8 kernel needs AVX512-VNNI")
    model = tiny_model(**INT8_SHAPE)
    eager = prepare_for_decoding(copy.deepcopy(model), RuntimeOptions(precision="fp32", pack=False))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("qkv.runtime.int8_choice.choose_kernel", lambda a, b: True)
        return eager, prepare_for_decoding(model, INT8_OPTIONS)


def test_an_int8_step_on_qkv_s_kernel_finds_torch_s_hypotheses(
    int8_on_kernel: tuple[Transformer, Transformer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same int8 model captured with its layers on qkv's kernel and on `torch._int_mm` (each
    packed weight unpacked back to (N, K) before the first step compiles): the same integer sums,
    the same beams."""
    monkeypatch.setattr("qkv.runtime.int8_choice.choose_kernel", lambda a, b: True)  # not measured
    on = int8_on_kernel[1]
    off = prepare_for_decoding(tiny_model(**INT8_SHAPE), INT8_OPTIONS)
    for m in off.modules():
        if isinstance(m, Int8Linear):
            assert m.packed is not None and m.qweight is None  # the weight held once
            blocks, groups, block, four = m.packed.shape
            unpacked = m.packed.permute(0, 2, 1, 3).reshape(blocks * block, groups * four)
            m.qweight, m.packed = unpacked[: m.out_features].contiguous(), None
    src = batch(random_sources(3, seed=7, max_len=8))
    with torch.inference_mode():
        results = [beam_search(m, src, beam=3, max_len=12) for m in (on, off)]
        greedy_tokens = [[h.tokens for h in greedy(m, src, max_len=12)] for m in (on, off)]
    tokens = [[[h.tokens for h in n] for n in r] for r in results]
    assert tokens[0] == tokens[1] and greedy_tokens[0] == greedy_tokens[1]


NARROW = dict(d_model=32, d_ff=48, n_decoder_layers=1)


@pytest.fixture(scope="module")
def narrow() -> tuple[Transformer, Transformer]:
    """A model of a shape of its own (d_model 32) and no positional encoding, readable and
    captured: no program yet."""
    model = tiny_model(**NARROW, positional="none", seed=11)
    model = prepare_for_decoding(model, RuntimeOptions(precision="fp32", pack=False))
    return model, capture_decoder(copy.deepcopy(model))


def test_one_program_serves_a_whole_decode_its_reads_growing_to_the_buffer(
    narrow: tuple[Transformer, Transformer],
) -> None:
    """Self-attention reads the held positions (a symbolic length), up to the last but one of a
    buffer sized for the longest output: reading a whole buffer would be a second program."""
    captured = narrow[1]  # its one program is compiled here (or by the test that used it first)
    src = batch(random_sources(2, seed=6, max_len=8))
    stats = torch._dynamo.utils.counters["stats"]
    compiled = []
    with torch.inference_mode():
        for s in (src, src.flip(0)):
            before = stats["unique_graphs"]
            hyps = greedy(captured, s, min_len=20, max_len=20)
            assert [len(h.tokens) for h in hyps] == [20, 20]
            readable = greedy(narrow[0], s, min_len=20, max_len=20)
            assert [h.tokens for h in hyps] == [h.tokens for h in readable]
            compiled.append(stats["unique_graphs"] - before)
    assert compiled[0] <= 1 and compiled[1] == 0


def test_a_prefix_and_attention_weights_take_the_readable_path(
    models: tuple[Transformer, Transformer],
) -> None:
    plain, captured = models
    src = batch(random_sources(2, seed=4, max_len=7))
    tgt = torch.randint(4, 40, (2, 5))
    with torch.inference_mode():
        memory = plain.encode(src)
        caches = plain.new_cache(), captured.new_cache()
        for ids in (tgt[:, :3], tgt[:, 3:4], tgt[:, 4:5]):  # a 3-token prefix, then steps
            want, got = (
                m.decode(ids, memory, None, c) for m, c in zip(models, caches, strict=True)
            )
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        weights = AttentionWeights(), AttentionWeights()
        for m, w in zip(models, weights, strict=True):
            m(src, tgt, weights=w)
    for want, got in zip(weights[0].cross, weights[1].cross, strict=True):
        torch.testing.assert_close(got, want)


def test_keys_and_values_held_in_float16_between_readable_and_captured_steps() -> None:
    """A captured step (of learned positions) with `kv_dtype` float16 stores the cache in float16, casting what a prefix
    (the readable decoder) left, and a readable step after it casts back: every step's logits
    within float16's rounding of the plain model's."""
    model = tiny_model(d_model=32, d_ff=64, n_decoder_layers=1, positional="learned", seed=8)
    model = prepare_for_decoding(model, RuntimeOptions(precision="fp32", pack=False))
    captured = capture_decoder(copy.deepcopy(model), kv_dtype=torch.float16)
    src = batch(random_sources(2, seed=9, max_len=7))
    tgt = torch.randint(4, 40, (2, 9))
    dtypes = []
    with torch.inference_mode():
        memory = model.encode(src)
        caches = model.new_cache(), captured.new_cache()
        for t in (0, 3, 4, 5, 6, 7, 8):  # a 3-token prefix, steps, one asking for weights
            ids = tgt[:, t : t + 1] if t else tgt[:, :3]
            weights = AttentionWeights() if t == 6 else None
            want = model.decode(ids, memory, None, caches[0])
            got = captured.decode(ids, memory, None, caches[1], weights=weights)
            torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
            dtypes.append(caches[1].self_attn[0].keys.dtype)
    half, full = torch.float16, torch.float32
    assert dtypes == [full, half, half, half, full, half, half]
    assert caches[1].cross_attn[0].keys.dtype == half and caches[1].length == 9


@pytest.mark.parametrize("kernel", [False, True])
def test_int8_linear_is_its_quantization_computed_in_float64(kernel: bool) -> None:
    """`torch._int_mm`'s product, and qkv's int8 kernel where it runs (the weight packed)."""
    if kernel and kernels.int8_linear() is None:
        pytest.skip("qkv's int8 kernel needs AVX512-VNNI")
    torch.manual_seed(0)
    linear = nn.Linear(48, 24)
    x = torch.randn(5, 3, 48)
    w = linear.weight.double()
    w_scale = w.abs().amax(1) / weight_levels()  # 127, or 63 where int8 products saturate
    x_scale = x.double().abs().amax(-1, keepdim=True) / 127
    product = torch.round(x.double() / x_scale) @ torch.round(w / w_scale[:, None]).T
    want = product * x_scale * w_scale + linear.bias.double()
    layer = Int8Linear(linear)
    if kernel:
        layer.use_kernel()
    with torch.inference_mode():
        got = layer(x)
        close = linear(x)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    assert (got - close).abs().max() < 0.02 * close.abs().max()  # and near the float layer


@pytest.mark.skipif(not onednn_int8_available(), reason="this torch has no oneDNN int8 product")
def test_int8_rows_compiled_through_onednn_are_int_mm_s_sums_prepacked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With `onednn_rows` on, the compiled layer multiplies several rows by oneDNN's prepacked
    weight (TorchInductor's freezing pattern fires: it needs the weights frozen) and one row by
    `_int_mm`; on a CPU where oneDNN's sums are `_int_mm`'s, both give the eager layer's outputs.
    Where they are not (u8 x s8 without VNNI saturates), the choice never turns it on."""
    torch.manual_seed(0)
    layer = Int8Linear(nn.Linear(64, 48))
    monkeypatch.setattr("qkv.runtime.int8_choice.choose_onednn", lambda a, b: True)  # "faster"
    if not onednn_rows_faster([layer]):  # its sums are not _int_mm's on this CPU
        monkeypatch.setattr("qkv.runtime.captured.int8_linear", lambda: None)  # no qkv kernel
        step = [m for m in int8_linears(tiny_model(d_model=64)).modules() if type(m) is Int8Linear]
        assert step and not any(m.onednn_rows for m in step)
        return
    layer.onednn_rows = True
    monkeypatch.setattr(torch._inductor.config, "freezing", True)  # as capture_decoder sets it
    compiled = torch.compile(layer, dynamic=True, options=CAPTURE_OPTIONS)
    counters.clear()
    with torch.inference_mode(), torch._inductor.config.patch(force_disable_caches=True):
        for rows in (3, 1):
            x = torch.randn(rows, 1, 64)
            torch.testing.assert_close(compiled(x), layer(x), rtol=1e-6, atol=1e-6)
    assert counters["inductor"]["qlinear_weight_prepack_matcher_count"] == 1  # the 3 rows' graph


def saturated_pairs(unsigned: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """What a u8 x s8 product without VNNI computes (vpmaddubsw): each pair of products summed
    and saturated to 16 bits, then the pairs summed and the zero point's 128 x w taken off."""
    products = unsigned.long()[:, None, :] * weight.long()[None, :, :]  # (M, N, K)
    pairs = products.view(*products.shape[:2], -1, 2).sum(-1).clamp(-32768, 32767)
    return (pairs.sum(-1) - 128 * weight.long().sum(1)).float()


@pytest.mark.skipif(not onednn_int8_available(), reason="this torch has no oneDNN int8 product")
def test_a_fast_int8_product_whose_sums_are_wrong_here_is_never_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each fast product measures faster (injected). oneDNN's own product is chosen where this
    CPU has VNNI and refused where it has not (its u8 x s8 pair sums saturate there: measured on
    full-range rows); made to saturate so (`saturated_pairs`) it is refused everywhere; qkv's
    kernel made 1% off is refused. The weights take all 8 bits, where this CPU's `_int_mm` sums
    them exactly (elsewhere the layers take 7 bits: tests/runtime/test_int8_sums.py)."""
    if not int_mm_exact():
        pytest.skip("this CPU's int8 products saturate at 8 bits: its layers take 7")
    torch.manual_seed(0)
    layers = [Int8Linear(nn.Linear(64, 48)), Int8Linear(nn.Linear(48, 64))]
    monkeypatch.setattr("qkv.runtime.int8_choice.choose_onednn", lambda a, b: True)
    monkeypatch.setattr("qkv.runtime.int8_choice.choose_kernel", lambda a, b: True)
    small = torch.randint(1, 129, (2, 64), dtype=torch.uint8)  # pair sums under 2^15
    signed = (small.short() - 128).to(torch.int8)
    want = torch._int_mm(signed, layers[0].qweight.t()).float()
    assert torch.equal(saturated_pairs(small, layers[0].qweight), want)  # the emulation
    full = torch.full((2, 64), 255, dtype=torch.uint8)  # x at 127: the largest pair sums
    exact = torch._int_mm((full.short() - 128).to(torch.int8), layers[0].qweight.t()).float()
    own = onednn_sums(full, *onednn_prepack(layers[0].qweight))
    vnni = any("vnni" in flag for flag in cpu_flags())
    assert torch.equal(own, exact) == vnni == onednn_rows_faster(layers)
    monkeypatch.setattr("qkv.runtime.int8_choice.onednn_prepack", lambda w: (w, None))
    monkeypatch.setattr(
        "qkv.runtime.int8_choice.onednn_sums", lambda x, w, _: saturated_pairs(x, w)
    )
    assert not onednn_rows_faster(layers)
    if kernels.int8_linear() is None:
        pytest.skip("qkv's int8 kernel needs AVX512-VNNI")
    assert kernel_rows_faster(layers)
    op = kernels.int8_linear()
    monkeypatch.setattr("qkv.runtime.int8_choice.int8_linear", lambda: lambda *a: op(*a) * 1.01)
    assert not kernel_rows_faster(layers)


def test_the_int8_product_for_several_rows_is_chosen_by_its_measured_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where qkv's int8 kernel does not run (no AVX512-VNNI, here injected), and oneDNN's sums are
    `_int_mm`'s (injected: without VNNI they are not, and it is refused, as tested above)."""
    monkeypatch.setattr("qkv.runtime.captured.int8_linear", lambda: None)
    assert choose_onednn(1.0, 0.85) and not choose_onednn(1.0, 0.95)
    model = tiny_model(d_model=64, d_ff=128)
    monkeypatch.setattr("qkv.runtime.int8_choice.agree", lambda got, want: True)  # as with VNNI
    for verdict in (True, False):
        monkeypatch.setattr("qkv.runtime.int8_choice.choose_onednn", lambda a, b, v=verdict: v)
        step = [m for m in int8_linears(copy.deepcopy(model)).modules() if type(m) is Int8Linear]
        assert len(step) > 3 and {m.onednn_rows for m in step} == {verdict}
        assert all(m.packed is None for m in step)
    monkeypatch.setattr("qkv.runtime.int8_choice.onednn_int8_available", lambda: False)
    monkeypatch.setattr("qkv.runtime.int8_choice.choose_onednn", lambda a, b: True)
    assert not onednn_rows_faster([Int8Linear(nn.Linear(8, 8))])  # nothing to measure


def test_the_int8_kernel_serves_where_its_one_row_products_measure_faster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the kernel built, the step's layers and the output projection go on it where
    `choose_kernel` says so (timings injected); else they stay on torch's products and fbgemm's."""
    assert choose_kernel(1.0, 1.0) and not choose_kernel(1.1, 1.0)
    assert not kernel_rows_faster([])  # nothing to measure
    if kernels.int8_linear() is None:
        pytest.skip("qkv's int8 kernel needs AVX512-VNNI")
    model = tiny_model(d_model=64, d_ff=128)
    for verdict in (True, False):
        monkeypatch.setattr("qkv.runtime.int8_choice.choose_kernel", lambda a, b, v=verdict: v)
        converted = dict(int8_linears(copy.deepcopy(model)).named_modules())
        step = [m for m in converted.values() if type(m) is Int8Linear]
        assert len(step) > 3 and {m.packed is not None for m in step} == {verdict}
        output = [m for n, m in converted.items() if n.endswith("output_projection")]
        assert [type(m) for m in output] == [Int8Linear if verdict else DynamicInt8Linear]
    monkeypatch.setattr("qkv.runtime.int8_choice.int8_linear", lambda: None)
    assert not kernel_rows_faster([Int8Linear(nn.Linear(16, 16))])  # no kernel: not measured


@pytest.mark.parametrize("kernel", [True, False])
def test_captured_int8_decodes_near_its_eager_twin(
    kernel: bool, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With qkv's int8 kernel the output projection joins the step's layers on it; without,
    it stays fbgemm's with the encoder's layers and the memory projections."""
    if kernel:
        eager, captured = request.getfixturevalue("int8_on_kernel")
    else:
        monkeypatch.setattr("qkv.runtime.captured.int8_linear", lambda: None)
        model = tiny_model(**INT8_SHAPE)
        eager = prepare_for_decoding(copy.deepcopy(model), RuntimeOptions(precision="fp32", pack=False))
        captured = prepare_for_decoding(model, INT8_OPTIONS)
    linear = (nn.Linear, DynamicInt8Linear, Int8Linear)
    kinds = {name: type(m) for name, m in captured.named_modules() if type(m) in linear}
    assert nn.Linear not in kinds.values()
    fbgemm = ("kv_proj",) if kernel else ("kv_proj", "output_projection")
    called_eagerly = [n for n in kinds if n.startswith("encoder.") or n.endswith(fbgemm)]
    assert len(called_eagerly) > 3 and {kinds[n] for n in called_eagerly} == {DynamicInt8Linear}
    step = [m for n, m in captured.named_modules() if n in kinds and n not in called_eagerly]
    assert {type(m) for m in step} == {Int8Linear}
    assert {m.packed is not None for m in step} == {kernel}
    src = batch(random_sources(2, seed=5, max_len=8))
    with torch.inference_mode():
        memory = eager.encode(src)
        caches = eager.new_cache(), captured.new_cache()
        for ids in torch.randint(4, 40, (2, 6)).T:
            want, got = (
                m.decode(ids[:, None], memory, None, c)
                for m, c in zip((eager, captured), caches, strict=True)
            )
            assert (got - want).abs().max() < 0.05 * want.abs().max()


def test_what_cannot_be_captured_is_refused_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for positional in POSITIONAL:  # the ones captured decode as the readable model: tests above
        refusal = capture_refusal(Transformer(tiny_config(positional=positional)))
        assert (refusal is None) == (positional in CAPTURABLE_POSITIONAL), (positional, refusal)
        assert refusal is None or f"positional={positional!r}" in refusal
    assert set(CAPTURABLE_POSITIONAL) < set(POSITIONAL)
    rope = Transformer(tiny_config(positional="rope"))
    assert "positional='rope'" in str(capture_refusal(rope))
    with pytest.raises(ValueError, match="cannot capture the decoding step: positional='rope'"):
        prepare_for_decoding(rope, RuntimeOptions(precision="fp32", capture=True))
    with pytest.raises(ValueError, match="packs its weights itself"):
        RuntimeOptions(capture=True, pack=True)
    monkeypatch.setattr("qkv.runtime.captured.shutil.which", lambda name: None)
    assert "needs a C++ compiler" in str(capture_refusal(Transformer(tiny_config())))


def test_two_captured_models_of_one_shape_each_decode_with_their_own_weights(
    narrow: tuple[Transformer, Transformer],
) -> None:
    """Frozen weights are a program's constants and its guards skip the modules, so the program
    one model compiled must never serve another (`own_step`: each its own code object)."""
    other = prepare_for_decoding(tiny_model(**NARROW, seed=12), RuntimeOptions(precision="fp32", pack=False))
    plains = [narrow[0], other]
    captured = [narrow[1], capture_decoder(copy.deepcopy(other))]
    src = batch(random_sources(2, seed=7, max_len=8))
    with torch.inference_mode():
        for plain, model in zip(plains, captured, strict=True):
            want = [h.tokens for h in greedy(plain, src, min_len=12, max_len=12)]
            assert [h.tokens for h in greedy(model, src, min_len=12, max_len=12)] == want
        assert want != [h.tokens for h in greedy(plains[0], src, min_len=12, max_len=12)]
