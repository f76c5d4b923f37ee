"""Text in, text out: a model directory as a translator.

    translator = Translator.load("runs/multi30k-de-en")          # config.json, weights, tokenizer
    translator.translate(["Ein Mann fährt Fahrrad."], beam=4)     # -> ["A man rides a bike."]
    translator.translate_detailed(texts, nbest=4, attention=True) # -> [Translation(text, score, ...)]
    Translator.load(["runs/a-avg", "runs/b-avg"])                # an ensemble of models sharing a tokenizer

Sentences are tokenized, sorted by length (so that batches hold sentences of similar length and little
padding), cut into batches of at most `batch_tokens` padded source tokens, decoded with `qkv.decode.search`,
detokenized and returned in input order. The output does not depend on the batching or on the order of
the input (sampling aside, whose draws depend on the batch). Empty lines give "" without running the
model; a line longer than the source limit is truncated, with one warning counting such lines.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import torch
from torch import Tensor

from ..data.batching import cut_into_batches, pad_sequences
from ..data.tokenizer import SubwordTokenizer
from ..decode.ensemble import Ensemble
from ..decode.search import (
    DEFAULT_MAX_LEN_B,
    Hypothesis,
    beam_search,
    cross_attention,
    greedy,
    sample,
)
from ..model import Transformer
from ..modeldir import load_model_dir
from ..runtime.prepare import prepare_for_decoding
from ..runtime.workers import map_in_workers

DEFAULT_MAX_SRC_TOKENS = 1024


@dataclass
class Translation:
    """One translated sentence.

    text: the best hypothesis, detokenized. score: its log-prob with the length penalty (see `search`).
    tokens: its target ids (eos excluded). nbest: (text, score) of the n best hypotheses, best first.
    attention: on request, the best hypothesis's last-layer cross-attention averaged over heads,
        (T, S) with T = len(tokens) + 1 (the last row predicted eos) and S = source tokens + eos.
    """

    text: str
    score: float
    tokens: list[int]
    nbest: list[tuple[str, float]]
    attention: Tensor | None = None


class Translator:
    """A Transformer (or an `Ensemble` of them) and its tokenizer: lists of sentences in, lists of translations out."""

    def __init__(self, model: Transformer | Ensemble, tokenizer: SubwordTokenizer,
                 max_src_tokens: int = DEFAULT_MAX_SRC_TOKENS) -> None:
        """max_src_tokens: longest source (subword tokens, eos included) before truncation; with learned
        positions it is at most the model's `max_positions`."""
        if not isinstance(model, Transformer | Ensemble):
            raise ValueError(f"translation needs an encoder-decoder Transformer, got {type(model).__name__}")
        cfg = model.config
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_src_tokens = min(max_src_tokens, cfg.max_positions) if cfg.positional == "learned" \
            else max_src_tokens
        if self.max_src_tokens < 2:
            raise ValueError(f"max_src_tokens must be >= 2 (a token and eos), got {max_src_tokens}")

    @classmethod
    def load(cls, directory: str | os.PathLike[str] | list[str | os.PathLike[str]], device: str | torch.device = "cpu",
             max_src_tokens: int = DEFAULT_MAX_SRC_TOKENS, quantize: str | None = None,
             pack: bool | None = None) -> Translator:
        """Load a model directory written by `save_model_dir` (weights, config and tokenizer), or a list of
        them as an `Ensemble` (their tokenizers must be the same).
        quantize="int8": int8 dynamic quantization of the linear layers, for the CPU (`decode.quantize`).
        pack: linear weights packed for oneDNN (`decode.packed`); None: for float32 on a CPU that supports it."""
        directories = directory if isinstance(directory, list) else [directory]
        models = []
        for d in directories:
            model = load_model_dir(d, device)
            if not isinstance(model, Transformer):
                raise ValueError(f"{d} holds a {type(model).__name__}; translation needs a Transformer")
            models.append(prepare_for_decoding(model, device, quantize, pack))
        tokenizer = SubwordTokenizer.load(directories[0])
        for d in directories[1:]:
            if not SubwordTokenizer.load(d).same_as(tokenizer):
                raise ValueError(f"{d} and {directories[0]} have different tokenizers; an ensemble needs one")
        return cls(models[0] if len(models) == 1 else Ensemble(models).eval(), tokenizer, max_src_tokens)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def translate(self, texts: list[str], beam: int = 4, alpha: float = 0.6, nbest: int = 1,
                  batch_tokens: int = 4096, max_len_a: float = 1.0,
                  max_len_b: int = DEFAULT_MAX_LEN_B, workers: int = 1) -> list[str]:
        """Translate sentences with beam search (beam 1: greedy); one output string per input string."""
        return [t.text for t in self.translate_detailed(texts, beam, alpha, nbest, batch_tokens, max_len_a,
                                                        max_len_b, workers=workers)]

    def translate_detailed(self, texts: list[str], beam: int = 4, alpha: float = 0.6, nbest: int = 1,
                           batch_tokens: int = 4096, max_len_a: float = 1.0, max_len_b: int = DEFAULT_MAX_LEN_B,
                           attention: bool = False, sampling: bool = False, temperature: float = 1.0,
                           top_k: int = 0, top_p: float = 1.0, seed: int = 0, workers: int = 1) -> list[Translation]:
        """Translate sentences; one `Translation` per input string, in input order.

        beam, alpha, nbest: beam search (beam 1 is greedy decoding; nbest <= beam). batch_tokens: the most
        padded source tokens per batch (a longer sentence goes alone). Output length limit per sentence:
        max_len_a * source tokens + max_len_b. attention: also return the best hypothesis's cross-attention.
        sampling: draw tokens instead (temperature, top_k, top_p; batch i uses seed + i), one hypothesis.
        workers: decode this many batches at once, each on its share of torch's threads (`decode.workers`);
        with fewer batches than workers, the largest batches are split so that each worker has one.
        """
        if nbest > (1 if sampling else beam):
            raise ValueError(f"nbest={nbest} needs a beam at least as large (beam={beam}, sampling={sampling})")
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
        if attention and isinstance(self.model, Ensemble):
            raise ValueError("attention weights come from one model; translate with one model for them")
        ids = self._encode(texts)
        results: list[Translation | None] = [None] * len(texts)
        for i, seq in enumerate(ids):
            if not seq:
                results[i] = Translation("", 0.0, [], [("", 0.0)])
        order = sorted((i for i, seq in enumerate(ids) if seq), key=lambda i: -len(ids[i]))  # longest first
        sizes = np.minimum(np.array([len(ids[i]) + 1 for i in order], dtype=np.int64), batch_tokens)
        bounds = list(pairwise(cut_into_batches(sizes, sizes, batch_tokens)))
        while len(bounds) < workers and any(end - start > 1 for start, end in bounds):  # a batch for each worker
            start, end = max(bounds, key=lambda b: b[1] - b[0])
            bounds = sorted([b for b in bounds if b != (start, end)] + [(start, (start + end) // 2),
                                                                        ((start + end) // 2, end)])

        def decode(job: tuple[int, tuple[int, int]]) -> tuple[Tensor, list[list[Hypothesis]]]:
            b, (start, end) = job
            batch = order[start:end]
            src = pad_sequences([[*ids[i], self.tokenizer.eos_id] for i in batch], self.tokenizer.pad_id).to(
                self.device)  # (B, S)
            max_len = torch.tensor([int(max_len_a * len(ids[i]) + max_len_b) for i in batch], device=self.device)
            if sampling:
                return src, [[h] for h in sample(self.model, src, temperature, top_k, top_p, seed + b, max_len,
                                                 alpha=alpha)]
            if beam == 1:
                return src, [[h] for h in greedy(self.model, src, max_len, alpha=alpha)]
            return src, beam_search(self.model, src, beam, alpha, nbest, max_len)

        jobs = list(enumerate(bounds))
        for (_, (start, end)), (src, hyps) in zip(jobs, map_in_workers(decode, jobs, workers), strict=True):
            batch = order[start:end]
            attn = cross_attention(self.model, src, [h[0].tokens for h in hyps]) if attention else None
            for row, (i, sentence_hyps) in enumerate(zip(batch, hyps, strict=True)):
                results[i] = self._translation(sentence_hyps, None if attn is None else attn[row])
        return results  # type: ignore[return-value]

    def _encode(self, texts: list[str]) -> list[list[int]]:
        """Source ids of each text, truncated to leave room for eos within max_src_tokens."""
        ids = self.tokenizer.encode_src(list(texts))
        room = self.max_src_tokens - 1
        n_long = sum(len(seq) > room for seq in ids)
        if n_long:
            warnings.warn(f"{n_long} of {len(texts)} input lines are longer than {room} subword tokens and "
                          f"were truncated to that length", stacklevel=3)
        return [seq[:room] for seq in ids]

    def _translation(self, hyps: list[Hypothesis], attention: Tensor | None) -> Translation:
        texts = self.tokenizer.decode_tgt([h.tokens for h in hyps])
        best = hyps[0]
        return Translation(texts[0], best.score, best.tokens, [(t, h.score) for t, h in zip(texts, hyps, strict=True)],
                           attention)


__all__ = ["Translation", "Translator"]
