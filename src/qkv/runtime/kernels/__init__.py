"""Kernels written in C++ for what TorchInductor's generated loops do slowly, built on first use.

`decoding_attention()` returns `torch.ops.qkv.decoding_attention` (decoding_attention.cpp: a
captured decoding step's attention, one pass per row and head over cached keys and values), or
None where it cannot be built. It is compiled once per CPU instruction set
(`torch.backends.cpu.get_cpu_capability()`: the flags and `at::vec` width TorchInductor uses
too) by `torch.utils.cpp_extension` into its cache (`TORCH_EXTENSIONS_DIR`, by default
~/.cache/torch_extensions), in a few seconds; later processes load it. The captured step that
calls it needs the same C++ compiler.

`tests/runtime/test_kernels.py` checks it against equation 1 computed in float64.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("decoding_attention.cpp")
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
def decoding_attention() -> Callable[..., torch.Tensor] | None:
    """The op (q, k, v, mask, scale) -> out, built or loaded once per process; None, said once
    on stderr, where no C++ toolchain builds it."""
    capability = torch.backends.cpu.get_cpu_capability()
    try:
        _find_ninja()
        from torch.utils import cpp_extension

        cpp_extension.load(
            name=f"qkv_decoding_attention_{capability.lower()}",
            sources=[str(SOURCE)],
            extra_cflags=["-O3", *isa_flags(capability)],
            is_python_module=False,
            verbose=False,
        )
    except (OSError, RuntimeError, ImportError) as e:  # no compiler, no ninja, a failed build
        first = str(e).strip().splitlines()[:1]
        print(
            f"qkv: the C++ decoding-attention kernel is not built ({' '.join(first)}); "
            "captured steps use TorchInductor's loops",
            file=sys.stderr,
        )
        return None
    torch.library.register_fake("qkv::decoding_attention")(_shape_of_q)
    return torch.ops.qkv.decoding_attention


def _shape_of_q(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """The op's output without running it (for tracing): q's shape and dtype."""
    return q.new_empty(q.shape)


def _find_ninja() -> None:
    """Put the `ninja` package's binary on PATH when none is there (cpp_extension runs it)."""
    if shutil.which("ninja") is None:
        import ninja

        os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])


__all__ = ["ISA_FLAGS", "decoding_attention", "isa_flags"]
