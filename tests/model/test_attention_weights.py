"""Attention weights on request (an `AttentionWeights` passed to a model): every layer and head, checked
against the masks, nn.MultiheadAttention with copied weights, the fused path and the prepared model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv import DecoderOnly, EncoderOnly, Transformer
from qkv.decode.search import attention_weights, beam_search
from qkv.model import AttentionWeights, padding_mask
from qkv.runtime.prepare import prepare_for_decoding
from qkv.runtime.runtime_options import RuntimeOptions
from tiny_models import batch, random_sources, tiny_config

SOURCES = [[5, 6, 7, 8, 9, 3], [10, 11, 3], [12, 13, 14, 3]]  # a padded batch: lengths 6, 3, 4
TARGETS = [[2, 20, 21, 22, 23], [2, 24], [2, 25, 26]]  # bos + tokens, right-padded too


def assert_rows_are_distributions(w: Tensor, allowed: Tensor) -> None:
    """w (B, H, T_q, T_k): every row sums to 1 over the keys it may attend to and is 0 elsewhere."""
    allowed = allowed.expand_as(w)
    assert (w[~allowed] == 0).all()
    assert (w >= 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))


def key_padding(lengths: list[int], n_keys: int) -> Tensor:
    """(B, 1, 1, n_keys): key k of row b is real when k < lengths[b]."""
    return (torch.arange(n_keys)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def causal(n: int) -> Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()[None, None]  # (1, 1, T, T): key <= query


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "relative", "alibi"])
def test_every_map_of_every_model_sums_to_one_over_the_keys_it_may_see(positional: str) -> None:
    torch.manual_seed(0)
    cfg = tiny_config(positional=positional)
    src, tgt = batch(SOURCES), batch(TARGETS)  # (3, 6), (3, 5)
    model = Transformer(cfg).eval()
    weights = AttentionWeights()
    with torch.no_grad():
        model(src, tgt, weights=weights)
    assert len(weights.encoder) == cfg.n_encoder_layers
    assert len(weights.decoder) == len(weights.cross) == cfg.n_decoder_layers
    src_keys = key_padding([len(s) for s in SOURCES], src.size(1))
    for w in weights.encoder:
        assert w.shape == (3, cfg.n_heads, 6, 6)
        assert_rows_are_distributions(w, src_keys)
    for w in weights.decoder:
        assert w.shape == (3, cfg.n_heads, 5, 5)
        assert_rows_are_distributions(w, causal(5))  # padding is right of every real query
    for w in weights.cross:
        assert w.shape == (3, cfg.n_heads, 5, 6)
        assert_rows_are_distributions(w, src_keys)

    encoder_only, decoder_only = EncoderOnly(cfg).eval(), DecoderOnly(cfg).eval()
    alone, lm = AttentionWeights(), AttentionWeights()
    with torch.no_grad():
        encoder_only(src, weights=alone)
        decoder_only(tgt, weights=lm)
    assert len(alone.encoder) == cfg.n_encoder_layers and not alone.decoder and not alone.cross
    assert len(lm.decoder) == cfg.n_decoder_layers and not lm.encoder and not lm.cross
    for w in alone.encoder:
        assert_rows_are_distributions(w, src_keys)
    for w in lm.decoder:
        assert_rows_are_distributions(w, causal(5))


@pytest.mark.parametrize("norm_first", [False, True])
def test_per_head_encoder_weights_equal_torch_multihead_attention(norm_first: bool) -> None:
    """Each encoder layer's weights, head by head, are nn.MultiheadAttention's (average_attn_weights=False)
    with the layer's projections copied in, on the input that layer's attention reads."""
    torch.manual_seed(0)
    model = EncoderOnly(tiny_config(norm_first=norm_first)).eval()
    src = batch(SOURCES)
    mask = padding_mask(src, 0)
    weights = AttentionWeights()
    with torch.no_grad():
        model(src, weights=weights)
        x = model.encoder.embed(src)
        for layer, ours in zip(model.encoder.layers, weights.encoder, strict=True):
            ref = nn.MultiheadAttention(model.config.d_model, model.config.n_heads, batch_first=True)
            weight, bias = layer.self_attn.projection()
            ref.in_proj_weight.copy_(weight)
            ref.in_proj_bias.copy_(bias)
            ref.out_proj.load_state_dict(layer.self_attn.out_proj.state_dict())
            h = layer.self_attn_block.norm(x) if norm_first else x
            _, theirs = ref.eval()(h, h, h, key_padding_mask=src == 0, average_attn_weights=False)
            assert ours.shape == theirs.shape == (3, model.config.n_heads, 6, 6)
            torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
            x = layer(x, mask)


def test_requested_weights_leave_the_outputs_unchanged_and_only_then_leave_the_fused_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    cfg = tiny_config()
    src, tgt = batch(SOURCES), batch(TARGETS)
    calls = []
    fused = F.scaled_dot_product_attention

    def counted(*args: object, **kwargs: object) -> Tensor:
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    runs = [(Transformer(cfg).eval(), (src, tgt), cfg.n_encoder_layers + 2 * cfg.n_decoder_layers),
            (EncoderOnly(cfg).eval(), (src,), cfg.n_encoder_layers),
            (DecoderOnly(cfg).eval(), (tgt,), cfg.n_decoder_layers)]
    with torch.no_grad():
        for model, inputs, n_attention in runs:
            calls.clear()
            plain = model(*inputs)
            assert len(calls) == n_attention  # every attention module ran the fused kernel
            calls.clear()
            weights = AttentionWeights()
            explicit = model(*inputs, weights=weights)
            assert not calls  # the readable path, which returns the weights
            assert sum(map(len, (weights.encoder, weights.decoder, weights.cross))) == n_attention
            torch.testing.assert_close(explicit, plain, atol=1e-5, rtol=1e-5)


def test_a_prepared_model_gives_the_plain_models_weights() -> None:
    """prepare_for_decoding (packed weights, the decoding attention kernels) computes the weights as the
    plain model does: teacher forced, and step by step with beams sharing a memory row through the
    few-query kernel's sizes."""
    torch.manual_seed(0)
    plain = Transformer(tiny_config()).eval()
    prepared = Transformer(tiny_config())
    prepared.load_state_dict(plain.state_dict())
    prepare_for_decoding(prepared, RuntimeOptions(precision="fp32", pack=True))
    assert any(type(m).__name__ == "DecodingAttention" for m in prepared.modules())
    sources = random_sources(8, seed=3, max_len=9)
    src = batch(sources)
    outputs = [h[0].tokens for h in beam_search(plain, src, beam=2, max_len=6)]
    assert [h[0].tokens for h in beam_search(prepared, src, beam=2, max_len=6)] == outputs
    for ours, theirs in zip(attention_weights(prepared, src, outputs), attention_weights(plain, src, outputs),
                            strict=True):
        for kind in ("encoder", "decoder", "cross"):
            for a, b in zip(getattr(ours, kind), getattr(theirs, kind), strict=True):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # one step of 16 beams per sentence, 8 sentences: 128 rows x 4 heads = 512 query rows (few-query sizes)
    beams = 16
    mask = padding_mask(src, 0)
    step = torch.randint(4, 40, (8 * beams, 1))
    with torch.no_grad():
        results = []
        for model in (plain, prepared):
            weights = AttentionWeights()
            cache = model.new_cache()
            logits = model.decode(step, model.encode(src, mask), mask, cache, weights=weights)
            results.append((logits, weights))
    (want, plain_weights), (got, prepared_weights) = results
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for a, b in zip(prepared_weights.cross + prepared_weights.decoder,
                    plain_weights.cross + plain_weights.decoder, strict=True):
        assert a.shape[0] == 8 * beams
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
