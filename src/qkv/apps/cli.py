"""The `qkv` command line: thin wrappers over the Python API.

    qkv --help                                    the commands, one line each
    qkv translate --model DIR [--input FILE]      translate lines (stdin or FILE) to stdout
    qkv COMMAND --help                            the arguments of a command

Each command is a module of `qkv.apps.commands`; this module builds the parser from them, parses,
runs the command and turns its failures into exit statuses: a user's mistake or a refusal of the
system is one line, `qkv COMMAND: error: ...`, and status 2; Ctrl-C 130; a closed pipe, quietly,
141.

Details: docs/architecture.md, "The command line" (every command, the shared decoding options).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from .commands import COMMANDS
from .commands._flags import decode_options
from .commands._io import OutputError, detach_stdout, error_line


def build_parser() -> argparse.ArgumentParser:
    """The parser of `qkv`: a sub-parser per command of `qkv.apps.commands`, whose `run` is the
    parsed arguments' `func`."""
    parser = argparse.ArgumentParser(prog="qkv", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        command = importlib.import_module(f".commands.{name}_command", __package__)
        p = sub.add_parser(
            name,
            help=command.HELP,
            description=getattr(command, "DESCRIPTION", None),
            **getattr(command, "PARSER", {}),
        )
        command.add_arguments(p)
        p.set_defaults(func=command.run)
    return parser


def parse_arguments(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The parsed `argv`. A flag that the command's parser does not declare is an error, except
    for a command with `overrides` (`qkv train`): there each is a config override, `--key value`,
    `--key=value` or a bare `--key`, and `args.overrides` holds them as given."""
    args, unknown = parser.parse_known_args(argv)
    if "overrides" in args:
        # each override and its value as one token that argparse cannot mistake for the config
        start = argv.index(args.command) + 1
        tokens, stands_for = _opaque_overrides(argv, start, unknown)
        args, unknown = parser.parse_known_args(tokens)
        args.overrides = [part for token in unknown for part in stands_for.get(token, [token])]
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _opaque_overrides(
    argv: list[str], start: int, unknown: list[str]
) -> tuple[list[str], dict[str, list[str]]]:
    """argv with each unknown flag from `start` on, and its value (a next token that does not
    start with "--"), replaced by one opaque `--` token; and the tokens each stands for."""
    flags = {token for token in unknown if token.startswith("--")}
    tokens, stands_for, i = argv[:start], {}, start
    while i < len(argv):
        token = argv[i]
        if token in flags or (token.startswith("--") and " " in token):
            valued = "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            n = 2 if valued else 1
            opaque = f"--\0{len(stands_for)}"  # no command line holds a NUL character
            stands_for[opaque] = argv[i : i + n]
            tokens.append(opaque)
            i += n
        else:
            tokens.append(token)
            i += 1
    return tokens, stands_for


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    from_command_line = argv is None
    args = parse_arguments(parser, list(sys.argv[1:] if argv is None else argv))
    args.own_process = from_command_line  # the process is the command's: it may be restarted
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader of the output has gone (`| head`): stop, as Unix tools do
        detach_stdout()
        return 141  # 128 + SIGPIPE, the status of a process that SIGPIPE ended
    except KeyboardInterrupt as e:  # Ctrl-C: what was done, in one line
        detail = f" ({e})" if str(e) else ""
        error_line(f"qkv {args.command}: interrupted{detail}")
        return 130  # 128 + SIGINT
    except (ValueError, OSError) as e:  # user errors and the system's refusals: one clear line
        if isinstance(e, OutputError) and e.on_stdout:
            detach_stdout()
        error_line(f"qkv {args.command}: error: {one_line(e)}")
        return 2


def one_line(e: BaseException) -> str:
    """The message of an error on one line; an OSError as "reason: file"."""
    if isinstance(e, OSError) and e.strerror:
        text = f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    else:
        text = str(e) or type(e).__name__
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


__all__ = ["build_parser", "decode_options", "main", "parse_arguments"]

if __name__ == "__main__":
    sys.exit(main())
