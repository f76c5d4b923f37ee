"""Marian models (OPUS-MT) by their Hugging Face Hub name, converted once and cached.

    snapshot = marian_snapshot("Helsinki-NLP/opus-mt-en-de")          # the files, on disk
    directory = model_directory("hf:Helsinki-NLP/opus-mt-en-de@main")  # a qkv model directory
    convert_marian_named("Helsinki-NLP/opus-mt-en-de", "runs/en-de")   # `qkv convert marian`

`marian_snapshot` fetches only what the conversion reads (config.json, the weights, source.spm,
target.spm, the vocabularies, tokenizer_config.json) with `huggingface_hub`, into its own cache
(`HF_HOME` / `HF_HUB_CACHE`); `HF_HUB_OFFLINE=1` uses that cache alone, `HF_ENDPOINT` another hub,
`HF_TOKEN` a private model; a Hub that does not answer a connection within 3 s counts as
offline (huggingface_hub retries for tens of seconds). `model_directory` converts a snapshot once
into qkv's cache (`$QKV_CACHE_DIR/models`, else ~/.cache/qkv/models), one directory per commit,
and hands back the same directory on every later call. Each failure is a ValueError of one
line: no such model, no such revision, offline without it in the cache, a model that is not a
Marian one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..config import cache_dir
from .marian import convert_marian

PREFIX = "hf:"  # a model directory argument that names a Hub model: hf:ORG/NAME[@REVISION]
NEEDED = ["config.json", "*.spm", "*vocab.json", "tokenizer_config.json"]
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first one the repository has
CONNECT_SECONDS = 3.0  # how long a connection to the Hub may take before it counts as unreachable


def is_hub_name(name: str) -> bool:
    """Whether `name` names a Hub model: hf:ORG/NAME, or ORG/NAME that is no local path (either
    with @REVISION, which may hold slashes: its branch, tag or commit)."""
    if name.startswith(PREFIX):
        return True
    if Path(name).exists():
        return False
    repo = name.partition("@")[0]
    return repo.count("/") == 1 and not repo.startswith((".", "/"))


def split_name(name: str) -> tuple[str, str | None]:
    """'hf:org/name@rev' -> ('org/name', 'rev'); without @: revision None (the default branch)."""
    repo, _, revision = name.removeprefix(PREFIX).partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ValueError(
            f"{name!r}: a Hub model is named ORG/NAME (e.g. Helsinki-NLP/opus-mt-en-de)"
        )
    return repo, revision or None


def marian_snapshot(repo: str, revision: str | None = None) -> Path:
    """The local folder of a Hub repository's files that a Marian conversion reads. Where the
    Hub cannot be reached (`hub_unreachable`), the Hugging Face cache alone, at once."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import (
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision {revision}" if revision else ""
    unreachable = hub_unreachable()
    try:
        try:
            if unreachable:
                raise ConnectionError(unreachable)
            files = HfApi().list_repo_files(repo, revision=revision)
            weights = [next((w for w in WEIGHTS if w in files), WEIGHTS[0])]
        except (RepositoryNotFoundError, RevisionNotFoundError):
            raise
        except Exception:  # offline, or no network: the cache decides
            weights = list(WEIGHTS)
        folder = snapshot_download(
            repo,
            revision=revision,
            allow_patterns=[*NEEDED, *weights],
            local_files_only=bool(unreachable),
        )
    except RevisionNotFoundError:
        raise ValueError(f"{repo} has no revision {revision!r} on the Hub") from None
    except RepositoryNotFoundError:
        raise ValueError(
            f"no model {repo} on the Hub (a private one needs HF_TOKEN or `hf auth login`)"
        ) from None
    except LocalEntryNotFoundError:
        why = unreachable or "offline, or HF_HUB_OFFLINE=1"
        raise ValueError(
            f"{repo}{at} is not in the Hugging Face cache ({_hub_cache()}) and the Hub cannot be "
            f"reached ({why}): fetch it once with network access"
        ) from None
    return Path(folder)


def hub_unreachable(seconds: float = CONNECT_SECONDS) -> str | None:
    """Why the Hub cannot be reached, found in at most `seconds` (a TCP connection to its
    endpoint, `HF_ENDPOINT`), or None where it may be: huggingface_hub itself retries for tens
    of seconds before it gives up. None too with HF_HUB_OFFLINE=1 (the cache alone, without
    asking) and behind a proxy (the proxy decides)."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    proxies = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
    if constants.HF_HUB_OFFLINE or any(os.environ.get(v) for v in proxies):
        return None
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=seconds).close()
    except OSError as e:
        return (
            f"no connection to {constants.ENDPOINT} within {seconds:g} s: {e.strerror or e}; "
            "HF_HUB_OFFLINE=1 uses the cache without trying"
        )
    return None


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
    "hub_unreachable",
    "is_hub_name",
    "marian_snapshot",
    "model_directory",
    "resolve_model",
    "split_name",
]
