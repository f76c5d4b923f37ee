"""Translated files waiting to be downloaded (LibreTranslate's /translate_file, /download_file).

Kept in memory, each under a random name, for `KEEP_SECONDS` after it was made; at most
`KEEP_FILES` of them, so a server's memory stays bounded whatever is sent. Each file belongs to a
client (its address); when the store is full, the oldest file of the client that holds the most
goes, so a client sending many files pushes out its own, and every client keeps its share.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter, OrderedDict
from urllib.parse import quote

KEEP_SECONDS = 600.0
KEEP_FILES = 64
SUFFIXES = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
            ".htm": "text/html; charset=utf-8"}  # fmt: skip


class FileStore:
    """Named bytes that expire (see the module docstring); safe to use from any thread."""

    def __init__(self, keep_seconds: float = KEEP_SECONDS, keep_files: int = KEEP_FILES) -> None:
        self.keep_seconds, self.keep_files = keep_seconds, keep_files
        self._files: OrderedDict[str, tuple[float, str, bytes]] = OrderedDict()
        self._held: Counter[str] = Counter()  # client -> files kept
        self._lock = threading.Lock()

    def put(self, filename: str, data: bytes, client: str = "") -> str:
        """Keep `data` for `client`; the name to fetch it by: a random token, then the file's
        own name."""
        name = f"{secrets.token_urlsafe(16)}.{filename}"
        with self._lock:
            self._expire()
            self._files[name] = (time.monotonic(), client, data)
            self._held[client] += 1
            while len(self._files) > self.keep_files:
                most = max(self._held.values())
                self._drop(next(n for n, f in self._files.items() if self._held[f[1]] == most))
        return name

    def get(self, name: str) -> bytes | None:
        with self._lock:
            self._expire()
            kept = self._files.get(name)
        return None if kept is None else kept[2]

    def _expire(self) -> None:
        oldest = time.monotonic() - self.keep_seconds
        while self._files and next(iter(self._files.values()))[0] < oldest:
            self._drop(next(iter(self._files)))

    def _drop(self, name: str) -> None:
        _, client, _ = self._files.pop(name)
        self._held[client] -= 1
        if not self._held[client]:
            del self._held[client]


def content_disposition(filename: str) -> str:
    """The Content-Disposition of a download (RFC 6266): the name as it is where it is plain
    ASCII; otherwise an ASCII stand-in (`_` for each other character) and the name in UTF-8
    (`filename*`, RFC 5987), which browsers and curl prefer."""
    plain = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in filename)
    if plain == filename:
        return f'attachment; filename="{filename}"'
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(filename, safe='')}"


__all__ = ["SUFFIXES", "FileStore", "content_disposition"]
