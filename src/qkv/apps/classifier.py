"""Text classification with an encoder-only classifier (`qkv train --task classify`): texts in, one
label each out.

    classifier = Classifier.load("runs/langid")
    classifier.classify(["Ein Hund rennt.", "A dog runs."])      # ["de", "en"]

A text is read as the classifier was trained on it: [bos] + subword ids + [eos], cut to the
positions a learned positional table has; its label is the class of the highest logit.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..data.batching import pad_sequences
from ..data.tokenizer import SubwordTokenizer
from ..model import EncoderOnly
from ..modeldir import load_config, load_model_dir


class Classifier:
    """An encoder-only model with its tokenizer and class names."""

    def __init__(self, model: EncoderOnly, tokenizer: SubwordTokenizer, labels: list[str]) -> None:
        if len(labels) != model.config.n_classes:
            raise ValueError(f"{len(labels)} labels for a head of {model.config.n_classes} classes")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.labels = labels

    @classmethod
    def load(cls, directory: str | Path, device: str = "cpu") -> Classifier:
        arch, _, meta = load_config(directory)
        labels = meta.get("labels")
        if arch != "encoder_only" or not isinstance(labels, list):
            raise ValueError(
                f"{directory} holds no classifier (a {arch} model without labels); train one with "
                "qkv train --task classify"
            )
        model = load_model_dir(directory, device)
        names = [str(x) for x in labels]
        return cls(model, SubwordTokenizer.load(directory), names)  # type: ignore[arg-type]

    @torch.inference_mode()
    def classify(self, texts: list[str], batch_size: int = 64) -> list[str]:
        """The label of each text, in order (texts are batched by length)."""
        tok = self.tokenizer
        limit = self.model.encoder.max_positions()
        ids = [
            [tok.bos_id, *x[: None if limit is None else limit - 2], tok.eos_id]
            for x in tok.encode_src(texts)
        ]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        device = next(self.model.parameters()).device
        out = [""] * len(texts)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = pad_sequences([ids[i] for i in rows], tok.pad_id).to(device)
            classes = self.model.classify(batch).argmax(-1).tolist()
            for i, c in zip(rows, classes, strict=True):
                out[i] = self.labels[c]
        return out
