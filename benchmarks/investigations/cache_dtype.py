"""A captured step's attention of one layer against the dtype its keys and values are cached in.

One decoding step's self-attention of 32 sentences (the base shape: 8 heads of 64, 32 positions
held, one query each), compiled as the captured step compiles it (TorchInductor, C++ wrapper,
symbolic shapes) from `qkv.runtime.decoding_attention.grouped_attention`, keys and values read in their
cached dtype and cast up to float32. Timed two ways: one layer's keys and values called again and
again (they stay in the CPU's caches), and twelve layers' worth taking turns, as the six decoder
layers' self- and cross-attention do in a step (past a 32 MB L3 in float32).

    python -m benchmarks.investigations.cache_dtype              # one thread
    python -m benchmarks.investigations.cache_dtype --threads 2

Each time is the median of 30 passes after one warm-up pass over all twelve.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from benchmarks import common
from qkv.runtime.decoding_attention import grouped_attention

ROWS, POSITIONS, LAYERS = 32, 32, 12
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bf16": torch.bfloat16}


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """As the captured step reads a cache: k, v cast up to q's dtype, then equation 1."""
    return grouped_attention(q, k.to(q.dtype), v.to(q.dtype), mask, None, q.size(-1) ** -0.5)


def per_call_us(
    step: Callable[..., torch.Tensor],
    q: torch.Tensor,
    layers: list[tuple[torch.Tensor, torch.Tensor]],
    mask: torch.Tensor,
    turns: int,
) -> float:
    """Median µs a call over 30 passes, each calling the first `turns` layers in rotation."""
    passes = []
    for _ in range(30):
        start = time.perf_counter()
        for k, v in layers[:turns] * (LAYERS // turns):
            step(q, k, v, mask)
        passes.append((time.perf_counter() - start) / LAYERS)
    return sorted(passes)[len(passes) // 2] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    heads, d_head = common.HEADS, common.D_MODEL // common.HEADS
    q = torch.randn(ROWS, heads, 1, d_head)
    mask = torch.ones(ROWS, 1, 1, POSITIONS, dtype=torch.bool)
    step = torch.compile(attention, dynamic=True, options={"cpp_wrapper": True})
    print(f"{ROWS} rows x {heads} heads x {POSITIONS} positions, {args.threads} thread(s)")
    with torch.inference_mode():
        for name, dtype in DTYPES.items():
            shape = (ROWS, heads, POSITIONS, d_head)
            layers = [
                (torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)) for _ in range(LAYERS)
            ]
            for k, v in layers:  # compiles once per dtype; warms up
                step(q, k, v, mask)
            mb = 2 * layers[0][0].numel() * layers[0][0].element_size() / 1e6
            cached, rotating = (per_call_us(step, q, layers, mask, n) for n in (1, LAYERS))
            print(
                f"{name:8s} {mb:4.1f} MB a layer: {cached:5.0f} µs a call in cache, "
                f"{rotating:5.0f} µs with {LAYERS} layers taking turns ({LAYERS * mb:.0f} MB)"
            )


if __name__ == "__main__":
    main()
