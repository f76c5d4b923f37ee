"""The model directory: everything needed to use a trained model, and nothing that runs code on load.

    DIR/config.json          {"architecture": "transformer", "model": TransformerConfig.to_dict(), ...}
    DIR/model.safetensors    the weights (tied tensors stored once)
    DIR/tokenizer.json, DIR/spm*.model   the SentencePiece tokenizer (see qkv.data.tokenizer)

Every file is written atomically (a temporary file in the same directory, fsync, then rename), so a
crash leaves either the old file or the new one, never half of one. Loading reads JSON and safetensors
only: no pickle, so a checkpoint cannot execute code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model
from torch import nn

from . import __version__
from .config import TransformerConfig
from .model import DecoderOnly, EncoderOnly, Transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ARCHITECTURES: dict[str, type[nn.Module]] = {
    "transformer": Transformer, "decoder_only": DecoderOnly, "encoder_only": EncoderOnly}


class CheckpointError(ValueError):
    """A model directory or checkpoint file that cannot be read (missing, truncated, inconsistent)."""


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temporary path beside `path`, then replace `path` with it in one step."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n"))


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"missing file: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); the file may be truncated") from e


def architecture_of(model: nn.Module) -> str:
    for name, cls in ARCHITECTURES.items():
        if type(model) is cls:
            return name
    raise TypeError(f"cannot save a {type(model).__name__}")


def save_weights(path: str | os.PathLike[str], model: nn.Module) -> None:
    """model.safetensors, atomically; tied weights are stored once."""
    atomic_write(path, lambda p: save_model(model, str(p), metadata={"format": "pt"}))


def load_weights(path: str | os.PathLike[str], model: nn.Module, device: str | torch.device = "cpu") -> None:
    """Load safetensors weights into `model`; a truncated or mismatched file is a CheckpointError.

    When the file holds exactly the model's tensors, they are copied in one at a time, each read from its own
    short-lived mapping of the file, so that memory peaks at the model plus one tensor (safetensors'
    `load_model` keeps the whole file mapped while loading: twice the model). Other layouts (such as older
    qkv models, converted by `load_state_dict` hooks) go through `load_model`.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"missing file: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
        targets = model.state_dict(keep_vars=True)
        stored = {targets[k].data_ptr() for k in keys if k in targets}
        if set(keys) <= targets.keys() and all(t.data_ptr() in stored for t in targets.values()):
            with torch.no_grad():
                for key in keys:  # tied tensors are stored once, under one of their names
                    with safe_open(str(path), framework="pt") as f:
                        tensor = f.get_tensor(key)
                    if tensor.shape != targets[key].shape:
                        raise ValueError(f"{key} has shape {tuple(tensor.shape)} in the file but "
                                         f"{tuple(targets[key].shape)} in the model")
                    targets[key].copy_(tensor)
        else:
            load_model(model, str(path), strict=True, device=str(device))
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"cannot load {path}: {e}; the file may be truncated, corrupt or for another "
                              "model") from e


def save_model_dir(directory: str | os.PathLike[str], model: nn.Module, tokenizer: Any | None = None,
                   **metadata: Any) -> Path:
    """Write a self-contained model directory: config.json, model.safetensors, tokenizer files."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_weights(directory / WEIGHTS_FILE, model)
    if tokenizer is not None:
        tokenizer.save(directory)
    config = {"architecture": architecture_of(model), "model": model.config.to_dict(), "qkv_version": __version__,
              **metadata}
    write_json(directory / CONFIG_FILE, config)
    return directory


def load_config(directory: str | os.PathLike[str]) -> tuple[str, TransformerConfig, dict[str, Any]]:
    """(architecture, model config, the rest of config.json) of a model directory."""
    meta = read_json(Path(directory) / CONFIG_FILE)
    if not isinstance(meta, dict) or "model" not in meta:
        raise CheckpointError(f"{Path(directory) / CONFIG_FILE} has no 'model' section")
    arch = meta.pop("architecture", "transformer")
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"unknown architecture {arch!r} in {directory}; known: {sorted(ARCHITECTURES)}")
    return arch, TransformerConfig.from_dict(meta.pop("model")), meta


def load_model_dir(directory: str | os.PathLike[str], device: str | torch.device = "cpu") -> nn.Module:
    """Build the model described by DIR/config.json and load DIR/model.safetensors into it (eval mode)."""
    arch, cfg, _ = load_config(directory)
    model = ARCHITECTURES[arch](cfg).to(device)
    load_weights(Path(directory) / WEIGHTS_FILE, model, device)
    return model.eval()
