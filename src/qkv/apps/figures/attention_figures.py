"""The attention figures: masks, √d_k, temperature, LayerNorm vs BatchNorm, Nadaraya-Watson."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn

from ...model import (
    DotProductScore,
    MultiHeadedAttention,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    causal_mask,
    combine,
    padding_mask,
    softmax_attention,
)
from ...model.layers import make_norm
from ...model.nadaraya_watson import NadarayaWatson, fit_width, toy_regression, toy_target
from .common import PAD, seeded


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


NORMS = ("BatchNorm", "InstanceNorm", "LayerNorm", "RMSNorm")


def norm_outputs(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each of NORMS on a padded batch x (B, T, D), pads included in every statistic: BatchNorm
    over all B*T rows per feature (as a tutorial applies nn.BatchNorm1d to (B*T, D)),
    InstanceNorm over one sentence's T positions per feature, LayerNorm and RMSNorm (qkv's
    make_norm) over one token's D features."""
    B, T, D = x.shape
    with torch.no_grad():
        return {
            "BatchNorm": nn.BatchNorm1d(D, affine=False).train()(x.reshape(B * T, D)).view(B, T, D),
            "InstanceNorm": nn.InstanceNorm1d(D)(x.transpose(1, 2)).transpose(1, 2),
            "LayerNorm": make_norm("layernorm", D, 1e-5)(x),
            "RMSNorm": make_norm("rmsnorm", D, 1e-5)(x),
        }


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
    n = batch[0]
    alone = x[:1, :n]  # the same sentence in a batch of its own, without padding
    later = alone.clone()
    later[0, -1] = padded_embeddings([n], d, seed=1)[0, -1]  # its last token changed
    in_batch, by_itself, changed = norm_outputs(x), norm_outputs(alone), norm_outputs(later)
    fig = Figure(figsize=(15, 3.4), layout="constrained")
    ax1, ax2, ax3, ax4 = fig.subplots(1, 4)
    draw_norm_statistics(ax1, ax2, x, batch)
    positions = np.arange(n)
    batch_change = {k: (in_batch[k][0, :n] - by_itself[k][0]).abs().amax(-1) for k in NORMS}
    last_change = {k: (changed[k][0, :-1] - by_itself[k][0, :-1]).abs().amax(-1) for k in NORMS}
    for ax, change, xs, title in (
        (ax3, batch_change, positions, "sentence 1: padded batch vs alone"),
        (ax4, last_change, positions[:-1], "sentence 1 alone: last token changed"),
    ):
        for name, marker in zip(NORMS, "o^sx", strict=True):
            ax.plot(xs, change[name].numpy(), f"{marker}-", label=name)
        ax.set(xlabel="position in sentence 1", ylabel="max |Δ output|")
        ax.set_title(title)
        ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1, 0.08))
    summary = "; ".join(
        f"{k}: batch {batch_change[k].max():.2f}, last token {last_change[k].max():.2f}"
        for k in NORMS
    )
    return fig, summary


def draw_norm_statistics(ax1, ax2, x: torch.Tensor, batch: list[int]) -> None:
    """BatchNorm's per-feature std over a padded batch and over its real tokens (ax1); LayerNorm's
    per-token mean and std over sentence 1 (ax2)."""
    d = x.size(-1)
    real = torch.cat([x[b, :n] for b, n in enumerate(batch)])  # (tokens, D)
    features = np.arange(16)
    std = x.reshape(-1, d).std(0, unbiased=False)[:16].numpy()
    ax1.bar(features - 0.2, std, 0.4, label="padded batch")
    ax1.bar(features + 0.2, real.std(0, unbiased=False)[:16].numpy(), 0.4, label="real tokens")
    ax1.set_xticks(features, [str(i) for i in features], fontsize=8)  # features are columns
    ax1.set(xlabel="feature", ylabel="std over the batch")
    ax1.set_title("BatchNorm's statistics per feature")
    ax1.legend(fontsize=8)
    positions = np.arange(batch[0])
    ax2.plot(positions, x[0, : batch[0]].mean(-1).numpy(), "o-", label="mean")
    ax2.plot(positions, x[0, : batch[0]].std(-1, unbiased=False).numpy(), "s-", label="std")
    ax2.set(xlabel="position in sentence 1", ylabel=f"over the token's own {d} features")
    ax2.set_title("LayerNorm's statistics: one token each")
    ax2.legend(fontsize=8)


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
        im = ax.imshow(
            weights.numpy(),
            aspect="auto",
            cmap="Reds",
            interpolation="none",
            vmin=0,
            vmax=a_fitted.max().item(),
        )
        ax.set(xlabel="training input i (x_i sorted)", ylabel="test input x = 0.0, 0.1, ... 4.9")
        ax.set_title(f"attention weights, {title}")
    fig.colorbar(im, ax=ax3, shrink=0.8)
    summary = f"fitted w = {w:.2f}; leave-one-out loss {losses[0]:.3f} -> {losses[-1]:.3f}"
    return fig, summary
