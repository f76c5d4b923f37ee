"""The linear layers of one decoder step of the base shape against the number of rows, per kernel.

A greedy step multiplies M rows (one per sentence) by every decoder weight matrix: per layer the
self-attention's fused q/k/v (512 x 1536) and output (512 x 512), the cross-attention's query and
output (512 x 512 each), the FFN (512 x 2048, 2048 x 512); then the output projection (512 x 8k).
This times those products alone, on one thread (a worker process's setting), with the kernels
decoding uses: packed float32 and bf16 (`PackedLinear`) and dynamic int8 (`quantize_int8`).

    python -m benchmarks.investigations.linear_rows

M = 1, 8, 16, 32, 64, 128; each time is the median of 15 passes after 3 warm-up passes. Rows per
second that grow with M mean the weights' traffic bounds the step; rows per second that stop
growing mean the kernel's arithmetic does (GFLOP/s printed next to each).
"""

from __future__ import annotations

import torch
from torch import nn

from benchmarks import common
from qkv.runtime.packed import PackedLinear
from qkv.runtime.quantize import quantize_int8

D, FF = common.D_MODEL, common.D_FF
LAYER = [(D, 3 * D), (D, D), (D, D), (D, D), (D, FF), (FF, D)]  # (in, out) in one decoder layer
SHAPES = LAYER * common.LAYERS + [(D, common.VOCAB)]


def step_layers(kind: str) -> nn.Sequential:
    """The step's linear layers as `kind` (fp32, bf16 or int8) decoding runs them."""
    linears = [nn.Linear(i, o) for i, o in SHAPES]
    if kind == "int8":
        return quantize_int8(nn.Sequential(*linears), inplace=True)
    dtype = torch.bfloat16 if kind == "bf16" else torch.float32
    return nn.Sequential(*[PackedLinear(lin.to(dtype)) for lin in linears])


def median_step(layers: nn.Sequential, inputs: dict[int, torch.Tensor], repeats: int = 15) -> float:
    """Seconds of one pass over the step's layers, median of `repeats` after 3 warm-up passes."""

    def step() -> None:
        for layer, (i, _) in zip(layers, SHAPES, strict=True):
            layer(inputs[i])

    with torch.inference_mode():
        return common.time_calls(step, repeats, warmup=3).seconds


def main() -> None:
    torch.set_num_threads(1)
    flop_per_row = 2 * sum(i * o for i, o in SHAPES)
    print(common.describe(common.machine(), common.versions("torch")))
    for kind in ("fp32", "bf16", "int8"):
        layers = step_layers(kind)
        dtype = torch.bfloat16 if kind == "bf16" else torch.float32
        for rows in (1, 8, 16, 32, 64, 128):
            inputs = {n: torch.randn(rows, n, dtype=dtype) for n in (D, FF)}
            seconds = median_step(layers, inputs)
            print(
                f"{kind:5s} rows {rows:4d}  {seconds * 1e3:6.2f} ms a step  "
                f"{rows / seconds:7.0f} rows/s  {rows * flop_per_row / seconds / 1e9:5.0f} GFLOP/s",
                flush=True,
            )


if __name__ == "__main__":
    main()
