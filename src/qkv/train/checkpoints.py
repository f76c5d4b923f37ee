"""Training checkpoints: everything needed to continue a run exactly, with no pickle.

    OUT/checkpoints/step_00001000/model.safetensors      weights
    OUT/checkpoints/step_00001000/optimizer.safetensors  optimizer tensors (Adam moments) and RNG states
    OUT/checkpoints/step_00001000/trainer_state.json     step, data position, scheduler, scalars, history

A checkpoint directory is written under a temporary name and renamed when complete, so a run killed
mid-write leaves no half checkpoint; resume takes the newest complete one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..modeldir import CheckpointError, load_weights, read_json, save_weights

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
MODEL_FILE = "model.safetensors"


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / "checkpoints" / f"step_{step:08d}"


def list_checkpoints(root: Path) -> list[Path]:
    """Complete step checkpoints under root/checkpoints, oldest first."""
    folder = root / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith("step_") and (p / STATE_FILE).is_file())


def split_optimizer_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
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


def save_checkpoint(root: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    trainer_state: dict[str, Any], rng_states: list[torch.Tensor]) -> Path:
    """Write checkpoints/step_N atomically (temporary directory, then rename)."""
    final = checkpoint_dir(root, step)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_weights(tmp / MODEL_FILE, model)
    tensors, meta = split_optimizer_state(optimizer.state_dict())
    for rank, rng in enumerate(rng_states):
        tensors[f"rng.torch.{rank}"] = rng
    if torch.cuda.is_available():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    save_file(tensors, str(tmp / OPTIMIZER_FILE))
    (tmp / STATE_FILE).write_text(json.dumps({**trainer_state, "optimizer": meta}, indent=1) + "\n")
    if final.exists():  # the same step written again (e.g. a resumed run that stopped at once)
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def load_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, rank: int,
                    device: torch.device) -> dict[str, Any]:
    """Restore model, optimizer and this rank's RNG from a step checkpoint; return the trainer state."""
    state = read_json(path / STATE_FILE)
    load_weights(path / MODEL_FILE, model, device)
    try:
        tensors = load_file(str(path / OPTIMIZER_FILE))
    except Exception as e:  # safetensors raises its own error type for truncated files
        raise CheckpointError(f"cannot read {path / OPTIMIZER_FILE}: {e}") from e
    optimizer.load_state_dict(join_optimizer_state(tensors, state.pop("optimizer")))
    rng_key = f"rng.torch.{rank}" if f"rng.torch.{rank}" in tensors else "rng.torch.0"
    torch.set_rng_state(tensors[rng_key])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    return state


def prune_checkpoints(root: Path, keep: int) -> None:
    """Delete all but the newest `keep` step checkpoints."""
    for old in list_checkpoints(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
