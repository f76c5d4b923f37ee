"""The tutorials' mistakes, each shown beside the right version on qkv's modules (docs/concepts.md).

Each test runs the wrong version next to the right one, with qkv's modules or PyTorch's own ops as
the oracle, and asserts the difference that settles the claim. Where a claim is about a measured
result, a consistency check (test_consistency_...) reads the number from qkv's own table in
docs/concepts.md: it checks the page says what the claim needs, and does not rerun the benchmark.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from qkv import TransformerConfig
from qkv.model import (
    DecoderOnly,
    MultiHeadedAttention,
    PositionwiseFeedForward,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    Transformer,
    apply_rotary,
    causal_mask,
    padding_mask,
    per_head_attention,
    scaled_dot_product_attention,
    softmax_attention,
)
from qkv.model.layers import SublayerConnection, make_norm

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def entropy(weights: torch.Tensor) -> float:
    """Mean entropy (nats) of the rows of attention weights."""
    return -(weights * weights.clamp_min(1e-30).log()).sum(-1).mean().item()


def measured(command: str, variant: str, data: str | None = None) -> dict[str, str]:
    """One row of the table under `python -m benchmarks.variants <command>` in docs/concepts.md."""
    text = CONCEPTS.read_text(encoding="utf-8")
    section = text[text.index(f"benchmarks.variants {command} ") :]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        row = dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        if row["variant"] == variant and (data is None or row["data"] == data):
            return row
    raise AssertionError(f"no row {variant!r} in the {command} table")


def self_attention(d_model: int = 16, n_heads: int = 2, seed: int = 0) -> MultiHeadedAttention:
    torch.manual_seed(seed)
    mha = MultiHeadedAttention(d_model, n_heads).double().eval()
    mha.fused = False
    return mha


# --- scaled dot-product attention ------------------------------------------------------------


def test_the_scale_is_one_over_sqrt_d_k_not_one_over_d_k() -> None:
    """A formula that divides by 10 for d_k = 10 while its code divides by sqrt(10)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 300, 10, generator=g, dtype=torch.float64) for _ in range(3))
    out, weights = scaled_dot_product_attention(q, k, v)  # qkv's equation 1, default scale
    by_root = torch.softmax(q @ k.mT / math.sqrt(10), -1)
    by_ten = torch.softmax(q @ k.mT / 10, -1)
    torch.testing.assert_close(weights, by_root)
    torch.testing.assert_close(out, by_root @ v)
    assert (weights - by_ten).abs().max() > 0.05
    assert 0.8 < (q @ k.mT / math.sqrt(10)).var() < 1.2  # unit variance: the point of sqrt(d_k)
    assert (q @ k.mT / 10).var() < 0.15  # 1/d_k shrinks it to 1/d_k


def test_self_attention_projects_one_input_into_three_different_q_k_v() -> None:
    """Not "self-attention means Q = K = V": they come from one X, through W^Q, W^K and W^V."""
    mha = self_attention()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    q, k, v = mha.project_self(x)
    assert not torch.allclose(q, k) and not torch.allclose(k, v)
    scores = q @ k.mT  # (1, H, T, T)
    assert not torch.allclose(scores, scores.mT)  # q_i . k_j != q_j . k_i
    same = x @ x.mT  # Q = K = X: a symmetric score matrix
    torch.testing.assert_close(same, same.mT)
    with torch.no_grad():  # and qkv's output is the per-head formula with the three slices of W
        torch.testing.assert_close(mha(x)[0], per_head_attention(mha, x))


def test_the_diagonal_of_a_self_attention_map_is_large_only_when_q_equals_k() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 32, 64, generator=g, dtype=torch.float64)
    _, unprojected = scaled_dot_product_attention(x, x, x)  # Q = K = X
    mha = self_attention(64, 1)
    with torch.no_grad():
        _, projected = mha(x, need_weights=True)
    on_diagonal = torch.arange(32)

    def diagonal_argmax(w: torch.Tensor) -> float:
        return (w.reshape(32, 32).argmax(-1) == on_diagonal).double().mean().item()

    assert diagonal_argmax(unprojected) == 1.0  # x_i . x_i = |x_i|^2 beats every x_i . x_j
    assert diagonal_argmax(projected) < 0.2  # with W^Q != W^K the diagonal is not special


def test_softmax_keeps_score_gaps_it_does_not_tame_large_dot_products() -> None:
    """Softmax normalises scores into weights; it tames nothing: the scale before it does."""
    s = torch.tensor([[[[2.0, 1.0, 0.5, -1.0]]]], dtype=torch.float64)
    v = torch.eye(4, dtype=torch.float64)
    _, w = softmax_attention(s, v)
    torch.testing.assert_close(softmax_attention(s + 1000, v)[1], w)  # shift-invariant
    ratio = (w[..., 0] / w[..., 1]).item()
    assert ratio == pytest.approx(math.e)  # w_i / w_j = exp(s_i - s_j): gaps are exponentiated
    _, large = softmax_attention(s * 16, v)  # dot products 16x larger (d_k 256 unscaled)
    assert large.max() > 0.999999  # softmax lets them through: one-hot
    g = torch.Generator().manual_seed(0)  # real dot products at d_k 256: std 16 unscaled
    q, k = (torch.randn(64, 16, 256, generator=g, dtype=torch.float64) for _ in range(2))
    vk = torch.randn(64, 16, 8, dtype=torch.float64, generator=g)
    _, raw = softmax_attention(q @ k.mT, vk)
    _, scaled = scaled_dot_product_attention(q, k, vk)  # qkv's 1/sqrt(d_k) does the taming
    assert raw.amax(-1).mean() > 0.85 and scaled.amax(-1).mean() < 0.5  # 0.92 and 0.25 here


def test_multi_head_scales_by_sqrt_d_head_not_sqrt_d_model_and_batches_with_matmul() -> None:
    mha = self_attention(64, 8)  # d_head 8
    x = torch.randn(2, 10, 64, dtype=torch.float64) * 3
    with torch.no_grad():
        right, right_w = mha(x, need_weights=True)
        q, k, v = mha.project_self(x)
        heads, wrong_w = scaled_dot_product_attention(q, k, v, scale=64**-0.5)  # sqrt(d_model)
        wrong = mha.out_proj(heads.transpose(1, 2).reshape(2, 10, 64))
    assert (right - wrong).abs().max() > 1e-3
    # sqrt(d_model) = sqrt(h) sqrt(d_head): scores sqrt(8)x too small, the softmax too flat
    assert entropy(wrong_w) > entropy(right_w) + 0.05
    assert entropy(wrong_w) < math.log(10)  # towards the uniform weights, log T
    with pytest.raises(RuntimeError):
        torch.mm(q, k.mT)  # torch.mm takes 2-D matrices only: (B, H, T, Dh) fails
    loop = torch.stack(
        [torch.stack([torch.mm(q[b, h], k[b, h].T) for h in range(8)]) for b in range(2)]
    )
    torch.testing.assert_close(q @ k.mT, loop)  # @ (torch.matmul) batches over (B, H)


def test_dropout_applies_to_the_output_of_nn_multihead_attention_not_to_its_tuple() -> None:
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    dropout = nn.Dropout(0.1)
    x = torch.randn(2, 5, 8)
    with pytest.raises(TypeError):
        dropout(mha(x, x, x))  # the forward returns (output, weights)
    out, _ = mha(x, x, x)
    assert dropout.eval()(out).shape == (2, 5, 8)


def test_the_fourth_positional_argument_of_nn_multihead_attention_is_key_padding_mask() -> None:
    assert (
        list(inspect.signature(nn.MultiheadAttention.forward).parameters)[4] == "key_padding_mask"
    )
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(3, 3, 8)  # B = T = 3: both masks have the shape (3, 3)
    future = torch.ones(3, 3, dtype=torch.bool).triu(
        1
    )  # True = may not attend (torch's convention)
    with torch.no_grad():
        positional = torch_mha(x, x, x, future)[0]
        as_padding = torch_mha(x, x, x, key_padding_mask=future)[0]
        as_causal = torch_mha(x, x, x, attn_mask=future)[0]
        qkv_mha = MultiHeadedAttention(8, 2).eval()
        qkv_mha.in_proj.weight.copy_(torch_mha.in_proj_weight)
        qkv_mha.in_proj.bias.copy_(torch_mha.in_proj_bias)
        qkv_mha.out_proj.load_state_dict(torch_mha.out_proj.state_dict())
        causal = qkv_mha(x, mask=causal_mask(3))[0]  # qkv's causal mask: True = may attend
    torch.testing.assert_close(positional, as_padding)
    assert (positional - as_causal).abs().max() > 1e-3
    torch.testing.assert_close(causal, as_causal)


# --- normalisation -----------------------------------------------------------------------------


def hand_batchnorm_square_only(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Seed 000's hand BatchNorm, in loops: each column's mean is right, but the variance is
    divided by a row's length and the rows are counted by the number of columns, so it is
    right only for square matrices."""
    out = torch.zeros_like(x)
    for col in range(x.shape[1]):
        mean = x[:, col].sum() / len(x[:, col])  # per column: right
        var = ((x[:, col] - mean) ** 2).sum() / len(x[0])  # divides by D, not by N
        for row in range(x.shape[1]):  # counts D rows, not N
            out[row, col] = (x[row, col] - mean) / math.sqrt(var + eps)
    return out


def hand_batchnorm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mean, var = x.mean(dim=0, keepdim=True), x.var(dim=0, unbiased=False, keepdim=True)  # (1, D)
    return (x - mean) / torch.sqrt(var + eps)


def test_a_hand_batchnorm_indexed_by_the_column_count_is_right_only_for_square_input() -> None:
    """Seed 000 normalises each column (each feature over the batch), as BatchNorm does; its
    loops use the number of columns where they mean the number of rows."""
    square = torch.tensor(  # seed 000's 3 x 3 similarity matrix
        [[3.2897, 0.7432, -1.1652], [0.7432, 1.3647, -1.1707], [-1.1652, -1.1707, 5.6380]],
        dtype=torch.float64,
    )
    torch.testing.assert_close(hand_batchnorm_square_only(square), hand_batchnorm(square))
    bn = nn.BatchNorm1d(3, affine=False).double().train()
    torch.testing.assert_close(hand_batchnorm(square), bn(square))  # per column = BatchNorm1d
    tall = torch.randn(5, 3, dtype=torch.float64)  # a batch of 5, 3 features
    wrong = hand_batchnorm_square_only(tall)
    assert torch.count_nonzero(wrong[3:]) == 0  # rows 4 and 5 are never written
    assert (wrong[:3] - bn(tall)[:3]).abs().max() > 0.1  # and the variance is divided by 3, not 5
    with pytest.raises(IndexError):
        hand_batchnorm_square_only(torch.randn(2, 3, dtype=torch.float64))  # row 3 of 2


def test_layernorm_normalises_each_tokens_features_not_the_score_matrix() -> None:
    mha = self_attention()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        _, weights = mha(x, need_weights=True)  # (1, H, 5, 5), rows sum to 1
        on_scores = nn.LayerNorm(5).double()(weights)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 2, 5, dtype=torch.float64))
    assert on_scores.min() < 0  # no longer weights: negative, rows sum to 0
    torch.testing.assert_close(on_scores.sum(-1), torch.zeros(1, 2, 5, dtype=torch.float64))
    with pytest.raises(RuntimeError):
        nn.LayerNorm(5)(torch.randn(1, 2, 6, 6))  # and it is tied to one sentence length
    block = SublayerConnection(16, 0.0).double().eval()  # qkv's Add & Norm: over d_model
    assert block.norm.normalized_shape == (16,)
    with torch.no_grad():
        h = block(x, lambda t: mha(t)[0])  # (1, 5, 16), any length
    torch.testing.assert_close(h.mean(-1), torch.zeros(1, 5, dtype=torch.float64))
    torch.testing.assert_close(
        h.var(-1, unbiased=False), torch.ones(1, 5, dtype=torch.float64), atol=1e-4, rtol=0
    )


def test_gamma_scales_and_beta_shifts() -> None:
    norm = make_norm("layernorm", 8, 1e-5).double()
    gamma, beta = torch.rand(8, dtype=torch.float64) + 0.5, torch.randn(8, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(gamma)
        norm.bias.copy_(beta)
    x = torch.randn(3, 8, dtype=torch.float64)
    x_hat = (x - x.mean(-1, keepdim=True)) / torch.sqrt(
        x.var(-1, unbiased=False, keepdim=True) + 1e-5
    )
    with torch.no_grad():
        out = norm(x)
    torch.testing.assert_close(out, gamma * x_hat + beta)  # LN(x) = gamma * x_hat + beta
    assert (out - (beta * x_hat + gamma)).abs().max() > 0.1  # the swapped roles
    with torch.no_grad():
        norm.weight.zero_()
        torch.testing.assert_close(norm(x), beta.expand(3, 8))  # gamma = 0 leaves the shift beta


# --- positions ---------------------------------------------------------------------------------


def test_rope_runs_past_the_training_length_where_learned_positions_refuse() -> None:
    """RoPE runs at any length; learned positions refuse past their table."""
    for positional, runs in (("rope", True), ("learned", False)):
        cfg = TransformerConfig.preset(
            "tiny", src_vocab_size=20, positional=positional, max_positions=8
        )
        ids = torch.randint(4, 20, (1, 12))  # past max_positions
        with torch.no_grad():
            if runs:
                assert DecoderOnly(cfg)(ids).shape[1] == 12
            else:
                with pytest.raises(ValueError, match="max_positions"):
                    DecoderOnly(cfg)(ids)


def test_consistency_extrapolation_table_has_rope_at_0_percent_past_the_training_length() -> None:
    """Not "RoPE handles ultra-long text": qkv's extrapolation table (read, not rerun) shows no
    scheme, RoPE included, gets a longer number right."""
    rope = {n: float(measured("extrapolation", "rope")[f"exact_{n}_digits"]) for n in (6, 7, 8, 9)}
    assert rope[6] >= 99 and rope[7] == rope[8] == rope[9] == 0.0  # learned, not extrapolated
    chars = [float(measured("extrapolation", "rope")[f"chars_{n}_digits"]) for n in (7, 8, 9)]
    assert chars == sorted(chars, reverse=True) and chars[-1] < 60  # fading with the length
    sinusoidal = [
        float(measured("extrapolation", "sinusoidal")[f"chars_{n}_digits"]) for n in (7, 8, 9)
    ]
    assert all(r > s for r, s in zip(chars, sinusoidal, strict=True))  # better than sinusoidal


def test_rope_row_vector_and_column_vector_forms_are_transposes() -> None:
    """One pair at position p: column form x' = R x with R = [[c, -s], [s, c]]; row form
    x'^T = x^T R^T = x^T [[c, s], [-s, c]]. Reading the row form's matrix as a column one rotates
    by -p."""
    rope = RotaryEmbedding(2)
    p = 5
    cos, sin = rope(1, offset=p, dtype=torch.float64)
    c, s = math.cos(p), math.sin(p)  # d_head 2: theta = 1
    column = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    row = column.T
    x = torch.randn(2, dtype=torch.float64)
    qkv = apply_rotary(x[None], cos, sin)[0]
    torch.testing.assert_close(qkv, column @ x)
    torch.testing.assert_close(qkv, x @ row)  # the same rotation, written for a row vector
    mixed = row @ x  # the row form's matrix applied to a column: R_{-p}
    back_cos, back_sin = rope(1, offset=-p, dtype=torch.float64)
    torch.testing.assert_close(mixed, apply_rotary(x[None], back_cos, back_sin)[0])
    assert (mixed - qkv).abs().max() > 0.1


def rope_rotation(position: int, d: int = 8) -> torch.Tensor:
    """Seed 000's R_k, the transpose of [[cos, sin], [-sin, cos]] per pair: qkv's R_p x."""
    cos, sin = RotaryEmbedding(d)(1, offset=position, dtype=torch.float64)
    return apply_rotary(torch.eye(d, dtype=torch.float64), cos, sin).T


def test_rope_score_of_row_vectors_keeps_the_transpose_of_b_and_is_r_m_minus_n() -> None:
    """Seed 000: A R_m (B R_n)^T = A R_m R_n^T B = A R_{n-m} B. The transpose of B is dropped
    (two row vectors do not multiply), and in this row convention the offset is m - n."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(1, 8, generator=g, dtype=torch.float64) for _ in range(2))  # rows
    r = rope_rotation
    for k1, k2 in ((3, 10), (7, 2)):  # the tutorial's own identities hold
        torch.testing.assert_close(r(k2 - k1), r(k1).T @ r(k2))
        torch.testing.assert_close(r(k1), r(-k1).T)
    for m, n in ((7, 3), (2, 11)):
        score = (a @ r(m)) @ (b @ r(n)).T  # A R_m (B R_n)^T, (1, 1)
        torch.testing.assert_close(score, a @ r(m) @ r(n).T @ b.T)  # (B R_n)^T = R_n^T B^T
        torch.testing.assert_close(score, a @ r(m - n) @ b.T)  # R_m R_n^T = R_{m-n}
        with pytest.raises(RuntimeError):
            a @ r(n - m) @ b  # A R_{n-m} B as written: (1, 8) @ (1, 8)
        assert (score - a @ r(n - m) @ b.T).abs().item() > 1e-3  # and R_{n-m}: another score
        shifted = (a @ r(m + 5)) @ (b @ r(n + 5)).T  # a function of m - n only
        torch.testing.assert_close(shifted, score)
    # in column form, qkv's apply_rotary: (R_m q)^T (R_n k) = q^T R_{n-m} k
    q, k = a[0], b[0]
    assert ((r(7) @ q) @ (r(3) @ k)).item() == pytest.approx((q @ r(3 - 7) @ k).item())


# --- embeddings --------------------------------------------------------------------------------


def test_sqrt_d_model_matches_words_to_positions_only_with_a_one_over_d_initialisation() -> None:
    """x sqrt(d_model) is needed with qkv's N(0, 1/d) embeddings; with nn.Embedding's N(0, 1)
    (seed 001 keeps it, unscaled) the words already match the positions, and scaling them would
    drown the positions."""
    d = 512
    torch.manual_seed(0)
    embedding = TokenEmbedding(1000, d, padding_idx=0)  # N(0, 1/d), then x sqrt(d)
    default = nn.Embedding(1000, d)  # N(0, 1)
    ids = torch.randint(1, 1000, (1, 64))
    pe = SinusoidalPositionalEncoding(d)(torch.zeros(1, 64, d))  # |PE(p)| = sqrt(d / 2) = 16

    def positions_over_words(words: torch.Tensor) -> float:
        return (pe.norm(dim=-1) / words.norm(dim=-1)).mean().item()

    with torch.no_grad():
        scaled, plain = embedding(ids), embedding.lookup(ids)
        torch.testing.assert_close(scaled, plain * math.sqrt(d))
        unit, unit_scaled = default(ids), default(ids) * math.sqrt(d)
    assert 12 < positions_over_words(plain) < 20  # N(0, 1/d) unscaled: positions 16x the words
    assert 0.5 < positions_over_words(scaled) < 1  # scaled: comparable
    assert 0.6 < positions_over_words(unit) < 0.8  # N(0, 1) unscaled: 16 against ~22.6
    assert positions_over_words(unit_scaled) < 0.04  # N(0, 1) scaled: words 32x the positions


def test_pad_embeddings_are_zero_only_before_the_positions_are_added() -> None:
    cfg = TransformerConfig.preset("tiny", src_vocab_size=20, dropout=0.0)
    model = Transformer(cfg).eval()
    ids = torch.tensor([[5, 6, 7, cfg.pad_id, cfg.pad_id]])
    with torch.no_grad():
        tokens = model.encoder.embedding(ids)
        embedded = model.encoder.embed(ids)
    assert torch.count_nonzero(tokens[0, 3:]) == 0  # the pad row is zero
    pe = SinusoidalPositionalEncoding(cfg.d_model)(torch.zeros(1, 5, cfg.d_model))
    torch.testing.assert_close(embedded[0, 3:], pe[0, 3:])  # after + PE, a pad is PE(p)
    assert embedded[0, 3:].norm(dim=-1).min() > 1
    assert padding_mask(ids, cfg.pad_id).tolist() == [
        [[[True, True, True, False, False]]]
    ]  # the mask removes them


def test_cross_language_sharing_ties_one_joint_vocabulary() -> None:
    """The paper shares one BPE vocabulary (about 37k tokens, EN-DE) and one embedding matrix."""
    cfg = TransformerConfig.preset("tiny", src_vocab_size=40)
    model = Transformer(cfg)
    assert cfg.share_embeddings and cfg.tie_output  # qkv's defaults follow the paper
    assert model.encoder.embedding is model.decoder.embedding
    assert model.output_projection.weight is model.decoder.embedding.weight
    untied = Transformer(
        TransformerConfig.preset(
            "tiny", src_vocab_size=40, share_embeddings=False, tie_output=False
        )
    )
    assert model.num_parameters() + 2 * 40 * cfg.d_model == untied.num_parameters()
    with pytest.raises(ValueError, match="share_embeddings needs one vocabulary"):
        TransformerConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=30)


# --- masks -------------------------------------------------------------------------------------


def test_the_mask_removes_keys_from_the_softmax_it_does_not_multiply() -> None:
    mha = self_attention()
    x = torch.randn(1, 5, 16, dtype=torch.float64)  # 3 tokens, then 2 pads
    keep = torch.tensor([True, True, True, False, False])
    with torch.no_grad():
        alone = mha(x[:, :3])[0]
        masked = mha(x, mask=keep[None, None, None])[0][:, :3]
        multiplied_input = mha(x * keep[None, :, None])[0][:, :3]  # pads zeroed, still attended
        q, k, v = mha.project_self(x)
        _, multiplied_scores = softmax_attention(q @ k.mT / math.sqrt(8) * keep, v)
    torch.testing.assert_close(masked, alone)
    assert (multiplied_input - alone).abs().max() > 1e-3
    assert multiplied_scores[..., 3:].min() > 0.01  # a score of 0 still gets weight


# --- cost --------------------------------------------------------------------------------------


def test_attention_cost_counts_the_n_d_squared_projections() -> None:
    n, d = 64, 512
    mha = MultiHeadedAttention(d, 8).eval()
    mha.fused = False
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        mha(torch.randn(1, n, d))
    projections = 2 * n * d * (3 * d) + 2 * n * d * d  # Q, K, V and W^O: 8 N D^2
    scores = 2 * n * n * d + 2 * n * n * d  # Q K^T and A V: 4 N^2 D
    assert counter.get_total_flops() == projections + scores
    assert scores < 0.1 * counter.get_total_flops()  # O(N^2 D) alone misses 94% at N 64, D 512
    # the three matrices are three D x D projections, not free
    assert mha.in_proj.weight.shape == (3 * d, d)


def test_one_shared_projection_is_still_attention_not_an_ffn() -> None:
    """Neither "three matrices add no compute" nor "one matrix degenerates to an FFN"."""
    mha = self_attention()
    with torch.no_grad():
        w = torch.randn(16, 16, dtype=torch.float64) * 0.3
        mha.in_proj.weight.copy_(torch.cat([w, w, w]))  # W^Q = W^K = W^V
        mha.in_proj.bias.zero_()
        x = torch.randn(1, 6, 16, dtype=torch.float64)
        y = x.clone()
        y[0, 2] = torch.randn(16, dtype=torch.float64)
        changed = [(mha(x)[0][0, t] - mha(y)[0][0, t]).abs().max().item() > 1e-6 for t in range(6)]
        ffn = PositionwiseFeedForward(16, 32).double()
        ffn_changed = [not torch.equal(ffn(x)[0, t], ffn(y)[0, t]) for t in range(6)]
    assert changed == [True] * 6  # one matrix: every position still reads position 2
    assert ffn_changed == [t == 2 for t in range(6)]  # an FFN reads its own position only
    one = nn.Linear(16, 16)
    assert mha.in_proj.weight.numel() == 3 * one.weight.numel()  # three matrices, 3x the FLOPs


def test_sqrt_d_k_keeps_softmax_gradients_alive_it_is_not_about_local_optima() -> None:
    g = torch.Generator().manual_seed(0)
    d_k = 256
    q = torch.randn(1, 1, 64, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 32, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, 32, 4, generator=g, dtype=torch.float64)
    upstream = torch.randn(1, 1, 64, 4, generator=g, dtype=torch.float64)
    norms = {}
    for name, scale in (("unscaled", 1.0), ("scaled", d_k**-0.5)):
        scores = (q @ k.mT * scale).requires_grad_()
        out, _ = softmax_attention(scores, v)
        (out * upstream).sum().backward()
        norms[name] = scores.grad.norm(dim=-1)  # |d loss / d scores| per query, (1, 1, 64)
    # saturated rows pass almost no gradient back: the median query's is 100x smaller
    assert norms["unscaled"].median() < 0.02 * norms["scaled"].median()
    assert (norms["unscaled"] < 1e-3).double().mean() > 0.25 and norms["scaled"].min() > 0.05


def test_the_ffn_widens_to_d_ff_it_is_not_d_by_d() -> None:
    ffn = PositionwiseFeedForward(512, 2048)  # the paper's base: d_model 512, d_ff 2048
    assert ffn.w_1.weight.shape == (2048, 512) and ffn.w_2.weight.shape == (512, 2048)
    params = sum(p.numel() for p in ffn.parameters())
    assert params == 2 * 512 * 2048 + 2048 + 512
    d_by_d = 2 * 512 * 512 + 2 * 512  # W_FFN as D x D: a quarter of the parameters
    assert params > 3.9 * d_by_d


def test_cross_attention_queries_come_from_the_decoder_keys_and_values_from_the_encoder() -> None:
    torch.manual_seed(0)
    mha = MultiHeadedAttention(16, 2, cross=True).double().eval()
    target = torch.randn(2, 4, 16, dtype=torch.float64)  # decoder states, T = 4
    memory = torch.randn(2, 7, 16, dtype=torch.float64)  # encoder output, S = 7
    with torch.no_grad():
        out = mha(target, memory)[0]
        torch.testing.assert_close(out, per_head_attention(mha, target, memory))
        assert out.shape == target.shape  # one output per target position: the residual adds up
        wrong = mha(memory, memory)[0]  # queries from the encoder too
        assert wrong.shape == (2, 7, 16)
        with pytest.raises(RuntimeError):
            _ = target + wrong  # (B, 7, D) cannot join the decoder's (B, 4, D)


# --- qkv's measurements against the tutorials' claims ------------------------------------------


def test_consistency_scores_table_has_the_unscaled_dot_product_converging() -> None:
    """Not "scaling is needed to converge": in qkv's scores table (read, not rerun) unscaled
    scores learn the synthetic task (d_k 16) in each of three seeds. The Multi30k rows are one
    run each, so the page reads no order from them: a row with seeds would need a new reading."""
    dot = measured("scores", "dot", "synthetic")
    assert dot["exact_match"] == "100.0" and dot["exact_match_per_seed"] == "100 / 99.5 / 100"
    assert float(dot["valid_loss"]) <= float(
        measured("scores", "scaled_dot", "synthetic")["valid_loss"]
    )
    for variant in ("dot", "scaled_dot"):
        assert measured("scores", variant, "multi30k")["seeds"] == "—"


def test_unscaled_scores_at_d_k_16_are_peaked_but_not_one_hot() -> None:
    """At the tiny preset's d_k (16) unscaled softmaxes still pass gradients: not one-hot."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 500, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 32, 16, generator=g, dtype=torch.float64)
    _, weights = scaled_dot_product_attention(q, k, k, scale=1.0)
    assert weights.amax(-1).mean() < 0.8


def test_the_paper_has_no_norm_ablation_qkvs_default_is_its_layernorm() -> None:
    """The paper uses LayerNorm (post-norm) without comparing it; qkv's base preset follows it."""
    base = TransformerConfig.preset("base")
    assert base.norm == "layernorm" and base.norm_first is False


def test_consistency_norms_table_compares_what_the_paper_does_not() -> None:
    """qkv's norms table (read, not rerun) compares LayerNorm, RMSNorm and BatchNorm over seeds."""

    def seeds(variant: str) -> list[float]:
        return [float(x) for x in measured("norms", variant)["exact_match_per_seed"].split(" / ")]

    assert len(seeds("pre-layernorm-L6")) >= 3  # the comparison rests on several seeds
    assert min(seeds("pre-layernorm-L6") + seeds("pre-rmsnorm-L6")) == 100.0
    assert max(seeds("pre-batchnorm-L6")) < 90.0
