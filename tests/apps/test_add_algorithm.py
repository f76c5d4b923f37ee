"""A decoding algorithm is added where docs/architecture.md's "Where to add a thing" says, and
nowhere else: in a copy of src/qkv, a toy algorithm gets its function and its branch in
`search.run` (decode/search.py) and its field in `DecodeOptions` (decode/options.py); the copy
then finds it reachable from the command line, the translator and /v1/translate
(tests/apps/toy_algorithm.py, run in a process of its own). A surface that lists the decoding
fields by hand instead of reading `DecodeOptions` leaves the toy out, and this test fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import qkv

pytest.importorskip("fastapi")

HERE = Path(__file__).parent

SEED = 'seed: int = option(0, "sampling seed; batch i draws with seed + i", "sampling")\n'
FIELD = """    toy_token: int = option(
        -1, "toy: every output is this one token; -1: off", "search", native=True, serve=True
    )
"""
SAMPLED = "    if o.sampling:\n        seed = o.seed"
BRANCH = "    if o.toy_token >= 0:\n        return toy(src, o.toy_token)\n"
FUNCTION = '''

def toy(src: Tensor, token: int) -> list[list[Hypothesis]]:
    """Each row's output is `token`, with log-prob and score 0.0."""
    return [[Hypothesis([token], 0.0, 0.0)] for _ in range(src.shape[0])]
'''
PLACES = [  # (file, a text in it, what the text becomes)
    ("decode/options.py", SEED, SEED + FIELD),  # the field
    (
        "decode/options.py",
        "return not self.sampling",
        "return not self.sampling and self.toy_token < 0",
    ),
    ("decode/search.py", SAMPLED, BRANCH + SAMPLED),  # its branch in `run`
]


def add_toy_algorithm(package: Path) -> None:
    """The changes of PLACES, and the toy's function, made in the copy `package` of src/qkv."""
    for name, text, changed in PLACES:
        path = package / name
        source = path.read_text()
        assert source.count(text) == 1, f"{name}: {text!r}"
        path.write_text(source.replace(text, changed))
    search = package / "decode" / "search.py"
    search.write_text(search.read_text() + FUNCTION)


def test_a_decoding_algorithm_added_in_its_places_is_reachable(
    model_dir: Path, tmp_path: Path
) -> None:
    package = tmp_path / "src" / "qkv"
    shutil.copytree(Path(qkv.__file__).parent, package, ignore=shutil.ignore_patterns("*.pyc"))
    add_toy_algorithm(package)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package.parent), str(HERE)])}
    done = subprocess.run(
        [sys.executable, str(HERE / "toy_algorithm.py"), str(model_dir), str(package)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("reachable")
