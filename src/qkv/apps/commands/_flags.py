"""The arguments several commands take, each declared once.

    add_decoding_arguments(parser, SEARCH)      a flag per named `DecodeOptions` field
    add_flags(parser, "--device", ...)          flags of FLAGS, as declared there
    add_flag(parser, "--model", help="...")     one of FLAGS, changed for one command
    decode_options(args)                        the `DecodeOptions` of the parsed arguments
    runtime_options(args)                       the `RuntimeOptions` of the parsed arguments

A decoding flag is a `DecodeOptions` field: `--NAME` ("_" written "-"; or its metadata["flag"],
as `--sample`, a switch, for `sampling`), of the field's type, with the field's default (or the
command's, as `qkv generate`'s GENERATE) and the field's metadata["help"]. `qkv translate` takes
every field (ALL); the other commands take the groups that apply to them (SEARCH, SAMPLING: the
fields of that metadata["group"]). How the model loads and runs
(TRANSLATOR_FLAGS, --workers, `qkv serve`'s --threads) is one `RuntimeOptions`, each of its fields
a flag of the same name.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable
from typing import Any

import torch

from ...decode.options import OPTION_TYPES, DecodeOptions, option_names
from ...runtime.precision import PRECISIONS
from ...runtime.process import restart_with_tcmalloc
from ...runtime.quantize import QUANTIZATIONS
from ...runtime.runtime_options import RuntimeOptions
from ..glossary import Glossary

_FIELDS = {f.name: f for f in dataclasses.fields(DecodeOptions)}
ALL = tuple(_FIELDS)
SEARCH = option_names("group", "search")  # beam search and its limits
SAMPLING = option_names("group", "sampling")
DEFAULT_HELP = "{help} (default: %(default)s)"  # the help of a decoding flag that takes a value


def decoding_flag(name: str) -> str:
    """The flag of the `DecodeOptions` field `name`: `--max-len-b` of max_len_b."""
    return _FIELDS[name].metadata["flag"] or "--" + name.replace("_", "-")


def add_decoding_arguments(
    parser: argparse.ArgumentParser,
    names: Iterable[str],
    defaults: DecodeOptions | None = None,
    template: str = DEFAULT_HELP,
    helps: dict[str, str] | None = None,
) -> None:
    """A flag for each named `DecodeOptions` field, in the order given: its default from
    `defaults` (default: `DecodeOptions()`), its help the field's (or `helps[name]`) put into
    `template` ("{help}"; a switch's help is the text alone)."""
    defaults = DecodeOptions() if defaults is None else defaults
    for name in names:
        text = (helps or {}).get(name, _FIELDS[name].metadata["help"])
        default = getattr(defaults, name)
        if OPTION_TYPES[name] is bool:
            parser.add_argument(
                decoding_flag(name), dest=name, action="store_true", default=default, help=text
            )
        else:
            parser.add_argument(
                decoding_flag(name),
                dest=name,
                type=OPTION_TYPES[name],
                default=default,
                help=template.format(help=text),
            )


def decode_options(args: argparse.Namespace, base: DecodeOptions | None = None) -> DecodeOptions:
    """The one `DecodeOptions` of the parsed arguments: each field given as an argument of the same
    name; the others as in `base` (default: `DecodeOptions()`; `evaluate` has no sampling or
    n-best arguments, so their defaults apply)."""
    given = {name: getattr(args, name) for name in ALL if hasattr(args, name)}
    return (DecodeOptions() if base is None else base).replace(**given)


def runtime_options(args: argparse.Namespace) -> RuntimeOptions:
    """The one `RuntimeOptions` of the parsed arguments: each field given as an argument of the
    same name, the others at their defaults (`qkv serve` has no --workers, the others no
    --threads; --threads 0 is torch's threads, as None). Checked as it is made: a device this
    machine lacks is refused here, before any model loads."""
    names = (f.name for f in dataclasses.fields(RuntimeOptions))
    given = {name: getattr(args, name) for name in names if hasattr(args, name)}
    if given.get("threads") == 0:
        given["threads"] = None
    return RuntimeOptions(**given)


def restart_on_cpu(args: argparse.Namespace, device: str | torch.device) -> None:
    """Restart the command with tcmalloc (`runtime.process.restart_with_tcmalloc`) where it runs
    on the CPU in a process of its own (the command line's, not `cli.main` called by a program):
    glibc gives large freed blocks back to the system and maps them again, page by page, at the
    next step, and a training run's memory grows with its batch shapes; tcmalloc keeps them.
    Decoding on the CPU runs faster with it, and the restart starts Python and torch again
    (both measured in docs/benchmarks.md, "The allocator for decoding")."""
    if args.own_process and torch.device(device).type == "cpu":
        restart_with_tcmalloc()


RUNTIME_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RuntimeOptions)}

FLAGS: dict[str, dict[str, Any]] = {  # flag -> its add_argument keywords
    "--model": {
        "required": True,
        "action": "append",
        "help": "model directory (config.json, model.safetensors, tokenizer); give it again for "
        "each further model of an ensemble (same tokenizer): their probabilities are averaged",
    },
    "--input": {"help": "UTF-8 text file (.gz allowed); default: stdin"},
    "--device": {
        "default": RUNTIME_DEFAULTS["device"],
        "help": "cpu, cuda, cuda:1, mps, ... (default: %(default)s)",
    },
    "--batch-tokens": {
        "type": int,
        "default": RUNTIME_DEFAULTS["batch_tokens"],
        "help": "most padded source tokens in a batch (default: %(default)s)",
    },
    "--max-src-tokens": {
        "type": int,
        "default": RUNTIME_DEFAULTS["max_src_tokens"],
        "help": "longer source lines are truncated, with a warning; learned positions: at most "
        "max_positions (default: %(default)s)",
    },
    "--quantize": {
        "choices": QUANTIZATIONS,
        "help": "int8 dynamic quantization of the linear layers (CPU)",
    },
    "--precision": {  # --precision and --pack left at auto: measured on this CPU (runtime.choice)
        "choices": PRECISIONS,
        "default": RUNTIME_DEFAULTS["precision"],
        "help": "weights and compute: fp32, bf16, or auto (the faster of the two on this device; "
        "bf16 only where it is native: AVX512_BF16/AMX CPU, CUDA with bf16) "
        "(default: %(default)s)",
    },
    "--pack": {
        "action": argparse.BooleanOptionalAction,
        "default": RUNTIME_DEFAULTS["pack"],
        "help": "linear weights packed for oneDNN (--pack) or kept as nn.Linear (--no-pack) "
        "(default: the faster on this CPU, measured once and cached)",
    },
    "--capture": {
        "action": "store_true",
        "help": "decode through a captured step: the decoder's one-token step compiled by "
        "TorchInductor once per process (seconds; a C++ compiler needed), the same outputs; pays "
        "when many sentences are decoded, at batch 1 most (CPU)",
    },
    "--glossary": {
        "metavar": "TSV",
        "help": "terms the translations must use: 'source term<TAB>target term' lines; where a "
        "source term occurs, its target term appears in the translation (constrained beam search)",
    },
    "--workers": {
        "type": int,
        "default": RUNTIME_DEFAULTS["workers"],
        "help": "batches decoded at once: on a CPU, forked processes of one thread each (give as "
        "many as cores; threads where the system does not fork) (default: %(default)s)",
    },
}
# how a translator is loaded and run: translate, attention, evaluate and serve
TRANSLATOR_FLAGS = (
    "--batch-tokens",
    "--max-src-tokens",
    "--device",
    "--quantize",
    "--precision",
    "--pack",
    "--capture",
)


def add_flag(parser: argparse.ArgumentParser, flag: str, **changes: Any) -> None:
    """The flag as FLAGS declares it, with `changes` to its keywords (help=..., action=...)."""
    parser.add_argument(flag, **{**FLAGS[flag], **changes})


def add_flags(parser: argparse.ArgumentParser, *flags: str) -> None:
    """The flags as FLAGS declares them."""
    for flag in flags:
        add_flag(parser, flag)


def read_glossary(args: argparse.Namespace) -> Glossary | None:
    """The glossary of --glossary, read and checked (None without the flag)."""
    return Glossary.read(args.glossary) if getattr(args, "glossary", None) else None


def formats_help(formats: Iterable[str]) -> str:
    """The help of a FORMAT argument: "marian: OPUS-MT / Hugging Face Marian" for each format."""
    from ...interop import ABOUT

    return "; ".join(f"{name}: {ABOUT[name]}" if name in ABOUT else name for name in formats)
