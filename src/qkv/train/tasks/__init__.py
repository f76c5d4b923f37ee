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
