"""The position figures: sinusoidal encodings, their dot products, RoPE, T5 buckets, ALiBi."""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from ...model import (
    ALiBi,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
)
from ...model.positions import alibi_slopes, relative_position_bucket


def sinusoid_rows(length: int, d_model: int) -> torch.Tensor:
    """PE(0..length-1) as qkv's encoder adds it, from `SinusoidalPositionalEncoding`: (L, D)."""
    return SinusoidalPositionalEncoding(d_model)(torch.zeros(1, length, d_model))[0].double()


def sinusoid_dot(d_model: int = 512, max_offset: int = 200) -> torch.Tensor:
    """f(k) = PE(p) . PE(p + k) for k = 0..max_offset (any p: it depends on k only)."""
    pe = sinusoid_rows(max_offset + 1, d_model)
    return pe @ pe[0]


def period(dim: int, d_model: int, base: float = 10000.0) -> float:
    """The period in positions of PE(., dim): 2π·base^(2i/d_model) for dims 2i and 2i + 1."""
    return 2 * math.pi * base ** (2 * (dim // 2) / d_model)


def sinusoid_at(positions: np.ndarray, dim: int, d_model: int) -> np.ndarray:
    """PE(p, dim) at any real p, from the formula of paper 3.5 (qkv's table samples it at integer
    p): sin in even dims, cos in odd ones."""
    angle = 2 * math.pi * positions / period(dim, d_model)
    return np.sin(angle) if dim % 2 == 0 else np.cos(angle)


def draw_sinusoidal(small: bool) -> tuple[Figure, str]:
    length, d = (50, 64) if small else (100, 128)
    pe = sinusoid_rows(length, d)
    fig = Figure(figsize=(10, 3.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.2, 1])
    im = ax1.imshow(pe.numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="none")
    fig.colorbar(im, ax=ax1, shrink=0.8)
    ax1.set(xlabel="dimension (sin, cos, sin, cos, ...)", ylabel="position p")
    ax1.set_title(f"sinusoidal encodings PE(p), d_model {d}")
    span = 40  # positions shown on the right: a few cycles of the fastest dimension
    fine = np.linspace(0, span, 40 * span + 1)
    dims = (0, 10, 20, 40)
    for i, dim in enumerate(dims):
        color = f"C{i}"
        ax2.plot(
            fine,
            sinusoid_at(fine, dim, d),
            color=color,
            lw=1,
            label=f"dim {dim}: period {period(dim, d):.1f}",
        )
        ax2.plot(np.arange(span + 1), pe[: span + 1, dim].numpy(), ".", color=color, ms=4)
    ax2.set(xlabel="position p", ylabel="PE(p, dim)", xlim=(0, span), ylim=(-1.1, 1.45))
    ax2.set_title("one period per dim pair (dots: qkv's PE at integer p)", fontsize=10)
    ax2.legend(fontsize=7, loc="upper center", ncol=2)
    gap = max(
        float(np.abs(sinusoid_at(np.arange(length), dim, d) - pe[:, dim].numpy()).max())
        for dim in dims
    )
    return fig, f"PE table {length} x {d}; formula vs table at integer p: {gap:.0e}"


def offset_steps(f: torch.Tensor) -> torch.Tensor:
    """Δf(k) = f(k) − f(k − 1) for k = 1..len(f) − 1."""
    return f[1:] - f[:-1]


def rises(f: torch.Tensor) -> list[int]:
    """Every k with f(k) > f(k − 1)."""
    return [int(k) + 1 for k in (offset_steps(f) > 0).nonzero().flatten()]


def draw_sinusoid_dot(small: bool) -> tuple[Figure, str]:
    d, span = 512, 60 if small else 120
    pe = sinusoid_rows(3 * span + 1, d)
    k = torch.arange(-span, span + 1)
    fig = Figure(figsize=(12, 3.8), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    for p, style in ((span, "-"), (2 * span, "--")):
        ax1.plot(k.numpy(), (pe[p + k] @ pe[p]).numpy(), style, label=f"p = {p}")
    f = sinusoid_dot(d, span)
    rise = rises(f)[0]
    ax1.axvline(rise, color="gray", lw=0.8, label=f"first rise, k = ±{rise}")
    ax1.axvline(-rise, color="gray", lw=0.8)
    ax1.set(xlabel="offset k", ylabel="f(k) = PE(p) · PE(p + k)")
    ax1.set_title(f"d_model {d}: a function of k only, symmetric in k", fontsize=10)
    ax1.legend(fontsize=8)
    draw_offset_steps(ax2, f, min(span, 72))
    up = rises(f)
    step = offset_steps(f)
    summary = f"PE(p).PE(p+k) at d_model {d} first rises at k = {rise} (+{step[rise - 1]:.3f}); "
    return fig, summary + f"rises at {up[:6]}"


def draw_offset_steps(ax: Axes, f: torch.Tensor, last: int, floor: float = -0.45) -> None:
    """Bars of Δf(k) for k = 1..last: rises red, shoulders (a local peak of Δf still below 0)
    orange, the other falls blue; bars below `floor` are cut."""
    step = offset_steps(f).numpy()[:last]
    ks = np.arange(1, last + 1)
    peak = np.r_[False, (step[1:-1] > step[:-2]) & (step[1:-1] > step[2:]), False]
    colors = np.where(step > 0, "C3", np.where(peak, "C1", "C0"))
    ax.bar(ks, np.maximum(step, floor), color=colors, width=0.8)
    ax.axhline(0, color="black", lw=0.8)
    rise = rises(f)[0]
    ax.annotate(
        f"first rise, k = {rise}: {f[rise - 1]:.3f} → {f[rise]:.3f} (+{step[rise - 1]:.3f})",
        (rise, float(step[rise - 1])),
        (rise - 22, 0.105),
        fontsize=8,
        ha="center",
        va="center",
        arrowprops={"arrowstyle": "->"},
    )
    shoulders = [int(x) for x in ks[peak & (step < 0)]]
    up = [int(x) for x in ks[step > 0]]
    deepest = int(step.argmin())
    ax.set(ylim=(floor, 0.14), ylabel="Δf(k) = f(k) − f(k − 1)")
    ax.set_xlabel(
        f"offset k (bars cut at {floor}; the deepest is {step[deepest]:.1f} at k = {deepest + 1})"
    )
    ax.set_title(
        f"its steps: shoulders (orange, k = {', '.join(map(str, shoulders))}) still fall;\n"
        f"it rises (red) at k = {', '.join(map(str, up[:4]))}, ...",
        fontsize=9,
    )


def rope_scores(d_head: int, length: int, seed: int = 0) -> torch.Tensor:
    """q_m . k_n for one random query/key pair rotated by qkv's RoPE at every (m, n): (L, L)."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, 1, 1, d_head, generator=g, dtype=torch.float64)
    cos, sin = RotaryEmbedding(d_head)(length, dtype=torch.float64)
    q_m = apply_rotary(q.expand(1, 1, length, d_head), cos, sin)[0, 0]  # (L, Dh)
    k_n = apply_rotary(k.expand(1, 1, length, d_head), cos, sin)[0, 0]
    return q_m @ k_n.T


def draw_rope_score(small: bool) -> tuple[Figure, str]:
    d_head, length = 64, 32 if small else 64
    s = rope_scores(d_head, length)
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1, 1.2])
    norm = TwoSlopeNorm(vcenter=0.0, vmin=float(s.min()), vmax=float(s.max()))  # white: 0
    im = ax1.imshow(s.numpy(), cmap="RdBu", norm=norm, interpolation="none")
    fig.colorbar(im, ax=ax1, shrink=0.8, label="score (white: 0)")
    ax1.set(xlabel="key position n", ylabel="query position m")
    ax1.set_title(f"RoPE: q_m · k_n, d_head {d_head}")
    for m in (0, length // 4, length // 2):
        delta = torch.arange(length - m)
        ax2.plot(delta.numpy(), s[m, m + delta].numpy(), label=f"m = {m}")
    ax2.axhline(0, color="gray", lw=0.8)
    ax2.set(xlabel="n − m", ylabel="score")
    ax2.set_title("the same curve from every m: a function of n − m", fontsize=10)
    ax2.legend(fontsize=8)
    spread = max(float(s.diagonal(j).std()) for j in range(-length + 2, length - 1))
    return fig, f"largest spread along a diagonal {spread:.1e}"


def draw_relative_positions(small: bool) -> tuple[Figure, str]:
    rel = torch.arange(-160, 161)
    n_heads = 8
    fig = Figure(figsize=(12, 3.4), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    for bidirectional in (True, False):
        b = relative_position_bucket(rel, bidirectional, num_buckets=32, max_distance=128)
        label = "bidirectional (encoder)" if bidirectional else "causal (decoder)"
        ax1.step(rel.numpy(), b.numpy(), where="mid", label=label)
    ax1.set(xlabel="key − query position", ylabel="bucket")
    ax1.set_title("T5 relative bias: 32 buckets, log-spaced to 128")
    ax1.legend(fontsize=8)
    slopes = alibi_slopes(n_heads)
    ax2.bar(np.arange(1, n_heads + 1), slopes.numpy())
    ax2.set(yscale="log", xlabel="head h", ylabel="slope m_h", title="ALiBi slopes 2^(−8h/H)")
    bias = ALiBi(n_heads)(1, 48)[0, :, 0]  # (H, 48): the last query over all keys
    for h in range(0, n_heads, 2):
        ax3.plot(bias[h].numpy(), label=f"head {h + 1}")
    ax3.set(xlabel="key position (query at 47)", ylabel="bias −m_h·|i − j|")
    ax3.set_title("ALiBi bias added to the scores")
    ax3.legend(fontsize=8)
    return fig, f"ALiBi slopes {slopes[0]:.3f} .. {slopes[-1]:.4f}"
