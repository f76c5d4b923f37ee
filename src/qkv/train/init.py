"""A run that starts from a trained model (`init_from`): for translation a qkv model directory, a
Marian / OPUS-MT directory, or a Hub name hf:ORG/NAME[@REV]; for a language model (task lm) a qkv
lm directory (decoder-only), which the run continues.

Marian models go through qkv's importer (`qkv.interop`: a Hub name is converted once into qkv's
cache, a local Marian directory into a temporary one), so a run starts from exactly the weights
`qkv convert marian` writes. The run keeps the model's tokenizer (its files are copied unchanged
into OUT) and its architecture: a model key of the recipe that differs from the model's is refused,
naming it, except the dropout rates (FREE_KEYS). The optimizer starts afresh. Where the run started
is recorded in OUT/config.json under "init_from": the name, the revision (a Hub commit) and the
sha256 of the weights file read (for a Hub model, its file on the Hub). Every failure is a
ValueError of one line, raised before the run creates OUT.

    init = load_init("hf:Helsinki-NLP/opus-mt-en-de", cfg.model)
    model = init.build()   # a fresh module holding the weights, dropout as the recipe says
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ..config import TransformerConfig
from ..interop.hub import PREFIX, WEIGHTS, marian_snapshot, snapshot_directory, split_name
from ..interop.marian import convert_marian
from ..modeldir import (
    ARCHITECTURES,
    CONFIG_FILE,
    TOKENIZER_FILE,
    TOKENIZER_FILES,
    WEIGHTS_FILE,
    CheckpointError,
    atomic_write_bytes,
    load_config,
    load_weights,
)

# model keys a run from a trained model may set to other values than the model's: they change no
# weight's shape or meaning
FREE_KEYS = ("dropout", "attention_dropout", "activation_dropout")
# the architectures a task starts from, and what they are called
TASK_ARCHS = {"translate": ("transformer", "rnn"), "lm": ("decoder_only",)}
TASK_MODELS = {"translate": "a translation model", "lm": "a language model"}


@dataclass
class InitModel:
    """A trained translation model to start from, read into memory."""

    name: str  # as the recipe gives it
    arch: str
    config: TransformerConfig  # the model's, with the recipe's FREE_KEYS
    model: nn.Module | None  # the weights (None once `build` handed them on)
    tokenizer_files: dict[str, bytes]  # the tokenizer's files, by name, as they are on disk
    origin: dict[str, str | None]  # name, revision, sha256
    languages: dict[str, str] = field(default_factory=dict)  # src_lang, tgt_lang when known

    def build(self) -> nn.Module:
        """The model with the recipe's dropout and the trained weights (once: it keeps no copy)."""
        if self.model is None:
            raise RuntimeError("InitModel.build is called once")
        model = ARCHITECTURES[self.arch](self.config)
        model.load_state_dict(self.model.state_dict())
        self.model = None
        return model

    def check_case(self, lowercase: bool | None) -> None:
        """A ValueError when the recipe's `lowercase` (None: not set) is not the tokenizer's: the
        run keeps the tokenizer, and the tokenizer decides whether text is lowercased."""
        tokenizer_lowercase = bool(json.loads(self.tokenizer_files[TOKENIZER_FILE])["lowercase"])
        if lowercase is None or lowercase == tokenizer_lowercase:
            return
        kind = "lowercase" if tokenizer_lowercase else "cased (it reads and writes text as it is)"
        raise ValueError(
            f"lowercase: {str(lowercase).lower()}: the tokenizer of init_from {self.name} is "
            f"{kind}, and a run from a trained model keeps its tokenizer, which decides the "
            "case: leave lowercase out of the recipe"
        )

    def write_tokenizer(self, directory: Path) -> None:
        """Copy the tokenizer files, byte for byte, into `directory`."""
        for file_name, data in self.tokenizer_files.items():
            atomic_write_bytes(directory / file_name, data)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_init(name: str, model_keys: dict[str, Any], task: str = "translate") -> InitModel:
    """The model `name` names for a run of `task` (see the module docstring), with the recipe's
    model keys `model_keys` checked against its architecture."""
    if task != "translate":
        return _load_qkv(name, model_keys, task)
    if name.startswith(PREFIX):
        repo, revision = split_name(name)
        snapshot = marian_snapshot(repo, revision)
        weights = next((snapshot / w for w in WEIGHTS if (snapshot / w).is_file()), None)
        if weights is None:
            raise ValueError(f"init_from {name}: the Hub snapshot has no {' or '.join(WEIGHTS)}")
        origin = {"name": name, "revision": snapshot.name, "sha256": sha256_file(weights)}
        return _read(snapshot_directory(snapshot, repo), name, origin, model_keys)
    path = Path(name)
    kind = _kind(path, name)
    if kind == "qkv":
        origin = {"name": name, "revision": None, "sha256": sha256_file(path / WEIGHTS_FILE)}
        return _read(path, name, origin, model_keys)
    weights = next((path / w for w in WEIGHTS if (path / w).is_file()), None)
    origin = {"name": name, "revision": None, "sha256": weights and sha256_file(weights)}
    with tempfile.TemporaryDirectory(prefix="qkv-init-") as tmp:
        try:
            converted = convert_marian(path, Path(tmp) / "model", name)
        except ValueError as e:
            raise ValueError(f"init_from {name}: {e}") from None
        return _read(converted, name, origin, model_keys)


def _load_qkv(name: str, model_keys: dict[str, Any], task: str) -> InitModel:
    """A qkv model directory, the only kind a run of `task` (other than translate) starts from."""
    if name.startswith(PREFIX) or _kind(Path(name), name, task) != "qkv":
        raise ValueError(
            f"init_from {name}: task {task!r} starts from a qkv model directory "
            f"({TASK_MODELS[task]}), not a Marian model"
        )
    origin = {"name": name, "revision": None, "sha256": sha256_file(Path(name) / WEIGHTS_FILE)}
    return _read(Path(name), name, origin, model_keys, task)


def _kind(path: Path, name: str, task: str = "translate") -> str:
    """The kind of model the directory `path` holds ("qkv" or "marian"), by its config.json."""
    if not path.is_dir():
        raise ValueError(
            f"init_from {name}: no such directory (a Hub model is named {PREFIX}ORG/NAME)"
        )
    try:
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ValueError(f"init_from {name}: no readable {CONFIG_FILE}: not a model") from None
    if isinstance(config, dict) and "architecture" in config:
        return "qkv"
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind != "marian":
        also = " or a Marian (OPUS-MT)" if task == "translate" else ""
        raise ValueError(
            f"init_from {name} is a {kind!r} model; task {task!r} starts from a qkv{also} model"
        )
    return "marian"


def _read(
    directory: Path,
    name: str,
    origin: dict[str, str | None],
    model_keys: dict[str, Any],
    task: str = "translate",
) -> InitModel:
    """The model directory `directory` (of the model `name`) read into an InitModel."""
    try:
        arch, config, meta = load_config(directory)
    except CheckpointError as e:
        raise ValueError(f"init_from {name}: {e}") from None
    if arch not in TASK_ARCHS[task]:
        its = f", task {meta['task']!r}" if isinstance(meta.get("task"), str) else ""
        raise ValueError(
            f"init_from {name} holds a {arch} model{its}; task {task!r} starts from "
            f"{TASK_MODELS[task]} ({' or '.join(TASK_ARCHS[task])})"
        )
    config = _with_model_keys(config, model_keys, name)
    model = ARCHITECTURES[arch](config)
    try:
        load_weights(directory / WEIGHTS_FILE, model)
    except CheckpointError as e:  # a temporary path means nothing to the user: name the model
        raise ValueError(f"init_from {name}: {str(e).replace(str(directory), name)}") from None
    files = {f: (directory / f).read_bytes() for f in TOKENIZER_FILES if (directory / f).is_file()}
    src, tgt = meta.get("src_lang"), meta.get("tgt_lang")
    languages = {"src_lang": src, "tgt_lang": tgt} if src and tgt else {}
    return InitModel(name, arch, config, model, files, origin, languages)


def _with_model_keys(
    config: TransformerConfig, model_keys: dict[str, Any], name: str
) -> TransformerConfig:
    """The model's config with the recipe's FREE_KEYS; any other model key of the recipe must
    equal the model's (a ValueError names the first that does not)."""
    known = config.to_dict()
    for key, value in model_keys.items():
        if key in FREE_KEYS:
            continue
        if key not in known:
            raise ValueError(f"model.{key}: no such model key")
        if value != known[key]:
            raise ValueError(
                f"model.{key}={value!r}: init_from {name} has {key}={known[key]!r}; a run from a "
                f"trained model keeps its shape (only {', '.join(FREE_KEYS)} may change)"
            )
    try:
        return config.replace(**{k: v for k, v in model_keys.items() if k in FREE_KEYS})
    except ValueError as e:
        raise ValueError(f"model keys: {e}") from None


__all__ = ["FREE_KEYS", "InitModel", "load_init", "sha256_file"]
