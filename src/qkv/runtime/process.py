"""Keep freed memory in the process (Linux/glibc): a CPU speed-up for training and batched decoding.

A training step allocates and frees the same large tensors every time (a batch of logits at d_model 128 and a
10k vocabulary is ~250 MB). glibc serves blocks above 32 MB with mmap and gives them back with munmap on free,
and trims the heap top above 128 kB, so every step pays page faults to map the same memory again and the kernel
zeroes it: on 2 cores that was a third of the step (`sys` time). Turning both off keeps the memory once
touched, as tcmalloc or jemalloc would; the process's RSS then stays at its peak instead of breathing.
Measured on the multi30k-small recipe (2 cores): 2.75k -> 4.16k target tokens/s (docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Ask glibc never to mmap large blocks nor trim the heap. Returns False where that is not possible
    (not Linux, not glibc); calling it again is harmless."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, -1))  # -1: SIZE_MAX, never trim
