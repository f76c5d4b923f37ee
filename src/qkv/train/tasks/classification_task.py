"""Text classification: an encoder-only model and a label per text."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...data.batching import TokenBatchSampler
from ...data.corpus import DataError
from ...data.text import load_labeled
from ...data.tokenizer import SubwordTokenizer
from ...model import EncoderOnly
from ...modeldir import WEIGHTS_FILE, CheckpointError, load_config, load_weights
from ..loss import ClassificationLoss
from .base import TextBatch, TextData
from .text_tasks import TextTask, text_tokenizer

log = logging.getLogger("qkv.train")


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


class ClassificationTask(TextTask[tuple[list[list[int]], list[int]]]):
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
            tok = text_tokenizer(cfg, train.texts, out, train_tokenizer, tokenizer_dir)
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

    def epoch_examples(self, sampler: TokenBatchSampler) -> tuple[list[list[int]], list[int]]:
        return self.data.train, self.data.train_labels

    def valid_examples(self) -> tuple[list[list[int]], list[int]]:
        return self.data.valid, self.data.valid_labels

    def collate(
        self, examples: tuple[list[list[int]], list[int]], indices: list[int], key: Sequence[int]
    ) -> TextBatch:
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

    def loss_module(self, model: nn.Module) -> nn.Module:
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
