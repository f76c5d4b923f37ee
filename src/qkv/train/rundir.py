"""A training run's output directory, OUT, and the policy around it: what qkv may write there,
which checkpoint a resumed run continues from and whether it may (its recipe and its data must be
the run's), which checkpoints are kept, what a fresh run that fails leaves behind (nothing it
created), and the message of a write that fails.

    OUT/config.json, model.safetensors, tokenizer   the best model so far (by cfg.valid_metric)
    OUT/train_config.yaml                           the resolved recipe
    OUT/checkpoints/step_N/                         resumable training checkpoints (the last K)
    OUT/log.csv, OUT/tensorboard/                   learning curves

    run_dir = RunDirectory(out, cfg, is_main=True)
    run_dir.check(overwrite=False)               # a file, a link, another's directory: refused
    path = run_dir.checkpoint_to_resume(resume)  # None: a fresh run
    with run_dir.removed_on_failure():           # a fresh run that fails leaves no OUT
        ...
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from ..modeldir import (
    MODEL_DIR_FILES,
    CheckpointError,
    UnsafeOutputError,
    atomic_write_text,
    refuse_symlinks,
    save_model_dir,
)
from .average import best_steps
from .checkpoints import (
    STATE_FILE,
    RngStates,
    check_checkpoint,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    remove_orphans,
    save_checkpoint,
)
from .recipe import TrainConfig

log = logging.getLogger("qkv.train")

RECIPE_FILE = "train_config.yaml"
# what qkv writes into OUT (besides the model directory's files): never through a symbolic link
RUN_FILES = (*MODEL_DIR_FILES, RECIPE_FILE, "log.csv", "checkpoints", "tensorboard")
# what a checkpoint's trainer state holds besides the run's progress (`Progress`)
STATE_KEYS = ("sampler", "scheduler", "optimizer", "config", "data")
# recipe keys a resumed run may change (they decide when to stop, log and checkpoint, and how the
# machine runs, not what is learned so far); any other difference is refused
RESUME_SAFE_KEYS = (
    "max_steps",
    "max_hours",
    "max_epochs",
    "valid_every",
    "log_every",
    "keep_checkpoints",
    "keep_best_checkpoints",
    "patience",
    "tensorboard",
    "threads",
    "max_nonfinite_updates",
    "data_dir",
    "prepared_dir",
    "download",
)


class TrainingError(ValueError):
    """A run that cannot go on: it diverged, or its checkpoint cannot be written."""


@dataclass
class Progress:
    """Where a run stands: saved in every checkpoint (trainer_state.json), restored on resume."""

    step: int = 0  # optimizer updates done
    best_metric: float | None = None  # the best validation value (higher is better)
    best_step: int | None = None  # the step that reached it
    bad_validations: int = 0  # validations in a row without improvement (for patience)
    elapsed_s: float = 0.0  # training time so far, across resumes
    history: list[dict[str, Any]] = field(default_factory=list)  # metrics of each validation
    skipped_updates: int = 0  # updates skipped for a non-finite loss or gradient

    def improve(self, value: float, step: int) -> bool:
        """Whether the validation `value` (higher is better) at `step` is the best so far, and
        if so, record it. NaN or inf is never the best."""
        if not math.isfinite(value):
            return False
        if self.best_metric is None or value > self.best_metric:
            self.best_metric, self.best_step = value, step
            return True
        return False

    @classmethod
    def from_state(cls, state: dict[str, Any], path: Path) -> Progress:
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in state]
        if missing:
            raise CheckpointError(f"{path}: the trainer state lacks {missing}")
        return cls(**{n: state[n] for n in names})


def check_state_keys(state: dict[str, Any], path: Path) -> None:
    """A CheckpointError naming the keys a checkpoint's trainer state lacks."""
    required = [f.name for f in fields(Progress)]
    missing = [k for k in (*STATE_KEYS, *required) if k not in state]
    if missing:
        raise CheckpointError(f"{path / STATE_FILE} lacks {', '.join(map(repr, missing))}")


class RunDirectory:
    """OUT of a training run of the recipe `cfg`; `is_main`: this process is the one that writes
    it (rank 0); `allow_data_change`: a resumed run may go on with data other than the run's."""

    def __init__(
        self, path: Path, cfg: TrainConfig, is_main: bool, allow_data_change: bool = False
    ) -> None:
        self.path = path
        self.cfg = cfg
        self.is_main = is_main
        self.allow_data_change = allow_data_change
        self.created = False  # whether this run creates OUT (set by `check`)

    # --- OUT -----------------------------------------------------------------------------------
    def check(self, overwrite: bool) -> None:
        """OUT must be a directory qkv may write: not a file, no symbolic link among the files it
        writes, and, unless `overwrite`, not a non-empty directory that is not a training run
        (e.g. a model made by `qkv average`, or anything else). Records whether OUT exists."""
        out = self.path
        if out.exists() and not out.is_dir():
            raise UnsafeOutputError(f"--out {out} is a file, not a directory")
        self.created = not out.exists()
        if self.created:
            return
        refuse_symlinks(out, RUN_FILES)
        is_run = (out / "checkpoints").is_dir()
        if not is_run and not overwrite and any(out.iterdir()):
            raise UnsafeOutputError(
                f"--out {out} is not empty and holds no training run; qkv would overwrite its "
                "files: choose another directory or pass --overwrite"
            )

    def create(self) -> None:
        """Make OUT (and the directories above it)."""
        self.path.mkdir(parents=True, exist_ok=True)

    def remove_if_created(self) -> None:
        """Remove OUT when this run created it and wrote no checkpoint into it."""
        if self.is_main and self.created and not list_checkpoints(self.path):
            shutil.rmtree(self.path, ignore_errors=True)

    @contextlib.contextmanager
    def removed_on_failure(self) -> Iterator[None]:
        """`remove_if_created` when the code in this context raises (the error goes on)."""
        try:
            yield
        except BaseException:
            self.remove_if_created()
            raise

    def last_checkpoint(self) -> Path | None:
        done = list_checkpoints(self.path)
        return done[-1] if done else None

    # --- resume --------------------------------------------------------------------------------
    def checkpoint_to_resume(self, resume: bool) -> Path | None:
        """The newest readable checkpoint to resume from (None: a fresh run). An unreadable newest
        checkpoint is skipped with a warning; the config must match the run's (RESUME_SAFE_KEYS
        may differ)."""
        checkpoints = list_checkpoints(self.path)
        if checkpoints and not resume:
            raise ValueError(
                f"{self.path} already holds a training run; pass --resume to continue "
                "it or choose another output directory"
            )
        if self.is_main and self.path.is_dir():
            for orphan in remove_orphans(self.path):
                log.info("removed %s, left by a killed run", orphan)
        if not resume:
            return None
        if not checkpoints:
            log.warning("--resume: no checkpoint in %s, starting from scratch", self.path)
            return None
        problems = []
        for path in reversed(checkpoints):
            try:
                recorded = _read_recipe(path)
            except CheckpointError as e:
                problems.append(str(e))
                log.warning("--resume: %s is unreadable (%s); trying the previous one", path, e)
                continue
            if problems:
                log.warning("--resume: resuming from %s instead", path)
            self._check_config(recorded, path)
            return path
        raise CheckpointError(
            f"no readable checkpoint in {self.path / 'checkpoints'}: {problems[0]}"
        )

    def _check_config(self, before: dict[str, Any], path: Path) -> None:
        """Refuse a resumed run whose recipe differs from the checkpoint's (`before`) in a key not
        in RESUME_SAFE_KEYS; the safe changes apply (and train_config.yaml records them)."""
        now = self.cfg.to_dict()
        diffs = []
        for key in now:
            if key == "model":
                for k in sorted(set(now[key]) | set(before[key])):
                    a, b = before[key].get(k), now[key].get(k)
                    if a != b:
                        diffs.append(f"model.{k} (run: {a!r}, now: {b!r})")
            elif key not in RESUME_SAFE_KEYS and now[key] != before[key]:
                diffs.append(f"{key} (run: {before[key]!r}, now: {now[key]!r})")
            elif now[key] != before[key]:
                log.info("--resume: %s changes from %r to %r", key, before[key], now[key])
        if diffs:
            raise ValueError(
                f"--resume: the config differs from the run's ({path}) in {'; '.join(diffs)}. "
                f"Only {', '.join(RESUME_SAFE_KEYS)} may change on resume; give the run's values "
                "or start a new run in another --out"
            )

    def check_data(self, recorded: dict[str, str], now: dict[str, str], path: Path) -> None:
        """Refuse to resume on data (fingerprints `now`) other than the run's (`recorded`, in the
        checkpoint `path`) unless allow_data_change: the batches of the rest of the epoch would be
        other batches, and the run no longer one run."""
        if recorded == now:
            return
        changed = [k for k, v in now.items() if recorded.get(k) != v]
        where = [f"{k} ({self._data_source(k)})" for k in changed]
        message = (
            f"--resume: the data differs from the run's ({path}): {', '.join(where)} now "
            "holds other text"
        )
        if not self.allow_data_change:
            raise ValueError(
                f"{message}. Restore the run's data, start a new run in another --out, or give "
                "--allow-data-change to go on with this data"
            )
        log.warning("%s; going on with it (--allow-data-change)", message)

    def _data_source(self, key: str) -> str:
        """What the recipe reads for the data `key` (train_src, valid_text, ...)."""
        cfg = self.cfg
        given = getattr(cfg, key, None) or getattr(cfg, key.split("_")[0] + "_tsv", None)
        return str(given) if given else f"corpus {cfg.corpus}"

    # --- checkpoints ---------------------------------------------------------------------------
    def write_checkpoint(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        rng: list[RngStates],
        tokenizer: Any,
        progress: Progress,
        state: dict[str, Any],
        fingerprints: dict[str, str],
    ) -> None:
        """The checkpoint of progress.step (`save_checkpoint`); its trainer state holds the
        progress, `state` (the trainer's parts: sampler, scheduler), the recipe in effect and the
        data's `fingerprints` (resume compares against them). Then all but the newest
        cfg.keep_checkpoints are removed, except the best window of keep_best_checkpoints."""
        step = progress.step
        config = self.cfg.to_dict()
        state = {**asdict(progress), **state, "config": config, "data": fingerprints}
        try:
            save_checkpoint(self.path, step, model, optimizer, state, rng, tokenizer)
        except OSError as e:
            raise self.write_failed(step, f"the checkpoint of step {step}", e) from e
        prune_checkpoints(self.path, self.cfg.keep_checkpoints, self._best_window(progress))

    def _best_window(self, progress: Progress) -> list[int]:
        """The steps of the keep_best_checkpoints consecutive validations with the best mean score
        so far (`qkv average --best`); none when the option is off or no window is complete."""
        n, metric = self.cfg.keep_best_checkpoints, self.cfg.valid_metric
        best = best_steps(progress.history, metric, n) if n and metric else None
        return best[0] if best else []

    def read_checkpoint(
        self,
        path: Path,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        rank: int,
        device: torch.device,
        fingerprints: dict[str, str],
    ) -> tuple[dict[str, Any], Progress, RngStates]:
        """Restore model and optimizer from the checkpoint `path` (`load_checkpoint`), the data's
        `fingerprints` checked against the run's (`check_data`). Returns the trainer state, the
        progress it records and the random states of `rank`."""
        state, rng = load_checkpoint(path, model, optimizer, rank, device)
        self.check_data(state["data"], fingerprints, path)
        return state, Progress.from_state(state, path), rng

    # --- writes --------------------------------------------------------------------------------
    def write_recipe(self, header: str) -> None:
        """OUT/train_config.yaml: the recipe in effect, under the comment `header`."""
        recipe = f"# {header}\n" + yaml.safe_dump(self.cfg.to_dict(), sort_keys=False)
        atomic_write_text(self.path / RECIPE_FILE, recipe)

    def write_model(
        self, model: nn.Module, tokenizer: Any, progress: Progress, **metadata: Any
    ) -> None:
        """OUT as a model directory of `model` at progress.step; config.json records the step, the
        validation metric and its best value, the languages, and `metadata`."""
        cfg, step = self.cfg, progress.step
        try:
            save_model_dir(
                self.path,
                model,
                tokenizer,
                train_step=step,
                valid_metric=cfg.valid_metric,
                best_metric=progress.best_metric,
                **cfg.languages(),
                **metadata,
            )
        except OSError as e:
            raise self.write_failed(step, "the model directory", e) from e

    def write_failed(self, step: int, what: str, e: OSError) -> TrainingError:
        """The error that stops a run whose output cannot be written (a full disk, ...)."""
        done = self.last_checkpoint()
        if done:
            then = f"the last good checkpoint is {done}; make room and continue with --resume"
        else:  # nothing to resume (and OUT removed where this run created it)
            then = "no checkpoint was written; make room and run the same command again"
        reason = e.strerror or str(e)
        return TrainingError(f"step {step}: cannot write {what} in {self.path} ({reason}); {then}")


def _read_recipe(path: Path) -> dict[str, Any]:
    """The recipe a checkpoint records, as `TrainConfig.to_dict` gives it; a CheckpointError when
    the checkpoint is unreadable, its trainer state lacks a key, or the recipe is none of qkv's."""
    state = check_checkpoint(path)
    check_state_keys(state, path)
    try:
        return TrainConfig.from_dict(state["config"]).to_dict()
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path / STATE_FILE}: its config is no recipe ({e})") from e
