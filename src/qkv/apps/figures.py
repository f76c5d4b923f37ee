"""`qkv figures`: every idea of the paper as a picture, drawn from qkv's own modules.

    qkv figures --out docs/figures              all figures (about a minute on 2 CPU cores)
    qkv figures --out /tmp/f --small            smaller sizes and a quickly trained demo model
    qkv figures --out /tmp/f --demo-model DIR   the cross-attention of a model you trained

Each `draw_*` function builds one matplotlib `Figure` (no pyplot, no global state) from the real
classes of `qkv.model` and returns it with a one-line summary of what it measured; `make_figures`
saves them as small PNGs. Everything is seeded, so the pictures are the same on every run except
the measured times of `complexity.png`. docs/concepts.md explains each picture.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from PIL import Image
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..config import TransformerConfig
from ..model import (
    ALiBi,
    DotProductScore,
    EncoderLayer,
    MultiHeadedAttention,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    apply_rotary,
    causal_mask,
    combine,
    padding_mask,
    softmax_attention,
)
from ..model.layers import make_norm
from ..model.nadaraya_watson import NadarayaWatson, fit_width, toy_regression, toy_target
from ..model.positions import alibi_slopes, relative_position_bucket
from ..runtime.timing import time_calls
from ..train.schedule import lr_multiplier, paper_peak_lr

DPI = 100
PAD = 0


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """torch's global generator seeded inside the block and restored after it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


# --- positions --------------------------------------------------------------------------------


def sinusoid_rows(length: int, d_model: int) -> torch.Tensor:
    """PE(0..length-1) as qkv's encoder adds it, from `SinusoidalPositionalEncoding`: (L, D)."""
    return SinusoidalPositionalEncoding(d_model)(torch.zeros(1, length, d_model))[0].double()


def sinusoid_dot(d_model: int = 512, max_offset: int = 200) -> torch.Tensor:
    """f(k) = PE(p) . PE(p + k) for k = 0..max_offset (any p: it depends on k only)."""
    pe = sinusoid_rows(max_offset + 1, d_model)
    return pe @ pe[0]


def first_rise(values: torch.Tensor) -> int:
    """The first k with values[k] > values[k - 1] (len(values) if they never rise)."""
    rises = (values[1:] > values[:-1]).nonzero()
    return int(rises[0]) + 1 if len(rises) else len(values)


def draw_sinusoidal(small: bool) -> tuple[Figure, str]:
    length, d = (50, 64) if small else (100, 128)
    pe = sinusoid_rows(length, d)
    fig = Figure(figsize=(10, 3.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.2, 1])
    im = ax1.imshow(pe.numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="none")
    fig.colorbar(im, ax=ax1, shrink=0.8)
    ax1.set(xlabel="dimension (sin, cos, sin, cos, ...)", ylabel="position p")
    ax1.set_title(f"sinusoidal encodings PE(p), d_model {d}")
    for dim in (0, 1, 8, 20, 40):
        ax2.plot(pe[:, dim].numpy(), label=f"dim {dim}")
    ax2.set(xlabel="position p", ylabel="PE(p, dim)", title="a few dimensions: one frequency each")
    ax2.legend(fontsize=7, loc="lower left")
    return fig, f"PE table {length} x {d}"


def draw_sinusoid_dot(small: bool) -> tuple[Figure, str]:
    d, span = 512, 60 if small else 120
    pe = sinusoid_rows(3 * span + 1, d)
    k = torch.arange(-span, span + 1)
    fig = Figure(figsize=(7, 3.4), layout="constrained")
    ax = fig.subplots()
    for p, style in ((span, "-"), (2 * span, "--")):
        ax.plot(k.numpy(), (pe[p + k] @ pe[p]).numpy(), style, label=f"p = {p}")
    f = sinusoid_dot(d, span)
    rise = first_rise(f)
    ax.axvline(rise, color="gray", lw=0.8)
    ax.axvline(-rise, color="gray", lw=0.8)
    ax.annotate(
        f"first rise at k = {rise}:\nf({rise}) = {f[rise]:.3f} > f({rise - 1}) = {f[rise - 1]:.3f}",
        (rise, float(f[rise])),
        (0.6 * span, float(f[0]) * 0.8),
        fontsize=8,
        ha="center",
        arrowprops={"arrowstyle": "->"},
    )
    ax.set(xlabel="offset k", ylabel="PE(p) · PE(p + k)")
    ax.set_title(f"d_model {d}: a function of k only, symmetric, not monotonic in |k|")
    ax.legend(fontsize=8)
    return fig, f"PE(p).PE(p+k) at d_model {d} first rises at k = {rise}"


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
    im = ax1.imshow(s.numpy(), cmap="RdBu", interpolation="none")
    fig.colorbar(im, ax=ax1, shrink=0.8)
    ax1.set(xlabel="key position n", ylabel="query position m")
    ax1.set_title(f"RoPE: q_m · k_n, d_head {d_head}")
    for m in (0, length // 4, length // 2):
        delta = torch.arange(length - m)
        ax2.plot(delta.numpy(), s[m, m + delta].numpy(), label=f"m = {m}")
    ax2.set(xlabel="n − m", ylabel="score")
    ax2.set_title("the same curve from every m: a function of n − m")
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


# --- masks, scores, softmax -------------------------------------------------------------------


def draw_masks(small: bool) -> tuple[Figure, str]:
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, PAD, PAD], [5, 6, 7, 8, PAD]])  # (B, T)
    B, T = ids.shape
    pad = padding_mask(ids, PAD)  # (B, 1, 1, T)
    both = combine(pad, causal_mask(T))  # (B, 1, T, T)
    assert both is not None
    fig = Figure(figsize=(9, 6), layout="constrained")
    axes = fig.subplots(2, B)
    for b in range(B):
        labels = [f"w{t + 1}" if ids[b, t] != PAD else "pad" for t in range(T)]
        rows = ((pad.expand(B, 1, T, T), "padding"), (both, "∧ causal"))
        for row, (mask, name) in enumerate(rows):
            ax = axes[row, b]
            ax.imshow(mask[b, 0].float().numpy(), cmap="Greens", vmin=-0.3, vmax=1.2)
            ax.set_xticks(range(T), labels, fontsize=8)
            ax.set_yticks(range(T), labels, fontsize=8)
            ax.set_xticks(np.arange(T + 1) - 0.5, minor=True)
            ax.set_yticks(np.arange(T + 1) - 0.5, minor=True)
            ax.grid(which="minor", color="white", lw=1.5)
            ax.tick_params(which="minor", length=0)
            ax.set_title(f"sentence {b + 1}: {name}", fontsize=9)
            if b == 0:
                ax.set_ylabel("query")
            if row == 1:
                ax.set_xlabel("key")
    fig.suptitle("masks of a padded batch (green: may attend)")
    return fig, f"batch {B} x {T}, {int(both.sum())} of {B * T * T} query-key pairs attend"


def scaling_statistics(
    d_ks: list[int], n_queries: int = 2000, n_keys: int = 32, seed: int = 0
) -> dict[str, list[float]]:
    """For q, k of d_k unit-variance components: the variance of the scores and the mean largest
    softmax probability over n_keys keys, unscaled (q.k) and scaled (q.k / sqrt(d_k))."""
    g = torch.Generator().manual_seed(seed)
    stats: dict[str, list[float]] = {key: [] for key in ("var", "var_scaled", "max", "max_scaled")}
    for d_k in d_ks:
        q = torch.randn(1, 1, n_queries, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(1, 1, n_keys, d_k, generator=g, dtype=torch.float64)
        v = torch.eye(n_keys, dtype=torch.float64)[None, None]  # the output is the weights
        for suffix, score in (("", DotProductScore(1.0)), ("_scaled", DotProductScore(d_k**-0.5))):
            scores = score(q, k)  # (1, 1, n_queries, n_keys)
            _, weights = softmax_attention(scores, v)
            stats["var" + suffix].append(float(scores.var()))
            stats["max" + suffix].append(float(weights.amax(-1).mean()))
    return stats


def draw_scaling(small: bool) -> tuple[Figure, str]:
    d_ks = [4, 16, 64, 256] if small else [2**i for i in range(1, 11)]
    n_keys = 32
    s = scaling_statistics(d_ks, n_keys=n_keys)
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ax1.loglog(d_ks, s["var"], "o-", label="q·k")
    ax1.loglog(d_ks, s["var_scaled"], "s-", label="q·k / √d_k")
    ax1.loglog(d_ks, d_ks, ":", color="gray", label="d_k")
    ax1.set(xlabel="d_k", ylabel="variance of the score", title="score variance: d_k, or 1 scaled")
    ax1.legend(fontsize=8)
    ax2.semilogx(d_ks, s["max"], "o-", label="softmax(q·k)")
    ax2.semilogx(d_ks, s["max_scaled"], "s-", label="softmax(q·k / √d_k)")
    ax2.axhline(1 / n_keys, color="gray", ls=":", label=f"uniform 1/{n_keys}")
    ax2.set(xlabel="d_k", ylabel="mean largest weight", ylim=(0, 1.05))
    ax2.set_title(f"saturation: largest of {n_keys} softmax weights")
    ax2.legend(fontsize=8)
    i = d_ks.index(64)
    summary = (
        f"d_k 64: var {s['var'][i]:.1f} unscaled, {s['var_scaled'][i]:.2f} scaled; mean max "
        f"weight {s['max'][i]:.2f} unscaled, {s['max_scaled'][i]:.2f} scaled"
    )
    return fig, summary


def temperature_weights(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """The attention weights of one query over keys whose dot-product scores are `scores` (S,),
    from qkv's MultiHeadedAttention with this temperature (one head of size 1, identity
    projections: the query is 1 and the keys are the scores)."""
    mha = MultiHeadedAttention(1, 1, score="dot", temperature=temperature, cross=True)
    with torch.no_grad():
        for linear in (mha.q_proj, mha.kv_proj, mha.out_proj):
            linear.weight.fill_(1.0)
            linear.bias.zero_()
        memory = scores.double().view(1, -1, 1)  # (1, S, 1)
        query = torch.ones(1, 1, 1, dtype=torch.float64)
        _, weights = mha.double()(query, memory, need_weights=True)
    return weights[0, 0, 0]  # (S,)


TEMPERATURE_SCORES = torch.tensor([2.0, 1.0, 0.5, 3.0, -1.0, 2.6, 0.0, 1.5])


def draw_temperature(small: bool) -> tuple[Figure, str]:
    temperatures = [10.0, 2.0, 1.0, 0.5, 0.1, 0.01]
    fig = Figure(figsize=(12, 2.8), layout="constrained")
    axes = fig.subplots(1, len(temperatures) + 1, sharey=True)
    keys = np.arange(len(TEMPERATURE_SCORES))
    for ax, t in zip(axes, temperatures, strict=False):
        ax.bar(keys, temperature_weights(TEMPERATURE_SCORES, t).numpy())
        ax.set_title(f"T = {t:g}", fontsize=9)
    hard = F.one_hot(TEMPERATURE_SCORES.argmax(), len(TEMPERATURE_SCORES))
    axes[-1].bar(keys, hard.numpy(), color="C3")
    axes[-1].set_title("hardmax (argmax)", fontsize=9)
    for ax in axes:
        ax.set_xticks(keys, [f"{x:g}" for x in TEMPERATURE_SCORES.tolist()], fontsize=7)
    axes[0].set_ylabel("weight")
    fig.suptitle("softmax(scores / T), scores on the x axis: uniform as T → ∞, hardmax as T → 0")
    coldest = temperature_weights(TEMPERATURE_SCORES, temperatures[-1])
    return fig, f"T = 0.01: largest weight {coldest.max():.6f}"


# --- normalisation ----------------------------------------------------------------------------


def norm_outputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """LayerNorm (qkv's make_norm) and BatchNorm (batch statistics over every row, pads included,
    as a tutorial applies nn.BatchNorm1d to (B*T, D)) of a padded batch x (B, T, D)."""
    B, T, D = x.shape
    layer_norm = make_norm("layernorm", D, 1e-5)
    batch_norm = nn.BatchNorm1d(D, affine=False).train()
    with torch.no_grad():
        return layer_norm(x), batch_norm(x.reshape(B * T, D)).view(B, T, D)


def padded_embeddings(lengths: list[int], d_model: int, seed: int = 0) -> torch.Tensor:
    """Embeddings * sqrt(d) + sinusoidal positions of random sentences, right-padded: (B, T, D)."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.full((len(lengths), T), PAD)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(4, 50, (n,), generator=g)
    with seeded(seed):
        embedding = TokenEmbedding(50, d_model, padding_idx=PAD)
    with torch.no_grad():
        return SinusoidalPositionalEncoding(d_model)(embedding(ids))


def draw_norms(small: bool) -> tuple[Figure, str]:
    d = 32
    batch = [6, 9, 3, 2]  # sentence 1 (6 tokens) among others, padded to 9
    x = padded_embeddings(batch, d)
    alone = x[:1, : batch[0]]  # the same sentence in a batch of its own, without padding
    ln_batch, bn_batch = norm_outputs(x)
    ln_alone, bn_alone = norm_outputs(alone)
    real = torch.cat([x[b, :n] for b, n in enumerate(batch)])  # (tokens, D)
    fig = Figure(figsize=(11, 3.4), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    features = np.arange(16)
    ax1.bar(features - 0.2, x.reshape(-1, d).std(0, unbiased=False)[:16].numpy(), 0.4,
            label="padded batch")
    ax1.bar(features + 0.2, real.std(0, unbiased=False)[:16].numpy(), 0.4, label="real tokens")
    ax1.set(xlabel="feature", ylabel="std over the batch")
    ax1.set_title("BatchNorm's statistics per feature")
    ax1.legend(fontsize=8)
    positions = np.arange(batch[0])
    ax2.plot(positions, x[0, : batch[0]].mean(-1).numpy(), "o-", label="mean")
    ax2.plot(positions, x[0, : batch[0]].std(-1, unbiased=False).numpy(), "s-", label="std")
    ax2.set(xlabel="position in sentence 1", title="LayerNorm's statistics: one token each")
    ax2.legend(fontsize=8)
    ln_change = (ln_batch[0, : batch[0]] - ln_alone[0]).abs().amax(-1)
    bn_change = (bn_batch[0, : batch[0]] - bn_alone[0]).abs().amax(-1)
    ax3.plot(positions, bn_change.numpy(), "o-", label="BatchNorm")
    ax3.plot(positions, ln_change.numpy(), "s-", label="LayerNorm")
    ax3.set(xlabel="position in sentence 1", ylabel="max |Δ output|")
    ax3.set_title("sentence 1: padded batch vs alone")
    ax3.legend(fontsize=8)
    summary = f"max change: LayerNorm {ln_change.max():.1e}, BatchNorm {bn_change.max():.2f}"
    return fig, summary


# --- attention before Transformers --------------------------------------------------------------


def draw_nadaraya_watson(small: bool) -> tuple[Figure, str]:
    x, y = toy_regression(50, seed=0)
    grid = torch.arange(0, 5, 0.1)  # the test inputs
    fixed, fitted = NadarayaWatson(), NadarayaWatson(learned_width=True)
    losses = fit_width(fitted, x, y, steps=300)
    with torch.no_grad():
        (f_fixed, a_fixed), (f_fitted, a_fitted) = fixed(grid, x, y), fitted(grid, x, y)
    w = fitted.w.item()
    fig = Figure(figsize=(12, 3.6), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3, width_ratios=[1.3, 1, 1])
    ax1.plot(grid.numpy(), toy_target(grid).numpy(), "k-", lw=1, label="truth 2 sin x + x^0.8")
    ax1.plot(x.numpy(), y.numpy(), "o", ms=3, alpha=0.5, label="training pairs (keys, values)")
    ax1.plot(grid.numpy(), f_fixed.numpy(), "--", label="non-parametric, w = 1")
    ax1.plot(grid.numpy(), f_fitted.numpy(), "-", label=f"parametric, fitted w = {w:.2f}")
    ax1.set(xlabel="x", ylabel="y", title="Nadaraya-Watson regression")
    ax1.legend(fontsize=7)
    for ax, weights, title in ((ax2, a_fixed, "w = 1"), (ax3, a_fitted, f"fitted w = {w:.2f}")):
        im = ax.imshow(weights.numpy(), aspect="auto", cmap="Reds", interpolation="none", vmin=0,
                       vmax=a_fitted.max().item())
        ax.set(xlabel="training input i (x_i sorted)", ylabel="test input x = 0.0, 0.1, ... 4.9")
        ax.set_title(f"attention weights, {title}")
    fig.colorbar(im, ax=ax3, shrink=0.8)
    summary = f"fitted w = {w:.2f}; leave-one-out loss {losses[0]:.3f} -> {losses[-1]:.3f}"
    return fig, summary


# --- cost -------------------------------------------------------------------------------------


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


# --- a trained model --------------------------------------------------------------------------

DEMO_NUMBERS = ["4 0 5 2", "9 1 7", "3 0 0 8"]


def train_demo_model(directory: Path, small: bool) -> Path:
    """The `qkv demo` recipe on numbers up to 9999 with fewer updates (small: a few, to test)."""
    from ..train import Trainer
    from .demo import demo_config

    if small:
        settings = {"synthetic_train": 300, "synthetic_valid": 20, "max_steps": 20,
                    "valid_every": 20, "warmup": 10}
    else:
        settings = {"synthetic_train": 5000, "synthetic_valid": 100, "max_steps": 600,
                    "valid_every": 600}
    cfg = demo_config(synthetic_max_value=9999, **settings)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is nearly as fast, and steady when busy
    try:
        Trainer(cfg, directory, overwrite=True).train()
    finally:
        torch.set_num_threads(threads)
    return directory


def draw_demo_attention(model_dir: Path) -> tuple[Figure, str]:
    from ..decode.options import DecodeOptions
    from ..runtime.options import RuntimeOptions
    from .translator import Translator

    translator = Translator.load(model_dir, RuntimeOptions(precision="fp32"))
    results = translator.translate_detailed(DEMO_NUMBERS, DecodeOptions(beam=1), attention=True)
    tokenizer = translator.tokenizer
    fig = Figure(figsize=(4 * len(DEMO_NUMBERS), 4), layout="constrained")
    axes = fig.subplots(1, len(DEMO_NUMBERS))
    for ax, text, result in zip(axes, DEMO_NUMBERS, results, strict=True):
        src_ids = tokenizer.encode_src([text])[0]
        src = [tokenizer.src_sp.id_to_piece(i) for i in src_ids] + ["</s>"]
        tgt = [tokenizer.tgt_sp.id_to_piece(i) for i in result.tokens] + ["</s>"]
        attention = result.attention
        assert attention is not None
        ax.imshow(attention.numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(src)), src, rotation=90, fontsize=8)
        ax.set_yticks(range(len(tgt)), tgt, fontsize=8)
        ax.set_title(f"{text} → {result.text}", fontsize=9)
        ax.set_xlabel("source token")
    axes[0].set_ylabel("output token (the query that predicted it)")
    fig.suptitle("cross-attention of the demo model: last layer, heads averaged", fontsize=10)
    return fig, "; ".join(f"{t} -> {r.text}" for t, r in zip(DEMO_NUMBERS, results, strict=True))


# --- the command ------------------------------------------------------------------------------

FIGURES: dict[str, Callable[[bool], tuple[Figure, str]]] = {
    "sinusoidal": draw_sinusoidal,
    "sinusoid_dot": draw_sinusoid_dot,
    "rope_score": draw_rope_score,
    "relative_positions": draw_relative_positions,
    "masks": draw_masks,
    "scaling": draw_scaling,
    "temperature": draw_temperature,
    "norms": draw_norms,
    "nadaraya_watson": draw_nadaraya_watson,
    "complexity": draw_complexity,
    "schedule": draw_schedule,
}
DEMO_FIGURE = "demo_attention"
ALL_FIGURES = (*FIGURES, DEMO_FIGURE)


def save(fig: Figure, path: Path) -> None:
    """A small PNG: 256 colours at most (plots have few), no version stamp (the same figure gives
    the same bytes)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, format="png")
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(256).save(path, format="PNG", optimize=True)


def make_figures(
    out_dir: str | Path,
    small: bool = False,
    demo_model: str | Path | None = None,
    only: list[str] | None = None,
    report: Callable[[str], None] = print,
) -> list[Path]:
    """Draw the figures (all, or those named in `only`) into out_dir as NAME.png; returns the
    paths. The demo figure uses `demo_model` or, without one, a model trained here."""
    names = list(ALL_FIGURES if only is None else only)
    unknown = sorted(set(names) - set(ALL_FIGURES))
    if unknown:
        raise ValueError(f"unknown figures {unknown}; choose from {list(ALL_FIGURES)}")
    if demo_model is not None and not Path(demo_model).is_dir():
        raise ValueError(f"--demo-model {demo_model} is not a model directory")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        start = time.perf_counter()
        with seeded(0):
            if name != DEMO_FIGURE:
                fig, summary = FIGURES[name](small)
            elif demo_model is not None:
                fig, summary = draw_demo_attention(Path(demo_model))
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    report("training a demo model for the cross-attention figure ...")
                    fig, summary = draw_demo_attention(train_demo_model(Path(tmp) / "demo", small))
        path = out / f"{name}.png"
        save(fig, path)
        paths.append(path)
        report(f"{path} ({time.perf_counter() - start:.1f} s): {summary}")
    return paths
