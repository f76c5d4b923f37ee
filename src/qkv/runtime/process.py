"""Process-wide settings: the one place where qkv changes the whole process.

Thread count, the allocator's behaviour and the global random seeds belong to the process, not to
a model or a trainer: the command line (`qkv train`, `qkv demo`) calls `configure_process` once,
before it builds anything, and building a `Trainer` or a `Translator` changes none of them (while
it trains, `Trainer.train()` draws dropout from torch's generator, from a state of its own: see
`qkv.train.trainer`). A Python program that wants the command line's settings calls
`configure_process` itself:

    configure_process(**cfg.process_settings())   # threads=..., seed=..., keep_freed_memory=...
    Trainer(cfg, "runs/m30k").train()

`keep_freed_memory` (Linux/glibc) keeps freed memory in the process. A training step allocates and
frees the same large tensors every time (a batch of logits is hundreds of MB at a 10k vocabulary).
glibc serves blocks above 32 MB with mmap and gives them back with munmap on free, and trims the
heap top above 128 kB, so every step pays page faults to map the same memory again and the kernel
zeroes it. Turning both off keeps the memory once touched, as tcmalloc or jemalloc would; the
process's RSS then stays at its peak instead of breathing. docs/benchmarks.md measures what it gains
for training on the CPU.

Kept freed memory fragments. Its heap never shrinks and serves every block, so each small block
that outlives a step (oneDNN's primitive for a new matrix-product shape above all: in bf16 on a CPU
with AVX512_BF16 or AMX, every product of a new shape builds one, and variable-length batches make
nearly every step's shapes new) can split the hole that the next step's larger tensor needed, and
the heap grows past it. On `multi30k-wide` in bf16 glibc's `mallinfo2` showed 4.1 GiB of heap of
which 3.1–3.5 GiB free in 18,000 pieces after 60 updates, and RSS grew by gigabytes every few
hundred updates until the machine ran out of memory; float32 products go to a BLAS that builds
nothing per shape. Two settings slow it (docs/benchmarks.md, "Training memory"):

* `onednn_primitive_cache` keeps that many oneDNN primitives (oneDNN's default: 1,024). A training
  step rarely meets its shapes again, so `TRAINING_PRIMITIVE_CACHE` is small and a primitive is
  freed soon after its step. oneDNN reads the capacity when it first builds a primitive:
  `configure_process` sets it before anything runs (an `ONEDNN_PRIMITIVE_CACHE_CAPACITY` already in
  the environment wins), and a later call changes nothing.
* `release_freed_memory()` gives the pages of the free pieces back (glibc's `malloc_trim`); the
  trainer calls it every `RELEASE_EVERY` CPU updates.

Those slow the growth; they do not end it, since the next steps touch the holes again. The allocator
that ends it is tcmalloc, which keeps freed blocks in size classes (no page faults, no growth: on
`multi30k-wide` in bf16 RSS stays at 2.6 GiB through update 200 and at 3.2 GiB from the first
validation on, at glibc's speed or better). `restart_with_tcmalloc()` runs the
same command again with tcmalloc preloaded where it is installed (Debian: `libtcmalloc-minimal4`);
`qkv train`, `qkv evaluate`, `qkv serve` and `qkv translate` of a long file do so on a CPU and say
so on stderr. Without it, glibc with the settings above for training. Decoding gains too: its step
allocates and frees tensors of tens of MB (a batch's logits, its log-probs, beam search's
candidates), which glibc maps and unmaps each time; with tcmalloc Multi30k's test set translates
1.1-1.35x faster (docs/benchmarks.md, "The allocator for decoding"). A program that decodes
through `Translator` gets it by starting Python with `LD_PRELOAD=libtcmalloc_minimal.so.4`.

`cudnn_attention=False` turns off PyTorch's cuDNN backend of `scaled_dot_product_attention` (CUDA
only; the flash and memory-efficient kernels take its place). On an H100 with torch 2.11 that
backend builds a graph for every new shape: 40 ms per new (batch, length) in bf16, 650 ms the first
time, so the first epoch of variable-length batches runs 7x slower (multi30k-wide: 100 bf16 steps
in 37 s with it, 5.5 s without; same losses). Decoding meets a new shape at every step (the keys
grow by one): on an H200, bf16 beam search over Multi30k's 1,000 test sentences takes 21.4 s with it
and 2.6 s without. `qkv train`, `qkv serve` and the translating commands turn it off; a program
that decodes in bf16 on CUDA with it on is warned (`runtime.choice`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import random
import sys
from collections.abc import Mapping
from functools import cache

import numpy as np
import torch

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_MAX = -4
# oneDNN primitives kept while training on the CPU, and updates between releases (module docstring)
TRAINING_PRIMITIVE_CACHE = 16
RELEASE_EVERY = 50
PRIMITIVE_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"


def configure_process(
    threads: int | None = None,
    seed: int | None = None,
    keep_freed_memory: bool = False,
    cudnn_attention: bool | None = None,
    onednn_primitive_cache: int | None = None,
) -> None:
    """Set the process-wide settings; None / False leaves a setting as it is.

    threads: torch's intra-op threads (CPU matrix products and the like).
    seed: seeds torch (CPU and CUDA), numpy's and Python's global generators. (A `Trainer` draws its
        model initialization and dropout from its own recipe's seed, so training is reproducible
        whatever the process's seed.)
    keep_freed_memory: ask glibc to keep freed memory (see the module docstring); for CPU training.
    cudnn_attention: whether scaled_dot_product_attention may use cuDNN on CUDA (module docstring).
    onednn_primitive_cache: how many oneDNN primitives to keep (module docstring); before the
        process's first oneDNN call only, and not over the environment's own setting.
    """
    if threads:
        torch.set_num_threads(threads)
    if seed is not None:
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
    if keep_freed_memory:
        _keep_freed_memory()
    if cudnn_attention is not None:
        torch.backends.cuda.enable_cudnn_sdp(cudnn_attention)
    if onednn_primitive_cache is not None:
        os.environ.setdefault(PRIMITIVE_CACHE_VARIABLE, str(onednn_primitive_cache))


def keep_freed_memory() -> bool:
    """Ask glibc never to mmap large blocks nor trim the heap (the allocator setting of
    `configure_process`). Returns False where that is not possible (not Linux, not glibc); calling
    it again is harmless."""
    libc = _glibc()
    mallopt = getattr(libc, "mallopt", None)  # musl and others have no mallopt
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    never_mmap = bool(mallopt(_M_MMAP_MAX, 0))
    never_trim = bool(mallopt(_M_TRIM_THRESHOLD, -1))  # -1: SIZE_MAX
    return never_mmap and never_trim


def release_freed_memory() -> bool:
    """Return the pages of freed heap memory to the system (glibc's malloc_trim): the memory kept
    by `keep_freed_memory` is touched again, page by page, when next used. Returns False where that
    is not possible (not Linux, not glibc)."""
    trim = getattr(_glibc(), "malloc_trim", None)
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


@cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, looked up once (find_library runs ldconfig); None off Linux or unloadable."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def tcmalloc_library() -> str | None:
    """The shared library of tcmalloc found on this machine (None where there is none)."""
    if not sys.platform.startswith("linux"):
        return None
    for name in ("tcmalloc_minimal", "tcmalloc"):
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def tcmalloc_loaded() -> bool:
    """Whether this process allocates with tcmalloc (it is mapped into the process)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("tcmalloc" in line for line in maps)
    except OSError:
        return False


def with_tcmalloc(env: Mapping[str, str], library: str) -> dict[str, str]:
    """`env` with tcmalloc's `library` first in LD_PRELOAD: a process started with it allocates
    with tcmalloc."""
    return {**env, "LD_PRELOAD": " ".join(filter(None, [library, env.get("LD_PRELOAD")]))}


def restart_with_tcmalloc() -> None:
    """Replace this process by the same command with tcmalloc preloaded (module docstring): where
    tcmalloc is installed and not loaded yet, and this process was not started so already (an
    LD_PRELOAD that did not take is not tried twice). Returns only where it does nothing. For a
    program's entry point: whatever the process did so far is lost."""
    library = tcmalloc_library()
    if library is None or tcmalloc_loaded() or os.environ.get(_RESTARTED):
        return
    env = {**with_tcmalloc(os.environ, library), _RESTARTED: library}
    print(
        f"allocator: tcmalloc ({library}): freed memory reused, no page faults, no growth",
        file=sys.stderr,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


_RESTARTED = "QKV_RESTARTED_WITH"
_keep_freed_memory = keep_freed_memory  # for configure_process, whose argument shadows the name
