"""`qkv classify`: label lines with a classifier (`qkv train --task classify`)."""

from __future__ import annotations

import argparse

from ...runtime.runtime_options import check_device
from ._flags import add_flag, add_flags
from ._io import Output, read_input_lines

HELP = "label lines with a classifier (qkv train --task classify), one label per line"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--model", action="store", help="model directory of a classifier")
    add_flags(parser, "--input", "--device")


def run(args: argparse.Namespace) -> int:
    from ..classifier import Classifier

    check_device(args.device)
    lines = read_input_lines(args.input)
    output = Output()
    classifier = Classifier.load(args.model, args.device)
    output.write(classifier.classify(lines))
    return 0
