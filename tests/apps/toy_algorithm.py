"""The checks `test_add_algorithm.py` runs in a copy of qkv with a toy decoding algorithm added:
`python toy_algorithm.py MODEL_DIR PACKAGE`, with that copy first on PYTHONPATH. The toy option
`toy_token` (-1: off) makes every sentence's output that one token, with log-prob and score 0.0,
which no model's search gives; it is declared as a "search" field, in /v1/translate's body and
among `qkv serve`'s flags. Each check raises AssertionError where it is not reachable."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import qkv
from qkv.apps.cli import build_parser
from qkv.apps.commands._flags import decode_options
from qkv.apps.server import ServedModel, create_app
from qkv.apps.server.service import Service
from qkv.apps.trace import trace_translation
from qkv.apps.translator import Translator
from qkv.decode.options import DecodeOptions

TEXT = "A dog runs."


def check_options() -> None:
    """The field's type is checked like the others', and it leaves beam search."""
    assert DecodeOptions().toy_token == -1
    with pytest.raises(ValueError, match="toy_token must be an integer"):
        DecodeOptions(toy_token=1.5)
    assert DecodeOptions().beam_search and not DecodeOptions(toy_token=3).beam_search


def check_command_line() -> None:
    """A flag of `qkv translate` (every field), `qkv evaluate` and `qkv attention` (the search
    group) and `qkv serve` (a request's default), reaching the `DecodeOptions`."""
    parser = build_parser()
    commands: dict[str, list[str]] = {
        "translate": [],
        "evaluate": [],
        "attention": ["--out", "o"],
        "serve": [],
    }
    for command, rest in commands.items():
        args = parser.parse_args([command, "--model", "m", *rest, "--toy-token", "7"])
        assert decode_options(args).toy_token == 7, command
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "--toy-token" in sub.choices["translate"].format_help()


def check_translator(translator: Translator, token: int, expected: str) -> None:
    """The translator decodes with it (the toy's answer), and a trace refuses it."""
    [r] = translator.translate_detailed([TEXT], DecodeOptions(toy_token=token))
    assert (r.text, r.score) == (expected, 0.0), (r.text, r.score)
    [plain] = translator.translate_detailed([TEXT], DecodeOptions())
    assert plain.score < 0.0
    with pytest.raises(ValueError, match="greedy and beam search"):
        trace_translation(translator, TEXT, DecodeOptions(toy_token=token))


def check_http(translator: Translator, token: int, expected: str) -> None:
    """/v1/translate takes the field (documented in the schema) and its job decodes with it; a
    server started with it (`qkv serve --toy-token`) uses it where a request leaves it unset."""
    jobs: list[Any] = []
    translate = Service.translate

    async def recorded(self: Service, request: Any, job: Any) -> Any:
        jobs.append(job)
        return await translate(self, request, job)

    Service.translate = recorded  # type: ignore[method-assign]
    served = [ServedModel("en", "zh", translator)]
    for options, body in (
        (DecodeOptions(), {"text": TEXT, "toy_token": token}),
        (DecodeOptions(toy_token=token), {"text": TEXT}),
    ):
        with TestClient(create_app(served, options=options)) as client:
            answer = client.post("/v1/translate", json=body)
            assert answer.status_code == 200, answer.text
            [t] = answer.json()["translations"]
            assert (t["text"], t["score"]) == (expected, 0.0), t
            assert jobs.pop().job.options.toy_token == token
            schema = client.get("/openapi.json").json()["paths"]["/v1/translate"]["post"]
    fields = schema["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert fields["toy_token"]["description"].startswith("toy:"), fields["toy_token"]


def main(model_dir: Path, package: Path) -> None:
    assert Path(qkv.__file__).parent == package, qkv.__file__  # the copy, not the checkout
    check_options()
    check_command_line()
    translator = Translator.load(model_dir)
    token = translator.target_vocab_size - 1
    [expected] = translator.tokenizer.decode_tgt([[token]])
    check_translator(translator, token, expected)
    check_http(translator, token, expected)
    print("reachable")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
