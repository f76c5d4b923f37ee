"""The model directory: everything needed to use a trained model, nothing that runs code on load.

    config.json        {"architecture": "transformer", "model": TransformerConfig.to_dict(), ...}
                       and, when known, the languages: "src_lang": "en", "tgt_lang": "de"
    model.safetensors  the weights (tied tensors stored once)
    tokenizer.json     the tokenizer's settings (see qkv.data.tokenizer)
    spm.model          the SentencePiece model of a joint vocabulary, or
    spm.src.model, spm.tgt.model   one model per side

This module owns these names and the way files are written: every file goes through `atomic_write`
(a temporary file `.NAME.<pid>.tmp` in the same directory, fsync, then rename), so a crash leaves
either the old file or the new one, never half of one. A write that fails (a full disk) removes its
temporary file and raises an OSError naming the file; the temporaries a killed process leaves are
removed by later writes (`remove_orphan_temporaries`). Checkpoints and the tokenizer use the same
names and writers. Loading reads JSON and safetensors only: no pickle, so no code runs on load.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from . import __version__
from .config import TransformerConfig
from .model import DecoderOnly, EncoderOnly, Transformer
from .model.rnn import RNNSearch

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
SPM_JOINT_FILE = "spm.model"
SPM_SRC_FILE = "spm.src.model"
SPM_TGT_FILE = "spm.tgt.model"
TOKENIZER_FILES = (TOKENIZER_FILE, SPM_JOINT_FILE, SPM_SRC_FILE, SPM_TGT_FILE)

ARCHITECTURES: dict[str, type[nn.Module]] = {
    "transformer": Transformer,
    "decoder_only": DecoderOnly,
    "encoder_only": EncoderOnly,
    "rnn": RNNSearch,
}

PathLike = str | os.PathLike[str]


class CheckpointError(ValueError):
    """A model directory or checkpoint file that cannot be read (missing, truncated,
    inconsistent)."""


class UnsafeOutputError(ValueError):
    """A write that would follow a symbolic link (out of the output directory) or clobber files
    that are not qkv's."""


MODEL_DIR_FILES = (CONFIG_FILE, WEIGHTS_FILE, *TOKENIZER_FILES)


def refuse_symlinks(directory: PathLike, names: tuple[str, ...] = MODEL_DIR_FILES) -> None:
    """Raise UnsafeOutputError if any of `names` in `directory` is a symbolic link: qkv never
    writes through one."""
    directory = Path(directory)
    for name in names:
        if (directory / name).is_symlink():
            raise UnsafeOutputError(
                f"{directory / name} is a symbolic link; qkv does not write through links "
                "(remove it or choose another output directory)"
            )


# --- atomic writes -------------------------------------------------------------------------------
TEMPORARY_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]{1,10})\.tmp")  # `.NAME.<pid>.tmp`
# the code of the operating system's error in a SafetensorError's message (new and old wordings)
_SAFETENSORS_OS_ERROR = re.compile(r"os error (\d+)|Os \{ code: (\d+)")


def temporary_path(path: Path) -> Path:
    """Where this process writes `path` before renaming it: `.NAME.<pid>.tmp` beside it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write(path: PathLike, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temporary path beside `path`, then replace `path` with it in one
    step. A `path` that is a symbolic link is refused (UnsafeOutputError).

    A failed write (e.g. a full disk, which safetensors reports as a SafetensorError) removes the
    temporary file, leaves `path` as it was, and raises an OSError naming `path`. Temporaries of
    `path` that ended processes left are removed first.
    """
    path = Path(path)
    if path.is_symlink():
        raise UnsafeOutputError(f"{path} is a symbolic link; qkv does not write through links")
    remove_orphan_temporaries(path.parent, (path.name,))
    tmp = temporary_path(path)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, SafetensorError) as e:
        error = _write_error(e, path, tmp)
        if error is None:
            raise
        raise error from e
    finally:
        tmp.unlink(missing_ok=True)


def _write_error(e: Exception, path: Path, tmp: Path) -> OSError | None:
    """The OSError that names `path` for an error of writing it through `tmp`, or None to raise
    `e` as it is (an OSError about another file, or a SafetensorError that is not the system's)."""
    if isinstance(e, OSError):
        # shutil.copyfile names the file it copies from first, the one it copies to second
        about_tmp = e.filename is None or str(tmp) in (str(e.filename), str(e.filename2))
        if e.errno is None or not about_tmp:
            return None
        return OSError(e.errno, e.strerror or os.strerror(e.errno), str(path))
    match = _SAFETENSORS_OS_ERROR.search(str(e))
    if match is None:
        return None
    code = int(match[1] or match[2])
    return OSError(code, os.strerror(code), str(path))


def _process_ended(pid: int) -> bool:
    """Whether process `pid`, which a temporary file is named after, has ended. This process counts
    as ended: its writes remove their temporaries before they return, so one named after it was
    left by an earlier process with the same id."""
    if pid == os.getpid():
        return True
    if os.name != "posix":  # os.kill would end the process there: take it as running
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):  # PermissionError: another user's process, running
        return False
    return False


def remove_orphan_temporaries(
    directory: PathLike, names: tuple[str, ...] = MODEL_DIR_FILES
) -> list[Path]:
    """Delete the temporary files (`.NAME.<pid>.tmp`) that processes killed while writing the files
    `names` of `directory` left there; returns what was removed.

    Only regular files of that pattern whose process has ended are removed: a user's other files,
    links, and the temporaries of a process still writing stay.
    """
    directory = Path(directory)
    removed: list[Path] = []
    if not directory.is_dir():
        return removed
    for name in dict.fromkeys(names):
        for p in directory.glob(f".{glob.escape(name)}.*.tmp"):
            match = TEMPORARY_NAME.fullmatch(p.name)
            if match is None or match["name"] != name or not _process_ended(int(match["pid"])):
                continue
            try:
                if not stat.S_ISREG(p.lstat().st_mode):
                    continue
                p.unlink()
            except FileNotFoundError:  # removed meanwhile
                continue
            removed.append(p)
    return removed


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    atomic_write(path, lambda p: p.write_bytes(data))


def atomic_write_text(path: PathLike, text: str) -> None:
    """Write `text` as UTF-8, atomically."""
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def atomic_write_json(path: PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def read_json(path: PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"missing file: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); the file may be truncated") from e


def copy_config_and_tokenizer(source: PathLike, target: PathLike) -> None:
    """Copy config.json and the tokenizer files of model directory `source` into `target`
    (nothing when they are the same directory), removing the temporaries killed writes of the
    model directory's files left in `target`."""
    source, target = Path(source), Path(target)
    target.mkdir(parents=True, exist_ok=True)
    remove_orphan_temporaries(target)
    if source.resolve() == target.resolve():
        return
    for name in (CONFIG_FILE, *TOKENIZER_FILES):
        if (source / name).is_file():
            atomic_write(target / name, lambda p, name=name: shutil.copyfile(source / name, p))


# --- weights -------------------------------------------------------------------------------------
def architecture_of(model: nn.Module) -> str:
    for name, cls in ARCHITECTURES.items():
        if type(model) is cls:
            return name
    raise TypeError(f"cannot save a {type(model).__name__}")


def save_weights(path: PathLike, model: nn.Module) -> None:
    """model.safetensors, atomically; tied weights are stored once, under the first of their names
    in sorted order. Weights that only share a buffer are stored each on its own (on CUDA, cuDNN's
    RNNs keep all their weights as views of one flat buffer)."""
    state = model.state_dict()
    first: dict[tuple[Any, ...], str] = {}  # one name per tensor: (device, address, shape, stride)
    for name in sorted(state):
        t = state[name]
        first.setdefault((t.device, t.data_ptr(), t.shape, t.stride()), name)
    tensors = {name: state[name].detach().cpu().contiguous() for name in first.values()}
    atomic_write(path, lambda p: save_file(tensors, str(p), metadata={"format": "pt"}))


def load_weights(path: PathLike, model: nn.Module) -> None:
    """Load safetensors weights into `model` (on whatever device it is).

    The file must hold exactly the model's tensors, tied ones once (as `save_weights` writes
    them). They are copied in one at a time, each read from its own short-lived mapping of the file,
    so that memory peaks at the model plus one tensor. A truncated file, a missing or unexpected
    tensor, a shape mismatch or a tensor with NaN or infinite values is a CheckpointError naming
    the file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"missing file: {path}")
    problem = f"cannot load {path}"
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
        targets = model.state_dict(keep_vars=True)
        unexpected = sorted(set(keys) - targets.keys())
        stored = {targets[k].data_ptr() for k in keys if k in targets}
        missing = sorted(k for k, t in targets.items() if t.data_ptr() not in stored)
        if unexpected or missing:
            raise ValueError(
                f"the file has unexpected tensors {unexpected[:5]} and lacks "
                f"{missing[:5]} of the model"
            )
        with torch.no_grad():
            for key in keys:  # tied tensors are stored once, under one of their names
                with safe_open(str(path), framework="pt") as f:
                    tensor = f.get_tensor(key)
                if tensor.shape != targets[key].shape:
                    raise ValueError(
                        f"{key} has shape {tuple(tensor.shape)} in the file but "
                        f"{tuple(targets[key].shape)} in the model"
                    )
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    raise CheckpointError(
                        f"{path}: tensor {key} holds NaN or infinite values; the model is broken "
                        "(a diverged training run?)"
                    )
                targets[key].copy_(tensor)
    except CheckpointError:
        raise
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise CheckpointError(
            f"{problem}: {e}; the file may be truncated, corrupt or for another model"
        ) from e


# --- the directory -------------------------------------------------------------------------------
def save_model_dir(
    directory: PathLike, model: nn.Module, tokenizer: Any | None = None, **metadata: Any
) -> Path:
    """Write a self-contained model directory: config.json, model.safetensors, tokenizer files.

    tokenizer: anything with a `save(directory)` method (SubwordTokenizer writes TOKENIZER_FILES).
    metadata: extra keys for config.json (e.g. the training step).
    The temporaries that killed writes of these files left in `directory` are removed.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    remove_orphan_temporaries(directory)
    save_weights(directory / WEIGHTS_FILE, model)
    if tokenizer is not None:
        tokenizer.save(directory)
    config = {
        "architecture": architecture_of(model),
        "model": model.config.to_dict(),
        "qkv_version": __version__,
        **metadata,
    }
    atomic_write_json(directory / CONFIG_FILE, config)
    return directory


def load_config(directory: PathLike) -> tuple[str, TransformerConfig, dict[str, Any]]:
    """(architecture, model config, the rest of config.json) of a model directory."""
    path = Path(directory) / CONFIG_FILE
    meta = read_json(path)
    if not isinstance(meta, dict) or "model" not in meta or "architecture" not in meta:
        raise CheckpointError(f"{path} needs an 'architecture' and a 'model' section")
    arch = meta.pop("architecture")
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            f"unknown architecture {arch!r} in {path}; known: {sorted(ARCHITECTURES)}"
        )
    try:
        config = TransformerConfig.from_dict(meta.pop("model"))
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None
    return arch, config, meta


def load_languages(directory: PathLike) -> tuple[str, str] | None:
    """The (source, target) languages a model directory records in config.json ("src_lang" and
    "tgt_lang", written by training when the data has a known pair), or None."""
    _, _, meta = load_config(directory)
    src, tgt = meta.get("src_lang"), meta.get("tgt_lang")
    if isinstance(src, str) and isinstance(tgt, str) and src and tgt:
        return src, tgt
    return None


def load_model_dir(directory: PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """Build the model described by DIR/config.json and load DIR/model.safetensors into it (in
    eval mode)."""
    arch, cfg, _ = load_config(directory)
    model = ARCHITECTURES[arch](cfg).to(device)
    load_weights(Path(directory) / WEIGHTS_FILE, model)
    return model.eval()
