"""The commands of `qkv`, one module each (`qkv.apps.cli` builds the parser and runs them).

The module of command NAME is `NAME_command.py` (`qkv translate`: `translate_command.py`), so that
no module name in qkv repeats; it has `HELP`, `add_arguments(parser)` and `run(args) -> int`, and
optionally `DESCRIPTION` and `PARSER`. What several commands share lies in the modules whose names
start with "_" (`_flags.py`, `_io.py`, `_translating.py`).

COMMANDS lists the commands in the order `qkv --help` shows them.

Details: docs/architecture.md, "The command line" (each part of a command module).
"""

COMMANDS = (
    "params",
    "train",
    "demo",
    "figures",
    "average",
    "translate",
    "attention",
    "explain",
    "evaluate",
    "serve",
    "convert",
    "export",
    "generate",
    "classify",
)
