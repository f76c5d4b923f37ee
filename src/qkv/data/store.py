"""Directories built once and shared: the store under which prepared data lives.

`built_once(root, name, build)` returns `root/name`, building it first when it is missing or
damaged. A build writes into a temporary directory beside it and renames it into place when
`build` returns, with `manifest.json` (written last) recording every file's size and sha256; a
directory without a manifest that matches its files is never used. Builders of the same name
take turns on a lock file (`fcntl.flock`): two runs, or the torchrun ranks of one, that need the
same data build it once. A build killed midway leaves a temporary directory that the next build
of that name removes. Deleting `root/name` at any time is safe: it is built again when needed.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .corpus import DataError

MANIFEST = "manifest.json"


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of `directory` when every file it lists has its recorded size and sha256;
    None when the directory or its manifest is missing, or a file is missing or differs."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        files = manifest["files"]
        for name, (size, digest) in files.items():
            path = directory / name
            if path.stat().st_size != size or file_sha256(path) != digest:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return manifest


def _finish(directory: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Record the files of `directory` (size, sha256) in its manifest, written last; return it."""
    files = {
        p.name: [p.stat().st_size, file_sha256(p)]
        for p in sorted(directory.iterdir())
        if p.name != MANIFEST
    }
    manifest = {**manifest, "files": files}
    with open(directory / MANIFEST, "w") as f:
        f.write(json.dumps(manifest, indent=1))
        f.flush()
        os.fsync(f.fileno())
    return manifest


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # waits while another process builds
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _unwritable(root: Path, e: OSError) -> DataError:
    why = "the disk is full" if e.errno == errno.ENOSPC else e.strerror or str(e)
    return DataError(
        f"cannot write prepared data under {root}: {why}. Free space, or put it elsewhere with "
        "--prepared_dir DIR (or QKV_CACHE_DIR); nothing half-written is kept"
    )


def built_once(
    root: Path, name: str, build: Callable[[Path], dict[str, Any]]
) -> tuple[Path, dict[str, Any]]:
    """`root/name` and its manifest, built by `build(tmp_dir) -> manifest` when missing or
    damaged."""
    final = root / name
    manifest = read_manifest(final)
    if manifest is not None:
        return final, manifest
    try:
        root.mkdir(parents=True, exist_ok=True)
        with _locked(root / f".{name}.lock"):
            manifest = read_manifest(final)  # built by another process while this one waited
            if manifest is not None:
                return final, manifest
            for stale in [final, *root.glob(f".{name}.*.tmp")]:
                shutil.rmtree(stale, ignore_errors=True)
            tmp = root / f".{name}.{os.getpid()}.tmp"
            tmp.mkdir()
            try:
                manifest = _finish(tmp, build(tmp))
                os.replace(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        named = Path(e.filename).resolve() if e.filename is not None else None
        if named is not None and root.resolve() not in (named, *named.parents):
            raise  # not the store's: an input file, named by the error itself
        raise _unwritable(root, e) from None
    return final, manifest
