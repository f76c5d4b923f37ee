"""The claims of the paper and of the tutorials, each measured on qkv's modules (docs/concepts.md).

Each test computes the real quantity and compares it with an independent value: a float64 hand
computation, torch's own modules, or the opposite case (the claim's contrast must show too).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from qkv import TransformerConfig
from qkv.model import (
    DecoderOnly,
    DotProductScore,
    LearnedPositionalEmbedding,
    MultiHeadedAttention,
    PositionwiseFeedForward,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    SublayerConnection,
    TokenEmbedding,
    apply_rotary,
    softmax_attention,
)
from qkv.model.layers import make_norm

PE_FIRST_RISE_512 = 44  # PE(p).PE(p+k) at d_model 512 falls from k = 0 to 43, then rises at k = 44


def weights_of(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """qkv's softmax_attention weights for a row of scores (with v = I the output is the weights)."""
    n = scores.size(-1)
    out, weights = softmax_attention(scores.double()[None, None, None], torch.eye(n, dtype=torch.float64), mask)
    torch.testing.assert_close(out, weights)
    return weights[0, 0, 0]


# --- sqrt(d_k) ---------------------------------------------------------------------------------


def test_dot_product_variance_is_d_k_and_one_after_scaling() -> None:
    g = torch.Generator().manual_seed(0)
    for d_k in (16, 64, 256):
        q = torch.randn(1, 1, 400, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(1, 1, 400, d_k, generator=g, dtype=torch.float64)
        unscaled = DotProductScore(1.0)(q, k).var().item()
        scaled = DotProductScore(1 / math.sqrt(d_k))(q, k).var().item()
        assert 0.9 * d_k < unscaled < 1.1 * d_k, (d_k, unscaled)
        assert 0.9 < scaled < 1.1, (d_k, scaled)


def test_unscaled_softmax_saturates_as_d_k_grows() -> None:
    g = torch.Generator().manual_seed(0)
    top_unscaled, top_scaled = [], []
    for d_k in (4, 16, 64, 256):
        q = torch.randn(1, 1, 500, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(1, 1, 32, d_k, generator=g, dtype=torch.float64)
        v = torch.zeros(1, 1, 32, 1, dtype=torch.float64)
        for score, tops in ((DotProductScore(1.0), top_unscaled), (DotProductScore(d_k**-0.5), top_scaled)):
            _, weights = softmax_attention(score(q, k), v)
            tops.append(weights.amax(-1).mean().item())
    assert top_unscaled == sorted(top_unscaled) and top_unscaled[-1] > 0.9, top_unscaled  # towards one-hot
    assert max(top_scaled) - min(top_scaled) < 0.05 and max(top_scaled) < 0.3, top_scaled  # stays spread


# --- temperature -------------------------------------------------------------------------------


def one_query(scores: torch.Tensor, temperature: float, fused: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """qkv's MultiHeadedAttention with this temperature, one head of size 1 and identity projections: the
    query is 1, the keys and the values are the scores. -> (output = sum_j w_j s_j, weights (S,) or None)."""
    mha = MultiHeadedAttention(1, 1, score="dot", temperature=temperature, cross=True).double()
    with torch.no_grad():
        for linear in (mha.q_proj, mha.kv_proj, mha.out_proj):
            linear.weight.fill_(1.0)
            linear.bias.zero_()
        mha.fused = fused
        out, weights = mha(torch.ones(1, 1, 1, dtype=torch.float64), scores.double().view(1, -1, 1),
                           need_weights=not fused)
    return out.flatten()[0], None if weights is None else weights.flatten()


def test_temperature_to_zero_is_hardmax_and_to_infinity_uniform() -> None:
    scores = torch.tensor([2.0, 1.0, 0.5, 3.0, -1.0, 2.6], dtype=torch.float64)
    hardmax, uniform = F.one_hot(scores.argmax(), 6).double(), torch.full((6,), 1 / 6, dtype=torch.float64)
    cold, hot, one = (one_query(scores, t, fused=False)[1] for t in (1e-3, 1e4, 1.0))
    torch.testing.assert_close(cold, hardmax)
    torch.testing.assert_close(hot, uniform, atol=1e-4, rtol=0)
    torch.testing.assert_close(one, torch.softmax(scores, 0))
    assert one_query(scores, 0.3, fused=False)[1].max() < 0.99  # a finite temperature is not yet hardmax
    # the fused kernel applies the same temperature: its output is sum_j w_j s_j
    for t in (1e-3, 0.3, 1.0, 1e4):
        torch.testing.assert_close(one_query(scores, t, fused=True)[0], one_query(scores, t, fused=False)[0])
    assert one_query(scores, 1e-3, fused=True)[0].item() == pytest.approx(scores.max().item())
    assert one_query(scores, 1e4, fused=True)[0].item() == pytest.approx(scores.mean().item(), abs=1e-3)


# --- sinusoidal encodings ----------------------------------------------------------------------


def pe_table(length: int, d_model: int) -> torch.Tensor:
    return SinusoidalPositionalEncoding(d_model)(torch.zeros(1, length, d_model))[0].double()


def test_sinusoid_dot_product_depends_on_the_offset_only_and_is_symmetric() -> None:
    pe = pe_table(400, 512)
    gram = pe @ pe.T  # (L, L): PE(p) . PE(q)
    for k in (1, 7, 50):
        diagonal = gram.diagonal(k)  # PE(p) . PE(p + k) for every p
        assert diagonal.max() - diagonal.min() < 1e-3, k
        p = 200
        assert abs(gram[p, p + k] - gram[p, p - k]) < 1e-3  # f(k) = f(-k)
    learned = torch.randn(400, 512, dtype=torch.float64)  # a table that is not shift-invariant
    assert (learned @ learned.T).diagonal(7).std() > 1


def test_sinusoid_dot_product_is_not_monotonic_in_the_offset() -> None:
    pe = pe_table(200, 512)
    f = pe @ pe[0]  # f(k) = PE(0) . PE(k)
    assert f[0].item() == pytest.approx(256, abs=1e-3)  # d/2 pairs of sin^2 + cos^2
    falls = (f[1:] < f[:-1]).tolist()
    assert all(falls[: PE_FIRST_RISE_512 - 1]) and not falls[PE_FIRST_RISE_512 - 1]
    # the hand sum over the 256 frequencies, float64
    w = 10000.0 ** (-torch.arange(0, 512, 2, dtype=torch.float64) / 512)
    for k in (PE_FIRST_RISE_512 - 1, PE_FIRST_RISE_512):
        assert f[k].item() == pytest.approx(torch.cos(k * w).sum().item(), abs=1e-3)


def test_sinusoid_shift_is_one_fixed_rotation_for_every_position() -> None:
    d, k = 64, 9
    pe = pe_table(300, d)
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    R = torch.zeros(d, d, dtype=torch.float64)  # block-diagonal: one 2x2 rotation per frequency
    for i, angle in enumerate((k * w).tolist()):
        c, s = math.cos(angle), math.sin(angle)
        R[2 * i: 2 * i + 2, 2 * i: 2 * i + 2] = torch.tensor([[c, s], [-s, c]])  # acts on (sin, cos)
    torch.testing.assert_close(pe[:-k] @ R.T, pe[k:], atol=1e-5, rtol=0)  # PE(p + k) = R_k PE(p), all p
    assert (pe[3] - pe[5]).abs().max() > 0.5  # and the encodings themselves are absolute positions


# --- per position ------------------------------------------------------------------------------


def changed_positions(module: nn.Module, x: torch.Tensor, j: int) -> list[bool]:
    """Which positions of module(x) change when position j of the input changes."""
    y = x.clone()
    y[:, j] = torch.randn_like(y[:, j]) if y.is_floating_point() else (y[:, j] % 20) + 5
    with torch.no_grad():
        a, b = module(x), module(y)
    a, b = (a[0], b[0]) if isinstance(a, tuple) else (a, b)
    return [not torch.equal(a[:, t], b[:, t]) for t in range(x.size(1))]


def test_ffn_layernorm_and_embeddings_act_per_position_self_attention_does_not() -> None:
    x = torch.randn(2, 6, 16)
    j = 2
    only_j = [t == j for t in range(6)]
    assert changed_positions(PositionwiseFeedForward(16, 32), x, j) == only_j
    assert changed_positions(make_norm("layernorm", 16, 1e-5), x, j) == only_j
    assert changed_positions(make_norm("rmsnorm", 16, 1e-5), x, j) == only_j
    ids = torch.randint(4, 20, (2, 6))
    embed = nn.Sequential(TokenEmbedding(30, 16, padding_idx=0), SinusoidalPositionalEncoding(16))
    assert changed_positions(embed, ids, j) == only_j
    assert changed_positions(MultiHeadedAttention(16, 2).eval(), x, j) == [True] * 6


def test_layernorm_ignores_batch_mates_and_padding_batchnorm_does_not() -> None:
    lengths = [6, 9, 3, 2]  # sentence 1 has 6 tokens; the batch is padded to 9
    ids = torch.zeros(4, 9, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(4, 30, (n,))
    embed = nn.Sequential(TokenEmbedding(30, 32, padding_idx=0), SinusoidalPositionalEncoding(32))
    layer_norm = make_norm("layernorm", 32, 1e-5)
    batch_norm = make_norm("batchnorm", 32, 1e-5).train()  # qkv's foil: statistics of (B*T, D)
    with torch.no_grad():
        x, alone = embed(ids), embed(ids[:1, :6])  # sentence 1 in the padded batch, and alone
        rows = x.reshape(-1, 32)
        ln_batch, ln_alone = layer_norm(x)[0, :6], layer_norm(alone)[0]
        bn_batch, bn_alone = batch_norm(x)[0, :6], batch_norm(alone)[0]
    torch.testing.assert_close(ln_batch, ln_alone, atol=0, rtol=0)
    assert (bn_batch - bn_alone).abs().max() > 0.1
    hand = (rows - rows.mean(0)) / torch.sqrt(rows.var(0, unbiased=False) + 1e-5)  # pads in the statistics
    torch.testing.assert_close(bn_batch, hand[:6], atol=1e-5, rtol=0)



@pytest.mark.parametrize("norm_first", [False, True])
def test_the_batchnorm_foil_trains_and_ties_a_sentence_to_its_batch_mates(norm_first: bool) -> None:
    """norm: batchnorm in a whole Transformer: one training step runs, and in training mode a
    sentence's logits change with its batch-mates; with LayerNorm they are the same to rounding."""
    from qkv import Transformer

    src = torch.randint(4, 30, (3, 7))
    tgt = torch.randint(4, 30, (3, 5))
    logits = {}
    for norm in ("layernorm", "batchnorm"):
        torch.manual_seed(0)
        cfg = TransformerConfig.preset("tiny", src_vocab_size=30, dropout=0.0,
                                       attention_dropout=0.0, norm=norm, norm_first=norm_first)
        model = Transformer(cfg).train()
        with torch.no_grad():
            together, alone = model(src, tgt)[0], model(src[:1], tgt[:1])[0]
        logits[norm] = (together - alone).abs().max()
        before = [p.detach().clone() for p in model.parameters()]
        loss = F.cross_entropy(model(src, tgt).flatten(0, 1), tgt.flatten())
        loss.backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        assert torch.isfinite(loss)
        assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert logits["layernorm"] < 1e-5
    assert logits["batchnorm"] > 0.01


# --- RoPE --------------------------------------------------------------------------------------


def test_rope_rotate_half_equals_interleaved_complex_form_after_a_permutation() -> None:
    d_head, length = 16, 12
    x = torch.randn(1, 1, length, d_head, dtype=torch.float64)  # interleaved layout: pairs (2i, 2i+1)
    cos, sin = RotaryEmbedding(d_head)(length, dtype=torch.float64)
    # the oracle: pairs as complex numbers, multiplied by e^{i p theta_i}
    theta = 10000.0 ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * theta  # (L, Dh/2)
    z = torch.view_as_complex(x.reshape(1, 1, length, d_head // 2, 2).contiguous())
    complex_form = torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
    perm = torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])  # (2i, 2i+1) -> (i, i+Dh/2)
    torch.testing.assert_close(apply_rotary(x[..., perm], cos, sin), complex_form[..., perm])
    assert not torch.allclose(apply_rotary(x, cos, sin), complex_form)  # without the permutation: not equal


def rope_matrix(rope: RotaryEmbedding, position: int) -> torch.Tensor:
    """R_p as a column-vector matrix: apply_rotary(x) = R_p x, read off qkv's rotation of the basis."""
    cos, sin = rope(1, offset=position, dtype=torch.float64)
    d = cos.size(-1)
    return apply_rotary(torch.eye(d, dtype=torch.float64), cos, sin).T


def test_rope_score_uses_r_n_minus_m_with_the_key_transposed() -> None:
    d_head = 8
    rope = RotaryEmbedding(d_head)
    q, k = torch.randn(2, d_head, dtype=torch.float64)
    for m, n in ((7, 3), (2, 11), (40, 40)):
        score = ((rope_matrix(rope, m) @ q) @ (rope_matrix(rope, n) @ k)).item()  # (R_m q) . (R_n k)
        assert score == pytest.approx((q @ rope_matrix(rope, n - m) @ k).item(), abs=1e-9)  # q^T R_{n-m} k
        if m != n:
            assert abs(score - q @ rope_matrix(rope, m - n) @ k) > 1e-3  # R_{m-n}: the sign mistake
        for shift in (1, 25):  # a function of n - m only
            shifted = ((rope_matrix(rope, m + shift) @ q) @ (rope_matrix(rope, n + shift) @ k)).item()
            assert shifted == pytest.approx(score, abs=1e-9)


# --- learned positions -------------------------------------------------------------------------


def test_learned_positions_refuse_positions_past_the_table() -> None:
    table = LearnedPositionalEmbedding(8, 16)
    table(torch.zeros(1, 8, 16))  # all 8 positions are fine
    with pytest.raises(ValueError, match="exceeds max_positions=8"):
        table(torch.zeros(1, 9, 16))
    with pytest.raises(ValueError, match="max_positions=8"):
        table(torch.zeros(1, 1, 16), offset=8)  # the 9th position of an incremental decoder
    cfg = TransformerConfig.preset("tiny", src_vocab_size=20, positional="learned", max_positions=8)
    with pytest.raises(ValueError, match="max_positions=8"):
        DecoderOnly(cfg)(torch.randint(4, 20, (1, 9)))


# --- mistakes common in tutorials -------------------------------------------------------------


def test_the_papers_add_and_norm_is_post_norm() -> None:
    assert TransformerConfig.preset("base").norm_first is False  # qkv's default is the paper's
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    sublayer = nn.Linear(8, 8).double()
    post = SublayerConnection(8, 0.0).double().eval()
    with torch.no_grad():
        post.norm.weight.uniform_(0.5, 1.5)
        post.norm.bias.uniform_(-0.5, 0.5)
        h = x + sublayer(x)  # LayerNorm(x + Sublayer(x)), by hand
        hand = (h - h.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, unbiased=False, keepdim=True) + 1e-5)
        hand = hand * post.norm.weight + post.norm.bias
        torch.testing.assert_close(post(x, sublayer), hand)
        pre = SublayerConnection(8, 0.0, norm_first=True).double().eval()
        pre.load_state_dict(post.state_dict())
        assert (pre(x, sublayer) - hand).abs().max() > 0.1  # pre-norm is another function


def test_nn_multihead_attention_without_batch_first_attends_across_the_batch() -> None:
    x = torch.randn(3, 5, 8)  # (B, S, D)
    y = x.clone()
    y[1] = torch.randn(5, 8)  # change sentence 2 only
    for batch_first, leaks in ((False, True), (True, False)):
        mha = nn.MultiheadAttention(8, 2, batch_first=batch_first).eval()
        with torch.no_grad():
            a, b = mha(x, x, x)[0], mha(y, y, y)[0]
        assert (not torch.allclose(a[0], b[0])) == leaks  # does sentence 1's output change?
    qkv_mha = MultiHeadedAttention(8, 2).eval()
    with torch.no_grad():
        torch.testing.assert_close(qkv_mha(x)[0][0], qkv_mha(y)[0][0])  # qkv is batch first


def test_softmax_of_1_1_0_1_is_not_a_third_each() -> None:
    weights = weights_of(torch.tensor([1.0, 1.0, 0.0, 1.0]))
    e = math.e
    torch.testing.assert_close(weights, torch.tensor([e, e, 1, e], dtype=torch.float64) / (3 * e + 1))
    assert weights[0].item() == pytest.approx(0.2969, abs=1e-4) and weights[2].item() == pytest.approx(0.1092, abs=1e-4)
    # a third each needs the third key masked (score -inf), not a score of 0
    masked = weights_of(torch.tensor([1.0, 1.0, 0.0, 1.0]), torch.tensor([True, True, False, True]))
    torch.testing.assert_close(masked, torch.tensor([1, 1, 0, 1], dtype=torch.float64) / 3)
