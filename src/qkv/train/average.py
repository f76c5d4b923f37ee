"""Checkpoint averaging (paper 6.1: "averaging the last 5 checkpoints, which were written at
10-minute intervals"): the element-wise mean of the weights of the last N step checkpoints."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from ..modeldir import WEIGHTS_FILE, copy_config_and_tokenizer, load_model_dir, save_weights
from .checkpoints import list_checkpoints


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Mean of the tensors stored in each path's model.safetensors (accumulated in float64)."""
    if not paths:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        for name, tensor in load_file(str(path / WEIGHTS_FILE)).items():
            if name not in total:
                total[name] = torch.zeros_like(tensor, dtype=torch.float64)
            total[name] += tensor.double()
    return {name: (t / len(paths)).float() for name, t in total.items()}


def average_run(
    run_dir: str | Path, last: int, out_dir: str | Path | None = None
) -> tuple[Path, list[Path]]:
    """Average the last `last` step checkpoints of a training run into a model directory.

    The result goes to out_dir (a copy of the run's config and tokenizer plus the averaged weights),
    or replaces run_dir/model.safetensors when out_dir is None.
    """
    run_dir = Path(run_dir)
    paths = list_checkpoints(run_dir)[-last:]
    if len(paths) < last:
        raise ValueError(
            f"{run_dir} has {len(paths)} checkpoint(s), fewer than the {last} asked for"
        )
    target = Path(out_dir) if out_dir is not None else run_dir
    if target != run_dir:
        copy_config_and_tokenizer(run_dir, target)
    model = load_model_dir(run_dir)  # the architecture, and a check that the averaged names fit it
    model.load_state_dict(average_checkpoints(paths), strict=False)  # tied tensors: stored once
    save_weights(target / WEIGHTS_FILE, model)
    return target, paths
