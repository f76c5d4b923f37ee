"""Concepts the tutorials raise that need no training to settle, each measured with qkv's modules:
why naive integer or normalised positions fail, why the sinusoids' relativity does not survive the
projections W_Q and W_K (the cross terms), and what InstanceNorm normalises beside BatchNorm,
LayerNorm and RMSNorm."""

from __future__ import annotations

import math

import torch
from torch import nn

from qkv.model.positions import sinusoid_table


def test_naive_positions_fail_where_the_sinusoids_do_not() -> None:
    """Integer positions (p added to every feature) grow without bound: at p = 100 they are 100
    times an embedding's unit scale. Normalised positions (p / (T - 1)) give one position two
    encodings in sentences of two lengths. The sinusoids are bounded in [-1, 1] and give each
    position one encoding whatever the length."""
    d = 16
    embedding = torch.randn(d, generator=torch.Generator().manual_seed(0))  # ~unit scale
    integer = torch.full((d,), 100.0)
    assert integer.norm() / embedding.norm() > 50
    third_of_5, third_of_10 = 2 / (5 - 1), 2 / (10 - 1)  # position 2 in T = 5 and T = 10
    assert third_of_5 != third_of_10
    table = sinusoid_table(1000, d)
    assert table.abs().max() <= 1.0
    assert torch.equal(sinusoid_table(5, d)[2], sinusoid_table(10, d)[2])


def test_the_projections_break_the_relativity_of_sinusoidal_positions() -> None:
    """PE(p) · PE(p + k) depends on k alone (a sum of cos(k w_i)). Through attention's projections
    the score is PE(p) W_Q W_Kᵀ PE(p + k)ᵀ: with W_Q W_Kᵀ = I it keeps depending on k alone, but a
    learned W_Q W_Kᵀ mixes the sine and cosine pairs and the score then depends on p too; adding the
    token embeddings adds cross terms x W_Q W_Kᵀ PE(q)ᵀ that depend on the absolute position."""
    d, k = 16, 5
    table = sinusoid_table(200, d).double()
    identity = [float(table[p] @ table[p + k]) for p in range(0, 150, 10)]
    assert max(identity) - min(identity) < 1e-4  # relative only (float32 table)
    g = torch.Generator().manual_seed(0)
    w_q, w_k = (torch.randn(d, d, generator=g, dtype=torch.float64) for _ in range(2))
    projected = [float(table[p] @ w_q @ w_k.T @ table[p + k]) for p in range(0, 150, 10)]
    assert max(projected) - min(projected) > 1.0  # the same offset k, different scores
    x = torch.randn(d, generator=g, dtype=torch.float64)
    cross = [float(x @ w_q @ w_k.T @ table[q]) for q in range(0, 150, 10)]
    assert max(cross) - min(cross) > 1.0  # a token's score against a bare position varies with it


def test_instance_norm_normalises_each_feature_over_the_positions_of_one_sentence() -> None:
    """For text (B, T, D): BatchNorm normalises each feature over the batch and positions,
    InstanceNorm each feature over the positions of one sentence, LayerNorm each position over its
    features, RMSNorm the same without centring. Only LayerNorm and RMSNorm make a position's
    output independent of the other positions and sentences (what decoding one token at a time
    needs); InstanceNorm mixes the positions of a sentence, so a decoder's token would see the
    future through the statistics."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 8, generator=g, dtype=torch.float64) * 3 + 1  # (B, T, D)
    instance = nn.InstanceNorm1d(8, dtype=torch.float64)(x.transpose(1, 2)).transpose(1, 2)
    assert torch.allclose(instance.mean(dim=1), torch.zeros(2, 8, dtype=torch.float64), atol=1e-9)
    layer = nn.LayerNorm(8, elementwise_affine=False, dtype=torch.float64)(x)
    assert torch.allclose(layer.mean(dim=-1), torch.zeros(2, 6, dtype=torch.float64), atol=1e-9)
    rms = nn.RMSNorm(8, elementwise_affine=False, dtype=torch.float64)(x)
    assert torch.allclose(rms.pow(2).mean(dim=-1), torch.ones(2, 6, dtype=torch.float64), atol=1e-6)
    later = x.clone()
    later[:, -1] += 10.0  # change only the last position
    again = nn.InstanceNorm1d(8, dtype=torch.float64)(later.transpose(1, 2)).transpose(1, 2)
    assert not torch.allclose(again[:, 0], instance[:, 0])  # the first position sees the last
    layer_again = nn.LayerNorm(8, elementwise_affine=False, dtype=torch.float64)(later)
    assert torch.allclose(layer_again[:, 0], layer[:, 0])  # it does not under LayerNorm
    assert math.isfinite(float(instance.std()))
