"""The GRU encoder-decoder with Bahdanau attention (`model.arch: rnn`): its attention and its
decoder against a float64 hand computation, its cache against recomputation, under the same searches."""

from __future__ import annotations

import pytest
import torch

from qkv import TransformerConfig
from qkv.decode.search import beam_search, greedy, sample
from qkv.model.attention import AdditiveScore, AttentionWeights
from qkv.model.masks import padding_mask
from qkv.model.rnn import RNNSearch

V = 23


def tiny_rnn(**overrides: object) -> RNNSearch:
    torch.manual_seed(0)
    cfg = TransformerConfig.preset(
        "tiny",
        arch="rnn",
        src_vocab_size=V,
        d_model=16,
        n_encoder_layers=2,
        n_decoder_layers=2,
        **overrides,
    )
    return RNNSearch(cfg).eval()


def sources() -> torch.Tensor:
    """Three sources ending in eos (3), right-padded with pad (0)."""
    return torch.tensor([[5, 9, 7, 11, 3], [6, 8, 3, 0, 0], [12, 3, 0, 0, 0]])


def gru_cell(cell: torch.nn.GRUCell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The GRU equations (Cho et al., 2014) in float64: gates r, z and the candidate n, rows of W in that order."""
    w_ih, w_hh = cell.weight_ih.double(), cell.weight_hh.double()
    b_ih, b_hh = cell.bias_ih.double(), cell.bias_hh.double()
    ir, iz, i_n = (x @ w_ih.T + b_ih).chunk(3, -1)
    hr, hz, hn = (h @ w_hh.T + b_hh).chunk(3, -1)
    r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
    n = torch.tanh(i_n + r * hn)
    return (1 - z) * n + z * h


def test_attention_and_decoder_equal_a_float64_hand_computation() -> None:
    """e_tj = v^T tanh(W_q s_{t-1} + W_k h_j), a_t = softmax over the real source tokens, c_t = sum a_tj h_j,
    s_t = GRU([E y_{t-1}; c_t], s_{t-1}), s_0 = tanh(W_init mean h), o_t = tanh(W_o [s_t; c_t; E y]) -> logits:
    written out with the model's parameters in float64, from its annotations h."""
    model = tiny_rnn()
    src, tgt = sources(), torch.tensor([[2, 4, 6, 8], [2, 5, 7, 0], [2, 9, 0, 0]])
    weights = AttentionWeights()
    with torch.no_grad():
        logits = model(src, tgt, weights)
        memory = model.encode(src).double()  # (B, S, D)
    (maps,) = weights.cross  # (B, 1, T, S)
    dec = model.decoder
    w_q, w_k, v = (
        p[0].double()
        for p in (dec.attention.score.w_q, dec.attention.score.w_k, dec.attention.score.v)
    )
    emb = model.decoder.embedding
    for b in range(3):
        length = int((src[b] != 0).sum())
        h = memory[b, :length]  # (S_b, D)
        init = torch.tanh(dec.init_state.weight.double() @ h.mean(0) + dec.init_state.bias.double())
        states = list(init.view(2, 16))
        for t in range(4):
            e = torch.stack(
                [v @ torch.tanh(w_q.T @ states[-1] + w_k.T @ h[j]) for j in range(length)]
            )
            a = e.softmax(0)
            torch.testing.assert_close(maps[b, 0, t, :length].double(), a, atol=1e-6, rtol=1e-5)
            assert bool((maps[b, 0, t, length:] == 0).all())  # padding gets nothing
            c = a @ h
            y = emb(tgt[b, t : t + 1])[0].double()
            inp = torch.cat([y, c])
            for layer, cell in enumerate(dec.cells):
                states[layer] = gru_cell(cell, inp, states[layer])
                inp = states[layer]
            o = torch.tanh(
                dec.output.weight.double() @ torch.cat([states[-1], c, y])
                + dec.output.bias.double()
            )
            want = model.output_projection.weight.double() @ o
            torch.testing.assert_close(logits[b, t].double(), want, atol=1e-5, rtol=1e-4)


def test_the_score_is_qkvs_additive_score() -> None:
    """BahdanauAttention's split key projection gives AdditiveScore's scores (one head over the full width)."""
    attention = tiny_rnn().decoder.attention
    assert isinstance(attention.score, AdditiveScore)
    q, h = torch.randn(4, 16), torch.randn(4, 7, 16)
    mask = torch.ones(4, 7, dtype=torch.bool)
    _, a = attention(q, attention.project_keys(h), h, mask)
    scores = attention.score(q[:, None, None, :], h[:, None])  # (B, 1, 1, S)
    torch.testing.assert_close(a, scores[:, 0, 0].softmax(-1))


def test_a_source_row_without_tokens_gets_zero_weights() -> None:
    """The masking of `softmax_attention` (finite scores at masked keys, then zeroed weights): a row whose keys
    are all masked gets zero weights and a zero context, not NaN, and the other rows are unchanged."""
    attention = tiny_rnn().decoder.attention
    q, h = torch.randn(3, 16), torch.randn(3, 7, 16)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1] = False
    mask[2, 4:] = False
    with torch.no_grad():
        context, a = attention(q, attention.project_keys(h), h, mask)
    assert torch.all(a[1] == 0) and torch.all(context[1] == 0)
    assert torch.all(a[2, 4:] == 0) and torch.isfinite(context).all()
    torch.testing.assert_close(a.sum(-1), torch.tensor([1.0, 0.0, 1.0]))


def test_the_encoder_ignores_padding() -> None:
    """Each row's annotations are those of the row alone, without padding (the backward GRU starts at its last
    token)."""
    model = tiny_rnn()
    src = sources()
    with torch.no_grad():
        batch = model.encode(src, padding_mask(src, 0))
        for b in range(3):
            length = int((src[b] != 0).sum())
            alone = model.encode(src[b : b + 1, :length])
            torch.testing.assert_close(batch[b : b + 1, :length], alone, atol=1e-6, rtol=1e-5)
            assert bool((batch[b, length:] == 0).all())


def test_cached_decoding_equals_recomputation() -> None:
    """The recurrent cache (states per hypothesis row, keys per source row, reordered by beam search's
    back-pointers and as sentences finish) changes no id: greedy, beam 4 with 4-best, sampling. Stepping the
    decoder with the cache gives the teacher-forced logits."""
    model = tiny_rnn()
    src = sources()
    for search in (
        greedy,
        lambda m, s, **kw: beam_search(m, s, beam=4, nbest=4, **kw),
        lambda m, s, **kw: sample(m, s, top_p=0.9, seed=3, **kw),
    ):
        cached = search(model, src, max_len=9)
        recomputed = search(model, src, max_len=9, use_cache=False)
        ids = [[h.tokens for h in r] if isinstance(r, list) else r.tokens for r in cached]
        assert ids == [
            [h.tokens for h in r] if isinstance(r, list) else r.tokens for r in recomputed
        ]
    tgt = torch.tensor([[2, 4, 6, 8, 10]] * 3)
    with torch.no_grad():
        memory = model.encode(src)
        mask = padding_mask(src, 0)
        full = model.decode(tgt, memory, mask)
        cache = model.new_cache()
        steps = torch.cat(
            [model.decode(tgt[:, t : t + 1], memory, mask, cache) for t in range(5)], dim=1
        )
    torch.testing.assert_close(steps, full, atol=1e-6, rtol=1e-5)
    assert cache.length == 5


@pytest.mark.parametrize(
    "key,value,message", [("d_model", 15, "even d_model"), ("n_decoder_layers", 0, "one")]
)
def test_bad_rnn_shapes_are_named(key: str, value: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TransformerConfig.preset("tiny", arch="rnn", n_heads=1, **{key: value})
