"""The cost figures: time, memory and FLOPs against the length; the warm-up schedule."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch.utils.flop_counter import FlopCounterMode

from ...config import TransformerConfig
from ...model import (
    EncoderLayer,
    MultiHeadedAttention,
)
from ...runtime.timing import time_calls
from ...train.schedule import lr_multiplier, paper_peak_lr
from .common import seeded


def layer_flops(length: int, d_model: int = 512, d_ff: int = 2048) -> tuple[int, int]:
    """FLOPs of one qkv EncoderLayer on one sentence of `length` tokens, counted by torch's
    FlopCounterMode on the meta device: (matrix-vector products of the linear layers, i.e. the
    projections and the FFN; the score and weighted-sum products Q K^T and A V)."""
    with torch.device("meta"):
        cfg = TransformerConfig(src_vocab_size=8, d_model=d_model, n_heads=8, d_ff=d_ff)
        layer = EncoderLayer(cfg).eval()
        layer.self_attn.fused = False  # the readable path: Q K^T and A V as two matmuls
        x = torch.empty(1, length, d_model)
        counter = FlopCounterMode(display=False)
        with counter:
            layer(x)
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    linear = sum(n for op, n in counts.items() if op.endswith(("addmm", "aten.mm")))
    scores = sum(n for op, n in counts.items() if op.endswith("bmm"))
    return linear, scores


def crossover_length(d_model: int = 512, d_ff: int = 2048) -> int:
    """The length at which the score FLOPs (4 L^2 d) reach the linear ones (8 L d^2 + 4 L d d_ff):
    L = 2 d + d_ff."""
    return 2 * d_model + d_ff


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null in the block (the profiler's C++ start/stop lines)."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def peak_bytes(fn: Callable[[], object]) -> int:
    """The most bytes the CPU allocator held during fn() above what it held before, from the
    allocation records of torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    totals = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"]
    if not totals:
        return 0
    first = next(e for e in events if e.get("name") == "[memory]")["args"]
    before = first["Total Allocated"] - first["Bytes"]
    return max(totals) - before


def best_time(fn: Callable[[], object], repeats: int = 7, min_seconds: float = 0.02) -> float:
    """Seconds per call of fn: the best of `repeats` rounds, each long enough to time."""
    return time_calls(fn, repeats, min_seconds=min_seconds).best_seconds


def attention_cost(
    lengths: list[int], d_model: int = 256, n_heads: int = 4, repeats: int = 7
) -> dict[str, list]:
    """Time (one thread, best of `repeats`) and peak memory of one forward pass of qkv's
    MultiHeadedAttention (self-attention, one sentence of L tokens), fused kernel and readable
    path (weights kept)."""
    with seeded(0):
        mha = MultiHeadedAttention(d_model, n_heads).eval()
    cost: dict[str, list] = {"time": [], "time_weights": [], "bytes": [], "bytes_weights": []}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core: steadier on a shared machine
    try:
        for length in lengths:
            x = torch.randn(1, length, d_model)
            for suffix, need in (("", False), ("_weights", True)):

                def run(x: torch.Tensor = x, need: bool = need) -> object:
                    with torch.no_grad():
                        return mha(x, need_weights=need)

                cost["time" + suffix].append(best_time(run, repeats))
                cost["bytes" + suffix].append(peak_bytes(run))
    finally:
        torch.set_num_threads(threads)
    return cost


def slope_guide(ax: Axes, xs: list[int], y_end: float, power: int, label: str) -> None:
    """A dotted line ∝ L^power through the last measured point."""
    x = np.array(xs, dtype=float)
    ax.loglog(x, y_end * (x / x[-1]) ** power, ":", color="gray")
    ax.annotate(label, (x[0], y_end * (x[0] / x[-1]) ** power), fontsize=8, color="gray")


def draw_complexity(small: bool) -> tuple[Figure, str]:
    lengths = [32, 64, 128] if small else [64, 128, 256, 512, 1024, 2048]
    cost = attention_cost(lengths, repeats=2 if small else 7)
    fig = Figure(figsize=(13, 3.6), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    for ax, key, unit, scale in ((ax1, "time", "ms", 1e3), (ax2, "bytes", "MiB", 2.0**-20)):
        ax.loglog(lengths, np.array(cost[key]) * scale, "o-", label="fused kernel")
        weights = np.array(cost[key + "_weights"]) * scale
        ax.loglog(lengths, weights, "s-", label="readable path, weights kept")
        slope_guide(ax, lengths, weights[-1], 2, "∝ L²")
        slope_guide(ax, lengths, weights[-1] / 8, 1, "∝ L")
        ax.set(xlabel="length L", ylabel=unit)
        ax.legend(fontsize=8)
    ax1.set_title("time of one MultiHeadedAttention (d 256, 4 heads, 1 thread)", fontsize=9)
    ax2.set_title("peak memory allocated during it", fontsize=9)
    d, d_ff = 512, 2048
    sweep = [2**i for i in range(6, 15)]
    counted = [layer_flops(n, d, d_ff) for n in sweep]
    ax3.loglog(sweep, [c[0] for c in counted], "o-", label="projections + FFN ∝ L·d²")
    ax3.loglog(sweep, [c[1] for c in counted], "s-", label="Q Kᵀ and A V ∝ L²·d")
    cross = crossover_length(d, d_ff)
    ax3.axvline(cross, color="gray", lw=0.8)
    ax3.annotate(f"equal at\nL = 2d + d_ff\n= {cross}", (cross * 1.15, counted[0][1]), fontsize=8)
    ax3.set(xlabel="length L", ylabel="FLOPs")
    ax3.set_title(f"FLOPs of one encoder layer, d {d}, d_ff {d_ff}", fontsize=9)
    ax3.legend(fontsize=8)
    slope = math.log(cost["time_weights"][-1] / cost["time_weights"][-2]) / math.log(2)
    summary = (
        f"crossover L = {cross}; readable path at L {lengths[-1]}: "
        f"{cost['time_weights'][-1] * 1e3:.1f} ms (last doubling x{2**slope:.1f}), "
        f"{cost['bytes_weights'][-1] / 2**20:.1f} MiB; fused {cost['bytes'][-1] / 2**20:.1f} MiB"
    )
    return fig, summary


def draw_schedule(small: bool) -> tuple[Figure, str]:
    d_model, warmup = 512, 4000
    steps = np.arange(1, 40_001, 40 if small else 10)
    factor = lr_multiplier("noam", warmup)
    peak = paper_peak_lr(d_model, warmup)
    lr = np.array([peak * factor(int(s) - 1) for s in steps])
    fig = Figure(figsize=(6, 3.2), layout="constrained")
    ax = fig.subplots()
    ax.plot(steps, lr * 1e4)
    ax.axvline(warmup, color="gray", lw=0.8)
    ax.set(xlabel="update", ylabel="learning rate × 10⁴")
    ax.set_title("paper eq. 3: linear warm-up to step 4000, then ∝ 1/√step", fontsize=9)
    return fig, f"peak {peak:.2e} at step {warmup}"
