"""The precision setting: `auto`, `fp32` or `bf16`, resolved at run time for the device at hand.

bf16 pays where the hardware multiplies bf16 natively: a CUDA device with bf16 support, or a CPU
with the AVX512_BF16 or AMX-BF16 instructions (read from /proc/cpuinfo when asked, never from a
list of CPU models); elsewhere torch emulates bf16, slower than fp32.

* `auto`: bf16 where it is native, fp32 elsewhere. Training adds two measured rules on the CPU: a
  model narrower than `CPU_BF16_MIN_D_MODEL` keeps fp32, and so does a CPU whose bf16 matrix
  products turn out slower than its fp32 ones (`bf16_matmul_pays`: a CPU may expose AVX512_BF16
  without AMX and multiply bf16 slower than fp32; docs/benchmarks.md, "Default training precision").
* `fp32`: always fp32.
* `bf16`: always bf16; on hardware without native bf16 it runs, emulated and slow, with a warning.

    precision = resolve_precision("auto", "cpu")   # "bf16" on an AVX512_BF16 CPU, else "fp32"
    print(describe_hardware("cpu"))                 # cpu: avx512_bf16 amx_bf16-  (native bf16)
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from pathlib import Path

import torch

from .measure import alternate, fastest

PRECISIONS = ("auto", "fp32", "bf16")
# the CPU flags that mean native bf16 matrix products (either is enough)
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# training on the CPU with `auto`: below this d_model bf16 autocast gains nothing over fp32 (its
# casts cost what the small matmuls gain; measured in docs/benchmarks.md), so fp32 is kept
CPU_BF16_MIN_D_MODEL = 128
# the environment variables that cap the instructions oneDNN and ATen use, and the caps below
# AVX-512 (and below AVX-VNNI) they accept
ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
CAPS_WITHOUT_VNNI = {"default", "sse41", "avx", "avx2"}
CAPS_BELOW_AVX512 = CAPS_WITHOUT_VNNI | {"avx2_vnni", "avx2_vnni_2"}


def check_precision(setting: str) -> str:
    """`setting` if it is one of PRECISIONS, else a ValueError in one line."""
    if setting not in PRECISIONS:
        raise ValueError(f"precision={setting!r}; choose from {', '.join(PRECISIONS)}")
    return setting


def parse_cpu_flags(cpuinfo: str) -> set[str]:
    """The flags of the first processor listed in a /proc/cpuinfo text (empty if none)."""
    found = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    return set(found[1].split()) if found else set()


def within_isa_caps(flags: set[str], environ: dict[str, str]) -> set[str]:
    """`flags` less what the ISA caps in `environ` forbid the libraries to use.

    oneDNN (ONEDNN_MAX_CPU_ISA) and ATen (ATEN_CPU_CAPABILITY) run their AVX2 code under a cap
    below AVX-512, as on a CPU without it: the flags are read the same way.
    """
    caps = {environ.get(name, "").lower() for name in ISA_CAP_VARIABLES}
    if caps & CAPS_BELOW_AVX512:
        flags = {flag for flag in flags if not flag.startswith(("avx512", "amx"))}
    if caps & CAPS_WITHOUT_VNNI:
        flags = flags - {"avx_vnni"}
    return flags


def cpu_flags() -> set[str]:
    """This machine's CPU flags, read now from /proc/cpuinfo (empty where there is none), less
    the instructions an ISA cap in the environment forbids (`within_isa_caps`)."""
    try:
        flags = parse_cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        return set()
    return within_isa_caps(flags, dict(os.environ))


def native_bf16(device: str | torch.device, flags: set[str] | None = None) -> bool:
    """Whether `device` multiplies bf16 natively. flags: the CPU's flags (default: read now)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if dev.type == "cpu":
        flags = cpu_flags() if flags is None else flags
        return any(flag in flags for flag in BF16_CPU_FLAGS)
    return False


def resolve_precision(
    setting: str,
    device: str | torch.device,
    flags: set[str] | None = None,
    d_model: int | None = None,
) -> str:
    """"fp32" or "bf16" for a precision setting on `device`.

    auto: bf16 where native; given a d_model (training), a CPU also needs d_model >=
    CPU_BF16_MIN_D_MODEL and, when its flags are read (not given), bf16 products measured faster
    than fp32 ones (`bf16_matmul_pays`). bf16 where it is not native: bf16 anyway, with a warning
    that it is emulated (slow). flags: the CPU's flags (default: read now).
    """
    check_precision(setting)
    if setting == "fp32":
        return "fp32"
    native = native_bf16(device, flags)
    if setting == "bf16":
        if not native:
            warnings.warn(
                f"precision bf16 on {torch.device(device)}: no native bf16 here (CPU flags "
                f"{'/'.join(BF16_CPU_FLAGS)} absent), so it is emulated: on an AVX2 CPU, "
                "training is 20-50x and decoding 2-5x slower than in fp32 (docs/benchmarks.md); "
                "precision auto picks fp32 here",
                stacklevel=2,
            )
        return "bf16"
    training_on_cpu = native and torch.device(device).type == "cpu" and d_model is not None
    if training_on_cpu and (
        d_model < CPU_BF16_MIN_D_MODEL or (flags is None and not bf16_matmul_pays())
    ):
        return "fp32"
    return "bf16" if native else "fp32"


@functools.cache
def bf16_matmul_pays(size: int = 1024, repeats: int = 5) -> bool:
    """Whether this CPU multiplies bf16 matrices faster than fp32 ones: the best of `repeats`
    size x size products each, the two alternating after a warm-up (`runtime.measure`); fp32
    stays on a tie. Measured once per process (~0.2 s). The flags alone do not say it (the
    module docstring)."""
    a = torch.randn(size, size)
    matrices = {name: a.to(torch_dtype(name)) for name in ("fp32", "bf16")}
    runs = {name: lambda x=x: torch.matmul(x, x) for name, x in matrices.items()}
    best = {name: {size: t.best_seconds} for name, t in alternate(runs, repeats).items()}
    return fastest(best) == "bf16"


def describe_hardware(device: str | torch.device, flags: set[str] | None = None) -> str:
    """One line for logs: the device, its bf16 flags (a trailing - where absent) and the verdict."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return f"{dev}: {torch.cuda.get_device_name(dev)} (bf16 supported: {native_bf16(dev)})"
    if dev.type != "cpu":
        return f"{dev}: no native bf16"
    flags = cpu_flags() if flags is None else flags
    marks = " ".join(f if f in flags else f"{f}-" for f in BF16_CPU_FLAGS)
    verdict = "native bf16" if native_bf16(dev, flags) else "no native bf16"
    return f"cpu: {marks} ({verdict})"


def torch_dtype(precision: str) -> torch.dtype:
    """The tensor dtype of a resolved precision ("fp32" or "bf16")."""
    return {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]


__all__ = [
    "BF16_CPU_FLAGS",
    "CPU_BF16_MIN_D_MODEL",
    "PRECISIONS",
    "bf16_matmul_pays",
    "check_precision",
    "cpu_flags",
    "describe_hardware",
    "native_bf16",
    "parse_cpu_flags",
    "resolve_precision",
    "torch_dtype",
]
