"""Marian models (OPUS-MT) by their Hugging Face Hub name, converted once and cached.

    snapshot = marian_snapshot("Helsinki-NLP/opus-mt-en-de")          # the files, on disk
    directory = model_directory("hf:Helsinki-NLP/opus-mt-en-de@main")  # a qkv model directory
    convert_marian_named("Helsinki-NLP/opus-mt-en-de", "runs/en-de")   # `qkv convert marian`

`marian_snapshot` fetches only what the conversion reads (config.json, the weights, source.spm,
target.spm, the vocabularies, tokenizer_config.json) with `huggingface_hub`, into its own cache
(`HF_HOME` / `HF_HUB_CACHE`); `HF_HUB_OFFLINE=1` uses that cache alone (as does a Hub that does
not answer one request: `hub_reachable`), `HF_ENDPOINT` another hub,
`HF_TOKEN` a private model. `model_directory` converts a snapshot once into qkv's cache
(`$QKV_CACHE_DIR/models`, else ~/.cache/qkv/models), one directory per commit, and hands back the
same directory on every later call. Each failure is a ValueError of one line: no such model, no
such revision, offline without it in the cache, a model that is not a Marian one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..config import cache_dir
from .marian import convert_marian

PREFIX = "hf:"  # a model directory argument that names a Hub model: hf:ORG/NAME[@REVISION]
NEEDED = ["config.json", "*.spm", "*vocab.json", "tokenizer_config.json"]
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first one the repository has


def is_hub_name(name: str) -> bool:
    """Whether `name` names a Hub model: hf:ORG/NAME, or ORG/NAME that is no local path."""
    if name.startswith(PREFIX):
        return True
    return name.count("/") == 1 and not Path(name).exists() and not name.startswith((".", "/"))


def split_name(name: str) -> tuple[str, str | None]:
    """'hf:org/name@rev' -> ('org/name', 'rev'); without @: revision None (the default branch)."""
    repo, _, revision = name.removeprefix(PREFIX).partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ValueError(
            f"{name!r}: a Hub model is named ORG/NAME (e.g. Helsinki-NLP/opus-mt-en-de)"
        )
    return repo, revision or None


PROBE_SECONDS = 10  # how long the one request that tells whether the Hub answers may take


def hub_reachable() -> bool:
    """Whether the Hub answers one request (no retries) within PROBE_SECONDS; False offline
    (HF_HUB_OFFLINE=1). huggingface_hub retries a refused connection five times over ~25 s,
    logging each try: an unreachable Hub is left to the cache at once instead."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return False
    try:
        get_session().head(constants.ENDPOINT, timeout=PROBE_SECONDS)
    except Exception:  # refused, unresolvable, timed out: no Hub to ask
        return False
    return True


def _weights_listed(api: Any, repo: str, revision: str | None) -> list[str] | None:
    """The weights file the repository has, as the Hub lists it (None when the listing fails
    otherwise than by a missing repository or revision, which raise)."""
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        files = api.list_repo_files(repo, revision=revision)
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise
    except Exception:  # the Hub failed to list it: the cache decides
        return None
    return [next((w for w in WEIGHTS if w in files), WEIGHTS[0])]


def marian_snapshot(repo: str, revision: str | None = None) -> Path:
    """The local folder of a Hub repository's files that a Marian conversion reads."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import (
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision {revision}" if revision else ""
    online = hub_reachable()
    weights = list(WEIGHTS)  # unknown which one the repository has: whichever the cache holds
    try:
        if online:
            weights = _weights_listed(HfApi(), repo, revision) or weights
        folder = snapshot_download(
            repo, revision=revision, allow_patterns=[*NEEDED, *weights], local_files_only=not online
        )
    except RevisionNotFoundError:
        raise ValueError(f"{repo} has no revision {revision!r} on the Hub") from None
    except RepositoryNotFoundError:
        raise ValueError(
            f"no model {repo} on the Hub (a private one needs HF_TOKEN or `hf auth login`)"
        ) from None
    except LocalEntryNotFoundError:
        raise ValueError(
            f"{repo}{at} is not in the Hugging Face cache ({_hub_cache()}) and the Hub cannot be "
            "reached (offline, or HF_HUB_OFFLINE=1): fetch it once with network access"
        ) from None
    return Path(folder)


def resolve_model(directory: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """A model directory as given, or the converted directory of a Hub name ("hf:ORG/NAME")."""
    if isinstance(directory, str) and directory.startswith(PREFIX):
        return model_directory(directory)
    return directory


def model_directory(name: str) -> Path:
    """The qkv model directory of a Hub model name (see `split_name`), converted on first use."""
    repo, revision = split_name(name)
    return snapshot_directory(marian_snapshot(repo, revision), repo)


def snapshot_directory(snapshot: Path, repo: str) -> Path:
    """The qkv model directory of the Hub snapshot `snapshot` of `repo`, converted on first use."""
    _check_marian(snapshot, repo)
    target = cache_dir() / "models" / f"{repo.replace('/', '--')}--{snapshot.name[:12]}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        convert_marian(snapshot, work / "model", f"{repo}@{snapshot.name}")
        try:
            (work / "model").rename(target)
        except OSError:  # another process converted it meanwhile
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def convert_marian_named(source: str | Path, out_dir: str | Path) -> Path:
    """`convert_marian` of a local Marian directory, or of a Hub model named ORG/NAME[@REV]
    (or hf:ORG/NAME[@REV]) fetched first (`marian_snapshot`)."""
    name = str(source)
    if Path(name).is_dir() or not is_hub_name(name):
        return convert_marian(source, out_dir)
    repo, revision = split_name(name)
    snapshot = marian_snapshot(repo, revision)
    _check_marian(snapshot, repo)
    return convert_marian(snapshot, out_dir, f"{repo}@{snapshot.name}")


def _check_marian(snapshot: Path, repo: str) -> None:
    try:
        kind = json.loads((snapshot / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        raise ValueError(f"{repo}: no readable config.json: not a Marian model") from None
    if kind != "marian":
        raise ValueError(f"{repo} is a {kind!r} model; qkv converts Marian models (OPUS-MT)")


def _hub_cache() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


__all__ = [
    "PREFIX",
    "convert_marian_named",
    "is_hub_name",
    "marian_snapshot",
    "model_directory",
    "resolve_model",
    "snapshot_directory",
    "split_name",
]
