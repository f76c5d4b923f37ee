"""Process-wide settings: the one place where qkv changes the whole process.

    configure_process(**cfg.process_settings())   # threads=..., seed=..., keep_freed_memory=...
    Trainer(cfg, "runs/m30k").train()

Threads, the allocator, oneDNN's primitive cache, cuDNN's attention and the random seeds belong to
the process, not to a model or a trainer: the command line calls `configure_process` once, before
it builds anything, and building a `Trainer` or a `Translator` changes none of them. A program
that wants the command line's settings calls it itself, as above.

Details: docs/architecture.md, "Process-wide settings" (why each setting); the measurements:
docs/benchmarks.md, "Training loop: the CPU recipe", "Training memory", "The allocator for
decoding", "bf16 on CUDA".
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
# oneDNN primitives kept while training on the CPU, and updates between releases: why, in
# docs/architecture.md, "Process-wide settings"
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
    keep_freed_memory: ask glibc to keep freed memory; for CPU training.
    cudnn_attention: whether scaled_dot_product_attention may use cuDNN on CUDA.
    onednn_primitive_cache: how many oneDNN primitives to keep; before the
        process's first oneDNN call only, and not over the environment's own setting.
    Why each of the last three: docs/architecture.md, "Process-wide settings".
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


def release_freed_memory(tcmalloc: bool = False) -> bool:
    """Return the pages of freed heap memory to the system (glibc's malloc_trim): the memory kept
    by `keep_freed_memory` is touched again, page by page, when next used. tcmalloc=True: tcmalloc's
    freed pages too (`MallocExtension_ReleaseFreeMemory`), after a one-off phase whose peak should
    not stay resident (sorting millions of pairs into batches); not every step, whose memory it
    reuses. Returns False where that is not possible (not Linux, not glibc)."""
    if tcmalloc and tcmalloc_loaded():
        release = getattr(ctypes.CDLL(None), "MallocExtension_ReleaseFreeMemory", None)
        if release is not None:
            release()
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
    """Replace this process by the same command with tcmalloc preloaded (docs/architecture.md,
    "Process-wide settings"): where tcmalloc is installed and not loaded yet, and this process was
    not started so already (an LD_PRELOAD that did not take is not tried twice). Returns only where
    it does nothing. For a program's entry point: whatever the process did so far is lost."""
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
