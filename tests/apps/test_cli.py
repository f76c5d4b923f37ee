"""The command line, run in-process: parameter counts, the decoding arguments, help."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from qkv.apps.cli import build_parser, decode_options, main
from qkv.apps.translator import DEFAULT_BATCH_TOKENS, DEFAULT_MAX_SRC_TOKENS
from qkv.decode.options import DecodeOptions
from qkv.decode.search import DEFAULT_MAX_LEN_B


def test_params_prints_paper_sized_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["params", "--preset", "base", "--vocab", "37000"]) == 0
    printed = int(
        re.search(r"([\d,]+) parameters", capsys.readouterr().out).group(1).replace(",", "")
    )
    assert abs(printed - 65e6) / 65e6 < 0.05  # the paper's Table 3: 65M for base


def test_parser_leaves_the_http_stack_unloaded() -> None:
    """Every command builds the whole parser (serve's limits included); only `qkv serve` itself
    loads FastAPI and uvicorn. In a fresh interpreter: this one has them from other tests."""
    code = (
        "import sys; from qkv.apps.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_decoding_argument_defaults_are_the_library_defaults() -> None:
    """Each `DecodeOptions` field is an argument of `qkv translate` whose default is the field's
    default; the batching and source limits default to the translator's."""
    parser = build_parser()
    defaults = DecodeOptions()
    args = parser.parse_args(["translate", "--model", "X"])
    for field in dataclasses.fields(DecodeOptions):
        assert getattr(args, field.name) == getattr(defaults, field.name), field.name
    assert decode_options(args) == defaults
    assert args.max_len_b == DEFAULT_MAX_LEN_B
    assert (args.batch_tokens, args.max_src_tokens) == (
        DEFAULT_BATCH_TOKENS,
        DEFAULT_MAX_SRC_TOKENS,
    )
    evaluate = parser.parse_args(["evaluate", "--model", "X"])  # no sampling or n-best arguments
    assert decode_options(evaluate) == defaults
    assert (evaluate.batch_tokens, evaluate.max_src_tokens) == (
        DEFAULT_BATCH_TOKENS,
        DEFAULT_MAX_SRC_TOKENS,
    )


def test_decoding_arguments_make_one_decode_options() -> None:
    parser = build_parser()
    given = [
        "--beam",
        "6",
        "--alpha",
        "1.5",
        "--nbest",
        "3",
        "--max-len-a",
        "0.25",
        "--max-len-b",
        "7",
        "--min-len",
        "2",
        "--temperature",
        "0.5",
        "--top-k",
        "9",
        "--top-p",
        "0.8",
        "--seed",
        "11",
    ]
    args = parser.parse_args(["translate", "--model", "X", *given])
    assert decode_options(args) == DecodeOptions(
        beam=6,
        alpha=1.5,
        nbest=3,
        max_len_a=0.25,
        max_len_b=7,
        min_len=2,
        temperature=0.5,
        top_k=9,
        top_p=0.8,
        seed=11,
    )
    assert decode_options(parser.parse_args(["translate", "--model", "X", "--sample"])).sampling
    args = parser.parse_args(["evaluate", "--model", "X", "--beam", "2", "--min-len", "1"])
    assert decode_options(args) == DecodeOptions(beam=2, min_len=1)


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--beam", "0"], "beam"),
        (["--nbest", "5"], "nbest"),
        (["--sample", "--nbest", "2"], "nbest"),
        (["--top-p", "0"], "top_p"),
        (["--temperature", "0"], "temperature"),
        (["--max-len-b", "-1"], "max_len_b"),
        # non-finite numbers and sizes that would allocate without bound
        (["--alpha", "nan"], "alpha"),
        (["--alpha", "inf"], "alpha"),
        (["--alpha=-inf"], "alpha"),
        (["--temperature", "inf"], "temperature"),
        (["--temperature", "nan"], "temperature"),
        (["--max-len-a", "inf"], "max_len_a"),
        (["--max-len-b", "1000000000"], "max_len_b"),
        (["--min-len", "1000000000"], "min_len"),
        (["--top-p", "nan"], "top_p"),
    ],
)
def test_bad_decoding_arguments_fail_before_any_model_loads(
    tmp_path: Path, argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = str(tmp_path / "absent")  # loading it would fail differently
    assert main(["translate", "--model", absent, "--input", absent, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("qkv translate: error: ") and field in err and "absent" not in err
    assert err.count("\n") == 1 and "Traceback" not in err
    if field == "beam":
        assert "nbest" not in err  # the beam is blamed, not nbest


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["translate"], ["evaluate"]):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--help"])
        assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # the help as argparse wraps it, unwrapped
    assert "translate" in out and "evaluate" in out and "--max-len-b" in out
    assert f"b of the output limit: a * source tokens + b (default: {DEFAULT_MAX_LEN_B})" in out
    assert f"beam size; 1 is greedy decoding (default: {DecodeOptions().beam})" in out


def test_decoding_flags_agree_across_commands() -> None:
    """Each decoding flag of `qkv translate` (a `DecodeOptions` field) has the same default where
    `qkv serve` and `qkv generate` take it: in serve's request model (None there: the server's
    options, which serve's flags make) and among generate's flags (defaults: its GENERATE)."""
    pytest.importorskip("fastapi")
    from qkv.apps.generator import GENERATE
    from qkv.apps.server.routes.native import NativeRequest

    parser = build_parser()
    names = [field.name for field in dataclasses.fields(DecodeOptions)]
    translate = vars(parser.parse_args(["translate", "--model", "X"]))
    assert set(names) <= set(translate)
    serve = parser.parse_args(["serve", "--model", "X"])
    server = decode_options(serve)  # what a request leaves unset
    request = {name: f.default for name, f in NativeRequest.model_fields.items() if name in names}
    assert set(request) == {"beam", "alpha", "nbest", "max_len_a", "max_len_b", "min_len"}
    for name, default in request.items():
        assert getattr(serve, name, getattr(server, name)) == getattr(server, name), name
        assert (getattr(server, name) if default is None else default) == translate[name], name
    generate = vars(parser.parse_args(["generate", "--model", "X"]))
    for name in ("sampling", "temperature", "top_k", "top_p", "seed", "min_len"):
        assert generate[name] == getattr(GENERATE, name) == translate[name], name
