"""Tiny random models and sources for the decoding tests, built in-process (float32, CPU, no dropout)."""

from __future__ import annotations

import torch
from torch import Tensor

from qkv import Transformer, TransformerConfig
from qkv.data.batching import pad_sequences
from qkv.model import AttentionWeights, DecoderCache

V = 40  # vocabulary: pad 0, unk 1, bos 2, eos 3, words 4..39


def tiny_config(**overrides: object) -> TransformerConfig:
    """The tiny preset without dropout; the vocabulary is V unless overridden."""
    return TransformerConfig.preset("tiny", **{"src_vocab_size": V, "dropout": 0.0, "attention_dropout": 0.0,
                                               **overrides})


class EndingTransformer(Transformer):
    """A random Transformer whose eos logit also gets a bias that depends on the previous token and grows
    with the position, so that hypotheses end at varied lengths (a random model either stops at once or
    never). The bias depends only on the prefix, so cached and uncached decoding still agree.
    """

    def __init__(self, config: TransformerConfig, seed: int = 0) -> None:
        super().__init__(config)
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("eos_bias", 8 * torch.rand(config.target_vocab_size, generator=g) - 4)

    def decode(self, tgt_ids: Tensor, memory: Tensor, memory_mask: Tensor | None = None,
               cache: DecoderCache | None = None, weights: AttentionWeights | None = None) -> Tensor:
        offset = 0 if cache is None else cache.length
        logits = super().decode(tgt_ids, memory, memory_mask, cache, weights)  # (B, T, V)
        position = torch.arange(offset, offset + tgt_ids.size(1), device=tgt_ids.device)  # (T,)
        bias = self.eos_bias[tgt_ids] + 0.1 * position  # (B, T)
        return torch.cat([logits[..., :3], logits[..., 3:4] + bias[..., None], logits[..., 4:]], dim=-1)


def tiny_model(ending: bool = True, seed: int = 0, **overrides: object) -> Transformer:
    torch.manual_seed(seed)
    cfg = tiny_config(**overrides)
    return (EndingTransformer(cfg, seed) if ending else Transformer(cfg)).eval()


def random_sources(n: int, seed: int = 1, min_len: int = 2, max_len: int = 20) -> list[list[int]]:
    """n source id lists of random lengths, each ending with eos (3)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g).tolist()
    return [[*torch.randint(4, V, (length,), generator=g).tolist(), 3] for length in lengths]


def batch(sources: list[list[int]]) -> Tensor:
    return pad_sequences(sources, 0)  # (B, S)
