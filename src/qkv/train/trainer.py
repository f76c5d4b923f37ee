"""The training loop: the paper's recipe (Adam, warm-up schedule, label smoothing, dropout) around a model,
with validation, best-checkpoint selection, early stopping, exact resume, logs, and DDP.

    trainer = Trainer(load_train_config("configs/multi30k-small.yaml"), "runs/m30k")
    result = trainer.train()        # OUT is a model directory that `Translator.load` / `qkv translate` read
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from ..data.batching import Batch, TokenBatchSampler, collate
from ..model import Transformer
from ..modeldir import save_model_dir
from ..runtime.process import keep_freed_memory
from .checkpoints import list_checkpoints, load_checkpoint, prune_checkpoints, save_checkpoint
from .distributed import all_reduce_sum, barrier, cleanup, gather_rng_states, init_distributed
from .loss import label_smoothed_loss, label_smoothed_loss_from_hidden
from .prepare import EncodedData, prepare_data, sample_segmentation
from .recipe import TrainConfig
from .schedule import lr_multiplier, paper_peak_lr

log = logging.getLogger("qkv.train")
LOG_FIELDS = ["step", "epoch", "lr", "train_loss", "train_ppl", "tokens_per_s", "valid_loss", "valid_ppl",
              "valid_bleu", "elapsed_s"]


@dataclass
class TrainResult:
    out_dir: Path
    step: int
    best_step: int | None
    best_metric: float | None
    stopped_early: bool
    history: list[dict[str, Any]] = field(default_factory=list)


class Trainer:
    """Trains `Transformer(cfg.model_config(...))` on the configured data, writing OUT as a model directory.

    OUT/config.json, model.safetensors, tokenizer   the best model so far (by cfg.valid_metric)
    OUT/train_config.yaml                           the resolved recipe
    OUT/checkpoints/step_N/                         resumable training checkpoints (the last K)
    OUT/log.csv, OUT/tensorboard/                   learning curves
    """

    def __init__(self, cfg: TrainConfig, out_dir: str | Path, resume: bool = False) -> None:
        self.cfg, self.out = cfg, Path(out_dir)
        self.env, self.device = init_distributed(cfg.device)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if self.device.type == "cpu":
            keep_freed_memory()
        resume_from = list_checkpoints(self.out)[-1] if resume and list_checkpoints(self.out) else None
        if resume and resume_from is None:
            log.warning("--resume: no checkpoint in %s, starting from scratch", self.out)
        if not resume and list_checkpoints(self.out):
            raise ValueError(f"{self.out} already holds a training run; pass --resume to continue it "
                             "or choose another output directory")
        torch.manual_seed(cfg.seed)
        if self.env.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
        fresh_tokenizer = resume_from is None and self.env.is_main
        self.data: EncodedData = prepare_data(cfg, self.out, train_tokenizer=fresh_tokenizer) if \
            self.env.is_main else None  # type: ignore[assignment]
        barrier(self.env)
        if not self.env.is_main:  # other ranks read the tokenizer rank 0 trained
            self.data = prepare_data(cfg, self.out, train_tokenizer=False)
        tok = self.data.tokenizer
        self.model_cfg = cfg.model_config(tok.src_vocab_size, tok.tgt_vocab_size)
        torch.manual_seed(cfg.seed)
        self.model = Transformer(self.model_cfg).to(self.device)
        self.ddp = DistributedDataParallel(self.model) if self.env.enabled else None
        peak = cfg.lr if cfg.lr is not None else paper_peak_lr(self.model_cfg.d_model, cfg.warmup)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=peak, betas=cfg.adam_betas, eps=cfg.adam_eps,
                                          weight_decay=cfg.weight_decay)
        factor = lr_multiplier(cfg.schedule, cfg.warmup, cfg.max_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)
        self.sampler = TokenBatchSampler([len(s) for s in self.data.train_src], [len(t) for t in self.data.train_tgt],
                                         cfg.max_tokens, shuffle=True, seed=cfg.seed, rank=self.env.rank,
                                         world_size=self.env.world_size)
        # validation batches are the same every time: length-sorted, cut once (room for a max_len pair)
        self.valid_batches = TokenBatchSampler(
            [len(s) for s in self.data.valid_src], [len(t) for t in self.data.valid_tgt],
            max(cfg.max_tokens, 2 * cfg.max_len + 4), shuffle=False).rank_batches(0)
        self.step, self.best_metric, self.best_step, self.bad_validations = 0, None, None, 0
        self.elapsed_s = 0.0  # training time so far, across resumes
        self._last_checkpoint_s = 0.0  # elapsed_s at the previous checkpoint (for max_hours)
        self.history: list[dict[str, Any]] = []
        if resume_from is not None:
            self._restore(resume_from)  # model, optimizer, RNG, data position, schedule
        else:
            torch.manual_seed(cfg.seed + self.env.rank)  # each rank its own dropout stream
        bf16 = cfg.amp if self.device.type == "cuda" else cfg.cpu_bf16 and self.device.type == "cpu"
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    # --- checkpoints ---------------------------------------------------------------------------
    def _trainer_state(self) -> dict[str, Any]:
        return {"step": self.step, "sampler": self.sampler.state_dict(), "scheduler": self.scheduler.state_dict(),
                "best_metric": self.best_metric, "best_step": self.best_step,
                "bad_validations": self.bad_validations, "history": self.history, "elapsed_s": self.elapsed_s}

    def _restore(self, path: Path) -> None:
        state = load_checkpoint(path, self.model, self.optimizer, self.env.rank, self.device)
        self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["sampler"])
        self.step, self.best_metric, self.best_step = state["step"], state["best_metric"], state["best_step"]
        self.bad_validations, self.history = state["bad_validations"], state["history"]
        self.elapsed_s = state.get("elapsed_s", 0.0)  # checkpoints from before the field: the clock restarts
        log.info("resumed from %s (step %d)", path, self.step)

    def _check_in_sync(self) -> None:
        """All DDP replicas must hold the same weights; compare a fingerprint of them across ranks."""
        fingerprint = sum(float(p.detach().double().sum()) for p in self.model.parameters())
        total = all_reduce_sum(fingerprint, self.env, self.device)
        if abs(total - self.env.world_size * fingerprint) > 1e-6 * max(1.0, abs(total)):
            raise RuntimeError(f"rank {self.env.rank}: model replicas diverged at step {self.step}")

    def _save(self) -> None:
        self._check_in_sync()
        rng = gather_rng_states(self.env)
        if self.env.is_main:
            save_checkpoint(self.out, self.step, self.model, self.optimizer, self._trainer_state(), rng)
            prune_checkpoints(self.out, self.cfg.keep_checkpoints)
        barrier(self.env)

    def _write_model_dir(self) -> None:
        """OUT as a model directory holding the current weights (called for each new best)."""
        save_model_dir(self.out, self.model, self.data.tokenizer, train_step=self.step,
                       valid_metric=self.cfg.valid_metric, best_metric=self.best_metric)

    # --- one update ----------------------------------------------------------------------------
    def _epoch_ids(self) -> tuple[list[list[int]], list[list[int]]]:
        """The training pairs' ids for the sampler's epoch: fixed, or re-segmented per epoch (subword_dropout),
        from a seed of (seed, epoch) so that a resumed epoch gets the same draw."""
        d, cfg = self.data, self.cfg
        if cfg.subword_dropout == 0.0:
            return d.train_src, d.train_tgt
        seed = int(np.random.SeedSequence([cfg.seed, self.sampler.epoch]).generate_state(1)[0])
        src, tgt = sample_segmentation(d, cfg.subword_dropout, seed, cfg.max_len)
        self.sampler.set_lengths([len(s) for s in src], [len(t) for t in tgt])
        return src, tgt

    def _batches(self):
        tok = self.data.tokenizer
        while self.cfg.max_epochs is None or self.sampler.epoch < self.cfg.max_epochs:
            src, tgt = self._epoch_ids()
            for indices in self.sampler:
                pairs = [(src[i], tgt[i]) for i in indices]
                yield collate(pairs, tok.pad_id, tok.bos_id, tok.eos_id, indices).to(self.device)

    def train_step(self, batches: list[Batch]) -> tuple[float, float, int]:
        """One optimizer update over accumulated batches. Returns (loss sum, nll sum, target tokens) on this rank."""
        sums = self.accumulate_gradients(batches)
        if self.cfg.clip_norm > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return sums

    def accumulate_gradients(self, batches: list[Batch]) -> tuple[float, float, int]:
        """Backward over the batches; the loss is divided once by the total number of target tokens across
        batches and devices, so the gradient is that of the mean token loss of the whole group."""
        self.model.train()
        n_tokens = sum(b.n_tgt_tokens for b in batches)
        global_tokens = all_reduce_sum(n_tokens, self.env, self.device)
        runner = self.ddp or self.model
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(batches):
            sync = self.ddp is None or i == len(batches) - 1
            with (contextlib.nullcontext() if sync else self.ddp.no_sync()), self.autocast:  # type: ignore[union-attr]
                hidden = runner(batch.src, batch.tgt[:, :-1], project=False)  # (B, T, D)
                loss, nll = label_smoothed_loss_from_hidden(hidden, self.model.output_projection, batch.tgt[:, 1:],
                                                            self.model_cfg.pad_id, self.cfg.label_smoothing,
                                                            self.cfg.loss_chunk_tokens)
            # DDP averages gradients over ranks, so scale by world size to get sum / global tokens
            (loss * (self.env.world_size / global_tokens)).backward()
            loss_sum, nll_sum = loss_sum + loss.item(), nll_sum + nll.item()
        return loss_sum, nll_sum, n_tokens

    # --- validation ----------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Loss, perplexity and (if configured) greedy-decoding sacreBLEU on the validation set."""
        self.model.eval()
        d, tok = self.data, self.data.tokenizer
        loss_sum = nll_sum = n = 0.0
        for indices in self.valid_batches:
            batch = collate([(d.valid_src[i], d.valid_tgt[i]) for i in indices], tok.pad_id, tok.bos_id,
                            tok.eos_id, indices).to(self.device)
            with self.autocast:
                logits = self.model(batch.src, batch.tgt[:, :-1])
                loss, nll = label_smoothed_loss(logits, batch.tgt[:, 1:], tok.pad_id, self.cfg.label_smoothing)
            loss_sum, nll_sum, n = loss_sum + loss.item(), nll_sum + nll.item(), n + batch.n_tgt_tokens
        out = {"valid_loss": loss_sum / n, "valid_ppl": math.exp(min(nll_sum / n, 50.0))}
        if self.cfg.valid_bleu and d.valid is not None:
            from ..apps.translator import Translator
            from ..evaluate import bleu

            k = self.cfg.valid_max_sentences or len(d.valid)
            hyps = Translator(self.model, tok).translate(d.valid.src[:k], beam=1)
            out["valid_bleu"] = bleu(hyps, d.valid.tgt[:k], lang=self.cfg.tgt_lang)[0].score
        return out

    def _improved(self, metrics: dict[str, float]) -> bool:
        value = metrics["valid_bleu"] if self.cfg.valid_metric == "bleu" else -metrics["valid_loss"]
        if self.best_metric is None or value > self.best_metric:
            self.best_metric, self.best_step = value, self.step
            return True
        return False

    # --- the loop ------------------------------------------------------------------------------
    def train(self) -> TrainResult:
        cfg, main = self.cfg, self.env.is_main
        if main:
            (self.out / "train_config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
            log.info("model: %s parameters; %d training pairs; %d batches per epoch per device",
                     f"{self.model.num_parameters():,}", len(self.data.train_src), len(self.sampler))
        writer = self._tensorboard() if main else None
        csv_file, csv_writer = self._csv_log() if main else (None, None)
        bar = tqdm(total=cfg.max_steps, initial=self.step, disable=None if main else True, desc="train", unit="step",
                   dynamic_ncols=True)
        batches, stopped_early = self._batches(), False
        window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "time": time.perf_counter()}
        start = time.perf_counter() - self.elapsed_s
        self._last_checkpoint_s = self.elapsed_s
        try:
            while self.step < cfg.max_steps:
                group = [b for _, b in zip(range(cfg.accum_steps), batches, strict=False)]
                if not group:
                    break  # max_epochs reached
                loss, nll, n = self.train_step(group)
                window["loss"] += loss
                window["nll"] += nll
                window["tokens"] += n
                bar.update(1)
                row: dict[str, Any] = {}
                if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                    tokens = all_reduce_sum(window["tokens"], self.env, self.device)
                    elapsed = time.perf_counter() - window["time"]
                    row = {"step": self.step, "epoch": self.sampler.epoch, "lr": self.scheduler.get_last_lr()[0],
                           "train_loss": window["loss"] / max(window["tokens"], 1),
                           "train_ppl": math.exp(min(window["nll"] / max(window["tokens"], 1), 50.0)),
                           "tokens_per_s": tokens / max(elapsed, 1e-9)}
                    bar.set_postfix(loss=f"{row['train_loss']:.3f}", lr=f"{row['lr']:.2e}",
                                    tok_s=f"{row['tokens_per_s']:.0f}")
                    window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "time": time.perf_counter()}
                self.elapsed_s = time.perf_counter() - start
                if self.step % cfg.valid_every == 0 or self.step == cfg.max_steps:
                    row = {"step": self.step, "epoch": self.sampler.epoch, **row}
                    stopped_early = self._checkpoint(row) or self._out_of_time()
                if row and main:
                    row["elapsed_s"] = self.elapsed_s
                    self._log(row, csv_writer, writer)
                    assert csv_file is not None
                    csv_file.flush()
                if stopped_early:
                    break
            if self.step % cfg.valid_every and self.step != cfg.max_steps:  # ended by max_epochs
                self._checkpoint({})
        finally:
            bar.close()
            if csv_file is not None:
                csv_file.close()
            if writer is not None:
                writer.close()
        result = TrainResult(self.out, self.step, self.best_step, self.best_metric, stopped_early, self.history)
        cleanup(self.env)
        return result

    def _checkpoint(self, row: dict[str, Any]) -> bool:
        """Validate (if there is a validation set), keep the best model, save a step checkpoint.
        Returns True when early stopping says to stop."""
        if self.data.valid is not None and self.data.valid_src:
            metrics = self.validate() if self.env.is_main else {}
            row.update(metrics)
            if self.env.is_main:
                improved = self._improved(metrics)
                self.bad_validations = 0 if improved else self.bad_validations + 1
                self.history.append({"step": self.step, **metrics})
                log.info("step %d: %s%s", self.step, ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()),
                         " (best)" if improved else "")
                if improved:
                    self._write_model_dir()
        elif self.env.is_main:  # no validation data: the last model is the model
            self._write_model_dir()
        self._save()
        stop = self.cfg.patience is not None and self.bad_validations >= self.cfg.patience
        return bool(all_reduce_sum(float(stop), self.env, self.device))

    def _out_of_time(self) -> bool:
        """Whether the next checkpoint would come after max_hours (predicted from the time since the last one),
        so that the run ends at the last checkpoint within its budget. Rank 0's clock decides for all."""
        if self.cfg.max_hours is None:  # the same config on every rank: no collective needed
            return False
        interval, self._last_checkpoint_s = self.elapsed_s - self._last_checkpoint_s, self.elapsed_s
        out = self.env.is_main and self.elapsed_s + interval > 3600 * self.cfg.max_hours
        if out:
            log.info("step %d: stopping, the next checkpoint would pass max_hours %g", self.step, self.cfg.max_hours)
        return bool(all_reduce_sum(float(out), self.env, self.device))

    # --- logs ----------------------------------------------------------------------------------
    def _csv_log(self) -> tuple[Any, csv.DictWriter]:
        path = self.out / "log.csv"
        rows = []
        if path.exists():  # a resumed run keeps the rows up to its checkpoint (a killed run may leave half a row)
            with open(path, newline="") as f:
                rows = [r for r in csv.DictReader(f)
                        if (r.get("step") or "").isdigit() and int(r["step"]) <= self.step and None not in r.values()]
        tmp = path.with_suffix(".csv.tmp")  # the kept rows replace the log in one rename: a kill loses none
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=LOG_FIELDS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        tmp.replace(path)
        f = open(path, "a", newline="")  # noqa: SIM115 - closed in train()
        return f, csv.DictWriter(f, fieldnames=LOG_FIELDS, extrasaction="ignore")

    def _tensorboard(self) -> Any:
        if not self.cfg.tensorboard:
            return None
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(self.out / "tensorboard"), purge_step=self.step + 1 if self.step else None)

    def _log(self, row: dict[str, Any], csv_writer: csv.DictWriter | None, writer: Any) -> None:
        if csv_writer is not None:
            csv_writer.writerow(row)
        if writer is not None:
            for key, value in row.items():
                if key not in ("step", "epoch"):
                    writer.add_scalar(key, value, self.step)
