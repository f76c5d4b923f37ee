"""Training checkpoints: everything needed to continue a run exactly, with no pickle.

    OUT/checkpoints/step_00001000/model.safetensors      weights
    OUT/checkpoints/step_00001000/optimizer.safetensors  optimizer tensors (Adam), RNG states
    OUT/checkpoints/step_00001000/trainer_state.json     step, data position, scheduler, history,
                                                         the recipe in effect
    OUT/checkpoints/step_00001000/tokenizer.json, spm*.model   the tokenizer, so that resume never
                                                         depends on the top-level copy

A checkpoint directory is written under a temporary name and renamed when complete, so a run killed
mid-write leaves no half checkpoint (and a failed write, e.g. a full disk, removes its temporary
directory and raises an OSError); resume takes the newest readable one and removes the temporary
directories and files of killed runs (`remove_orphans`). The files inside are written with the
model directory's atomic writers (`qkv.modeldir`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from ..modeldir import (
    MODEL_DIR_FILES,
    WEIGHTS_FILE,
    CheckpointError,
    atomic_write,
    atomic_write_json,
    load_weights,
    read_json,
    remove_orphan_temporaries,
    save_weights,
)

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
# the files of a run directory that qkv writes atomically: the model directory's and the run's own
RUN_DIR_FILES = (*MODEL_DIR_FILES, "train_config.yaml", "log.csv")


@dataclass
class RngStates:
    """The random state of one training process: torch's CPU generator and, when it trains on a
    GPU, the current CUDA device's (where dropout draws from)."""

    cpu: torch.Tensor
    cuda: torch.Tensor | None = None

    @classmethod
    def current(cls, device: torch.device) -> RngStates:
        cuda = torch.cuda.get_rng_state() if device.type == "cuda" else None
        return cls(torch.get_rng_state(), cuda)

    @classmethod
    def seeded(cls, seed: int, device: torch.device) -> RngStates:
        """The states `torch.manual_seed(seed)` would set, made without touching the process's."""
        cuda = None
        if device.type == "cuda":
            cuda = torch.Generator(device).manual_seed(seed).get_state()
        return cls(torch.Generator().manual_seed(seed).get_state(), cuda)

    def apply(self) -> None:
        """Make these the states of the process's generators."""
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda)


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / "checkpoints" / f"step_{step:08d}"


def checkpoint_step(path: Path) -> int:
    """The step of a checkpoint directory (`checkpoint_dir`'s inverse)."""
    return int(path.name.removeprefix("step_"))


def list_checkpoints(root: Path) -> list[Path]:
    """Complete step checkpoints under root/checkpoints, oldest first."""
    folder = root / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.iterdir() if p.name.startswith("step_") and (p / STATE_FILE).is_file()
    )


def split_optimizer_state(
    state: dict[str, Any],
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimizer state_dict -> (tensors for safetensors, everything else for JSON)."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, pstate in state["state"].items():
        for name, value in pstate.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def join_optimizer_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("state."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    for idx, scalars in meta["scalars"].items():
        state.setdefault(int(idx), {}).update(scalars)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    root: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    rng: list[RngStates],
    tokenizer: Any | None = None,
) -> Path:
    """Write checkpoints/step_N atomically (temporary directory, then rename).

    rng: the random states of every rank, rank 0 first (rank 0's CUDA state is the one kept).
    tokenizer: saved into the checkpoint too (anything with a `save(directory)` method).
    If writing fails (an OSError, e.g. ENOSPC: a full disk, however safetensors reports it), the
    temporary directory is removed and the error raised: the newest complete checkpoint stays the
    one resume takes.
    """
    final = checkpoint_dir(root, step)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write_checkpoint(tmp, model, optimizer, trainer_state, rng, tokenizer)
        if final.exists():  # the same step written again (e.g. a resumed run that stopped at once)
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write_checkpoint(
    tmp: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    rng: list[RngStates],
    tokenizer: Any | None,
) -> None:
    tmp.mkdir(parents=True)
    if tokenizer is not None:
        tokenizer.save(tmp)
    save_weights(tmp / WEIGHTS_FILE, model)
    tensors, meta = split_optimizer_state(optimizer.state_dict())
    for rank, states in enumerate(rng):
        tensors[f"rng.torch.{rank}"] = states.cpu
    if rng[0].cuda is not None:
        tensors["rng.cuda"] = rng[0].cuda
    atomic_write(tmp / OPTIMIZER_FILE, lambda p: save_file(tensors, str(p)))
    atomic_write_json(tmp / STATE_FILE, {**trainer_state, "optimizer": meta})


def check_checkpoint(path: Path) -> dict[str, Any]:
    """A cheap readability check of a step checkpoint: its state parses and the headers of its
    safetensors files are whole. Returns the trainer state; raises CheckpointError."""
    state = read_json(path / STATE_FILE)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path / STATE_FILE} does not hold a trainer state")
    for name in (WEIGHTS_FILE, OPTIMIZER_FILE):
        try:
            with safe_open(str(path / name), framework="pt") as f:
                f.keys()
        except Exception as e:  # safetensors raises its own error type for truncated files
            raise CheckpointError(f"cannot read {path / name}: {e}") from e
    return state


def remove_orphans(root: Path, names: tuple[str, ...] = RUN_DIR_FILES) -> list[Path]:
    """Delete what killed runs left in the run directory `root`: the temporary checkpoint
    directories and files (`checkpoints/.step_N.<pid>.tmp`, whatever the process: only the run
    writes there), and the temporary files of the files `names` of `root` (`.NAME.<pid>.tmp`) whose
    process has ended (`qkv average` may write there too). Returns what was removed."""
    removed = remove_orphan_temporaries(root, names)
    folder = root / "checkpoints"
    if not folder.is_dir():
        return removed
    for p in folder.iterdir():
        if p.name.startswith(".step_") and p.name.endswith(".tmp"):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    rank: int,
    device: torch.device,
) -> tuple[dict[str, Any], RngStates]:
    """Restore model and optimizer from a step checkpoint.

    Returns the trainer state and the random states saved for `rank` (training on `device`), for
    the caller to apply when training resumes. A rank the checkpoint has no state for (a run resumed
    on more processes than wrote it) gets rank 0's.
    """
    state = read_json(path / STATE_FILE)
    load_weights(path / WEIGHTS_FILE, model)
    try:
        tensors = load_file(str(path / OPTIMIZER_FILE))
    except Exception as e:  # safetensors raises its own error type for truncated files
        raise CheckpointError(f"cannot read {path / OPTIMIZER_FILE}: {e}") from e
    optimizer.load_state_dict(join_optimizer_state(tensors, state.pop("optimizer")))
    own = f"rng.torch.{rank}"
    cpu = tensors[own] if own in tensors else tensors["rng.torch.0"]
    cuda = tensors.get("rng.cuda") if device.type == "cuda" else None
    return state, RngStates(cpu, cuda)


def prune_checkpoints(root: Path, keep: int, also_keep: Collection[int] = ()) -> None:
    """Delete all but the newest `keep` (>= 1) step checkpoints and those of the steps in
    `also_keep`."""
    if keep < 1:
        raise ValueError(f"keep_checkpoints must be at least 1, got {keep}")
    for old in list_checkpoints(root)[:-keep]:
        if checkpoint_step(old) not in also_keep:
            shutil.rmtree(old, ignore_errors=True)
