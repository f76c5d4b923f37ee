"""Real `qkv serve` processes on free loopback ports, for the server tests.

Each server is a child process (`python -m qkv serve --port 0 ...`); its first stdout line names the
port. Every client call has a timeout, so a hung server fails a test instead of hanging the suite.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from qkv.decode.options import DecodeOptions

KEY = "test-key"
PAIR = "en-zh"  # the tiny model of tests/apps/conftest.py: English and Chinese subwords
SERVED = DecodeOptions(beam=2, max_len_b=12)  # the shared server's defaults: short outputs
STARTUP_SECONDS = 120  # importing torch and loading the model, on a busy CI machine


class Server:
    """A running `qkv serve` process and an HTTP client for it."""

    def __init__(self, process: subprocess.Popen[str], url: str, lines: queue.Queue[str]) -> None:
        self.process, self.url, self.lines = process, url, lines
        self.client = httpx.Client(base_url=url, timeout=60)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, and the exit status once the process has drained and stopped."""
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            raise

    def output(self) -> str:
        """What the process printed so far (stdout and stderr)."""
        lines = []
        while not self.lines.empty():
            lines.append(self.lines.get_nowait())
        return "".join(lines)


def start_server(model: Path, *args: str) -> Server:
    # the decoding path of the in-process oracles (tests/conftest.py), not one measured here
    path = [] if "--precision" in args else ["--precision", "fp32", "--pack"]
    command = [sys.executable, "-m", "qkv", "serve", "--model", str(model), "--port", "0",
               "--threads", "1", *path, *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "QKV_API_KEY": ""}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    seen = []
    while True:
        try:
            line = lines.get(timeout=STARTUP_SECONDS)
        except queue.Empty:
            process.kill()
            raise RuntimeError("qkv serve did not start:\n" + "".join(seen)) from None
        seen.append(line)
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            break
        if process.poll() is not None and lines.empty():
            raise RuntimeError("qkv serve exited:\n" + "".join(seen))
    server = Server(process, found.group(1), lines)
    for _ in range(STARTUP_SECONDS * 10):  # the socket is bound before uvicorn serves it
        try:
            if server.client.get("/health", timeout=5).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            break
        threading.Event().wait(0.1)
    process.kill()
    raise RuntimeError("qkv serve did not answer /health:\n" + "".join(seen) + server.output())


@contextmanager
def running(model: Path, *args: str) -> Iterator[Server]:
    server = start_server(model, *args)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.stop()




def learners_path() -> Any:
    """docs/learners_path.py as a module: the screenshot functions that make docs/figures."""
    path = Path(__file__).resolve().parents[3] / "docs" / "learners_path.py"
    spec = importlib.util.spec_from_file_location("learners_path", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script
