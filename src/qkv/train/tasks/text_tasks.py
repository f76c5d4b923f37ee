"""Tasks on single texts: the decoder-only language model and BERT's masked language model.

A language model may continue a trained one (`init_from`, a qkv lm directory): its tokenizer files
are copied unchanged, its shape kept, its weights the start (`qkv.train.init`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...data.batching import pad_sequences
from ...data.corpus import DataError, read_lines
from ...data.named import get_corpus, named_paths
from ...data.text import load_text
from ...data.tokenizer import SubwordTokenizer
from ...model import DecoderOnly, EncoderOnly
from ..init import InitModel, load_init
from ..loss import LanguageModelLoss, MaskedLMLoss
from ..prepared_data import (
    load_corpora,
    validation_split,
)
from ..recipe import TrainConfig
from .base import Examples, Task, TextBatch, TextData, fingerprint, key_generator

log = logging.getLogger("qkv.train")

MASK_RATE = 0.15  # BERT: 15% of the tokens are chosen ...
MASK_SPLIT = (0.8, 0.1)  # ... of which 80% become [MASK], 10% a random token (10% stay)


def _corpus_side(cfg: TrainConfig, split: str) -> list[str]:
    """The src_lang side of a split of a named corpus (non-blank lines)."""
    corpus = get_corpus(cfg.corpus)  # type: ignore[arg-type]
    assert cfg.src_lang is not None
    # named_paths checks a pair; any other language of the corpus completes it
    other = cfg.tgt_lang or next((lang for lang in corpus.langs if lang != cfg.src_lang), "")
    path, _ = named_paths(corpus.name, split, cfg.src_lang, other, cfg.data_dir, cfg.download)
    return [line for line in read_lines(path) if line.strip()]


def load_texts(cfg: TrainConfig) -> tuple[list[str], list[str]]:
    """The training and validation texts of an lm or mlm recipe (validation may be empty)."""
    if cfg.corpus == "synthetic":  # the number words of the synthetic translation corpus
        train, valid = load_corpora(cfg)
        return train.tgt, [] if valid is None else valid.tgt
    if cfg.corpus is not None:
        valid_split = cfg.valid_split or validation_split(cfg.corpus)
        return _corpus_side(cfg, cfg.train_split), _corpus_side(cfg, valid_split)
    assert cfg.train_text is not None
    train = load_text(cfg.train_text)
    if not train:
        raise DataError(f"no text in {cfg.train_text}: the file is empty or blank")
    return train, load_text(cfg.valid_text) if cfg.valid_text else []


def train_text_tokenizer(texts: list[str], cfg: TrainConfig, out: Path) -> SubwordTokenizer:
    """A SentencePiece model trained on `texts` (one side: a joint vocabulary), saved to `out`."""
    return SubwordTokenizer.train(
        texts,
        [],
        out,
        vocab_size=cfg.vocab_size,
        model_type=cfg.subword,
        joint=True,
        character_coverage=cfg.character_coverage,
        seed=cfg.seed,
        max_sentences=cfg.tokenizer_sample,
        lowercase=cfg.lowercase,
    )


def text_tokenizer(
    cfg: TrainConfig, texts: list[str], out: Path, train: bool, directory: Path | None
) -> SubwordTokenizer:
    if train:
        return train_text_tokenizer(texts, cfg, out)
    return SubwordTokenizer.load(directory or out)


class TextTask(Task[Examples, TextBatch]):
    """A task on single texts: the batches are [bos] + ids + [eos]."""

    data: TextData

    def train_lengths(self) -> tuple[list[int], list[int]]:
        lengths = [len(x) for x in self.data.train]
        return lengths, lengths

    def valid_lengths(self) -> tuple[list[int], list[int]]:
        lengths = [len(x) for x in self.data.valid]
        return lengths, lengths

    def data_fingerprints(self) -> dict[str, str]:
        d = self.data
        return {
            "train_text": fingerprint(d.train, [d.train_labels]),
            "valid_text": fingerprint(d.valid, [d.valid_labels]),
        }

    def sequences(self, examples: list[list[int]], indices: list[int]) -> Tensor:
        """(B, T + 2): [bos] + ids + [eos] of examples[indices], right-padded."""
        tok = self.tokenizer
        return pad_sequences([[tok.bos_id, *examples[i], tok.eos_id] for i in indices], tok.pad_id)

    def _encode_texts(self, out: Path, train_tokenizer: bool, directory: Path | None) -> None:
        """Texts -> ids; training texts over max_len subwords are dropped (and counted),
        validation texts cut."""
        cfg = self.cfg
        train_texts, valid_texts = load_texts(cfg)
        tok = text_tokenizer(cfg, train_texts, out, train_tokenizer, directory)
        ids = tok.encode_src(train_texts)
        train = [x for x in ids if len(x) <= cfg.max_len]
        if len(train) < len(ids):
            log.info("dropped %d texts longer than %d subwords", len(ids) - len(train), cfg.max_len)
        if not train:
            raise ValueError(f"no training text of at most max_len={cfg.max_len} subwords")
        valid = [x[: cfg.max_len] for x in tok.encode_src(valid_texts)]
        log.info("%d training texts, %d validation texts", len(train), len(valid))
        self.data = TextData(tok, train, valid)


class LanguageModelTask(TextTask[list[list[int]]]):
    """A decoder-only causal language model: predict every next token of [bos] + text + [eos]."""

    noun = "training texts"

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__(cfg)
        # the language model to continue, read (and checked) before the run creates OUT
        self.init: InitModel | None = None
        if cfg.init_from is not None:
            self.init = load_init(cfg.init_from, cfg.model, task="lm")
            self.init.check_case(cfg.lowercase)

    def prepare(self, out: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        if self.init is not None and train_tokenizer:  # the model's tokenizer, not a new one
            self.init.write_tokenizer(out)
            train_tokenizer = False
        self._encode_texts(out, train_tokenizer, tokenizer_dir)

    def starts_trained(self) -> bool:
        return self.init is not None

    def metadata(self) -> dict[str, Any]:
        origin = {} if self.init is None else {"init_from": self.init.origin}
        return {**super().metadata(), **origin}

    def collate(
        self, examples: list[list[int]], indices: list[int], key: Sequence[int]
    ) -> TextBatch:
        seq = self.sequences(examples, indices)  # (B, T + 2)
        targets = seq[:, 1:]
        n = int((targets != self.tokenizer.pad_id).sum())
        return TextBatch(seq[:, :-1], targets, n)

    def build_model(self) -> nn.Module:
        if self.init is not None:
            return self.init.build()
        v = self.tokenizer.src_vocab_size
        return DecoderOnly(self.cfg.model_config(v, v))

    def loss_module(self, model: nn.Module) -> nn.Module:
        return LanguageModelLoss(model, self.cfg.label_smoothing, self.cfg.loss_chunk_tokens)


def mask_tokens(
    ids: Tensor,
    mask_id: int,
    special_ids: Sequence[int],
    vocab_size: int,
    generator: torch.Generator,
    pad_id: int = 0,
) -> tuple[Tensor, Tensor]:
    """BERT's corruption for masked-token prediction (Devlin et al., 2019, 3.1, appendix A.1).

    In each row of ids (B, T), 15% of the positions that hold a real token (not pad, bos, eos:
    `special_ids`), rounded and at least one, are chosen at random; a chosen token becomes
    `mask_id` 80% of the time, a random ordinary token (ids above every special id and unk,
    below `vocab_size`) 10% of the time, and stays itself 10% of the time.
    Returns (inputs (B, T), targets (B, T)): the corrupted ids, and the original id at each chosen
    position, pad_id elsewhere. Draws come from `generator` alone.
    """
    candidate = ~torch.isin(ids, torch.tensor(list(special_ids)))  # (B, T)
    n = candidate.sum(1)  # (B,)
    k = torch.minimum((MASK_RATE * n).round().clamp(min=1), n)  # (B,) positions to choose
    scores = torch.rand(ids.shape, generator=generator).masked_fill(~candidate, 2.0)
    rank = scores.argsort(1).argsort(1)  # (B, T): each position's place in a random order
    chosen = (rank < k[:, None]) & candidate
    action = torch.rand(ids.shape, generator=generator)
    first_ordinary = max(*special_ids, 1) + 1  # after pad, unk, bos, eos
    random_ids = torch.randint(first_ordinary, vocab_size, ids.shape, generator=generator)
    to_mask = chosen & (action < MASK_SPLIT[0])
    to_random = chosen & (action >= MASK_SPLIT[0]) & (action < sum(MASK_SPLIT))
    inputs = ids.masked_fill(to_mask, mask_id)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, ids.masked_fill(~chosen, pad_id)


class MaskedLMTask(TextTask[list[list[int]]]):
    """Encoder-only masked-token pretraining (BERT's masked LM) of [bos] + text + [eos]."""

    noun = "training texts"
    unused_parameters = True  # the classification head

    @property
    def mask_id(self) -> int:
        return self.tokenizer.src_vocab_size  # one past the tokenizer's ids

    def prepare(self, out: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        self._encode_texts(out, train_tokenizer, tokenizer_dir)

    def collate(
        self, examples: list[list[int]], indices: list[int], key: Sequence[int]
    ) -> TextBatch:
        tok = self.tokenizer
        seq = self.sequences(examples, indices)
        generator = key_generator(self.cfg.seed, key)
        # unk is a token like any other here: it may be chosen (never drawn as a random token)
        specials = (tok.pad_id, tok.bos_id, tok.eos_id)
        inputs, targets = mask_tokens(
            seq, self.mask_id, specials, tok.src_vocab_size, generator, tok.pad_id
        )
        return TextBatch(inputs, targets, int((targets != tok.pad_id).sum()))

    def build_model(self) -> EncoderOnly:
        v = self.mask_id + 1
        return EncoderOnly(self.cfg.model_config(v, v))

    def loss_module(self, model: nn.Module) -> nn.Module:
        return MaskedLMLoss(model, self.cfg.label_smoothing)

    def metadata(self) -> dict[str, Any]:
        return {"task": "mlm", "mask_id": self.mask_id}


# --- classification ------------------------------------------------------------------------------
