"""The training loop: the paper's recipe (Adam, warm-up schedule, label smoothing, dropout) around a
model, with validation, best-checkpoint selection, early stopping, exact resume, logs, and DDP.
One loop for every task (cfg.task: translate, lm, mlm, classify); what differs between them (the
data, the model, the batches, the loss, the validation metrics) is the task's (`qkv.train.tasks`).

    cfg = load_train_config("configs/multi30k-small.yaml")
    configure_process(**cfg.process_settings())  # the caller's part: qkv.runtime.process
    result = Trainer(cfg, "runs/m30k").train()   # OUT is a model directory `qkv translate` reads

Building a Trainer prepares the data, the model, the optimizer and the samplers, and restores a
checkpoint on resume; it leaves the process as it finds it (threads, allocator and global random
state are `configure_process`'s). The run's randomness comes from its recipe's seed alone: the model
is initialized from cfg.seed under a fork of torch's generator, and `train()` starts the dropout
stream of this rank (cfg.seed + rank, or the checkpoint's on resume) on torch's generator, where
the model's dropout draws from.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from ..data.batching import TokenBatchSampler
from ..modeldir import TOKENIZER_FILE
from ..runtime.precision import describe_hardware, resolve_precision
from ..runtime.process import RELEASE_EVERY, release_freed_memory
from ..runtime.training import prepare_for_training
from .checkpoints import RngStates
from .distributed import all_gather, all_reduce_sum, barrier, cleanup, init_distributed
from .logs import TrainingLog, TrainWindow, log_fields
from .recipe import TrainConfig, validation_score
from .rundir import Progress, RunDirectory, TrainingError
from .schedule import TimeBudget, lr_multiplier, paper_peak_lr
from .tasks import Task, make_task

log = logging.getLogger("qkv.train")
# a loss this many times an untrained model's (ln of the classes predicted among) has diverged
DIVERGED_LOSS = 10.0
# the first int of a batch's key, which seeds collate's randomness in the batch (`Task.collate`:
# mlm masks): a training batch's key is (TRAIN_KEY, epoch, position, rank), the i-th validation
# batch's (VALID_KEY, i), so that no validation batch draws what a training batch draws
TRAIN_KEY = 0
VALID_KEY = 1
PROGRESS_BAR: dict[str, Any] = {"desc": "train", "unit": "step", "dynamic_ncols": True}


@dataclass
class TrainResult:
    out_dir: Path
    step: int
    best_step: int | None
    best_metric: float | None
    stopped_early: bool
    history: list[dict[str, Any]] = field(default_factory=list)


class Trainer:
    """Trains the model of the recipe's task on its data into OUT, a model directory that holds
    the run too (`qkv.train.rundir`: the recipe, the checkpoints, the learning curves)."""

    def __init__(
        self,
        cfg: TrainConfig,
        out_dir: str | Path,
        resume: bool = False,
        overwrite: bool = False,
        allow_data_change: bool = False,
    ) -> None:
        """allow_data_change: resume even if the data differs from the run's (else refused)."""
        self.cfg = cfg
        self.out = Path(out_dir)
        self.allow_data_change = allow_data_change
        self.env, self.device = init_distributed(cfg.device)
        self.run_dir = RunDirectory(self.out, cfg, self.env.is_main, allow_data_change)
        self.run_dir.check(overwrite)
        barrier(self.env)  # every rank has seen OUT as it was before rank 0 writes into it
        with self.run_dir.removed_on_failure():
            self._setup(resume)

    def _setup(self, resume: bool) -> None:
        cfg = self.cfg
        resume_from = self.run_dir.checkpoint_to_resume(resume)
        # data: a resumed run reads the tokenizer its checkpoint holds
        tokenizer_dir = None
        if resume_from is not None and (resume_from / TOKENIZER_FILE).is_file():
            tokenizer_dir = resume_from
        self.task: Task = make_task(cfg)
        self._prepare_data(train_tokenizer=resume_from is None, tokenizer_dir=tokenizer_dir)
        self.data_fingerprints = self.task.data_fingerprints()
        self.sampler = self._train_sampler()
        self.valid_batches = self._valid_batches()
        # model and optimization
        self.model = self._build_model()
        d_model = getattr(getattr(self.model, "config", None), "d_model", None)
        self.precision = resolve_precision(cfg.precision, self.device, d_model=d_model)
        self.autocast = _autocast(self.precision, self.device)
        for note in prepare_for_training(self.model, self.precision, self.device):
            log.info("training on the CPU: %s", note)
        self.loss = self.task.loss_module(self.model)
        self.ddp = None
        if self.env.enabled:
            unused = self.task.unused_parameters
            self.ddp = DistributedDataParallel(self.loss, find_unused_parameters=unused)
        self.optimizer = self._build_optimizer()
        self.schedule = lr_multiplier(cfg.schedule, cfg.warmup, cfg.max_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.schedule)
        # where the run stands
        self.progress = Progress()
        # each rank its own dropout stream; train() starts it
        self.rng = RngStates.seeded(cfg.seed + self.env.rank, self.device)
        self.budget = None if cfg.max_hours is None else TimeBudget(cfg.max_hours, cfg.valid_every)
        self._nonfinite_in_row = 0  # updates skipped in a row for a non-finite loss or gradient
        self.resumed = resume_from is not None
        if resume_from is not None:
            self._restore(resume_from)

    @property
    def step(self) -> int:
        """Optimizer updates done."""
        return self.progress.step

    @property
    def data(self) -> Any:
        """The task's encoded data (translation: `qkv.train.prepared_data.EncodedData`)."""
        return self.task.data

    # --- setup ---------------------------------------------------------------------------------
    def _prepare_data(self, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        """Rank 0 prepares the data (training the tokenizer of a fresh run into OUT); the other
        ranks then read the tokenizer it saved (or the checkpoint's, on resume)."""
        if self.env.is_main:
            self.run_dir.create()
            self.task.prepare(self.out, train_tokenizer, tokenizer_dir)
        barrier(self.env)
        if not self.env.is_main:
            self.task.prepare(self.out, False, tokenizer_dir)

    def _train_sampler(self) -> TokenBatchSampler:
        return TokenBatchSampler(
            *self.task.train_lengths(),
            self.cfg.max_tokens,
            shuffle=True,
            seed=self.cfg.seed,
            rank=self.env.rank,
            world_size=self.env.world_size,
        )

    def _valid_batches(self) -> list[list[int]]:
        """Validation batches, the same every time: length-sorted, cut once, with room for a pair
        of max_len."""
        max_tokens = max(self.cfg.max_tokens, 2 * self.cfg.max_len + 4)
        sampler = TokenBatchSampler(*self.task.valid_lengths(), max_tokens, shuffle=False)
        return sampler.rank_batches(0)

    def _build_model(self) -> nn.Module:
        """The task's model, initialized from cfg.seed (the process's generator is left as is)."""
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(self.cfg.seed)
            model = self.task.build_model()
        return model.to(self.device)

    def _build_optimizer(self) -> torch.optim.Optimizer:
        cfg, params = self.cfg, self.model.parameters()
        peak = cfg.lr
        if peak is None:
            peak = paper_peak_lr(self.model.config.d_model, cfg.warmup)
        betas, eps, decay = cfg.adam_betas, cfg.adam_eps, cfg.weight_decay
        # the fused kernel: one pass over each weight, no temporaries of its size (the loop's)
        return torch.optim.Adam(
            params, lr=peak, betas=betas, eps=eps, weight_decay=decay, fused=True
        )

    # --- checkpoints ---------------------------------------------------------------------------
    def _restore(self, path: Path) -> None:
        """Model, optimizer, schedule, data position, progress and random state of a checkpoint."""
        state, self.progress, self.rng = self.run_dir.read_checkpoint(
            path, self.model, self.optimizer, self.env.rank, self.device, self.data_fingerprints
        )
        self.scheduler.load_state_dict(state["scheduler"])
        self.schedule.resumed(self.cfg.max_steps)
        self.sampler.load_state_dict(state["sampler"])
        log.info("resumed from %s (step %d)", path, self.step)

    def _check_in_sync(self) -> None:
        """All DDP replicas must hold the same weights: compare a fingerprint of them across
        ranks."""
        fingerprint = sum(float(p.detach().double().sum()) for p in self.model.parameters())
        total = all_reduce_sum(fingerprint, self.env, self.device)
        if abs(total - self.env.world_size * fingerprint) > 1e-6 * max(1.0, abs(total)):
            raise RuntimeError(f"rank {self.env.rank}: model replicas diverged at step {self.step}")

    def _save(self) -> None:
        self._check_in_sync()
        rng = all_gather(RngStates.current(self.device), self.env)
        if self.env.is_main:
            state = {"sampler": self.sampler.state_dict(), "scheduler": self.scheduler.state_dict()}
            tokenizer, fingerprints = self.task.tokenizer, self.data_fingerprints
            self.run_dir.write_checkpoint(
                self.model, self.optimizer, rng, tokenizer, self.progress, state, fingerprints
            )
        barrier(self.env)

    def _write_model_dir(self) -> None:
        """OUT as a model directory holding the current weights (called for each new best)."""
        bad = [n for n, p in self.model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            raise self._diverged(f"the weights hold NaN or infinite values ({bad[0]}, ...)")
        self.run_dir.write_model(
            self.model, self.task.tokenizer, self.progress, **self.task.metadata()
        )

    def _diverged(self, what: str, step: int | None = None) -> TrainingError:
        """The error of a diverged run, at `step` (default: the update being made)."""
        lr = self.scheduler.get_last_lr()[0]
        done = self.run_dir.last_checkpoint()
        last = f"; the last checkpoint is {done}" if done else ""
        step = self.step + 1 if step is None else step
        return TrainingError(
            f"training diverged at step {step}: {what}. The learning rate is likely too "
            f"high (lr {lr:.3g} at this step): lower --lr, or set --clip_norm{last}"
        )

    def _check_loss(self, which: str, loss: float) -> None:
        """Stop a run whose loss (per prediction) is not finite, or is DIVERGED_LOSS times an
        untrained model's, ln(classes): it has diverged even if its numbers stay finite."""
        untrained = math.log(max(self.task.classes, 2))
        if math.isfinite(loss) and loss <= DIVERGED_LOSS * untrained:
            return
        times = f", {loss / untrained:.3g} times an untrained model's"
        raise self._diverged(
            f"the {which} loss is {loss:.4g}{times if math.isfinite(loss) else ''}", self.step
        )

    # --- one update ----------------------------------------------------------------------------
    def _epoch_ids(self) -> Any:
        """The training examples of the sampler's epoch (translation: re-segmented per epoch with
        subword_dropout)."""
        return self.task.epoch_examples(self.sampler)

    def _batches(self) -> Iterator[Any]:
        """Training batches, epoch after epoch (until max_epochs), from the sampler's position.
        A batch's key (TRAIN_KEY, epoch, position, rank) seeds the task's randomness in it."""
        while self.cfg.max_epochs is None or self.sampler.epoch < self.cfg.max_epochs:
            examples = self._epoch_ids()
            for indices in self.sampler:
                if self.sampler.position == 1:  # the epoch's order is built: its sort's memory goes
                    release_freed_memory(tcmalloc=True)
                key = (TRAIN_KEY, self.sampler.epoch, self.sampler.position, self.env.rank)
                yield self.task.collate(examples, indices, key).to(self.device)

    def train_step(self, batches: list[Any]) -> tuple[float, float, int]:
        """One optimizer update over accumulated batches.
        Returns (loss sum, nll sum, target tokens) on this rank.

        An update whose loss or gradient norm is not finite (NaN, inf) is skipped (the step does
        not advance) and counted; cfg.max_nonfinite_updates of them in a row raise TrainingError.
        """
        sums = self.accumulate_gradients(batches)
        params = [p for p in self.model.parameters() if p.grad is not None]
        if self.cfg.clip_norm > 0:
            norm = nn.utils.clip_grad_norm_(params, self.cfg.clip_norm)
        else:
            norm = nn.utils.get_total_norm([p.grad for p in params])
        finite = math.isfinite(sums[0]) and bool(torch.isfinite(norm))
        if all_reduce_sum(float(not finite), self.env, self.device) > 0:  # the same on all ranks
            self.optimizer.zero_grad(set_to_none=True)
            self.progress.skipped_updates += 1
            self._nonfinite_in_row += 1
            what = f"loss {sums[0]:.4g}, gradient norm {float(norm):.4g}"
            log.warning("step %d: update skipped, %s", self.step + 1, what)
            if self._nonfinite_in_row >= self.cfg.max_nonfinite_updates:
                raise self._diverged(
                    f"the loss or gradients were not finite in {self._nonfinite_in_row} updates "
                    f"in a row ({what})"
                )
            return 0.0, 0.0, 0
        self._nonfinite_in_row = 0
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.progress.step += 1
        return sums

    def accumulate_gradients(self, batches: list[Any]) -> tuple[float, float, int]:
        """Backward over the batches; the loss is divided once by the total number of target tokens
        across batches and devices, so the gradient is that of the mean token loss of the group."""
        self.model.train()
        n_tokens = sum(self.task.count(b) for b in batches)
        global_tokens = all_reduce_sum(n_tokens, self.env, self.device)
        loss_sum = 0.0
        nll_sum = 0.0
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            loss_of = self.ddp or self.loss
            sync: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if self.ddp is not None and not last:  # DDP averages gradients after the last batch
                sync = self.ddp.no_sync()
            with sync, self.autocast:
                loss, nll = loss_of(*self.task.loss_inputs(batch))
            # DDP averages gradients over ranks, so scale by world size to get sum / global tokens
            (loss * (self.env.world_size / global_tokens)).backward()
            loss_sum += loss.item()
            nll_sum += nll.item()
        return loss_sum, nll_sum, n_tokens

    # --- validation ----------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """The loss (and perplexity) on the validation set, and the task's metrics (translation:
        greedy-decoding sacreBLEU, if configured; classification: accuracy and macro-F1)."""
        self.model.eval()
        examples = self.task.valid_examples()
        loss_sum = 0.0
        nll_sum = 0.0
        n_tokens = 0
        for i, indices in enumerate(self.valid_batches):
            batch = self.task.collate(examples, indices, (VALID_KEY, i)).to(self.device)
            with self.autocast:
                loss, nll = self.loss(*self.task.loss_inputs(batch))
            loss_sum += loss.item()
            nll_sum += nll.item()
            n_tokens += self.task.count(batch)
        out = {"valid_loss": loss_sum / n_tokens}
        if "valid_ppl" in self.task.metrics:
            out["valid_ppl"] = math.exp(min(nll_sum / n_tokens, 50.0))
        out.update(self.task.extra_metrics(self.model, self.valid_batches, self.device))
        return out

    def _improved(self, metrics: dict[str, float]) -> bool:
        """Whether `metrics` hold the best validation so far (then recorded in the progress)."""
        return self.progress.improve(validation_score(self.cfg.valid_metric, metrics), self.step)

    def _checkpoint(self, row: dict[str, Any], save: bool = True) -> bool:
        """Validate (if there is a validation set), keep the best model, save a step checkpoint
        (unless not `save`). Returns True when early stopping says to stop."""
        p = self.progress
        if self.task.has_validation():
            metrics = self.validate() if self.env.is_main else {}
            if self.env.is_main:
                self._check_loss("validation", metrics["valid_loss"])
            row.update(metrics)
            if self.env.is_main:
                improved = self._improved(metrics)
                p.bad_validations = 0 if improved else p.bad_validations + 1
                p.history.append({"step": self.step, **metrics})
                values = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
                log.info("step %d: %s%s", self.step, values, " (best)" if improved else "")
                if improved:
                    self._write_model_dir()
        elif self.env.is_main:  # no validation data: the last model is the model
            self._write_model_dir()
        if save:
            self._save()
        stop = self.cfg.patience is not None and p.bad_validations >= self.cfg.patience
        return bool(all_reduce_sum(float(stop), self.env, self.device))

    def _out_of_time(self) -> bool:
        """Whether the next checkpoint would come after max_hours (predicted from the time since
        the last one), so that the run ends at the last checkpoint within its budget; else an
        annealed schedule is re-planned to reach 0 where the budget ends. Rank 0's clock decides
        for all."""
        if self.budget is None:  # the same config on every rank: no collective needed
            return False
        end = self.budget.end_step(self.step, self.progress.elapsed_s) if self.env.is_main else 0
        end = round(all_reduce_sum(float(end), self.env, self.device))
        if end <= self.step:
            what = f"the next checkpoint would pass max_hours {self.cfg.max_hours:g}"
            log.info("step %d: stopping, %s", self.step, what)
            return True
        self.schedule.replan(self.step, end)
        return False

    # --- the loop ------------------------------------------------------------------------------
    def train(self) -> TrainResult:
        """Train to max_steps (or max_epochs, max_hours, early stopping); returns the result."""
        if self.env.is_main:
            precision = (
                f"precision: {self.precision} (setting {self.cfg.precision}; "
                f"{describe_hardware(self.device)})"
            )
            log.info(precision)
            self.run_dir.write_recipe(precision)  # the recipe in effect
            if self.resumed:  # the top-level tokenizer again, from the checkpoint's
                self.task.tokenizer.save(self.out)
            n_params = f"{sum(p.numel() for p in self.model.parameters()):,}"
            log.info(
                "model: %s parameters; %d %s; %d batches per epoch per device",
                n_params,
                len(self.task.train_lengths()[1]),
                self.task.noun,
                len(self.sampler),
            )
        self.rng.apply()  # this rank's dropout stream, from where the checkpoint left it
        training_log = self._open_log() if self.env.is_main else None
        closing: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if training_log is not None:
            closing = contextlib.closing(training_log)
        with self.run_dir.removed_on_failure(), closing:  # closed first, then OUT removed
            if self.step == 0 and self.task.starts_trained():  # its score is the one to beat
                self._checkpoint(row := {"step": 0, "epoch": 0}, save=False)
                if training_log is not None:
                    training_log.write({**row, "elapsed_s": 0.0})
            stopped_early = self._loop(training_log)
        p = self.progress
        result = TrainResult(self.out, p.step, p.best_step, p.best_metric, stopped_early, p.history)
        self.ddp = None  # before the group goes (`cleanup`)
        cleanup(self.env)
        return result

    def _open_log(self) -> TrainingLog:
        return TrainingLog(self.out, self.step, self.cfg.tensorboard, log_fields(self.task.metrics))

    def _loop(self, training_log: TrainingLog | None) -> bool:
        """Updates until a limit; logs, validates and checkpoints on the way. Returns whether it
        stopped early (patience or max_hours)."""
        cfg = self.cfg
        batches = self._batches()
        window = TrainWindow()
        start = time.perf_counter() - self.progress.elapsed_s
        if self.budget is not None:
            self.budget.start(self.progress.elapsed_s)
        quiet = None if self.env.is_main else True  # None: off when not writing to a terminal
        bar = tqdm(total=cfg.max_steps, initial=self.step, disable=quiet, **PROGRESS_BAR)
        with bar:
            while self.step < cfg.max_steps:
                group = list(itertools.islice(batches, cfg.accum_steps))
                if not group:
                    break  # max_epochs reached
                before = self.step
                sums = self.train_step(group)
                if self.step == before:
                    continue  # a skipped update (non-finite loss or gradients)
                window.add(*sums)
                bar.update(1)
                if self.device.type == "cpu" and self.step % RELEASE_EVERY == 0:
                    release_freed_memory()  # kept freed memory fragments: qkv.runtime.process
                row: dict[str, Any] = {}
                if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                    row = self._train_row(window)
                    self._check_loss("training", row["train_loss"])
                    bar.set_postfix(
                        loss=f"{row['train_loss']:.3f}",
                        lr=f"{row['lr']:.2e}",
                        tok_s=f"{row['tokens_per_s']:.0f}",
                    )
                    window = TrainWindow()
                self.progress.elapsed_s = time.perf_counter() - start
                stop = False
                if self.step % cfg.valid_every == 0 or self.step == cfg.max_steps:
                    row = {"step": self.step, "epoch": self.sampler.epoch, **row}
                    stop = self._checkpoint(row) or self._out_of_time()
                if row and training_log is not None:
                    training_log.write({**row, "elapsed_s": self.progress.elapsed_s})
                if stop:
                    return True
        if self.step % cfg.valid_every and self.step != cfg.max_steps:  # ended by max_epochs
            self._checkpoint({})
        return False

    def _train_row(self, window: TrainWindow) -> dict[str, Any]:
        """The log row of the training window: loss and perplexity per token, throughput."""
        tokens = all_reduce_sum(window.tokens, self.env, self.device)
        lr = self.scheduler.get_last_lr()[0]
        return {"step": self.step, "epoch": self.sampler.epoch, "lr": lr, **window.columns(tokens)}


def _autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast where the precision is bf16; else none.

    Weights, gradients and optimizer state stay fp32; under autocast the matmuls run in bf16
    while softmax, log_softmax and layer_norm run in fp32, and the loss is summed in fp32.
    """
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
