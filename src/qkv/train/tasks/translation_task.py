"""The encoder-decoder of the paper on parallel text."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sacrebleu.metrics import BLEU
from torch import Tensor, nn

from ...data.batching import Batch, TokenBatchSampler, collate, pad_sequences
from ...decode.options import DecodeOptions
from ...decode.search import run
from ...model import Transformer
from ...model.rnn import RNNSearch
from ..coverage import check_coverage
from ..freeze import freeze
from ..init import InitModel, load_init
from ..loss import TranslationLoss
from ..mix import GeneralPairs, Joined, load_general
from ..prepared_data import (
    EncodedData,
    prepare_data,
    sample_segmentation,
)
from ..recipe import TrainConfig
from .base import Task, fingerprint

log = logging.getLogger("qkv.train")


Pairs = tuple[Sequence[list[int]], Sequence[list[int]]]  # source ids, target ids
COVERAGE_PAIRS = 20_000  # the training pairs the coverage of an init model's tokenizer is read on
# validation BLEU decodes as `qkv translate --beam 1` does: the same search, the same length caps
VALID_DECODING = DecodeOptions(beam=1)


class TranslationTask(Task[Pairs, Batch]):
    """The encoder-decoder of the paper on parallel text (qkv.train.prepared_data)."""

    noun = "training pairs"
    metrics = ("valid_loss", "valid_ppl", "valid_bleu")
    data: EncodedData

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__(cfg)
        # the model to start from, read (and checked) before the run creates OUT
        self.init: InitModel | None = None
        self.general: GeneralPairs | None = None  # general pairs to mix in (qkv.train.mix)
        if cfg.init_from is not None:
            self.init = load_init(cfg.init_from, cfg.model)
            self.init.check_case(cfg.lowercase)

    def prepare(self, out: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        if self.init is not None and train_tokenizer:  # the model's tokenizer, not a new one
            self.init.write_tokenizer(out)
            train_tokenizer = False
        self.data = prepare_data(self.cfg, out, train_tokenizer, tokenizer_dir)
        self.out = out
        self._sampled: tempfile.TemporaryDirectory | None = None  # this epoch's segmentation
        if self.init is not None:  # the data is new to the model's tokenizer: can it encode it?
            self._check_coverage()
        if self.cfg.mix_src is not None:
            self.general = load_general(self.cfg, self.data.tokenizer, len(self.data.train_src))

    def _check_coverage(self) -> None:
        """The coverage line of the init model's tokenizer on the first COVERAGE_PAIRS pairs."""
        assert self.init is not None
        d, k = self.data, min(COVERAGE_PAIRS, len(self.data.train_src))
        texts = tuple(next(lines.chunks(k, d.rows[:k])) for lines in (d.text_src, d.text_tgt))
        ids = d.train_src[:k], d.train_tgt[:k]
        log.info(check_coverage(d.tokenizer, texts, ids, self.cfg.max_unk_rate, self.init.name))

    def starts_trained(self) -> bool:
        return self.init is not None

    def train_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        src, tgt = self._with_general(self.data.train_src, self.data.train_tgt, 0)
        return src.lengths, tgt.lengths

    def _with_general(self, src: Any, tgt: Any, epoch: int) -> tuple[Any, Any]:
        """The pairs of an epoch: the run's, then the general ones mixed in (mix_src, mix_tgt)."""
        if self.general is None:
            return src, tgt
        general_src, general_tgt = self.general.sample(self.cfg.seed, epoch)
        return Joined(src, general_src), Joined(tgt, general_tgt)

    def valid_lengths(self) -> tuple[list[int], list[int]]:
        return [len(s) for s in self.data.valid_src], [len(t) for t in self.data.valid_tgt]

    def has_validation(self) -> bool:
        return self.data.valid is not None and bool(self.data.valid_src)

    def data_fingerprints(self) -> dict[str, str]:
        d = self.data
        return {
            **d.fingerprints,
            "valid_src": fingerprint(d.valid_src),
            "valid_tgt": fingerprint(d.valid_tgt),
            **(
                {}
                if self.general is None
                else {
                    "mix_src": fingerprint(self.general.src),
                    "mix_tgt": fingerprint(self.general.tgt),
                }
            ),
        }

    def epoch_examples(self, sampler: TokenBatchSampler) -> Pairs:
        """The training pairs' ids for the sampler's epoch: fixed, or re-segmented per epoch
        (subword_dropout) from a seed of (seed, epoch), so that a resumed epoch gets the same
        draw. A sampled segmentation is written to a temporary folder in the run directory,
        removed when the next epoch's replaces it."""
        cfg = self.cfg
        if cfg.subword_dropout == 0.0 and self.general is None:
            return self.data.train_src, self.data.train_tgt
        src, tgt = self.data.train_src, self.data.train_tgt
        if cfg.subword_dropout > 0.0:
            src, tgt = self._sample_segmentation(sampler.epoch)
        src, tgt = self._with_general(src, tgt, sampler.epoch)
        sampler.set_lengths(src.lengths, tgt.lengths)
        return src, tgt

    def _sample_segmentation(self, epoch: int) -> tuple[Any, Any]:
        cfg = self.cfg
        seed = int(np.random.SeedSequence([cfg.seed, epoch]).generate_state(1)[0])
        previous = self._sampled
        self._sampled = tempfile.TemporaryDirectory(prefix=".segmentation-", dir=self.out)
        if previous is not None:
            previous.cleanup()
        directory = Path(self._sampled.name)
        return sample_segmentation(self.data, cfg.subword_dropout, seed, cfg.max_len, directory)

    def valid_examples(self) -> Pairs:
        return self.data.valid_src, self.data.valid_tgt

    def collate(
        self,
        examples: Pairs,
        indices: list[int],
        key: Sequence[int],
    ) -> Batch:
        src, tgt = examples
        tok = self.tokenizer
        pairs = [(src[i], tgt[i]) for i in indices]
        return collate(pairs, tok.pad_id, tok.bos_id, tok.eos_id, indices)

    def loss_inputs(self, batch: Batch) -> tuple[Tensor, ...]:
        return batch.src, batch.tgt[:, :-1], batch.tgt[:, 1:]

    def count(self, batch: Batch) -> int:
        return batch.n_tgt_tokens

    def build_model(self) -> nn.Module:
        """The model from the trained one (init_from), or a new one; its `freeze` parts frozen."""
        if self.init is not None:
            model = self.init.build()
        else:
            tok = self.tokenizer
            config = self.cfg.model_config(tok.src_vocab_size, tok.tgt_vocab_size)
            model = RNNSearch(config) if config.arch == "rnn" else Transformer(config)
        if self.cfg.freeze:
            frozen = freeze(model, self.cfg.freeze)
            log.info("frozen: %s (%s parameters)", ", ".join(self.cfg.freeze), f"{frozen:,}")
        return model

    def loss_module(self, model: nn.Module) -> nn.Module:
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

    def _valid_bleu(
        self, model: nn.Module, batches: list[list[int]], device: torch.device
    ) -> float:
        """sacreBLEU of the greedy translations (`VALID_DECODING`, through `decode.search.run`) of
        the first valid_max_sentences (default: all) validation sentences, in the validation
        batches."""
        d = self.data
        tok = d.tokenizer
        assert d.valid is not None
        k = min(self.cfg.valid_max_sentences or len(d.valid), len(d.valid))
        outputs: dict[int, list[int]] = {}
        for indices in batches:
            rows = [i for i in indices if i < k]
            if not rows:
                continue
            src = pad_sequences([[*d.valid_src[i], tok.eos_id] for i in rows], tok.pad_id)
            lengths = [VALID_DECODING.max_output_length(len(d.valid_src[i])) for i in rows]
            hyps = run(model, src.to(device), VALID_DECODING, torch.tensor(lengths, device=device))
            outputs.update((i, h[0].tokens) for i, h in zip(rows, hyps, strict=True))
        texts = tok.decode_tgt([outputs[i] for i in range(k)])
        metric = BLEU(trg_lang=self.cfg.tgt_lang or "")
        return metric.corpus_score(texts, [d.valid.tgt[:k]]).score

    def metadata(self) -> dict[str, Any]:
        """config.json of a translation model: the architecture says it all; a run from a trained
        model adds where it started, and that model's languages unless the recipe gives them."""
        if self.init is None:
            return {}
        languages = {} if self.cfg.languages() else self.init.languages
        return {"init_from": self.init.origin, **languages}


# --- monolingual text: lm and mlm ----------------------------------------------------------------
