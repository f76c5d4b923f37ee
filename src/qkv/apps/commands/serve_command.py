"""`qkv serve`: model directories over HTTP (`qkv.apps.server`): LibreTranslate-compatible and
native APIs, and a page. FastAPI and uvicorn load when the command runs, not with its parser."""

from __future__ import annotations

import argparse
import os

from ...decode.options import option_names
from ..documents import SPLITS
from ..server.limits import Limits
from ._flags import (
    TRANSLATOR_FLAGS,
    add_decoding_arguments,
    add_flag,
    add_flags,
    decode_options,
    read_glossary,
    restart_on_cpu,
    runtime_options,
)
from ._translating import print_decoding_path

HELP = "serve model directories over HTTP: LibreTranslate-compatible and native APIs, a page"
DESCRIPTION = (
    "Serve translations over HTTP (see qkv.apps.server): POST /translate (LibreTranslate), POST "
    "/v1/translate (native), /languages, /health, /metrics, /docs, and a page at /. Sentences of "
    "concurrent requests are decoded in shared batches. SIGTERM or Ctrl-C answers the requests in "
    "flight, then stops."
)
# the decoding options a request may leave unset: the server's flags for them
DECODING = option_names("serve")
DECODING_HELP = "{help} (a request's default: %(default)s)"
LIMITS = {  # the integer `Limits` of `qkv serve`, each an option of the same name
    "max_body_bytes": "request body size",
    "max_chars": "characters of text per request",
    "max_sentences": "sentences (lines) per request",
    "max_beam": "beam and n-best per request",
    "max_output_tokens": "max_len_b and min_len per request, and the output length limit "
    "(max_len_a x source tokens + max_len_b) beyond a sentence's source length",
    "max_decode_tokens": "beam x output length limit, summed over a request's sentences",
    "long_request_tokens": "requests that may decode more (as above) have a decoding thread of "
    "their own",
    "max_queue": "requests waiting for the decoder; beyond: 503",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser, "--model", help="model directory; give it again for each further language pair"
    )
    parser.add_argument(
        "--pair",
        action="append",
        help="SRC-TGT (e.g. en-de) of each --model, in order, for models whose config.json "
        "records no languages",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: loopback)"
    )
    parser.add_argument(
        "--port", type=int, default=8000, help="0: a free port (default: %(default)s)"
    )
    parser.add_argument(
        "--api-key",
        help="require this key (LibreTranslate's api_key field or 'Authorization: Bearer KEY'; "
        "default: $QKV_API_KEY, else none)",
    )
    parser.add_argument(
        "--cors",
        action="append",
        metavar="ORIGIN",
        help="let web pages of this origin call the APIs from a browser ('*': any); repeatable",
    )
    add_decoding_arguments(parser, DECODING, template=DECODING_HELP)
    _add_limit_arguments(parser)
    parser.add_argument(
        "--max-wait-ms",
        type=float,
        default=5.0,
        help="how long the decoder waits for more requests to batch with (%(default)s)",
    )
    parser.add_argument(
        "--no-batching", action="store_true", help="decode one request at a time (to compare)"
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default=SPLITS[0],
        help="how /translate cuts a text: the sentences of each line, or each line whole "
        "(%(default)s)",
    )
    add_flags(parser, "--glossary", *TRANSLATOR_FLAGS)
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's)")
    parser.add_argument("--access-log", action="store_true", help="log every request")


def _add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """What one request may ask for (`Limits`), and how long stopping may take."""
    limits = Limits()
    for name, help_text in LIMITS.items():
        default = getattr(limits, name)
        flag = f"--{name.replace('_', '-')}"
        parser.add_argument(flag, type=int, default=default, help=f"{help_text} ({default})")
    parser.add_argument(
        "--timeout",
        type=float,
        default=limits.timeout,
        help="seconds a request may take; beyond: 504 (%(default)s)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=20.0,
        help="on SIGTERM or Ctrl-C, seconds to finish the requests in flight; then they are "
        "answered 503 and the exit status is 1 (%(default)s)",
    )


def parse_limits(args: argparse.Namespace) -> Limits:
    """The `Limits` of the parsed arguments, checked as the flags are."""
    given = Limits(**{name: getattr(args, name) for name in LIMITS}, timeout=args.timeout)
    for name in LIMITS:
        if getattr(given, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if not given.timeout > 0 or args.max_wait_ms < 0 or args.batch_tokens < 1:
        raise ValueError("--timeout must be > 0, --max-wait-ms >= 0 and --batch-tokens >= 1")
    if not args.grace >= 0:
        raise ValueError("--grace must be >= 0")
    if args.max_len_b > given.max_output_tokens:
        raise ValueError(
            f"--max-len-b {args.max_len_b} is over --max-output-tokens {given.max_output_tokens}"
        )
    return given


def run(args: argparse.Namespace) -> int:
    from ...runtime.process import configure_process
    from ..server import create_app, load_models, serve
    from ..server.run import bind, warm_up

    options = decode_options(args)  # what a request leaves unset
    request_limits = parse_limits(args)
    runtime = runtime_options(args)
    glossary = read_glossary(args)
    bind(args.host, args.port).close()  # a busy port or an unknown host: before the models load
    restart_on_cpu(args, runtime.device)
    configure_process(threads=runtime.threads, cudnn_attention=False)  # qkv.runtime.process
    models = load_models(args.model, args.pair or (), runtime)
    print_decoding_path(models[0].translator)
    warm_up(models, options)
    app = create_app(
        models,
        limits=request_limits,
        options=options,
        api_key=args.api_key or os.environ.get("QKV_API_KEY") or None,
        max_wait=args.max_wait_ms / 1000,
        batching=not args.no_batching,
        cors_origins=args.cors,
        split=args.split,
        glossary=glossary,
    )
    print(f"qkv serve: {', '.join(m.pair for m in models)}", flush=True)
    lost = serve(app, args.host, args.port, grace=args.grace, access_log=args.access_log)
    return 1 if lost else 0
