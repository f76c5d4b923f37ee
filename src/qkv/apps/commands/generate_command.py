"""`qkv generate`: continue prompts with a decoder-only language model (`qkv train --task lm`)."""

from __future__ import annotations

import argparse

from ...decode.options import MAX_OUTPUT_TOKENS
from ...runtime.runtime_options import check_device
from ..generator import GENERATE
from ._flags import SAMPLING, add_decoding_arguments, add_flag, decode_options
from ._io import Output, read_input_lines

HELP = "continue prompts with a language model (qkv train --task lm), one line each"
DESCRIPTION = (
    "One continuation per prompt (--prompt, repeatable, else the lines of --input or stdin), "
    "greedy or sampled, decoded with the key/value cache."
)
DECODING = (*SAMPLING, "min_len")  # beam and max_len_a are GENERATE's; max_len_b: --max-new-tokens


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--model", action="store", help="model directory of a decoder-only LM")
    parser.add_argument("--prompt", action="append", help="a prompt (give it again for more)")
    add_flag(parser, "--input", help="UTF-8 file of prompts, one per line; default: stdin")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=GENERATE.max_len_b,
        help="the most tokens generated per prompt (default: %(default)s)",
    )
    add_decoding_arguments(
        parser, DECODING, defaults=GENERATE, helps={"sampling": "sample, not greedy"}
    )
    add_flag(parser, "--device")


def run(args: argparse.Namespace) -> int:
    from ..generator import Generator

    if not 0 <= args.max_new_tokens <= MAX_OUTPUT_TOKENS:
        raise ValueError(f"--max-new-tokens must be between 0 and {MAX_OUTPUT_TOKENS}")
    options = decode_options(args, GENERATE.replace(max_len_b=args.max_new_tokens))
    check_device(args.device)
    if args.prompt is not None and args.input is not None:
        raise ValueError("give --prompt or --input, not both")
    prompts = args.prompt if args.prompt is not None else read_input_lines(args.input)
    output = Output()
    generator = Generator.load(args.model, args.device)
    output.write(generator.generate(prompts, options))
    return 0
