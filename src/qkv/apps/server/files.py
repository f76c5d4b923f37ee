"""Translated files waiting to be downloaded (LibreTranslate's /translate_file, /download_file).

Kept in memory, each under a random name, for `KEEP_SECONDS` after it was made; at most
`KEEP_FILES` of them (the oldest go first), so a server's memory stays bounded whatever is sent.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict

KEEP_SECONDS = 600.0
KEEP_FILES = 64
SUFFIXES = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
            ".htm": "text/html; charset=utf-8"}  # fmt: skip


class FileStore:
    """Named bytes that expire (see the module docstring); safe to use from any thread."""

    def __init__(self, keep_seconds: float = KEEP_SECONDS, keep_files: int = KEEP_FILES) -> None:
        self.keep_seconds, self.keep_files = keep_seconds, keep_files
        self._files: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, filename: str, data: bytes) -> str:
        """Keep `data`; the name to fetch it by: a random token, then the file's own name."""
        name = f"{secrets.token_urlsafe(16)}.{filename}"
        with self._lock:
            self._expire()
            self._files[name] = (time.monotonic(), data)
            while len(self._files) > self.keep_files:
                self._files.popitem(last=False)
        return name

    def get(self, name: str) -> bytes | None:
        with self._lock:
            self._expire()
            kept = self._files.get(name)
        return None if kept is None else kept[1]

    def _expire(self) -> None:
        oldest = time.monotonic() - self.keep_seconds
        while self._files and next(iter(self._files.values()))[0] < oldest:
            self._files.popitem(last=False)


__all__ = ["SUFFIXES", "FileStore"]
