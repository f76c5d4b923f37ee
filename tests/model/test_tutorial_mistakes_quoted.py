"""More of the tutorials' mistakes (docs/concepts.md), each quoted with its file and line.

The tutorials are five text files, 000_aad3c9e2544470e0.txt to 004_4ae46f6186792f9b.txt (seeds
000 to 004). Each test quotes the statement with its file and line, runs it as written beside the
right version on qkv's modules, and asserts the difference that settles it.
"""

from __future__ import annotations

import math

import torch

from qkv import TransformerConfig
from qkv.model import (
    AdditiveScore,
    MultiHeadedAttention,
    NadarayaWatson,
    SinusoidalPositionalEncoding,
    Transformer,
    scaled_dot_product_attention,
    softmax_attention,
)
from qkv.model.positions import sinusoid_table

F64 = torch.float64


def test_the_additive_score_needs_its_outer_v_to_be_one_number_per_pair() -> None:
    """000_aad3c9e2544470e0.txt line 41: "sim(Q,K)=tanh(WQ+UK)". tanh(W q + U k) is a vector (one
    value per hidden unit), not a score: the softmax needs one number per query-key pair, which
    the outer v gives, score = vᵀ tanh(W q + U k) (Bahdanau; seed 004 line 44 writes w_vᵀ)."""
    torch.manual_seed(0)
    additive = AdditiveScore(n_heads=1, d_head=4).double()
    q = torch.randn(1, 1, 3, 4, dtype=F64)  # (B, H, T_q, Dh)
    k = torch.randn(1, 1, 5, 4, dtype=F64)  # (B, H, T_k, Dh)
    without_v = torch.tanh(
        (q @ additive.w_q[0])[..., :, None, :] + (k @ additive.w_k[0])[..., None, :, :]
    )
    assert without_v.shape == (1, 1, 3, 5, 4)  # a 4-vector per (query, key): no single weight
    with torch.no_grad():
        scores = additive(q, k)
        torch.testing.assert_close(scores, without_v @ additive.v[0])  # vᵀ tanh(...)
    assert scores.shape == (1, 1, 3, 5)
    _, weights = softmax_attention(scores, torch.eye(5, dtype=F64).expand(1, 1, 5, 5))
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 1, 3, dtype=F64))
    per_unit = torch.softmax(without_v, dim=-2)  # softmax over keys without v: 4 weightings
    assert (per_unit[..., 0] - per_unit[..., 1]).abs().max() > 0.01


def test_seven_one_nine_five_are_scores_and_the_question_needs_two_lookups() -> None:
    """000_aad3c9e2544470e0.txt lines 44-53: the attention weights 7, 1, 9, 5 for 段誉's skill,
    father, sworn brothers and 乔峰's skill, and "这样，就可以把高分答案结合，得到正确答案". Weights
    sum to 1 (these sum to 22); a softmax of them puts 0.87 on 乔峰和虚竹. "段誉's sworn brother's
    signature skill" needs two lookups: one attention averages the values and gives 降龙十八掌
    less than 1/4 at any sharpness, two (layer 2's query made from layer 1's output) find it."""
    tutorial = torch.tensor([7.0, 1.0, 9.0, 5.0], dtype=F64)
    assert tutorial.sum() == 22
    softmax = torch.softmax(tutorial, -1)
    assert softmax.argmax() == 2 and 0.86 < softmax[2] < 0.87 and softmax[3] < 0.02
    # features: 段誉, 乔峰, 虚竹, signature skill, father, sworn brothers
    keys = torch.tensor(
        [[1, 0, 0, 1, 0, 0], [1, 0, 0, 0, 1, 0], [1, 0, 0, 0, 0, 1], [0, 1, 0, 1, 0, 0]], dtype=F64
    )
    person = torch.zeros(4, 6, dtype=F64)
    person[2, 1] = person[2, 2] = 1  # the answer 乔峰和虚竹, as features
    duan_yu, skill, brothers = (torch.eye(6, dtype=F64)[i] for i in (0, 3, 5))
    for sharpness in (0.5, 1.0, 4.0, 16.0, 64.0):
        query = sharpness * (duan_yu + brothers + skill)[None]
        _, one = scaled_dot_product_attention(query, keys, person, scale=1.0)
        assert one[0, 3] < 0.25  # 降龙十八掌's key matches 1 feature of 3; two keys match 2
    found, first = scaled_dot_product_attention(
        8 * (duan_yu + brothers)[None], keys, person, scale=1.0
    )
    assert first.argmax() == 2  # 段誉's sworn brothers: 乔峰和虚竹
    _, second = scaled_dot_product_attention(8 * (found + skill), keys, person, scale=1.0)
    assert second.argmax() == 3 and second[0, 3] > 0.99  # 乔峰's signature skill: 降龙十八掌


def test_the_exp_log_div_term_is_the_power_which_is_not_hard_to_compute() -> None:
    """000_aad3c9e2544470e0.txt line 212: "由于次方比较难算" (powers are hard to compute), hence
    1/10000^(2i/d) = exp(-(2i/d) ln 10000). Both are one PyTorch call and both are within float32
    rounding of the float64 value; qkv's table takes the power (in float64) and equals the
    tutorial's exp/log table to float32 rounding."""
    for d in (10, 512):
        i2 = torch.arange(0, d, 2)
        exact = 10000.0 ** (-i2.to(F64) / d)
        exp_log = torch.exp(i2.float() * -math.log(10000.0) / d)
        power = 10000.0 ** (-i2.float() / d)
        for form in (exp_log, power):
            assert ((form.double() - exact).abs() / exact).max() < 1e-6  # float32 rounding
        pe = torch.zeros(100, d)
        position = torch.arange(100).unsqueeze(1)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * exp_log), torch.cos(position * exp_log)
        torch.testing.assert_close(sinusoid_table(100, d), pe, atol=5e-5, rtol=0)
    # without the scale of 10000^x the power is no harder: torch.pow is the same one call
    torch.testing.assert_close(torch.pow(torch.tensor(3.0), 4.0), torch.tensor(81.0))


def test_the_sinusoids_are_added_positions_not_an_activation_of_the_embedding() -> None:
    """002_0c28afa443cf3c3f.txt line 107: each positional embedding goes through a sin or cos
    "激活" (activation), even columns sin, odd columns cos. The sinusoids are a fixed function of
    the position alone, added to the embedding (paper 3.5): what qkv adds does not depend on the
    token; sin/cos applied to the embedding, as an activation, would depend on the token only, and a
    word would get the same vector at every position."""
    pe = SinusoidalPositionalEncoding(16).double()
    assert list(pe.parameters()) == []  # nothing learned
    a, b = torch.randn(1, 6, 16, dtype=F64), torch.randn(1, 6, 16, dtype=F64)
    torch.testing.assert_close(pe(a) - a, pe(b) - b)  # the same added vector whatever the tokens
    torch.testing.assert_close((pe(a) - a)[0], sinusoid_table(6, 16).double())
    word = torch.randn(16, dtype=F64)
    same_word = word.expand(1, 6, 16)  # one word at positions 0..5

    def activated(x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        out[..., 0::2], out[..., 1::2] = torch.sin(x[..., 0::2]), torch.cos(x[..., 1::2])
        return out

    assert torch.equal(activated(same_word)[0, 0], activated(same_word)[0, 5])  # no position
    assert (pe(same_word)[0, 0] - pe(same_word)[0, 5]).abs().max() > 0.5  # positions told apart


def test_the_tied_output_layer_is_the_embeddings_transpose_not_its_inverse() -> None:
    """002_0c28afa443cf3c3f.txt line 194: the output linear layer is the inverse transform of the
    embedding ("输出线性层表示的线性变换是嵌入层的逆变换"), turning embeddings back into one-hot
    vectors. Tied, it is the same (V, d) matrix E used as logits = h Eᵀ: the transpose. E is not
    square (no inverse), and Eᵀ does not undo E: a word's own embedding, projected back, scores
    other words too, and its softmax is not one-hot."""
    cfg = TransformerConfig.preset("tiny", src_vocab_size=40, dropout=0.0)
    model = Transformer(cfg).double().eval()
    e = model.decoder.embedding.weight  # (V, d)
    assert model.output_projection.weight is e and e.shape == (40, 64)
    h = torch.randn(3, 64, dtype=F64)
    with torch.no_grad():
        torch.testing.assert_close(model.output_projection(h), h @ e.T)  # the transpose
        back = e @ e.T  # each word's embedding through the output layer: (V, V)
        pseudo_inverse = torch.linalg.pinv(e)  # (d, V): the nearest thing to an inverse
    assert (pseudo_inverse - e.T).abs().max() > 0.1
    assert (back - torch.eye(40, dtype=F64)).abs().max() > 0.1  # Eᵀ does not give one-hot back
    probabilities = torch.softmax(back[4:], -1)  # real words (0-3 are special)
    assert probabilities.max(-1).values.max() < 0.5


def test_the_variance_is_a_sum_over_one_shared_index_and_the_softmax_sums_over_keys() -> None:
    """003_52d3c8fa058639d9.txt line 30 writes var(q_i k_jᵀ) = E[(Σ_l q_{ij} k_{jl})²] (q's index l
    written j) and uses E[(Σ_l x_l)²] = Σ_l E[x_l²] without saying why; line 33 writes the
    temperature softmax as exp(s_ij/τ) / Σ_k exp(s_ij/τ) (s_ij where s_ik is meant). Right: the
    score is Σ_l q_il k_jl, and its variance is D because the cross terms E[q_l k_l q_m k_m]
    vanish (independent, mean 0); the denominator sums over the keys k. As written it is 1/L
    whatever τ, and never tends to one-hot."""
    g = torch.Generator().manual_seed(0)
    n, d = 200_000, 16
    q, k = (torch.randn(n, d, generator=g, dtype=F64) for _ in range(2))
    terms = q * k  # q_l k_l, (n, D)
    score = terms.sum(-1)
    assert abs(score.var().item() / d - 1) < 0.02
    cross = (score**2 - (terms**2).sum(-1)).mean()  # the l != m terms of (Σ_l q_l k_l)²
    assert abs(cross.item()) < 0.2 and (terms**2).sum(-1).mean().item() > d * 0.98
    as_written = q[:, 0] * k.sum(-1)  # q_{ij} fixed, Σ_l k_{jl}: another variable
    assert abs(torch.corrcoef(torch.stack([score, as_written]))[0, 1].item()) < 0.35
    torch.manual_seed(0)
    mha = MultiHeadedAttention(8, 1).double().eval()
    x = torch.randn(1, 5, 8, dtype=F64)
    with torch.no_grad():
        qh, kh, _ = mha.project_self(x)
        s = (qh @ kh.mT / math.sqrt(8))[0, 0]  # (5, 5)
        for tau in (2.0, 0.5, 1e-4):
            mha.temperature = tau
            _, weights = mha(x, need_weights=True)
            e = torch.exp((s - s.amax(-1, keepdim=True)) / tau)  # exp(s_ik / τ), shifted
            torch.testing.assert_close(weights[0, 0], e / e.sum(-1, keepdim=True))  # Σ over k
            same_term = (s / tau)[..., None].expand(5, 5, 5)  # Σ_k exp(s_ij/τ): k not in it
            as_written = torch.exp(s / tau - torch.logsumexp(same_term, -1))
            torch.testing.assert_close(as_written, torch.full((5, 5), 0.2, dtype=F64))
        assert weights.max(-1).values.min() > 0.999  # τ = 1e-4: one-hot, the hardmax


def test_the_query_is_the_volitional_cue_pooling_has_none() -> None:
    """004_4ae46f6186792f9b.txt line 7: "自主性的（无额外提示的）注意力，可以通过参数化的全连接层，
    甚至是非参数化的最大汇聚层来模拟" — the volitional and non-volitional cues swapped (d2l.ai: with
    non-volitional cues only, a fully connected layer or pooling is enough). Pooling and a fully
    connected layer compute the same output whatever is asked; attention's query, the volitional
    cue (line 11), changes which values it reads."""
    keys = torch.linspace(0, 5, 50, dtype=F64)
    values = 2 * torch.sin(keys) + keys**0.8
    nw = NadarayaWatson()
    queries = torch.tensor([0.5, 2.5, 4.5], dtype=F64)
    answers, weights = nw(queries, keys, values)
    assert answers.max() - answers.min() > 1.0  # the query decides what is read
    nearest = (queries[:, None] - keys[None]).abs().argmin(-1)
    assert torch.equal(weights.argmax(-1), nearest)  # each query reads the keys near it
    mean_pooled, max_pooled = values.mean(), values.max()  # no query: one answer for all
    fc = torch.nn.Linear(50, 1).double()
    with torch.no_grad():
        fc_out = fc(values)  # a fully connected layer reads the inputs, not a query
    assert mean_pooled.numel() == max_pooled.numel() == fc_out.numel() == 1


def test_multi_head_attention_is_not_linear_in_its_input() -> None:
    """004_4ae46f6186792f9b.txt line 187: "token之间的关系，则由线性的多头注意力进行学习" (the
    relations between tokens are learned by the linear multi-head attention). Its weights are a
    softmax of products of the input, so attention(x + y) != attention(x) + attention(y) and
    attention(2x) != 2 attention(x) even without biases; it is linear in the values only once the
    weights are fixed."""
    torch.manual_seed(0)
    mha = MultiHeadedAttention(16, 2, bias=False).double().eval()
    x, y = torch.randn(1, 6, 16, dtype=F64), torch.randn(1, 6, 16, dtype=F64)
    with torch.no_grad():

        def f(t: torch.Tensor) -> torch.Tensor:
            return mha(t)[0]

        assert (f(x + y) - f(x) - f(y)).abs().max() > 0.1
        assert (f(2 * x) - 2 * f(x)).abs().max() > 0.1
        q, k, _ = mha.project_self(x)
        _, weights = scaled_dot_product_attention(q, k, k)  # the weights, fixed
        v1, v2 = torch.randn(2, 1, 2, 6, 8, dtype=F64)
        torch.testing.assert_close(weights @ (v1 + v2), weights @ v1 + weights @ v2)
