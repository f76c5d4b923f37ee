"""Checkpoint averaging (paper 6.1: "averaging the last 5 checkpoints, which were written at
10-minute intervals"): the element-wise mean of the weights of the last N step checkpoints.

Everything is checked before anything is written: every checkpoint's weights exist and hold the
same tensor names and shapes as the run's model (an offending file is named), and the mean must
fit the model exactly. Then the output is written, each file atomically.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from ..modeldir import (
    WEIGHTS_FILE,
    CheckpointError,
    copy_config_and_tokenizer,
    load_model_dir,
    save_weights,
)
from .checkpoints import list_checkpoints


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


def average_run(
    run_dir: str | Path, last: int, out_dir: str | Path | None = None
) -> tuple[Path, list[Path]]:
    """Average the last `last` (>= 1) step checkpoints of a training run into a model directory.

    The result goes to out_dir (a copy of the run's config and tokenizer plus the averaged weights),
    or replaces run_dir/model.safetensors when out_dir is None or is run_dir itself.
    """
    if last < 1:
        raise ValueError(f"--last must be at least 1, got {last}")
    run_dir = Path(run_dir)
    paths = list_checkpoints(run_dir)[-last:]
    if len(paths) < last:
        raise ValueError(
            f"{run_dir} has {len(paths)} checkpoint(s), fewer than the {last} asked for"
        )
    target = Path(out_dir) if out_dir is not None else run_dir
    if target.exists() and not target.is_dir():
        raise ValueError(f"--out {target} is a file, not a directory")
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
    return target, paths
