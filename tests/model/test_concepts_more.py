"""Concepts the tutorials raise that need no training to settle, each measured with qkv's modules:
why naive integer or normalised positions fail, why the sinusoids' relativity does not survive the
projections W_Q and W_K (the cross terms), what InstanceNorm normalises beside BatchNorm,
LayerNorm and RMSNorm, and the paper's Table 1 (path lengths and sequential operations, restricted
self-attention's window)"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from qkv import TransformerConfig
from qkv.model import MultiHeadedAttention, window_mask
from qkv.model.layers import EncoderLayer
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


def _first_layer_count_reaching(make_layer, n: int, d: int, most: int) -> int:
    """The fewest stacked layers (made by `make_layer`) through which the last output position
    depends on the first input position: the maximum path length, measured with autograd."""
    torch.manual_seed(0)
    layers = [make_layer() for _ in range(most)]
    for depth in range(1, most + 1):
        x = torch.randn(1, n, d, requires_grad=True)
        y = x
        for layer in layers[:depth]:
            y = layer(y)
        probe = torch.randn(d)  # a random read-out: a norm's output sums to a constant
        (grad,) = torch.autograd.grad(y[0, -1] @ probe, x)
        if grad[0, 0].abs().sum() > 0:
            return depth
    return most + 1


def test_table_1_path_lengths_and_sequential_operations_measured() -> None:
    """The paper's Table 1, measured on n = 16 positions. Maximum path length (layers from input 1
    to output n): self-attention 1 (O(1)); a causal convolution of kernel 3 needs (n - 1) / (k - 1)
    = 8 layers (O(n/k)); a recurrent layer reaches every position in one layer but through n - 1
    steps. Sequential operations: a self-attention layer is one call for all n positions (O(1));
    a GRU makes n cell calls, one after the other (O(n))."""
    from qkv import TransformerConfig
    from qkv.model.layers import EncoderLayer

    n, d = 16, 8
    cfg = TransformerConfig(d_model=d, n_heads=2, d_ff=16, dropout=0.0, attention_dropout=0.0)

    def attention_layer() -> nn.Module:
        layer = EncoderLayer(cfg)
        return lambda x: layer(x, None)

    class Conv(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(d, d, 3)  # causal: position t reads t - 2, t - 1, t

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            padded = nn.functional.pad(x.transpose(1, 2), (2, 0))
            return torch.tanh(self.conv(padded)).transpose(1, 2)

    assert _first_layer_count_reaching(attention_layer, n, d, most=3) == 1
    assert _first_layer_count_reaching(Conv, n, d, most=12) == math.ceil((n - 1) / 2)
    cell, calls = nn.GRUCell(d, d), []
    cell.register_forward_hook(lambda *_: calls.append(1))
    h, x = torch.zeros(1, d), torch.randn(1, n, d)
    for t in range(n):  # each step needs the state of the one before
        h = cell(x[:, t], h)
    assert len(calls) == n
    layer, calls = EncoderLayer(cfg), []
    layer.self_attn.register_forward_hook(lambda *_: calls.append(1))
    layer(x, None)
    assert len(calls) == 1  # every position in one call


def test_restricted_self_attention_reaches_a_token_n_over_r_layers_away() -> None:
    """The paper's Table 1, restricted self-attention: each query attends to the r keys on either
    side (qkv's `window_mask`), O(r n d) per layer, and a maximum path length of O(n / r). Measured
    at n = 16, r = 2: the window keeps 74 of the 256 query-key pairs (n (2r + 1) - r (r + 1)), no
    weight falls outside it, and the last output depends on the first input after ceil((n - 1) / r)
    = 8 layers (3 with r = 5), where full self-attention needs 1."""
    n, d = 16, 8
    mask = window_mask(n, 2)
    by_hand = torch.tensor([[abs(i - j) <= 2 for j in range(n)] for i in range(n)])
    assert torch.equal(mask[0, 0], by_hand)
    assert int(mask.sum()) == n * (2 * 2 + 1) - 2 * (2 + 1) == 74
    mha = MultiHeadedAttention(d, 2).eval()
    with torch.no_grad():
        _, weights = mha(torch.randn(1, n, d), mask=mask, need_weights=True)
    assert weights[..., ~mask[0, 0]].abs().max() == 0
    cfg = TransformerConfig(d_model=d, n_heads=2, d_ff=16, dropout=0.0, attention_dropout=0.0)
    for r, layers in ((2, 8), (5, 3)):

        def restricted(r: int = r) -> nn.Module:
            layer = EncoderLayer(cfg)
            return lambda x: layer(x, window_mask(n, r))

        assert layers == math.ceil((n - 1) / r)
        assert _first_layer_count_reaching(restricted, n, d, most=10) == layers
    with pytest.raises(ValueError, match="radius"):
        window_mask(4, -1)
