"""Loading the models to serve and running the server (what `qkv serve` does).

    models = load_models(["runs/en-de", "runs/de-en"])         # pairs from config.json
    models = load_models(["runs/mine"], pairs=["en-de"])       # for a model that records none
    models = load_models(["runs/en-de"], runtime=RuntimeOptions(device="cuda"))
    serve(create_app(models), host="127.0.0.1", port=8000)     # until SIGTERM or Ctrl-C

The socket is bound before uvicorn starts, so that port 0 (a free port) works: the line
`qkv serve: listening on http://HOST:PORT` on stdout gives the port. On SIGTERM or Ctrl-C uvicorn
stops accepting connections and answers the requests in flight for at most `grace` seconds; what is
still queued or decoding then is abandoned (its requests answered 503, the running batch stopped at
its next step), and `serve` returns how many requests it abandoned.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from types import FrameType

import uvicorn
from fastapi import FastAPI

from ...decode.options import DecodeOptions
from ...interop.hub import resolve_model
from ...modeldir import load_languages
from ...runtime.runtime_options import RuntimeOptions
from ..translator import Translator
from .service import ServedModel, Stopped

log = logging.getLogger("qkv.serve")


def parse_pair(text: str) -> tuple[str, str]:
    """'en-de' -> ('en', 'de')."""
    source, _, target = text.partition("-")
    if not source or not target or "-" in target:
        raise ValueError(f"a language pair looks like en-de, got {text!r}")
    return source, target


def load_models(
    directories: Sequence[str],
    pairs: Sequence[str] = (),
    runtime: RuntimeOptions | None = None,
) -> list[ServedModel]:
    """One `ServedModel` per model directory, each with the pair its config.json records, or the
    pair given for it in `pairs` (one per directory, in order; given ones win), each loaded and
    run as `runtime` says (None: `RuntimeOptions()`)."""
    if pairs and len(pairs) != len(directories):
        raise ValueError(
            f"{len(pairs)} --pair for {len(directories)} --model: give one --pair per model "
            "(in the same order), or none"
        )
    models = []
    for i, given in enumerate(directories):
        directory = resolve_model(given)
        pair = parse_pair(pairs[i]) if pairs else load_languages(directory)
        if pair is None:
            raise ValueError(
                f"{directory} does not record its languages; give them with --pair SRC-TGT "
                "(e.g. --pair en-de)"
            )
        translator = Translator.load(directory, runtime)
        models.append(ServedModel(pair[0], pair[1], translator))
    return models


def warm_up(models: Sequence[ServedModel], options: DecodeOptions) -> None:
    """Translations of one sentence and of two per model before serving, so that the first
    request is not the slow one (a captured step compiles its graphs for one row and for several
    here) and a model that cannot translate fails now, not on a user's request."""
    for m in models:
        for texts in (["hello world"], ["hello world", "good morning"]):
            m.translator.translate_detailed(texts, options.replace(nbest=1))


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: a free port), IPv4 or IPv6 as the host is."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ValueError(f"--host {host}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Server(uvicorn.Server):
    """uvicorn's server, which also calls `on_exit` at the first SIGTERM or Ctrl-C."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[int], None]) -> None:
        super().__init__(config)
        self.on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            self.on_exit(sig)
        super().handle_exit(sig, frame)


def serve(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 8000,
    grace: float = 20.0,
    access_log: bool = False,
) -> int:
    """Run the server until SIGTERM or Ctrl-C (see the module docstring); the number of requests
    abandoned when it stopped."""
    sock = bind(host, port)
    sock.listen(2048)  # connections wait in the backlog until uvicorn serves them
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"qkv serve: listening on http://{shown}:{bound_port}", flush=True)
    if not is_loopback(host):
        log.warning("qkv serve: listening on %s, reachable from other machines", host)
    config = uvicorn.Config(
        app,
        log_level="info",
        access_log=access_log,
        timeout_graceful_shutdown=int(grace) + 5,  # after the abandoned requests are answered
        lifespan="on",
    )
    abandoned: list[int] = []

    def abandon() -> None:
        error = Stopped(f"the server stopped before answering (no answer within {grace:g} s)")
        abandoned.append(app.state.abandon(error))

    def start_clock(signum: int) -> None:
        if hasattr(app.state, "drain"):
            app.state.drain()
        timer = threading.Timer(grace, abandon)
        timer.daemon = True
        timer.start()

    server = _Server(config, start_clock)
    # uvicorn handles SIGTERM and SIGINT (drain, then stop) and raises the signal again when done;
    # these handlers take that second one, so that a drained server exits with status 0
    received: list[int] = []
    stops = (signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, lambda signum, _: received.append(signum)) for s in stops}
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    why = f" ({signal.Signals(received[0]).name})" if received else ""
    lost = sum(abandoned)
    left = f"; {lost} requests abandoned after {grace:g} s (answered 503)" if lost else ""
    print(f"qkv serve: stopped{why}{left}", flush=True)
    return lost


__all__ = ["bind", "load_models", "parse_pair", "serve", "warm_up"]
