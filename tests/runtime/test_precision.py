"""The precision setting (`qkv.runtime.precision`): detection from injected CPU flags, `auto` per device,
bf16 decoding against fp32 decoding of the same model, the bf16 few-query attention against the fused
kernel, and the bad values."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import Tensor

from qkv import Transformer
from qkv.apps.cli import main
from qkv.apps.demo import DemoResult
from qkv.apps.translator import Translator
from qkv.model import MultiHeadedAttention
from qkv.model.masks import padding_mask
from qkv.runtime import precision as P
from qkv.runtime.decoding_attention import (
    FEW_QUERY_MIN_ROWS_BF16,
    DecodingAttention,
    use_decoding_attention,
)
from qkv.runtime.packed import PackedLinear, packing_available
from qkv.runtime.prepare import prepare_for_decoding
from qkv.runtime.runtime_options import RuntimeOptions
from tiny_models import batch, random_sources, tiny_model

# /proc/cpuinfo excerpts: an AVX-512 CPU with bf16 (AMD Zen 4), one with AMX (Sapphire Rapids), one without
ZEN4 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_vnni avx512_bf16\n"
SPR = "processor\t: 0\nflags\t\t: avx2 avx512f amx_tile amx_int8 amx_bf16\nbugs\t\t: spectre_v1\n"
SKYLAKE = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_vnni\n"


def test_detection_reads_the_flags_of_a_cpuinfo_text() -> None:
    assert P.parse_cpu_flags(ZEN4) >= {"avx512f", "avx512_bf16"}
    assert "spectre_v1" not in P.parse_cpu_flags(SPR)  # the flags line only
    assert P.parse_cpu_flags("processor\t: 0\n") == set()
    assert P.native_bf16("cpu", P.parse_cpu_flags(ZEN4))
    assert P.native_bf16("cpu", P.parse_cpu_flags(SPR))
    assert not P.native_bf16("cpu", P.parse_cpu_flags(SKYLAKE))
    assert P.describe_hardware("cpu", P.parse_cpu_flags(SKYLAKE)) == (
        "cpu: avx512_bf16- amx_bf16- (no native bf16)"
    )
    assert P.describe_hardware("cpu", P.parse_cpu_flags(ZEN4)) == "cpu: avx512_bf16 amx_bf16- (native bf16)"


def test_an_isa_cap_in_the_environment_reads_the_cpu_as_one_without_what_it_forbids() -> None:
    zen4 = P.parse_cpu_flags(ZEN4) | {"avx_vnni"}
    assert P.within_isa_caps(zen4, {}) == zen4
    assert P.within_isa_caps(zen4, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}) == zen4
    avx2 = P.within_isa_caps(zen4, {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert avx2 == {"fpu", "sse2", "avx2", "fma"}
    assert not P.native_bf16("cpu", avx2)
    assert P.within_isa_caps(zen4, {"ATEN_CPU_CAPABILITY": "avx2"}) == avx2
    assert P.within_isa_caps(zen4, {"DNNL_MAX_CPU_ISA": "avx2_vnni"}) == avx2 | {"avx_vnni"}
    assert P.within_isa_caps(P.parse_cpu_flags(SPR), {"ATEN_CPU_CAPABILITY": "avx512"}) == {
        "avx2", "avx512f", "amx_tile", "amx_int8", "amx_bf16"
    }


def test_auto_resolves_per_device_and_model_width(monkeypatch: pytest.MonkeyPatch) -> None:
    with_bf16, without = P.parse_cpu_flags(ZEN4), P.parse_cpu_flags(SKYLAKE)
    assert P.resolve_precision("auto", "cpu", with_bf16) == "bf16"
    assert P.resolve_precision("auto", "cpu", without) == "fp32"
    assert P.resolve_precision("fp32", "cpu", with_bf16) == "fp32"
    assert P.resolve_precision("auto", "cpu", with_bf16, d_model=64) == "fp32"  # narrow: no gain measured
    assert P.resolve_precision("auto", "cpu", with_bf16, d_model=P.CPU_BF16_MIN_D_MODEL) == "bf16"
    assert P.resolve_precision("auto", "mps") == "fp32"

    for supported in (True, False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda s=supported: s)
        expected = "bf16" if supported else "fp32"
        assert P.resolve_precision("auto", "cuda", d_model=64) == expected  # no width rule on CUDA


def test_bf16_without_native_support_runs_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="emulated"):
        assert P.resolve_precision("bf16", "cpu", P.parse_cpu_flags(SKYLAKE)) == "bf16"


def test_bad_values_are_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"^precision='fp16'; choose from auto, fp32, bf16$"):
        P.resolve_precision("fp16", "cpu")
    with pytest.raises(ValueError, match="precision='fp16'"):
        prepare_for_decoding(tiny_model(), RuntimeOptions(precision="fp16"))
    with pytest.raises(ValueError, match="int8 quantization or bf16"):
        prepare_for_decoding(tiny_model(), RuntimeOptions(precision="bf16", quantize="int8"))
    with pytest.raises(SystemExit):
        main(["translate", "--model", str(tmp_path), "--precision", "fp16"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --precision: invalid choice: 'fp16'" in err


def test_int8_with_auto_keeps_its_float32_kernels() -> None:
    model = prepare_for_decoding(tiny_model(), RuntimeOptions(precision="auto", quantize="int8"))
    assert all(p.dtype == torch.float32 for p in model.parameters())


def step_logits(model: Transformer, src: Tensor, tokens: Tensor) -> Tensor:
    """The logits of each decoder step, fed `tokens` (B, T) one at a time with the cache -> (B, T, V) fp32."""
    mask = padding_mask(src, 0)
    memory, cache = model.encode(src, mask), model.new_cache()
    return torch.cat([model.decode(tokens[:, t : t + 1], memory, mask, cache).float()
                      for t in range(tokens.size(1))], dim=1)


@pytest.mark.parametrize("rows", [3, 40], ids=["few-rows", "many-rows"])
def test_bf16_decoding_matches_fp32_on_a_random_model(rows: int) -> None:
    """Every weight in bf16 (packed where oneDNN is there): the forward's logits, and those of cached
    one-token steps (the decoding attention: fused kernel in fp32 below FEW_QUERY_MIN_ROWS_BF16 query rows,
    bf16 matmuls from there), within 3% of the logit scale of fp32's (bf16 keeps 8 mantissa bits). Exact
    outputs are compared on a trained model (below): a random model's near ties flip."""
    model = tiny_model(d_model=64, d_ff=128, ending=False)
    fp32 = prepare_for_decoding(copy.deepcopy(model), RuntimeOptions(precision="fp32"))
    bf16 = prepare_for_decoding(copy.deepcopy(model), RuntimeOptions(precision="bf16"))
    assert all(t.dtype == torch.bfloat16 for t in [*bf16.parameters(), *bf16.buffers()] if t.is_floating_point())
    if packing_available(torch.bfloat16):
        linears = [m for m in bf16.modules() if isinstance(m, PackedLinear)]
        assert linears and all(m.packed.dtype == torch.bfloat16 for m in linears)
    src = batch(random_sources(rows, seed=1, max_len=9))
    tgt = torch.randint(4, 40, (rows, 7))
    tgt[:, 0] = 2  # bos
    with torch.no_grad():
        pairs = [(fp32(src, tgt), bf16(src, tgt)), (step_logits(fp32, src, tgt), step_logits(bf16, src, tgt))]
    for ref, got in pairs:
        err = (got.float() - ref).abs().max()
        assert 0 < err < 0.03 * ref.abs().max()
        assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9


def test_bf16_few_query_attention_fires_and_equals_the_fused_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 takes the two-matmul path from FEW_QUERY_MIN_ROWS_BF16 query rows (fp32 not yet), below them the
    fused kernel in fp32; both give F.sdpa's fp32 output to bf16 rounding."""
    H, Dh, S = 4, 16, 9
    rows = FEW_QUERY_MIN_ROWS_BF16 // H  # one query each: exactly the threshold
    mha = use_decoding_attention(MultiHeadedAttention(H * Dh, H)).eval()
    calls: list[torch.dtype] = []
    few = DecodingAttention._few_queries

    def counted(self: DecodingAttention, q: Tensor, *args: Tensor | None) -> Tensor:
        calls.append(q.dtype)
        return few(self, q, *args)

    monkeypatch.setattr(DecodingAttention, "_few_queries", counted)
    q, k, v = torch.randn(rows, H, 1, Dh), torch.randn(rows, H, S, Dh), torch.randn(rows, H, S, Dh)
    ids = torch.ones(rows, S, dtype=torch.long)
    ids[::3, 5:] = 0
    mask = padding_mask(ids, 0)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out32, _ = mha.attend(q, k, v, mask, None, need_weights=False)
    out16, _ = mha.attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, None, need_weights=False)
    assert calls == [torch.bfloat16]  # fp32 at these rows: the fused kernel
    torch.testing.assert_close(out32, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out16.float(), expected, atol=0.03, rtol=0.02)
    calls.clear()
    fused: list[torch.dtype] = []
    plain = MultiHeadedAttention.attend

    def recorded(self: MultiHeadedAttention, q: Tensor, *args: object) -> tuple[Tensor, Tensor | None]:
        fused.append(q.dtype)
        return plain(self, q, *args)

    monkeypatch.setattr(MultiHeadedAttention, "attend", recorded)
    below, _ = mha.attend(q[:-1].bfloat16(), k[:-1].bfloat16(), v[:-1].bfloat16(), mask[:-1], None,
                          need_weights=False)
    assert calls == [] and fused == [torch.float32]  # below the threshold: the fused kernel in fp32
    assert below.dtype == torch.bfloat16
    torch.testing.assert_close(below.float(), expected[:-1], atol=0.03, rtol=0.02)


@pytest.mark.skipif(not packing_available(), reason="this torch build has no oneDNN packed linear")
def test_a_cpu_that_cannot_pack_bf16_decodes_bf16_unpacked(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN packs bf16 weights only with AVX-512 BW/VL/DQ or AVX-NE-CONVERT: elsewhere the bf16 model
    keeps nn.Linear, its logits within 3% of the logit scale of the plain fp32 model's, fp32 is still
    packed, and asking to pack bf16 is a clear error."""
    from qkv.runtime import packed as packed_module
    from qkv.runtime import prepare as prepare_module

    def fp32_only(dtype: torch.dtype = torch.float32) -> bool:
        return dtype == torch.float32

    monkeypatch.setattr(prepare_module, "packing_available", fp32_only)
    monkeypatch.setattr(packed_module, "packing_available", fp32_only)
    model = tiny_model(d_model=64, d_ff=128, ending=False)
    bf16 = prepare_for_decoding(copy.deepcopy(model), RuntimeOptions(precision="bf16"))
    assert not any(isinstance(m, PackedLinear) for m in bf16.modules())
    assert next(bf16.parameters()).dtype == torch.bfloat16
    src = batch(random_sources(5, seed=1, max_len=9))
    tgt = torch.randint(4, 40, (5, 7))
    tgt[:, 0] = 2  # bos
    with torch.no_grad():
        ref, got = model.eval()(src, tgt), bf16(src, tgt).float()
    assert 0 < (got - ref).abs().max() < 0.03 * ref.abs().max()
    assert any(isinstance(m, PackedLinear) for m in prepare_for_decoding(copy.deepcopy(model), RuntimeOptions(precision="fp32")).modules())
    with pytest.raises(RuntimeError, match=r"cannot pack torch\.bfloat16"):
        prepare_for_decoding(copy.deepcopy(model), RuntimeOptions(precision="bf16", pack=True))


def test_translate_precision_bf16_is_translator_load_bf16(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from qkv.data.tokenizer import SubwordTokenizer
    from qkv.modeldir import save_model_dir
    from sentences import EN, ZH

    tokenizer = SubwordTokenizer.train(EN, ZH, tmp_path / "m", vocab_size=500)
    directory = save_model_dir(tmp_path / "m", tiny_model(ending=False, src_vocab_size=tokenizer.src_vocab_size), tokenizer)
    (tmp_path / "in.txt").write_text("\n".join(EN[:3]) + "\n", encoding="utf-8")
    fast = ["--beam", "2", "--max-len-a", "0.5", "--max-len-b", "4"]
    assert main(["translate", "--model", str(directory), "--input", str(tmp_path / "in.txt"), *fast,
                 "--precision", "bf16"]) == 0
    translator = Translator.load(directory, RuntimeOptions(precision="bf16"))
    assert next(translator.model.parameters()).dtype == torch.bfloat16
    from qkv.decode.options import DecodeOptions

    expected = translator.translate(EN[:3], DecodeOptions(beam=2, max_len_a=0.5, max_len_b=4))
    captured = capsys.readouterr()
    assert captured.out.splitlines() == expected
    assert captured.err.startswith("decoding path: bf16")  # the choice and why, on stderr


@pytest.mark.slow
def test_bf16_decoding_of_a_trained_demo_model_equals_fp32_on_held_out_numbers(short_demo: DemoResult) -> None:
    """The demo's number task, trained briefly (600 updates): greedy and beam 4 bf16 translations of its
    300 test numbers (200 held out, every 1- and 2-digit one) equal the fp32 ones on at least 99%."""
    from qkv.decode.options import DecodeOptions

    sources = [src for src, _, _ in short_demo.examples]
    fp32 = Translator.load(short_demo.out_dir, RuntimeOptions(precision="fp32"))
    bf16 = Translator.load(short_demo.out_dir, RuntimeOptions(precision="bf16"))
    for beam in (1, 4):
        a = fp32.translate(sources, DecodeOptions(beam=beam))
        b = bf16.translate(sources, DecodeOptions(beam=beam))
        same = sum(x == y for x, y in zip(a, b, strict=True))
        assert len(a) == 300 and same >= 0.99 * len(a), (beam, same)


@pytest.mark.parametrize("pays", [True, False])
def test_training_auto_keeps_fp32_where_bf16_products_are_slower(monkeypatch, pays: bool) -> None:
    """On the CPU it runs on (flags read, not given), training's auto also asks whether bf16
    matrix products are faster than fp32's here: a native-bf16 CPU where they are not keeps fp32;
    decoding's path is measured apart (runtime.choice)."""
    monkeypatch.setattr(P, "native_bf16", lambda device, flags=None: True)
    monkeypatch.setattr(P, "bf16_matmul_pays", lambda: pays)
    assert P.resolve_precision("auto", "cpu", d_model=512) == ("bf16" if pays else "fp32")
    assert P.resolve_precision("auto", "cpu") == "bf16"
    assert P.resolve_precision("auto", "cpu", {"avx512_bf16"}, d_model=512) == "bf16"  # as given
