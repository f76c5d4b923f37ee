"""What the one training loop trains: a task knows its data, its model, its batches, its loss and
its validation metrics; the loop, checkpoints, exact resume, DDP and the time budget are the
trainer's (`qkv.train.trainer`).

    task = make_task(cfg)                            # translate, lm, mlm or classify (TASKS)
    task.prepare(out, train_tokenizer=True)          # data and tokenizer (trained into out)
    model = task.build_model()

Randomness in a batch comes from a generator seeded by the recipe's seed and the batch's `key`, so
a resumed run draws the same batches.

Details: docs/architecture.md, "Training tasks" (each task's model, batch and loss; the calls).
"""

from __future__ import annotations

from ..recipe import TrainConfig
from .base import Task, TextBatch, TextData, fingerprint, key_generator
from .classification_task import ClassificationTask, accuracy_and_macro_f1
from .text_tasks import (
    LanguageModelTask,
    MaskedLMTask,
    load_texts,
    mask_tokens,
    train_text_tokenizer,
)
from .translation_task import TranslationTask

TASKS: dict[str, type[Task]] = {
    "translate": TranslationTask,
    "lm": LanguageModelTask,
    "mlm": MaskedLMTask,
    "classify": ClassificationTask,
}


def make_task(cfg: TrainConfig) -> Task:
    """The task the recipe names (cfg.task)."""
    return TASKS[cfg.task](cfg)


__all__ = [
    "TASKS",
    "ClassificationTask",
    "LanguageModelTask",
    "MaskedLMTask",
    "Task",
    "TextBatch",
    "TextData",
    "TranslationTask",
    "accuracy_and_macro_f1",
    "fingerprint",
    "key_generator",
    "load_texts",
    "make_task",
    "mask_tokens",
    "train_text_tokenizer",
]
