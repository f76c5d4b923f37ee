"""What the one training loop trains: a task knows its data, its model, its batches, its loss and
its validation metrics; the loop, checkpoints, exact resume, DDP and the time budget are the
trainer's (`qkv.train.trainer`).

    task        model         a batch                              loss
    translate   Transformer   src (B, S), tgt (B, T+1)             TranslationLoss
    lm          DecoderOnly   [bos] + ids -> ids + [eos]           LanguageModelLoss
    mlm         EncoderOnly   [bos] + ids + [eos], 15% corrupted   MaskedLMLoss
    classify    EncoderOnly   [bos] + ids + [eos] -> a label       ClassificationLoss

    task = make_task(cfg)
    task.prepare(out, train_tokenizer=True)          # data and tokenizer (trained into out)
    model = task.build_model()
    batch = task.collate(task.epoch_examples(sampler), indices, key)
    loss_sum, nll_sum = task.loss_module(model)(*task.loss_inputs(batch))   # / task.count(batch)

Encoder-only models read one more id than the tokenizer has: the last id of their vocabulary is
BERT's [MASK] (`mask_id`), so that an mlm model and a classifier made from it share their shape.
Randomness in a batch (the mlm corruption) comes from a generator seeded by the recipe's seed and
the batch's `key` (its epoch, position and rank), so a resumed run draws the same batches.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sacrebleu.metrics import BLEU
from torch import Tensor, nn

from ..data.batching import Batch, TokenBatchSampler, collate, pad_sequences
from ..data.corpus import DataError, read_lines
from ..data.named import get_corpus, named_paths
from ..data.text import load_labeled, load_text
from ..data.tokenizer import SubwordTokenizer
from ..decode.search import DEFAULT_MAX_LEN_B, greedy
from ..model import DecoderOnly, EncoderOnly, Transformer
from ..model.rnn import RNNSearch
from ..modeldir import WEIGHTS_FILE, CheckpointError, load_config, load_weights
from .loss import ClassificationLoss, LanguageModelLoss, MaskedLMLoss, TranslationLoss
from .prepare import (
    EncodedData,
    load_corpora,
    prepare_data,
    sample_segmentation,
    validation_split,
)
from .recipe import TrainConfig

log = logging.getLogger("qkv.train")

MASK_RATE = 0.15  # BERT: 15% of the tokens are chosen ...
MASK_SPLIT = (0.8, 0.1)  # ... of which 80% become [MASK], 10% a random token (10% stay)


@dataclass
class TextBatch:
    """A batch of a one-sequence task: inputs (B, T) and targets ((B, T) ids, or (B,) labels)
    right-padded; n_targets: the targets the loss sums over (non-pad tokens, or examples)."""

    inputs: Tensor
    targets: Tensor
    n_targets: int

    def to(self, device: torch.device | str) -> TextBatch:
        return TextBatch(self.inputs.to(device), self.targets.to(device), self.n_targets)


@dataclass
class TextData:
    """Encoded monolingual data: the tokenizer, training and validation ids (and labels)."""

    tokenizer: SubwordTokenizer
    train: list[list[int]]
    valid: list[list[int]]
    train_labels: list[int] = field(default_factory=list)
    valid_labels: list[int] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # class names, by class index


class Task:
    """The part of training that depends on what is trained. Subclasses set the data in `prepare`
    and implement the rest."""

    noun = "training examples"  # for the log
    metrics: tuple[str, ...] = ("valid_loss", "valid_ppl")  # validation columns of log.csv
    unused_parameters = False  # the model has parameters this task's loss never reaches (DDP)
    data: Any

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg

    # --- data
    def prepare(self, out: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        """Load and encode the data; train the tokenizer into `out`, or load it from
        `tokenizer_dir` (default `out`)."""
        raise NotImplementedError

    @property
    def tokenizer(self) -> SubwordTokenizer:
        return self.data.tokenizer

    def train_lengths(self) -> tuple[list[int], list[int]]:
        """(source, target) lengths of the training examples, for the batch sampler."""
        raise NotImplementedError

    def valid_lengths(self) -> tuple[list[int], list[int]]:
        raise NotImplementedError

    def has_validation(self) -> bool:
        return bool(self.valid_lengths()[1])

    def epoch_examples(self, sampler: TokenBatchSampler) -> Any:
        """The training examples of the sampler's epoch (what `collate` takes)."""
        return self.data.train

    def valid_examples(self) -> Any:
        return self.data.valid

    def collate(self, examples: Any, indices: list[int], key: Sequence[int]) -> Any:
        """The batch of examples[indices]; `key` (ints) seeds any randomness in it."""
        raise NotImplementedError

    def loss_inputs(self, batch: Any) -> tuple[Tensor, ...]:
        return batch.inputs, batch.targets

    def count(self, batch: Any) -> int:
        return batch.n_targets

    # --- model
    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def loss_module(self, model: Any) -> nn.Module:
        raise NotImplementedError

    def data_fingerprints(self) -> dict[str, str]:
        """A fingerprint of each part of the encoded data, by the recipe key that names it
        (train_src, valid_text, ...): a resumed run compares them with its checkpoint's."""
        raise NotImplementedError

    @property
    def classes(self) -> int:
        """How many values each prediction chooses among (tokens or labels): an untrained model's
        loss per prediction is about ln(classes)."""
        return self.tokenizer.src_vocab_size

    def extra_metrics(
        self, model: nn.Module, batches: list[list[int]], device: torch.device
    ) -> dict[str, float]:
        """Validation metrics beyond the loss (the loss is the trainer's)."""
        return {}

    def metadata(self) -> dict[str, Any]:
        """Keys for the model directory's config.json."""
        return {"task": self.cfg.task}


def fingerprint(*parts: Sequence[Sequence[int]]) -> str:
    """A short sha256 of lists of id sequences (their lengths and ids): what identifies data."""
    h = hashlib.sha256()
    for sequences in parts:
        lengths = np.array([len(x) for x in sequences], dtype=np.int64)
        flat = [i for x in sequences for i in x]
        h.update(lengths.tobytes())
        h.update(np.array(flat, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


class TranslationTask(Task):
    """The encoder-decoder of the paper on parallel text (qkv.train.prepare)."""

    noun = "training pairs"
    metrics = ("valid_loss", "valid_ppl", "valid_bleu")
    data: EncodedData

    def prepare(self, out: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        self.data = prepare_data(self.cfg, out, train_tokenizer, tokenizer_dir)

    def train_lengths(self) -> tuple[list[int], list[int]]:
        return [len(s) for s in self.data.train_src], [len(t) for t in self.data.train_tgt]

    def valid_lengths(self) -> tuple[list[int], list[int]]:
        return [len(s) for s in self.data.valid_src], [len(t) for t in self.data.valid_tgt]

    def has_validation(self) -> bool:
        return self.data.valid is not None and bool(self.data.valid_src)

    def data_fingerprints(self) -> dict[str, str]:
        d = self.data
        return {
            "train_src": fingerprint(d.train_src),
            "train_tgt": fingerprint(d.train_tgt),
            "valid_src": fingerprint(d.valid_src),
            "valid_tgt": fingerprint(d.valid_tgt),
        }

    def epoch_examples(self, sampler: TokenBatchSampler) -> tuple[list[list[int]], ...]:
        """The training pairs' ids for the sampler's epoch: fixed, or re-segmented per epoch
        (subword_dropout) from a seed of (seed, epoch), so that a resumed epoch gets the same
        draw."""
        cfg = self.cfg
        if cfg.subword_dropout == 0.0:
            return self.data.train_src, self.data.train_tgt
        seed = int(np.random.SeedSequence([cfg.seed, sampler.epoch]).generate_state(1)[0])
        src, tgt = sample_segmentation(self.data, cfg.subword_dropout, seed, cfg.max_len)
        sampler.set_lengths([len(s) for s in src], [len(t) for t in tgt])
        return src, tgt

    def valid_examples(self) -> tuple[list[list[int]], ...]:
        return self.data.valid_src, self.data.valid_tgt

    def collate(self, examples: Any, indices: list[int], key: Sequence[int]) -> Batch:
        src, tgt = examples
        tok = self.tokenizer
        pairs = [(src[i], tgt[i]) for i in indices]
        return collate(pairs, tok.pad_id, tok.bos_id, tok.eos_id, indices)

    def loss_inputs(self, batch: Batch) -> tuple[Tensor, ...]:
        return batch.src, batch.tgt[:, :-1], batch.tgt[:, 1:]

    def count(self, batch: Batch) -> int:
        return batch.n_tgt_tokens

    def build_model(self) -> Transformer | RNNSearch:
        tok = self.tokenizer
        config = self.cfg.model_config(tok.src_vocab_size, tok.tgt_vocab_size)
        return RNNSearch(config) if config.arch == "rnn" else Transformer(config)

    def loss_module(self, model: Any) -> nn.Module:
        return TranslationLoss(model, self.cfg.label_smoothing, self.cfg.loss_chunk_tokens)

    @property
    def classes(self) -> int:
        return self.tokenizer.tgt_vocab_size

    def extra_metrics(
        self, model: nn.Module, batches: list[list[int]], device: torch.device
    ) -> dict[str, float]:
        if self.cfg.valid_bleu and self.data.valid is not None:
            return {"valid_bleu": self._valid_bleu(model, batches, device)}
        return {}

    def _valid_bleu(self, model: Any, batches: list[list[int]], device: torch.device) -> float:
        """sacreBLEU of the greedy translations of the first valid_max_sentences (default: all)
        validation sentences, decoded in the validation batches."""
        d = self.data
        tok = d.tokenizer
        assert d.valid is not None
        k = self.cfg.valid_max_sentences or len(d.valid)
        outputs: dict[int, list[int]] = {}
        for indices in batches:
            rows = [i for i in indices if i < k]
            if not rows:
                continue
            src = pad_sequences([[*d.valid_src[i], tok.eos_id] for i in rows], tok.pad_id)
            max_len = torch.tensor([len(d.valid_src[i]) + DEFAULT_MAX_LEN_B for i in rows])
            hyps = greedy(model, src.to(device), max_len.to(device))
            outputs.update((i, h.tokens) for i, h in zip(rows, hyps, strict=True))
        texts = tok.decode_tgt([outputs[i] for i in range(k)])
        metric = BLEU(trg_lang=self.cfg.tgt_lang or "")
        return metric.corpus_score(texts, [d.valid.tgt[:k]]).score

    def metadata(self) -> dict[str, Any]:
        return {}  # config.json of a translation model: the architecture says it all


# --- monolingual text: lm and mlm ----------------------------------------------------------------
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
        lowercase=cfg.lowercase,
    )


def _tokenizer(
    cfg: TrainConfig, texts: list[str], out: Path, train: bool, directory: Path | None
) -> SubwordTokenizer:
    if train:
        return train_text_tokenizer(texts, cfg, out)
    return SubwordTokenizer.load(directory or out)


class _TextTask(Task):
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
        tok = _tokenizer(cfg, train_texts, out, train_tokenizer, directory)
        ids = tok.encode_src(train_texts)
        train = [x for x in ids if len(x) <= cfg.max_len]
        if len(train) < len(ids):
            log.info("dropped %d texts longer than %d subwords", len(ids) - len(train), cfg.max_len)
        if not train:
            raise ValueError(f"no training text of at most max_len={cfg.max_len} subwords")
        valid = [x[: cfg.max_len] for x in tok.encode_src(valid_texts)]
        log.info("%d training texts, %d validation texts", len(train), len(valid))
        self.data = TextData(tok, train, valid)


class LanguageModelTask(_TextTask):
    """A decoder-only causal language model: predict every next token of [bos] + text + [eos]."""

    noun = "training texts"

    def prepare(self, out: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        self._encode_texts(out, train_tokenizer, tokenizer_dir)

    def collate(self, examples: Any, indices: list[int], key: Sequence[int]) -> TextBatch:
        seq = self.sequences(examples, indices)  # (B, T + 2)
        targets = seq[:, 1:]
        n = int((targets != self.tokenizer.pad_id).sum())
        return TextBatch(seq[:, :-1], targets, n)

    def build_model(self) -> DecoderOnly:
        v = self.tokenizer.src_vocab_size
        return DecoderOnly(self.cfg.model_config(v, v))

    def loss_module(self, model: Any) -> nn.Module:
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


def key_generator(seed: int, key: Sequence[int]) -> torch.Generator:
    """A torch generator seeded from the recipe's seed and a batch's key (non-negative ints)."""
    state = np.random.SeedSequence([seed, *key]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


class MaskedLMTask(_TextTask):
    """Encoder-only masked-token pretraining (BERT's masked LM) of [bos] + text + [eos]."""

    noun = "training texts"
    unused_parameters = True  # the classification head

    @property
    def mask_id(self) -> int:
        return self.tokenizer.src_vocab_size  # one past the tokenizer's ids

    def prepare(self, out: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        self._encode_texts(out, train_tokenizer, tokenizer_dir)

    def collate(self, examples: Any, indices: list[int], key: Sequence[int]) -> TextBatch:
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

    def loss_module(self, model: Any) -> nn.Module:
        return MaskedLMLoss(model, self.cfg.label_smoothing)

    def metadata(self) -> dict[str, Any]:
        return {"task": "mlm", "mask_id": self.mask_id}


# --- classification ------------------------------------------------------------------------------
def accuracy_and_macro_f1(predicted: list[int], expected: list[int]) -> tuple[float, float]:
    """Accuracy, and the mean over classes (those in `expected` or `predicted`) of each class's
    F1 = 2 TP / (2 TP + FP + FN)."""
    if not expected:
        return math.nan, math.nan
    accuracy = sum(p == e for p, e in zip(predicted, expected, strict=True)) / len(expected)
    f1 = []
    for c in sorted(set(expected) | set(predicted)):
        tp = sum(p == c and e == c for p, e in zip(predicted, expected, strict=True))
        fp = sum(p == c and e != c for p, e in zip(predicted, expected, strict=True))
        fn = sum(p != c and e == c for p, e in zip(predicted, expected, strict=True))
        f1.append(2 * tp / (2 * tp + fp + fn))
    return accuracy, sum(f1) / len(f1)


class ClassificationTask(_TextTask):
    """An encoder-only classifier of text<TAB>label lines, from scratch or from an mlm model
    directory (`init_from`: its tokenizer, shape and weights; the head starts afresh)."""

    metrics = ("valid_loss", "valid_accuracy", "valid_macro_f1")
    unused_parameters = True  # the masked-LM output layer

    def prepare(self, out: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        cfg = self.cfg
        assert cfg.train_tsv is not None
        train = load_labeled(cfg.train_tsv)
        if not train.texts:
            raise DataError(f"no examples in {cfg.train_tsv}: the file is empty or blank")
        labels = sorted(set(train.labels))
        if len(labels) < 2:
            only = f"one label ({labels[0]!r})"
            raise DataError(f"{cfg.train_tsv} has {only}; a classifier needs two or more")
        valid = load_labeled(cfg.valid_tsv) if cfg.valid_tsv else None
        if valid is not None:
            unknown = sorted(set(valid.labels) - set(labels))
            if unknown:
                raise DataError(
                    f"{cfg.valid_tsv} has labels that {cfg.train_tsv} lacks: {unknown[:5]}"
                )
        if train_tokenizer and cfg.init_from is not None:
            tok = SubwordTokenizer.load(cfg.init_from)
            tok.save(out)
        else:
            tok = _tokenizer(cfg, train.texts, out, train_tokenizer, tokenizer_dir)
        index = {label: i for i, label in enumerate(labels)}
        self.data = TextData(
            tok,
            [x[: cfg.max_len] for x in tok.encode_src(train.texts)],
            [] if valid is None else [x[: cfg.max_len] for x in tok.encode_src(valid.texts)],
            [index[label] for label in train.labels],
            [] if valid is None else [index[label] for label in valid.labels],
            labels,
        )
        log.info("%d training examples, %d classes: %s", len(train), len(labels), labels[:10])

    def epoch_examples(self, sampler: TokenBatchSampler) -> Any:
        return self.data.train, self.data.train_labels

    def valid_examples(self) -> Any:
        return self.data.valid, self.data.valid_labels

    def collate(self, examples: Any, indices: list[int], key: Sequence[int]) -> TextBatch:
        texts, labels = examples
        targets = torch.tensor([labels[i] for i in indices], dtype=torch.long)
        return TextBatch(self.sequences(texts, indices), targets, len(indices))

    def build_model(self) -> EncoderOnly:
        cfg = self.cfg
        n_classes = len(self.data.labels)
        if cfg.init_from is None:
            v = self.tokenizer.src_vocab_size + 1  # and the mask id
            return EncoderOnly(cfg.model_config(v, v).replace(n_classes=n_classes))
        arch, pretrained_config, _ = load_config(cfg.init_from)
        if arch != "encoder_only":
            raise ValueError(
                f"init_from {cfg.init_from} holds a {arch} model; a classifier starts from an "
                "encoder-only model (qkv train --task mlm)"
            )
        pretrained = EncoderOnly(pretrained_config)
        load_weights(Path(cfg.init_from) / WEIGHTS_FILE, pretrained)
        config = pretrained_config.replace(**{**cfg.model, "n_classes": n_classes})
        model = EncoderOnly(config)
        body = {k: v for k, v in pretrained.state_dict().items() if not k.startswith("head.")}
        try:
            missing, unexpected = model.load_state_dict(body, strict=False)
        except RuntimeError as e:  # a shape changed by a model key of the recipe
            first = str(e).splitlines()[-1].strip()
            raise CheckpointError(f"init_from {cfg.init_from} does not fit: {first}") from None
        if unexpected or any(not k.startswith("head.") for k in missing):
            raise CheckpointError(f"init_from {cfg.init_from} does not fit the classifier")
        return model

    def loss_module(self, model: Any) -> nn.Module:
        return ClassificationLoss(model, self.cfg.label_smoothing)

    @property
    def classes(self) -> int:
        return len(self.data.labels)

    @torch.no_grad()
    def extra_metrics(
        self, model: nn.Module, batches: list[list[int]], device: torch.device
    ) -> dict[str, float]:
        predicted: dict[int, int] = {}
        for indices in batches:
            ids = self.sequences(self.data.valid, indices).to(device)
            classes = model.classify(ids).argmax(-1).tolist()  # type: ignore[operator]
            predicted.update(zip(indices, classes, strict=True))
        expected = self.data.valid_labels
        accuracy, f1 = accuracy_and_macro_f1([predicted[i] for i in range(len(expected))], expected)
        return {"valid_accuracy": accuracy, "valid_macro_f1": f1}

    def metadata(self) -> dict[str, Any]:
        return {"task": "classify", "labels": self.data.labels}


TASKS: dict[str, type[Task]] = {
    "translate": TranslationTask,
    "lm": LanguageModelTask,
    "mlm": MaskedLMTask,
    "classify": ClassificationTask,
}


def make_task(cfg: TrainConfig) -> Task:
    """The task the recipe names (cfg.task)."""
    return TASKS[cfg.task](cfg)
