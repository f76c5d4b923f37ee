"""Kernels written in C++ for what a decoding step's compiled code does slowly, built on first use.

- `decoding_attention()`: `torch.ops.qkv.decoding_attention` (decoding_attention.cpp), a captured
  step's attention, one pass per row and head over the cached keys and values;
- `int8_linear()`: `torch.ops.qkv.int8_linear` (int8_linear.cpp), an int8 linear layer for a few
  rows that streams its weight (packed by `pack_int8_weight`) with AVX512-VNNI;

each None where it cannot be built (or, for `int8_linear`, where the CPU lacks VNNI). Both are
compiled into one library per CPU instruction set (`torch.backends.cpu.get_cpu_capability()`: the
flags and `at::vec` width TorchInductor uses too) by `torch.utils.cpp_extension` into its cache
(`TORCH_EXTENSIONS_DIR`, by default ~/.cache/torch_extensions), in a few seconds; later processes
load it. The captured step that calls them needs the same C++ compiler.

`tests/runtime/test_kernels.py` checks the attention against equation 1 computed in float64 and
the int8 layer against `torch._int_mm`'s integer sums.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch

SOURCES = [Path(__file__).with_name(f) for f in ("decoding_attention.cpp", "int8_linear.cpp")]
# the float arithmetic as written: a * b + c rounded twice, as PyTorch's own ops round it
COMMON_FLAGS = ["-O3", "-ffp-contract=off"]
BLOCK = 64  # output rows a block of `pack_int8_weight`'s layout holds (int8_linear.cpp's kBlock)
# compiler flags per `get_cpu_capability()`: TorchInductor's for the same instruction sets, and
# F16C (float16 loads)
ISA_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma", "-mf16c"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c"],
}


def isa_flags(capability: str) -> list[str]:
    """The compiler flags for a `torch.backends.cpu.get_cpu_capability()` value: at::vec's
    vectors of that width where the flags are known, its portable ones otherwise."""
    flags = ISA_FLAGS.get(capability)
    if flags is None:
        return []
    return [*flags, f"-DCPU_CAPABILITY_{capability}", f"-DCPU_CAPABILITY={capability}"]


@functools.cache
def build() -> bool:
    """Build or load the kernels once per process; False, said once on stderr, where no C++
    toolchain builds them."""
    capability = torch.backends.cpu.get_cpu_capability()
    try:
        _find_ninja()
        from torch.utils import cpp_extension

        cpp_extension.load(
            name=f"qkv_kernels_{capability.lower()}",
            sources=[str(s) for s in SOURCES],
            extra_cflags=[*COMMON_FLAGS, *isa_flags(capability)],
            is_python_module=False,
            verbose=False,
        )
    except (OSError, RuntimeError, ImportError) as e:  # no compiler, no ninja, a failed build
        first = str(e).strip().splitlines()[:1]
        print(
            f"qkv: the C++ decoding kernels are not built ({' '.join(first)}); "
            "captured steps use TorchInductor's loops and torch's int8 products",
            file=sys.stderr,
        )
        return False
    torch.library.register_fake("qkv::decoding_attention")(_shape_of_q)
    torch.library.register_fake("qkv::int8_linear")(_shape_of_int8_linear)
    return True


def decoding_attention() -> Callable[..., torch.Tensor] | None:
    """The op (q, k, v, mask, scale) -> out, or None where it is not built."""
    return torch.ops.qkv.decoding_attention if build() else None


def int8_linear() -> Callable[..., torch.Tensor] | None:
    """The op (x, packed, row_sums, scale, bias) -> y, or None where it is not built or this CPU
    lacks AVX512-VNNI."""
    return torch.ops.qkv.int8_linear if build() and torch.ops.qkv.has_int8_linear() else None


def pack_int8_weight(qweight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An int8 weight (N, K) as `int8_linear` reads it: packed (ceil(N / 64), K / 4, 64, 4), each
    block of 64 output rows four columns at a time (the last padded with zeros), and its row sums
    (N) int32."""
    N, K = qweight.shape
    padded = torch.cat([qweight, qweight.new_zeros(-N % BLOCK, K)])
    packed = padded.view(-1, BLOCK, K // 4, 4).permute(0, 2, 1, 3).contiguous()
    return packed, qweight.sum(dim=1, dtype=torch.int32)


def _shape_of_q(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """The op's output without running it (for tracing): q's shape and dtype."""
    return q.new_empty(q.shape)


def _shape_of_int8_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    row_sums: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """The int8 layer's output without running it (for tracing): (M, N) float32."""
    return x.new_empty(x.size(0), scale.size(0))


def _find_ninja() -> None:
    """Put the `ninja` package's binary on PATH when none is there (cpp_extension runs it)."""
    if shutil.which("ninja") is None:
        import ninja

        os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])


__all__ = [
    "ISA_FLAGS",
    "build",
    "decoding_attention",
    "int8_linear",
    "isa_flags",
    "pack_int8_weight",
]
