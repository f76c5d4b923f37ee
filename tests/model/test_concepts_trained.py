"""Concepts settled by training: a tiny model learns to reverse a few symbols for a few seconds,
once as the paper builds it and once with the tutorial's idea, and both are scored the same way
(teacher-forced training loss, and the token accuracy of greedy translations of held-out inputs).

- Training without the causal mask: the decoder reads the token it must predict (the leak). With
  noisy targets the training loss falls far below the masked model's (it reads the noise too),
  and greedy decoding, which has no future to read, gets almost nothing right.
- "Why three matrices": one matrix for queries, keys and values (Q = K = V = x W) in every
  self-attention. The scores are symmetric and a token's score with itself, |x W|², stands out:
  attention is pulled to the diagonal. Reversing is still learned: the cross-attention does it.
  Two of the three tied (Q = K, K = V, Q = V): each still learns; only Q = K pulls to the diagonal.
- A seq2seq without attention (the encoder-decoder before Bahdanau et al.): every decoder step
  gets one fixed summary of the source (here the mean of the GRU annotations) instead of an
  attention-weighted one. Short inputs fit through that bottleneck, longer ones do not.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import qkv.model.transformer as transformer_module
from qkv import Transformer, TransformerConfig
from qkv.decode import greedy
from qkv.model import AttentionWeights, padding_mask
from qkv.model.rnn import RNNSearch

pytestmark = pytest.mark.slow  # each test trains small models, several seconds each

BOS, EOS, SYMBOLS, LENGTH = 2, 3, 10, 6


def reversal_batch(
    n: int, g: torch.Generator, noise: float = 0.0, length: int = LENGTH
) -> tuple[Tensor, Tensor]:
    """n sources of `length` symbols (ids 4..13) with eos, and their reversals with eos, each
    target symbol replaced by a random one with probability `noise`."""
    x = torch.randint(4, 4 + SYMBOLS, (n, length), generator=g)
    y = x.flip(1)
    replace = torch.rand(n, length, generator=g) < noise
    y = torch.where(replace, torch.randint(4, 4 + SYMBOLS, (n, length), generator=g), y)
    eos = torch.full((n, 1), EOS)
    return torch.cat([x, eos], 1), torch.cat([y, eos], 1)


class TiedQKV(nn.Module):
    """Self-attention's stacked [W^Q; W^K; W^V] with matrices shared: `tie` names the ones that are
    one matrix ("qkv": all three; "qk", "kv", "qv": a pair, the third its own)."""

    def __init__(self, d_model: int, tie: str = "qkv") -> None:
        super().__init__()
        self.tie = tie
        self.proj = nn.Linear(d_model, d_model)
        self.other = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        y, z = self.proj(x), self.other(x)
        q, k, v = {"qkv": (y, y, y), "qk": (y, y, z), "kv": (z, y, y), "qv": (y, z, y)}[self.tie]
        return torch.cat([q, k, v], dim=-1)


def train_and_score(
    steps: int = 300, tie: str | None = None, seed: int = 0, noise: float = 0.0
) -> tuple[float, float, float]:
    """A tiny Transformer trained to reverse (targets with `noise`) -> the mean teacher-forced
    loss of its last 50 updates, the greedy token accuracy on 200 held-out clean inputs, and the
    mean share of encoder self-attention a token puts on itself."""
    torch.manual_seed(seed)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=16, dropout=0.0, attention_dropout=0.0)
    model = Transformer(cfg)
    if tie:
        for layer in [*model.encoder.layers, *model.decoder.layers]:
            layer.self_attn.in_proj = TiedQKV(cfg.d_model, tie)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        src, tgt = reversal_batch(64, g, noise)
        tgt_in = torch.cat([torch.full((64, 1), BOS), tgt[:, :-1]], 1)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    src, tgt = reversal_batch(200, torch.Generator().manual_seed(1000 + seed))
    hyps = greedy(model.eval(), src, max_len=LENGTH)
    right = sum(
        sum(a == b for a, b in zip(h.tokens, t[:LENGTH], strict=False))
        for h, t in zip(hyps, tgt.tolist(), strict=True)
    )
    weights = AttentionWeights()
    with torch.no_grad():
        model.encode(src, padding_mask(src, cfg.pad_id), weights)
    diagonal = torch.stack([w.diagonal(dim1=-2, dim2=-1).mean() for w in weights.encoder]).mean()
    return sum(losses[-50:]) / 50, right / (200 * LENGTH), float(diagonal)


def test_training_without_the_causal_mask_leaks_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Targets with 30% random symbols: the masked model's loss stays near the noise (~1.0 nats)
    and it reverses every clean input; without the mask the loss falls to ~0 (it reads each next
    symbol, noise included) and greedy decoding, with no future to read, gets almost nothing."""
    masked_loss, masked_accuracy, _ = train_and_score(noise=0.3)
    no_mask = lambda T, S, device: torch.ones(1, 1, T, S, dtype=torch.bool, device=device)  # noqa: E731
    monkeypatch.setattr(transformer_module, "causal_mask", no_mask)
    leaked_loss, leaked_accuracy, _ = train_and_score(noise=0.3)
    assert masked_loss > 0.7 and leaked_loss < masked_loss / 10
    assert masked_accuracy > 0.95 and leaked_accuracy < 0.5


@functools.cache
def tied_and_scored(tie: str | None) -> tuple[float, float, float]:
    """`train_and_score(tie=tie, seed=1)`, trained once for the tests that compare the ties."""
    return train_and_score(tie=tie, seed=1)


def test_one_matrix_for_queries_keys_and_values_pulls_attention_to_the_diagonal() -> None:
    """Both learn to reverse (the reversal is the cross-attention's work, whose W^Q and W^K stay
    apart); with Q = K = V each score matrix is symmetric and a token's score with itself, |x W|²,
    stands out: the share a token puts on itself in the encoder rises from 0.22 to 0.41 (7 keys,
    uniform 0.14). The tutorials' "the diagonal of the self-attention map is large" is a claim
    about this tied form, not about the paper's three matrices."""
    _, three_accuracy, three_diagonal = tied_and_scored(None)
    _, one_accuracy, one_diagonal = tied_and_scored("qkv")
    assert three_accuracy > 0.95 and one_accuracy > 0.95
    assert one_diagonal > three_diagonal + 0.1


def test_two_of_the_three_matrices_tied_still_attend_only_q_equals_k_pulls_to_the_diagonal() -> (
    None
):
    """Seed 002 (002_0c28afa443cf3c3f.txt lines 243-245): with Q = K the attention computation
    "fails" (失效), with K = V or Q = V the model cannot tell matching from content. Measured, one
    pair tied in every self-attention, 300 updates each: all three learn to reverse every held-out
    input; Q = K makes the scores symmetric and pulls a token's attention to itself (0.47 of it,
    as with Q = K = V), while K = V (0.17) and Q = V (0.15) stay near the untied model (0.22)."""
    _, _, three_diagonal = tied_and_scored(None)
    pairs = {tie: tied_and_scored(tie) for tie in ("qk", "kv", "qv")}
    assert all(accuracy > 0.95 for _, accuracy, _ in pairs.values())  # nothing "fails"
    assert pairs["qk"][2] > three_diagonal + 0.15
    assert abs(pairs["kv"][2] - three_diagonal) < 0.1 and abs(pairs["qv"][2] - three_diagonal) < 0.1


class FixedContext(nn.Module):
    """In place of `BahdanauAttention`: the same context at every step, the mean annotation."""

    def project_keys(self, memory: Tensor) -> Tensor:
        return memory

    def forward(self, query: Tensor, keys: Tensor, memory: Tensor, mask: Tensor) -> tuple:
        weights = mask.to(memory.dtype) / mask.sum(1, keepdim=True)  # (R, S), uniform
        return (weights[:, :, None] * memory).sum(1), weights


def recurrent_accuracy(length: int, attention: bool, steps: int = 250) -> float:
    """Greedy token accuracy of a 1-layer GRU encoder-decoder (d 64) trained to reverse `length`
    symbols, with Bahdanau attention or with a fixed context."""
    torch.manual_seed(0)
    cfg = TransformerConfig.preset(
        "tiny",
        src_vocab_size=16,
        dropout=0.0,
        attention_dropout=0.0,
        arch="rnn",
        n_encoder_layers=1,
        n_decoder_layers=1,
    )
    model = RNNSearch(cfg)
    if not attention:
        model.decoder.attention = FixedContext()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        src, tgt = reversal_batch(64, g, length=length)
        tgt_in = torch.cat([torch.full((64, 1), BOS), tgt[:, :-1]], 1)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    src, tgt = reversal_batch(200, torch.Generator().manual_seed(1000), length=length)
    hyps = greedy(model.eval(), src, max_len=length)
    right = sum(
        sum(a == b for a, b in zip(h.tokens, t[:length], strict=False))
        for h, t in zip(hyps, tgt.tolist(), strict=True)
    )
    return right / (200 * length)


def test_without_attention_a_longer_source_does_not_fit_through_one_vector() -> None:
    """250 updates each: 4 symbols pass through the fixed context (0.965 of the tokens right), 12
    do not (0.37), while Bahdanau attention reverses 12 (every token right)."""
    assert recurrent_accuracy(4, attention=False) > 0.9
    assert recurrent_accuracy(12, attention=True) > 0.95
    assert recurrent_accuracy(12, attention=False) < 0.7
