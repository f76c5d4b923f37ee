"""Packed linear weights (oneDNN blocked layout): every linear layer is replaced, outputs equal nn.Linear's to
float rounding, decoding finds the same hypotheses, cached decoding still equals recomputation."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from qkv import DecoderOnly, Transformer
from qkv.decode import beam_search, greedy
from qkv.runtime.packed import PackedLinear, pack_linear_weights, packing_available
from tiny_models import batch, random_sources, tiny_config, tiny_model

pytestmark = pytest.mark.skipif(not packing_available(), reason="this torch build has no oneDNN packed linear")


@pytest.mark.parametrize("tie", [True, False])
def test_packed_outputs_equal_nn_linear_and_decoding_finds_the_same_hypotheses(tie: bool) -> None:
    model = tiny_model(d_model=64, d_ff=128, tie_output=tie)  # hypotheses end at varied lengths
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    packed = pack_linear_weights(copy.deepcopy(model))
    assert sum(type(m) is PackedLinear for m in packed.modules()) == n_linear  # the output projection too
    assert not any(type(m) is nn.Linear for m in packed.modules())
    src = batch(random_sources(6, seed=1, max_len=9))  # (B, S)
    tgt = torch.randint(4, 40, (6, 7))
    with torch.inference_mode():
        ref, got = model(src, tgt), packed(src, tgt)  # (B, T, V)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert [h.tokens for h in greedy(packed, src, max_len=12)] == [h.tokens for h in greedy(model, src, max_len=12)]
    assert [h.tokens for h in greedy(packed, src, max_len=12, use_cache=False)] == \
        [h.tokens for h in greedy(packed, src, max_len=12)]
    ours, theirs = beam_search(packed, src, beam=3, max_len=12), beam_search(model, src, beam=3, max_len=12)
    assert [h[0].tokens for h in ours] == [h[0].tokens for h in theirs]


def test_packed_linear_takes_any_leading_shape_and_no_bias() -> None:
    torch.manual_seed(0)
    for linear in (nn.Linear(24, 40), nn.Linear(24, 40, bias=False)):
        packed = PackedLinear(linear)
        for shape in ((24,), (1, 24), (3, 5, 24)):
            x = torch.randn(shape)
            with torch.inference_mode():
                torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)


def test_a_decoder_only_model_packs_too_and_bad_models_are_refused() -> None:
    model = DecoderOnly(tiny_config()).eval()
    x = torch.randint(4, 40, (2, 6))
    with torch.inference_mode():
        ref = model(x)
        torch.testing.assert_close(pack_linear_weights(copy.deepcopy(model))(x), ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="float32"):
        pack_linear_weights(Transformer(tiny_config()).double())


def test_packed_model_on_worker_threads_decodes_as_one_thread() -> None:
    from qkv.runtime.workers import map_in_workers

    model = tiny_model(d_model=64, d_ff=128)
    packed = pack_linear_weights(copy.deepcopy(model))
    batches = [batch(random_sources(4, seed=s, max_len=9)) for s in range(4)]
    alone = [[h.tokens for h in greedy(model, b, max_len=12)] for b in batches]
    assert map_in_workers(lambda b: [h.tokens for h in greedy(packed, b, max_len=12)], batches, workers=2) == alone


PACK_PEAK = """
import torch
from qkv import Transformer, TransformerConfig
from qkv.runtime.packed import pack_linear_weights
def mb(field):
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(field + ':')) / 1024
model = Transformer(TransformerConfig.preset('tiny', src_vocab_size=1000, d_model=512, d_ff=2048, n_heads=8,
                                             n_encoder_layers=4, n_decoder_layers=4))  # ~120 MB, mostly Linear
before = mb('VmRSS')
open('/proc/self/clear_refs', 'w').write('5')  # reset the high-water mark to the current RSS
pack_linear_weights(model)
print(mb('VmHWM') - before)
"""


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/clear_refs"), reason="reads VmHWM from /proc")
def test_packing_frees_each_float_weight_as_it_goes() -> None:
    """Packing ~110 MB of linear weights raises the peak by well under their size: a float weight is released
    when its packed copy is made, not after all of them (which would hold both copies at once)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", PACK_PEAK], capture_output=True, text=True, check=True)
    assert float(out.stdout) < 40, out.stdout


def test_packed_linear_with_plain_rows_multiplies_few_rows_by_the_plain_weight() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(32, 24)
    both = PackedLinear(linear, plain_rows=1)
    packed = PackedLinear(linear)
    assert packed.weight is None and both.weight is not None  # the plain weight kept only if asked
    with torch.inference_mode():
        for x in (torch.randn(1, 1, 32), torch.randn(3, 2, 32)):
            torch.testing.assert_close(both(x), linear(x), atol=1e-5, rtol=1e-5)
        one, many = torch.randn(1, 32), torch.randn(2, 32)
        assert torch.equal(both(one), torch.nn.functional.linear(one, linear.weight, linear.bias))
        assert torch.equal(both(many), packed(many))  # two rows: the packed kernel
    model = pack_linear_weights(tiny_model(), plain_rows=1)
    assert all(m.plain_rows == 1 for m in model.modules() if isinstance(m, PackedLinear))
