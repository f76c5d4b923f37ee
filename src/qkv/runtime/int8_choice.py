"""Which kernel multiplies an int8 decoding step's rows on this CPU, chosen by measuring, and
only among the kernels whose outputs are the plain path's here.

`Int8Linear` (`runtime.captured`) multiplies by `torch._int_mm` (the plain path), by oneDNN's
prepacked u8 x s8 product for several rows, or by qkv's own VNNI kernel for one row. Which is
faster depends on the CPU; whether a fast one is right does too: a u8 x s8 product on a CPU
without VNNI (AVX512-VNNI, AVX-VNNI) may saturate its 16-bit pair sums. So each candidate's
outputs are checked against `_int_mm`'s on the rows it is timed on, on the CPU it runs on, and a
candidate that disagrees is never chosen, however fast. `_int_mm` itself may saturate (oneDNN's
AVX2 code on a CPU with VNNI): there the layers take 7-bit weights (`weight_levels`), exact.
"""

from __future__ import annotations

import functools
from typing import Protocol

import torch
from torch import Tensor

from .kernels import int8_linear, pack_int8_weight
from .measure import alternate, fastest

# oneDNN's prepacked int8 product replaces torch._int_mm for several rows when it takes at most
# this share of its time (`onednn_rows_faster`)
ONEDNN_MARGIN = 0.9


class Int8Linear(Protocol):
    """What the choice reads of an int8 layer (`runtime.captured.Int8Linear`): its int8 weight
    (N, K) quantized per output row, the N scales, the bias; calling it gives its outputs."""

    qweight: Tensor
    scale: Tensor
    bias: Tensor | None
    in_features: int

    def __call__(self, x: Tensor) -> Tensor: ...


@functools.cache
def int_mm_exact() -> bool:
    """Whether `torch._int_mm` sums int8 products exactly at full range on this CPU: x at 127 by
    weights at +-127. In its AVX2 code (ONEDNN_MAX_CPU_ISA=AVX2), oneDNN multiplies x + 128
    (uint8) by the int8 weight and saturates each pair of products at 16 bits (vpmaddubsw):
    255 x 127 x 2 is over 32,767. On a CPU without VNNI torch sums exactly, in a slower loop."""
    x = torch.full((32, 64), 127, dtype=torch.int8)
    w = torch.full((16, 64), 127, dtype=torch.int8)
    w[1::2] = -127
    return torch.equal(torch._int_mm(x, w.t()).long(), x.long() @ w.long().T)


def weight_levels() -> int:
    """The largest |weight| of an int8 layer here: 127, or 63 where `int_mm_exact` is False
    (255 x 63 x 2 fits 16 bits: 7-bit weights, oneDNN's advice for CPUs without VNNI)."""
    return 127 if int_mm_exact() else 63


def onednn_rows_faster(linears: list[Int8Linear], rows: int = 4, repeats: int = 5) -> bool:
    """Whether oneDNN's prepacked product (`Int8Linear`) beats `torch._int_mm` for `rows`-row
    inputs (beam search's four hypotheses) on this CPU: each multiplies the same rows by every
    weight of `linears` in turn, the median of `repeats` passes (the two alternating), oneDNN
    chosen when at least `ONEDNN_MARGIN` faster. False where oneDNN's int8 product is missing,
    and where its sums are not `_int_mm`'s on these rows (`agree`): a u8 x s8 product without
    VNNI saturates its 16-bit pair sums, and the first row, every x at 127, is where they are
    largest."""
    if not linears or not onednn_int8_available():
        return False
    weights = [m.qweight for m in linears]
    signed = {
        w.size(1): torch.randint(-127, 128, (rows, w.size(1)), dtype=torch.int8) for w in weights
    }
    for x in signed.values():
        x[0] = 127
    unsigned = {k: (x.short() + 128).to(torch.uint8) for k, x in signed.items()}
    packed = [onednn_prepack(w) for w in weights]

    def int_mm() -> list[Tensor]:
        return [torch._int_mm(signed[w.size(1)], w.t()) for w in weights]

    def onednn() -> list[Tensor]:
        pairs = zip(weights, packed, strict=True)
        return [onednn_sums(unsigned[w.size(1)], *p) for w, p in pairs]

    if not all(agree(got, want.float()) for got, want in zip(onednn(), int_mm(), strict=True)):
        return False  # fast or not, wrong on this CPU
    timed = alternate({"int_mm": int_mm, "onednn": onednn}, repeats)
    return choose_onednn(timed["int_mm"].seconds, timed["onednn"].seconds)


def onednn_prepack(weight: Tensor) -> tuple[Tensor, Tensor]:
    """An int8 weight (N, K) prepacked for oneDNN's product, and its N scales (ones)."""
    return torch.ops.onednn.qlinear_prepack(weight, None), torch.ones(weight.size(0))


def onednn_sums(unsigned: Tensor, packed: Tensor, unit: Tensor) -> Tensor:
    """oneDNN's product of `unsigned` x (M, K) (uint8, zero point 128) by an int8 weight
    prepacked, its N scales `unit` (ones), the op TorchInductor's pattern calls: the integer
    sums, in float32 (M, N)."""
    one, zero_point = torch.ones(1), torch.tensor([128], dtype=torch.int32)
    float_output = (None, None, 1.0, 0, torch.float32, "none", [], "")  # no bias, no post-op
    return torch.ops.onednn.qlinear_pointwise.tensor(
        unsigned, one, zero_point, packed, unit, *float_output
    )


def agree(got: Tensor, want: Tensor) -> bool:
    """Whether a fast product's outputs are the plain path's (to float32 rounding)."""
    return bool((got - want).abs().max() <= 1e-5 * want.abs().max() + 1e-6)


def choose_onednn(int_mm_seconds: float, onednn_seconds: float) -> bool:
    """oneDNN's product where it takes at most `ONEDNN_MARGIN` of `_int_mm`'s time."""
    seconds = {"int_mm": {4: int_mm_seconds}, "onednn": {4: onednn_seconds}}
    return fastest(seconds, ONEDNN_MARGIN) == "onednn"


def onednn_int8_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_prepack")


def kernel_rows_faster(linears: list[Int8Linear], repeats: int = 5) -> bool:
    """Whether qkv's int8 kernel multiplies one row (a greedy step's) by every weight of `linears`
    faster than `torch._int_mm` does on this CPU: the kernel as called (x quantized and the sums
    scaled inside) against `_int_mm`'s bare integer product, the median of `repeats` passes each,
    the two alternating (`choose_kernel`). False where the kernel does not run, and where its
    outputs are not the layers' own (`_int_mm`'s) on these rows (`agree`)."""
    op = int8_linear()
    if op is None or not linears:
        return False
    x = {m.in_features: torch.randn(1, m.in_features) for m in linears}
    xq = {k: torch.randint(-127, 128, row.shape, dtype=torch.int8) for k, row in x.items()}
    packed = [pack_int8_weight(m.qweight) for m in linears]

    def kernel() -> list[Tensor]:
        pairs = zip(linears, packed, strict=True)
        return [op(x[m.in_features], weight, sums, m.scale, m.bias) for m, (weight, sums) in pairs]

    def int_mm() -> None:
        for m in linears:
            torch._int_mm(xq[m.in_features], m.qweight.t())

    with torch.inference_mode():
        if not all(agree(y, m(x[m.in_features])) for y, m in zip(kernel(), linears, strict=True)):
            return False  # fast or not, wrong on this CPU
        timed = alternate({"kernel": kernel, "int_mm": int_mm}, repeats)
        return choose_kernel(timed["kernel"].seconds, timed["int_mm"].seconds)


def choose_kernel(kernel_seconds: float, int_mm_seconds: float) -> bool:
    """qkv's int8 kernel where it takes at most `_int_mm`'s time (at several rows it is as fast
    as oneDNN's product: docs/benchmarks.md, "qkv's int8 kernel"): the kernel is the default,
    kept on a tie."""
    return fastest({"kernel": {1: kernel_seconds}, "int_mm": {1: int_mm_seconds}}) == "kernel"


__all__ = [
    "ONEDNN_MARGIN",
    "agree",
    "choose_kernel",
    "choose_onednn",
    "int_mm_exact",
    "kernel_rows_faster",
    "onednn_int8_available",
    "onednn_prepack",
    "onednn_rows_faster",
    "onednn_sums",
    "weight_levels",
]
