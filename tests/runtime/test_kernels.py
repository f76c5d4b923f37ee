"""The C++ decoding kernels: the attention against equation 1 computed in float64, the int8
layer against `torch._int_mm`'s integer sums, scaled as `Int8Linear` scales them."""

from __future__ import annotations

import re

import pytest
import torch

from qkv.model.attention import scaled_dot_product_attention
from qkv.runtime import kernels

pytestmark = pytest.mark.skipif(
    kernels.decoding_attention() is None, reason="no C++ toolchain builds the kernel here"
)


def equation_1(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """The readable model's attention in float64, the cache read as it is stored."""
    out, _ = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask, scale=scale)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("queries", [1, 4])
@pytest.mark.parametrize("d_head", [96, 64, 40, 8])  # whole vectors, vectors and a tail, a tail
@pytest.mark.parametrize("held", [11, 16, 37])  # keys: under a vector, one vector, more + a rest
def test_decoding_attention_is_equation_1_over_a_cache_in_its_dtype(
    dtype: torch.dtype, queries: int, d_head: int, held: int
) -> None:
    op = kernels.decoding_attention()
    g = torch.Generator().manual_seed(queries * d_head + held)
    rows, heads, capacity = 3, 2, 40
    buffer = torch.randn(2, rows, heads, capacity, d_head, generator=g).to(dtype)
    k, v = buffer[0, :, :, :held], buffer[1, :, :, :held]  # a narrowed cache: strided rows
    q = torch.randn(rows, heads, queries, d_head, generator=g)
    masks = {
        "every row": torch.rand(1, 1, 1, held, generator=g) > 0.4,
        "per row": torch.rand(rows, 1, 1, held, generator=g) > 0.4,
    }
    for mask in masks.values():
        mask[..., 0] = True  # a key for every row
        got = op(q, k, v, mask, 0.3)
        assert got.dtype == torch.float32 and got.shape == q.shape
        torch.testing.assert_close(
            got.double(), equation_1(q, k, v, mask, 0.3), atol=1e-5, rtol=1e-5
        )


def test_masked_keys_take_no_weight_whatever_they_hold() -> None:
    op = kernels.decoding_attention()
    q, k, v = torch.randn(2, 2, 1, 16), torch.randn(2, 2, 5, 16), torch.randn(2, 2, 5, 16)
    mask = torch.tensor([True, True, False, True, False]).view(1, 1, 1, 5)
    want = op(q, k, v, mask, 0.25)
    for spoil in (1e4, float("nan")):  # a key's dot product shares its vector of scores with others
        spoiled_k, spoiled_v = k.clone(), v.clone()
        spoiled_k[:, :, ~mask.view(-1)] = spoil
        spoiled_v[:, :, ~mask.view(-1)] = float("nan")
        torch.testing.assert_close(op(q, spoiled_k, spoiled_v, mask, 0.25), want)


def test_bad_shapes_and_dtypes_are_refused_by_name() -> None:
    op = kernels.decoding_attention()
    q, k = torch.randn(2, 2, 1, 16), torch.randn(2, 2, 5, 16)
    mask = torch.ones(1, 1, 1, 5, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="q is float32"):
        op(q.double(), k, k, mask, 1.0)
    with pytest.raises(RuntimeError, match="mask"):
        op(q, k, k, torch.ones(1, 1, 1, 4, dtype=torch.bool), 1.0)
    with pytest.raises(RuntimeError, match="float32 or float16"):
        op(q, k.bfloat16(), k.bfloat16(), mask, 1.0)


def test_flags_are_the_ones_torchinductor_picks_for_this_cpu() -> None:
    """The kernel is built as TorchInductor builds its own kernels here: the same vector macro
    and, F16C aside, -m flags among TorchInductor's (its own pick of this CPU's instruction set)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    flags = kernels.isa_flags(torch.backends.cpu.get_cpu_capability())
    isa = pick_vec_isa()
    macros = {f[2:] for f in flags if f.startswith("-DCPU_CAPABILITY_")}
    assert macros == set(isa.build_macro()) if isa else not flags
    arch = {f for f in flags if f.startswith("-m")} - {"-mf16c"}
    assert arch <= set(isa.build_arch_flags().split() if isa else [])
    assert kernels.isa_flags("DEFAULT") == []  # at::vec's portable vectors


def test_a_failed_build_says_so_once_and_leaves_the_op_to_inductor(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torch.utils import cpp_extension

    def no_compiler(**_: object) -> None:
        raise RuntimeError("Error building extension: c++: not found")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    kernels.build.cache_clear()
    try:
        assert kernels.decoding_attention() is None
        assert kernels.int8_linear() is None
    finally:
        kernels.build.cache_clear()
    err = capsys.readouterr().err
    assert err.count("not built (Error building extension: c++: not found)") == 1


needs_vnni = pytest.mark.skipif(
    kernels.int8_linear() is None, reason="qkv's int8 kernel needs AVX512-VNNI"
)


def int8_reference(
    x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """`Int8Linear`'s arithmetic by torch's own ops: x quantized per row, the integer sums in int64
    (what `torch._int_mm` makes where it does not saturate)."""
    sx = x.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
    xq = torch.round(x / sx).to(torch.int8)
    y = (xq.long() @ qweight.long().t()).float() * (sx * scale)
    return y if bias is None else y + bias


@needs_vnni
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9, 33])  # 4-row passes and each remainder
@pytest.mark.parametrize(("n", "k"), [(64, 16), (100, 48), (192, 512)])  # N: whole blocks, a tail
@pytest.mark.parametrize("bias", [True, False])
def test_int8_linear_makes_int_mm_s_sums_and_scales_them_alike(
    rows: int, n: int, k: int, bias: bool
) -> None:
    torch.manual_seed(rows * n + k)
    qweight = torch.randint(-127, 128, (n, k), dtype=torch.int8)
    qweight[0] = 127  # the extremes: the sums' range
    scale, b = torch.rand(n) / 100, torch.randn(n) if bias else None
    x = torch.randn(rows, k) * torch.logspace(-3, 3, rows)[:, None]
    x[0, 0] = -x[0].abs().max() * 2  # a row whose largest magnitude is negative
    packed, row_sums = kernels.pack_int8_weight(qweight)
    got = kernels.int8_linear()(x, packed, row_sums, scale, b)
    assert torch.equal(got, int8_reference(x, qweight, scale, b))


@needs_vnni
def test_int8_linear_reads_a_strided_input_and_refuses_bad_ones_by_name() -> None:
    op = kernels.int8_linear()
    qweight = torch.randint(-127, 128, (64, 32), dtype=torch.int8)
    packed, row_sums = kernels.pack_int8_weight(qweight)
    scale = torch.rand(64)
    x = torch.randn(32, 3).t()  # (3, 32), not contiguous
    assert torch.equal(op(x, packed, row_sums, scale, None), int8_reference(x, qweight, scale, None))
    bad = [
        ((x.double(), packed, row_sums, scale, None), "x must be an (M, K) float32"),
        ((torch.randn(3, 48), packed, row_sums, scale, None), "x has 48 columns, the weight 32"),
        ((x, qweight, row_sums, scale, None), "packed must be a contiguous (N / 64"),
        ((x, packed, row_sums, torch.rand(200), None), "scale must be one float32 value per"),
        ((x, packed, row_sums.long(), scale, None), "row_sums must be 64 int32 values"),
        ((x, packed, row_sums, scale, torch.randn(3)), "bias must be 64 float32 values"),
    ]
    for arguments, message in bad:
        with pytest.raises(RuntimeError, match=re.escape(message)):
            op(*arguments)
