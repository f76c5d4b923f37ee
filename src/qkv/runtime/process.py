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

`cudnn_attention=False` turns off PyTorch's cuDNN backend of `scaled_dot_product_attention` (CUDA
only; the flash and memory-efficient kernels take its place). On an H100 with torch 2.11 that
backend builds a graph for every new shape: 40 ms per new (batch, length) in bf16, 650 ms the first
time, so the first epoch of variable-length batches runs 7x slower (multi30k-wide: 100 bf16 steps
in 37 s with it, 5.5 s without; same losses). `qkv train` and `qkv serve` turn it off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import random
import sys

import numpy as np
import torch

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_MAX = -4


def configure_process(
    threads: int | None = None,
    seed: int | None = None,
    keep_freed_memory: bool = False,
    cudnn_attention: bool | None = None,
) -> None:
    """Set the process-wide settings; None / False leaves a setting as it is.

    threads: torch's intra-op threads (CPU matrix products and the like).
    seed: seeds torch (CPU and CUDA), numpy's and Python's global generators. (A `Trainer` draws its
        model initialization and dropout from its own recipe's seed, so training is reproducible
        whatever the process's seed.)
    keep_freed_memory: ask glibc to keep freed memory (see the module docstring); for CPU training.
    cudnn_attention: whether scaled_dot_product_attention may use cuDNN on CUDA (module docstring).
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


def keep_freed_memory() -> bool:
    """Ask glibc never to mmap large blocks nor trim the heap (the allocator setting of
    `configure_process`). Returns False where that is not possible (not Linux, not glibc); calling
    it again is harmless."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    never_mmap = bool(mallopt(_M_MMAP_MAX, 0))
    never_trim = bool(mallopt(_M_TRIM_THRESHOLD, -1))  # -1: SIZE_MAX
    return never_mmap and never_trim


_keep_freed_memory = keep_freed_memory  # for configure_process, whose argument shadows the name
