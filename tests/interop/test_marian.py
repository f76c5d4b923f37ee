"""Importing a Hugging Face MarianMTModel: qkv must compute Marian's function.

Oracle: the Hugging Face implementation itself (`transformers`, the `bench` extra): its logits on a teacher-forced
batch, and the ids of its `generate` (greedy) against qkv's `greedy` on the imported weights.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

transformers = pytest.importorskip("transformers")

from qkv.decode import greedy  # noqa: E402
from qkv.interop.marian import from_marian, marian_permutation  # noqa: E402
from qkv.model.positions import sinusoid_table  # noqa: E402

PAD, BOS, EOS, V = 0, 2, 3, 96


def marian(**overrides: Any) -> Any:
    """A tiny random MarianMTModel in eval mode with qkv's special ids (pad 0, decoder start 2, eos 3)."""
    kwargs: dict[str, Any] = dict(
        vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=BOS, forced_eos_token_id=None,
        activation_function="relu", scale_embedding=True)
    kwargs.update(overrides)
    torch.manual_seed(0)
    return transformers.MarianMTModel(transformers.MarianConfig(**kwargs)).eval()


def sources() -> Tensor:
    """(4, 9) source ids ending with eos, the last two rows right-padded."""
    src = torch.randint(4, V, (4, 9))
    src[:, -1] = EOS
    src[2, 6], src[2, 7:] = EOS, PAD
    src[3, 3], src[3, 4:] = EOS, PAD
    return src


def hf_greedy(hf: Any, src: Tensor, max_new_tokens: int) -> list[list[int]]:
    """Hugging Face greedy ids after the decoder start, up to eos (excluded); pad and bos never generated."""
    out = hf.generate(input_ids=src, attention_mask=src.ne(PAD), do_sample=False, num_beams=1,
                      max_new_tokens=max_new_tokens, suppress_tokens=[PAD, BOS])
    result = []
    for row in out[:, 1:].tolist():
        result.append(row[: row.index(EOS)] if EOS in row else row)
    return result


def test_the_permutation_turns_marian_positions_into_qkv_positions() -> None:
    hf = marian()
    table = hf.model.encoder.embed_positions.weight
    torch.testing.assert_close(table[:, marian_permutation(32)], sinusoid_table(64, 32), atol=1e-6, rtol=0)


@pytest.mark.parametrize("overrides", [
    {},
    {"activation_function": "gelu", "scale_embedding": False},
    {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 80, "tie_word_embeddings": False},
], ids=["relu-shared-tied", "gelu-unscaled", "separate-untied"])
def test_logits_equal_marian(overrides: dict[str, Any]) -> None:
    hf = marian(**overrides)
    model = from_marian(hf)
    src = sources()
    tgt = torch.randint(4, 80, (4, 7))
    tgt[:, 0] = BOS
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("eos_scale", [1.0, 3.0], ids=["to-max-len", "eos-early"])
def test_greedy_ids_equal_marian_generate(eos_scale: float) -> None:
    """A random model rarely ends; a larger eos embedding row (tied: a larger eos logit) makes it end early."""
    hf = marian()
    with torch.no_grad():
        hf.model.shared.weight[EOS] *= eos_scale
    model = from_marian(hf)
    src = sources()
    ours = [h.tokens for h in greedy(model, src, max_len=20)]
    assert ours == hf_greedy(hf, src, max_new_tokens=20)
    assert all(len(t) == 20 for t in ours) == (eos_scale == 1.0)


def test_what_qkv_cannot_represent_is_refused() -> None:
    with pytest.raises(ValueError, match="swish"):
        from_marian(marian(activation_function="swish"))
    with pytest.raises(NotImplementedError, match="bos_id == pad_id"):
        from_marian(marian(decoder_start_token_id=PAD))
    hf = marian()
    hf.final_logits_bias[0, 5] = 1.0
    with pytest.raises(NotImplementedError, match="final_logits_bias"):
        from_marian(hf)
