"""The commands of `qkv`, one module each (`qkv.apps.cli` builds the parser and runs them).

The module of command NAME is `NAME_command.py` (`qkv translate`: `translate_command.py`), so that
no module name in qkv repeats; it has:

    HELP                 its line in `qkv --help`
    DESCRIPTION          (optional) the text atop `qkv COMMAND --help`
    PARSER               (optional) keywords of its argparse parser (train: allow_abbrev=False)
    add_arguments(parser)
    run(args) -> int     the exit status; a ValueError or OSError is a one-line error (status 2)

What several commands share lies in the modules whose names start with "_":

    _flags.py        flags declared once: the decoding flags (one per `DecodeOptions` field), the
                     model and runtime flags (--model, --device, --batch-tokens, ...)
    _io.py           input lines from a file or stdin, output lines to a file or stdout
    _translating.py  loading a translator from the flags, translating lines as they are done

COMMANDS lists the commands in the order `qkv --help` shows them.
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
