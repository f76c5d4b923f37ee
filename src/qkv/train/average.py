"""Checkpoint averaging (paper 6.1: "averaging the last 5 checkpoints, which were written at
10-minute intervals"): the element-wise mean of the weights of N step checkpoints — the last N, or
the N consecutive kept checkpoints whose validations score best on average (the run's
`valid_metric`), for a run that trains past its best (`keep_checkpoints` sets how many are kept).

Everything is checked before anything is written: every checkpoint's weights exist and hold the
same tensor names and shapes as the run's model (an offending file is named), and the mean must
fit the model exactly. Then the output is written, each file atomically.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ..modeldir import (
    WEIGHTS_FILE,
    CheckpointError,
    copy_config_and_tokenizer,
    load_model_dir,
    read_json,
    save_weights,
)
from .checkpoints import STATE_FILE, checkpoint_step, list_checkpoints
from .recipe import validation_score


def _tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the tensors in a safetensors file (its header only)."""
    if not path.is_file():
        raise CheckpointError(f"missing file: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    except Exception as e:  # safetensors raises its own error type for truncated files
        raise CheckpointError(f"cannot read {path}: {e}") from e


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Mean of the tensors stored in each path's model.safetensors (accumulated in float64).
    Every file must hold the tensor names and shapes of the first; a file that does not is
    named."""
    if not paths:
        raise ValueError("no checkpoints to average")
    files = [p / WEIGHTS_FILE for p in paths]
    reference = _tensor_shapes(files[0])
    for file in files[1:]:
        shapes = _tensor_shapes(file)
        if shapes != reference:
            differ = sorted(set(shapes) ^ set(reference)) or sorted(
                k for k in shapes if shapes[k] != reference[k]
            )
            raise CheckpointError(
                f"{file} does not match {files[0]} (tensors {differ[:5]} differ); "
                "checkpoints of different models cannot be averaged"
            )
    total: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118
                    tensor = f.get_tensor(name).double()
                    if not bool(torch.isfinite(tensor).all()):
                        raise CheckpointError(f"{file}: tensor {name} holds NaN or infinite values")
                    if name in total:
                        total[name] += tensor
                    else:
                        total[name] = tensor
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"cannot read {file}: {e}") from e
    return {name: (t / len(paths)).float() for name, t in total.items()}


@dataclass
class Window:
    """The checkpoints of a validation-chosen window and their mean score."""

    paths: list[Path]
    metric: str  # the run's valid_metric
    mean: float  # mean validation score (the negated loss for "loss")


def best_steps(
    history: list[dict[str, Any]], metric: str, n: int, kept: Collection[int] | None = None
) -> tuple[list[int], float] | None:
    """The steps of the `n` consecutive validations in `history` (a run's validation metrics,
    oldest first) with the best mean score under `metric` (higher is better: the metric, or the
    negated loss), the later on a tie, and that mean. With `kept`, only windows whose every step is
    in it count. None when no window counts."""
    scores = [(int(h["step"]), validation_score(metric, h)) for h in history]
    best: tuple[list[int], float] | None = None
    for end in range(n, len(scores) + 1):
        steps = [step for step, _ in scores[end - n : end]]
        mean = sum(score for _, score in scores[end - n : end]) / n
        if kept is not None and not all(step in kept for step in steps):
            continue
        if math.isfinite(mean) and (best is None or mean >= best[1]):
            best = (steps, mean)
    return best


def best_window(run_dir: str | Path, n: int) -> Window:
    """The `n` (>= 1) kept checkpoints of a run at consecutive validations with the best mean score
    (the run's valid_metric; `best_steps`). The scores come from the newest checkpoint's
    validation history."""
    if n < 1:
        raise ValueError(f"--best must be at least 1, got {n}")
    run_dir = Path(run_dir)
    paths = {checkpoint_step(p): p for p in list_checkpoints(run_dir)}
    if not paths:
        raise ValueError(f"{run_dir} has no step checkpoints")
    newest = paths[max(paths)] / STATE_FILE
    state = read_json(newest)
    metric = state.get("config", {}).get("valid_metric") if isinstance(state, dict) else None
    history = state.get("history") if isinstance(state, dict) else None
    if not metric or not history:
        raise ValueError(
            f"{newest} records no validations to choose by (a run without validation data); "
            "average the last checkpoints with --last"
        )
    best = best_steps(history, metric, n, kept=paths)
    if best is None:
        raise ValueError(
            f"{run_dir} keeps no {n} checkpoints of consecutive validations ({len(paths)} kept; "
            "keep_checkpoints and keep_best_checkpoints set what a run keeps)"
        )
    steps, mean = best
    return Window([paths[step] for step in steps], metric, mean)


def average_run(
    run_dir: str | Path, last: int, out_dir: str | Path | None = None, overwrite: bool = False
) -> tuple[Path, list[Path]]:
    """Average the last `last` (>= 1) step checkpoints of a training run into a model directory
    (`average_into`). Returns the directory and the checkpoints averaged."""
    if last < 1:
        raise ValueError(f"--last must be at least 1, got {last}")
    paths = list_checkpoints(Path(run_dir))[-last:]
    if len(paths) < last:
        raise ValueError(
            f"{run_dir} has {len(paths)} checkpoint(s), fewer than the {last} asked for"
        )
    return average_into(run_dir, paths, out_dir, overwrite), paths


def average_into(
    run_dir: str | Path,
    paths: list[Path],
    out_dir: str | Path | None = None,
    overwrite: bool = False,
) -> Path:
    """Average the step checkpoints `paths` of the run in run_dir into a model directory.

    The result goes to out_dir (a copy of the run's config and tokenizer plus the averaged weights),
    or replaces run_dir/model.safetensors when out_dir is None or is run_dir itself. Another
    directory that is not empty is refused, unless `overwrite`.
    """
    run_dir = Path(run_dir)
    target = Path(out_dir) if out_dir is not None else run_dir
    if target.exists() and not target.is_dir():
        raise ValueError(f"--out {target} is a file, not a directory")
    other = target.is_dir() and target.resolve() != run_dir.resolve()
    if other and not overwrite and any(target.iterdir()):
        raise ValueError(
            f"--out {target} is not empty; qkv would replace its weights, config and tokenizer. "
            "Choose a new directory, or give --overwrite"
        )
    model = load_model_dir(run_dir)  # the architecture, and a check that the averaged names fit it
    averaged = average_checkpoints(paths)
    expected = model.state_dict()
    stored = {expected[k].data_ptr() for k in averaged if k in expected}
    unexpected = sorted(set(averaged) - set(expected))
    missing = sorted(k for k, t in expected.items() if t.data_ptr() not in stored)
    if unexpected or missing:
        raise CheckpointError(
            f"{paths[-1] / WEIGHTS_FILE} does not fit the model of {run_dir}: it has unexpected "
            f"tensors {unexpected[:5]} and lacks {missing[:5]}"
        )
    with torch.no_grad():
        for name, tensor in averaged.items():  # tied tensors are stored once, under one name
            if tensor.shape != expected[name].shape:
                raise CheckpointError(
                    f"{paths[-1] / WEIGHTS_FILE}: {name} has shape {tuple(tensor.shape)}, the "
                    f"model of {run_dir} {tuple(expected[name].shape)}"
                )
            expected[name].copy_(tensor)
    # everything checked: now write, each file atomically (nothing to copy onto itself)
    copy_config_and_tokenizer(run_dir, target)
    save_weights(target / WEIGHTS_FILE, model)
    return target
