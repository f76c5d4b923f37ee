"""Positional encodings against their formulas and the properties the papers prove."""

from __future__ import annotations

import math

import torch

from qkv.model import (
    ALiBi,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
)
from qkv.model.masks import causal_mask, combine, padding_mask
from qkv.model.positions import alibi_slopes, relative_position_bucket


def test_sinusoidal_matches_the_formula_beyond_the_initial_table() -> None:
    d = 10
    pe = SinusoidalPositionalEncoding(d, initial_length=4)
    out = pe(torch.zeros(1, 9, d), offset=3)[0]  # positions 3..11: the table has to grow
    for t in range(9):
        pos = t + 3
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert abs(out[t, 2 * i].item() - math.sin(angle)) < 1e-6
            assert abs(out[t, 2 * i + 1].item() - math.cos(angle)) < 1e-6


def test_sinusoidal_shift_is_a_rotation_per_frequency_pair() -> None:
    """PE(pos + k) = R_k PE(pos) with R_k = [[cos kw, sin kw], [-sin kw, cos kw]] for every pair (2i, 2i+1)."""
    d = 16
    table = SinusoidalPositionalEncoding(d)(torch.zeros(1, 200, d))[0].double()
    for k in (1, 5, 37):
        for i in range(d // 2):
            w = 1.0 / 10000 ** (2 * i / d)
            R = torch.tensor([[math.cos(k * w), math.sin(k * w)], [-math.sin(k * w), math.cos(k * w)]],
                             dtype=torch.float64)
            pair = table[:, 2 * i: 2 * i + 2]  # (L, 2): (sin, cos) of pos * w
            torch.testing.assert_close(pair[:-k] @ R.T, pair[k:], atol=1e-5, rtol=0)


def test_rope_score_depends_only_on_relative_position() -> None:
    d_head = 8
    rope = RotaryEmbedding(d_head)
    q, k = torch.randn(1, 1, 1, d_head), torch.randn(1, 1, 1, d_head)

    def score(m: int, n: int) -> float:
        cq, sq = rope(1, offset=m)
        ck, sk = rope(1, offset=n)
        return float(apply_rotary(q, cq, sq).flatten() @ apply_rotary(k, ck, sk).flatten())

    for delta in (0, 3, -4):
        ref = score(10 + delta, 10)
        for n in (0, 1, 57, 400):
            assert abs(score(n + delta, n) - ref) < 1e-4
    assert abs(score(3, 0) - score(0, 0)) > 1e-3  # and the distance does matter
    c, s = rope(5)
    torch.testing.assert_close(apply_rotary(q.expand(1, 1, 5, d_head), c, s).norm(dim=-1),
                               q.norm(dim=-1).expand(1, 1, 5))  # a rotation keeps the norm


def test_t5_buckets_hand_computed() -> None:
    rel = torch.tensor([0, -1, -3, 3, -8, -20, -128, 500])
    got = relative_position_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128).tolist()
    # 16 buckets per direction, exact below 8, then 8 + floor(log(d/8) / log(16) * 8), capped at 15
    assert got == [0, 1, 3, 19, 8, 10, 15, 31]
    causal = relative_position_bucket(rel, bidirectional=False, num_buckets=32, max_distance=128).tolist()
    # future keys (rel > 0) fall in bucket 0; exact below 16, then 16 + floor(log(d/16)/log(8) * 16)
    assert causal == [0, 1, 3, 0, 8, 16 + int(math.log(20 / 16) / math.log(8) * 16), 31, 0]


def test_relative_bias_for_incremental_step_is_last_row() -> None:
    rel = RelativePositionBias(n_heads=3, bidirectional=False)
    full = rel(6, 6)
    assert full.shape == (1, 3, 6, 6)
    torch.testing.assert_close(rel(1, 6), full[:, :, -1:])


def test_alibi_slopes_and_bias() -> None:
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert len(alibi_slopes(6)) == 6
    bias = ALiBi(8)(4, 4)
    assert bias.shape == (1, 8, 4, 4)
    assert bias[0, 0, 3, 1].item() == -0.5 * 2 and bias[0, 7, 2, 2].item() == 0.0
    torch.testing.assert_close(ALiBi(8)(1, 4), bias[:, :, -1:])


def test_masks_one_convention() -> None:
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    pm = padding_mask(ids, pad_id=0)
    assert pm.shape == (2, 1, 1, 3) and pm.dtype == torch.bool
    assert pm[0, 0, 0].tolist() == [True, True, False]
    cm = causal_mask(3)
    assert cm[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(2, 4)[0, 0].tolist() == [[True, True, True, False], [True, True, True, True]]
    both = combine(pm, cm, None)
    assert both is not None and both.shape == (2, 1, 3, 3)
    assert both[1, 0].tolist() == [[True, False, False], [True, False, False], [True, False, False]]
    assert combine(None, None) is None
