"""The baseline the Transformer replaced: a GRU encoder-decoder with additive attention, "RNNsearch"
(Bahdanau, Cho & Bengio, 2015), chosen by `model.arch: rnn`.

    encoder:    h_j = [fwd_j; bwd_j], a bidirectional GRU over the embedded source    (B, S, D)
    attention:  e_tj = v^T tanh(W_q s_{t-1} + W_k h_j),  a_t = softmax_j(e_tj),
                c_t = sum_j a_tj h_j
    decoder:    s_t = GRU([E y_{t-1}; c_t], s_{t-1}),    s_0 = tanh(W_init mean_j h_j)
    output:     o_t = tanh(W_o [s_t; c_t; E y_{t-1}]),   logits = output_projection(o_t)

The score is qkv's `AdditiveScore` (one head over the full width D); its key projection W_k h is
computed once per source. The model speaks the decoding interface (`qkv.decode.interface`) like the
Transformer, so greedy, beam search and sampling decode it unchanged: `RecurrentCache` holds each
hypothesis row's GRU states and each source row's projected keys, and `reorder(rows, sources)`
follows beam search's back-pointers. Config fields used: d_model (embeddings, annotations and
states), n_encoder_layers, n_decoder_layers, dropout, the vocabulary, share/tie of embeddings.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..config import TransformerConfig
from .attention import AdditiveScore, AttentionWeights, softmax_attention
from .embedding import TokenEmbedding
from .masks import padding_mask
from .transformer import EncoderDecoder


class BahdanauAttention(nn.Module):
    """Additive attention of a decoder state over the annotations: qkv's `AdditiveScore` with one
    head of width D, then `softmax_attention`. The keys' projection W_k h is split out so that it is
    computed once per source."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.score = AdditiveScore(1, d_model)

    def project_keys(self, memory: Tensor) -> Tensor:
        """memory h (B, S, D) -> W_k h (B, S, D)."""
        return self.score.project_keys(memory, head=0)

    def forward(
        self, query: Tensor, keys: Tensor, memory: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """query s (R, D), projected keys W_k h (R, S, D), memory h (R, S, D), mask (R, S)
        (True = a token) -> context c (R, D), weights a (R, S)."""
        scores = self.score.score_keys(query[:, None, :], keys, head=0)  # e_t: (R, 1, S)
        context, weights = softmax_attention(scores, memory, mask[:, None, :])  # (R, 1, D), a_t
        return context[:, 0], weights[:, 0]


class RecurrentCache:
    """The decoder's state between steps: the GRU states of every hypothesis row (L, R, D) and the
    projected keys of every source row (B, S, D)."""

    def __init__(self) -> None:
        self.states: Tensor | None = None
        self.keys: Tensor | None = None
        self._length = 0

    @property
    def length(self) -> int:
        """Target positions decoded so far."""
        return self._length

    def advance(self, states: Tensor, steps: int) -> None:
        self.states = states
        self._length += steps

    def reorder(self, rows: Tensor, sources: Tensor | None = None) -> None:
        """Keep hypothesis rows `rows` (R',) and, when sentences leave, source rows `sources`."""
        if self.states is not None:
            self.states = self.states.index_select(1, rows)
        if sources is not None and self.keys is not None:
            self.keys = self.keys.index_select(0, sources)


class RNNEncoder(nn.Module):
    """A bidirectional GRU over the embedded source: ids (B, S) -> annotations (B, S, D), zero at
    padding (the backward direction starts at each row's last token, not at its padding)."""

    def __init__(self, cfg: TransformerConfig, embedding: TokenEmbedding) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = embedding
        self.dropout = nn.Dropout(cfg.dropout)
        layers = cfg.n_encoder_layers
        self.rnn = nn.GRU(
            cfg.d_model,
            cfg.d_model // 2,
            num_layers=layers,
            batch_first=True,
            bidirectional=True,
            dropout=cfg.dropout if layers > 1 else 0.0,
        )

    def forward(self, src_ids: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is None:
            mask = padding_mask(src_ids, self.cfg.pad_id)
        lengths = mask[:, 0, 0, :].sum(1).clamp(min=1).cpu()  # (B,)
        x = self.dropout(self.embedding(src_ids))  # (B, S, D)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=src_ids.size(1))
        return self.dropout(h)


class RNNDecoder(nn.Module):
    """GRU cells fed [E y_{t-1}; c_t], one step per target position (the context of step t
    depends on the state of step t - 1). ids (R, T), memory (B, S, D) -> (o (R, T, D), weights)."""

    def __init__(self, cfg: TransformerConfig, embedding: TokenEmbedding) -> None:
        super().__init__()
        d, layers = cfg.d_model, cfg.n_decoder_layers
        self.embedding = embedding
        self.dropout = nn.Dropout(cfg.dropout)
        self.attention = BahdanauAttention(d)
        self.init_state = nn.Linear(d, layers * d)
        self.cells = nn.ModuleList([nn.GRUCell(2 * d if i == 0 else d, d) for i in range(layers)])
        self.output = nn.Linear(3 * d, d)  # o_t = tanh(W_o [s_t; c_t; E y_{t-1}])

    def initial_states(self, memory: Tensor, mask: Tensor) -> Tensor:
        """s_0 of every layer: tanh(W_init mean_j h_j) -> (L, B, D)."""
        real = mask.to(memory.dtype)[:, :, None]  # (B, S, 1)
        mean = (memory * real).sum(1) / real.sum(1).clamp(min=1.0)  # (B, D)
        states = torch.tanh(self.init_state(mean))  # (B, L D)
        return states.view(len(memory), len(self.cells), -1).transpose(0, 1)

    def forward(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        memory_mask: Tensor | None = None,
        cache: RecurrentCache | None = None,
        weights: AttentionWeights | None = None,
    ) -> tuple[Tensor, AttentionWeights | None]:
        R, T = tgt_ids.shape
        group = R // memory.size(0)  # hypothesis rows per source row
        if memory_mask is None:
            mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
        else:
            mask = memory_mask[:, 0, 0, :]  # (B, S)
        if cache is not None and cache.length > 0:
            keys, states = cache.keys, cache.states
            assert keys is not None and states is not None
        else:
            keys = self.attention.project_keys(memory)  # (B, S, D)
            states = self.initial_states(memory, mask).repeat_interleave(group, 1)  # (L, R, D)
            if cache is not None:
                cache.keys = keys
        if group > 1:  # every hypothesis row its source's annotations
            keys, memory, mask = (t.repeat_interleave(group, 0) for t in (keys, memory, mask))
        x = self.dropout(self.embedding(tgt_ids))  # (R, T, D)
        outputs, maps = [], []
        for t in range(T):
            context, a = self.attention(states[-1], keys, memory, mask)  # (R, D), (R, S)
            inp = torch.cat([x[:, t], context], dim=-1)
            new = []
            for layer, cell in enumerate(self.cells):
                s = cell(inp, states[layer])
                new.append(s)
                inp = self.dropout(s)
            states = torch.stack(new)  # (L, R, D)
            o = torch.tanh(self.output(torch.cat([states[-1], context, x[:, t]], dim=-1)))
            outputs.append(self.dropout(o))
            maps.append(a)
        if cache is not None:
            cache.advance(states, T)
        if weights is not None:
            weights.cross.append(torch.stack(maps, dim=1)[:, None])  # (R, 1, T, S)
        return torch.stack(outputs, dim=1), weights


class RNNSearch(EncoderDecoder):
    """The GRU encoder-decoder with Bahdanau attention. model(src (B, S), tgt_in (B, T)) -> logits
    (B, T, V), and the decoding interface of `Transformer`."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config, RNNEncoder, RNNDecoder)

    def encode(
        self,
        src_ids: Tensor,
        src_mask: Tensor | None = None,
        weights: AttentionWeights | None = None,
    ) -> Tensor:
        """src_ids (B, S) -> annotations (B, S, D) (no self-attention: `weights` stays as it is)."""
        return self.encoder(src_ids, src_mask)

    def new_cache(self, capacity: int = 64) -> RecurrentCache:
        """An empty recurrent cache (its size does not grow with the output: `capacity` is
        unused)."""
        return RecurrentCache()

    def max_target_positions(self) -> int | None:
        """No positional table: any length."""
        return None


__all__ = ["BahdanauAttention", "RNNDecoder", "RNNEncoder", "RNNSearch", "RecurrentCache"]
