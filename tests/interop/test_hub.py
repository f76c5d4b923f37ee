"""OPUS-MT (Marian) models by their Hub name, offline: a Hugging Face cache laid out as
huggingface_hub lays it out (models--ORG--NAME/refs/REV -> snapshots/SHA/files) holds a Marian model
built in the test; `qkv translate --model hf:ORG/NAME` converts it once into qkv's cache and
translates as the converted directory does; a missing model, a missing revision and a model that
is not a Marian one are one line each."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from marian_models import SHA, hub_cache
from qkv.apps.translator import Translator
from qkv.interop.hub import is_hub_name, split_name
from qkv.interop.marian import convert_marian
from qkv.runtime.runtime_options import RuntimeOptions


def qkv(tmp: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_CACHE": str(tmp / "hub"), "HF_HUB_OFFLINE": "1",
           "QKV_CACHE_DIR": str(tmp / "qkv-cache"), **env}
    return subprocess.run([sys.executable, "-m", "qkv", *args], input=stdin, env=env, text=True,
                          capture_output=True, timeout=300)


def test_names() -> None:
    assert is_hub_name("hf:Helsinki-NLP/opus-mt-en-de") and is_hub_name("Helsinki-NLP/opus-mt-en-de")
    assert not is_hub_name("./runs/x") and not is_hub_name("runs")
    assert split_name("hf:a/b@v1.0") == ("a/b", "v1.0") and split_name("a/b") == ("a/b", None)
    with pytest.raises(ValueError, match="ORG/NAME"):
        split_name("hf:opus-mt-en-de")


def test_translate_by_hub_name_converts_once_offline(marian_dir: Path, tmp_path: Path) -> None:
    hub_cache(tmp_path / "hub", "test-org/opus-mt-tiny", marian_dir)
    lines = "the cat sees the dog\na small house\n"
    first = qkv(tmp_path, "translate", "--model", "hf:test-org/opus-mt-tiny", "--precision", "fp32",
                "--pack", stdin=lines)
    assert first.returncode == 0, first.stderr
    converted = list((tmp_path / "qkv-cache" / "models").iterdir())
    assert [p.name for p in converted] == [f"test-org--opus-mt-tiny--{SHA[:12]}"]
    made = (converted[0] / "model.safetensors").stat().st_mtime_ns
    again = qkv(tmp_path, "translate", "--model", "hf:test-org/opus-mt-tiny@main", "--precision",
                "fp32", "--pack", stdin=lines)
    assert again.stdout == first.stdout
    assert (converted[0] / "model.safetensors").stat().st_mtime_ns == made  # not converted again
    expected = Translator.load(convert_marian(marian_dir, tmp_path / "direct"),
                               RuntimeOptions(precision="fp32", pack=True)).translate(lines.splitlines())
    assert first.stdout.splitlines() == expected


def test_convert_by_hub_name_and_revision_equals_converting_the_directory(
    marian_dir: Path, tmp_path: Path
) -> None:
    hub_cache(tmp_path / "hub", "test-org/opus-mt-tiny", marian_dir, revision="v1")
    r = qkv(tmp_path, "convert", "marian", "test-org/opus-mt-tiny", "--revision", "v1",
            "--out", str(tmp_path / "named"))
    assert r.returncode == 0, r.stderr
    direct = convert_marian(marian_dir, tmp_path / "direct", f"test-org/opus-mt-tiny@{SHA}")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "spm.src.model"):
        assert (tmp_path / "named" / name).read_bytes() == (direct / name).read_bytes(), name


@pytest.mark.slow
def test_hub_failures_are_one_line(marian_dir: Path, tmp_path: Path) -> None:
    hub_cache(tmp_path / "hub", "test-org/opus-mt-tiny", marian_dir)
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    hub_cache(tmp_path / "hub", "test-org/bert-tiny", bert)
    cases = {
        "hf:test-org/absent": "is not in the Hugging Face cache",
        "hf:test-org/opus-mt-tiny@v9": "at revision v9 is not in the Hugging Face cache",
        "hf:test-org/bert-tiny": "is a 'bert' model; qkv converts Marian models",
    }
    for name, message in cases.items():
        r = qkv(tmp_path, "translate", "--model", name, stdin="a\n")
        lines = [line for line in r.stderr.splitlines() if line.startswith("qkv translate: error:")]
        assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr
        assert "Traceback" not in r.stderr
    # a revision with a slash, given to convert: not taken for a local path
    r = qkv(tmp_path, "convert", "marian", "test-org/opus-mt-tiny", "--revision", "../x",
            "--out", str(tmp_path / "out"))
    lines = [line for line in r.stderr.splitlines() if line.startswith("qkv convert: error:")]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "at revision ../x is not in the Hugging Face cache" in lines[0], r.stderr
    assert is_hub_name("a/b@feature/x") and not is_hub_name("./a@b/c")


def test_a_hub_that_cannot_be_reached_is_found_at_once_and_the_cache_used(
    marian_dir: Path, tmp_path: Path
) -> None:
    """HF_ENDPOINT a loopback port that refuses connections, HF_HUB_OFFLINE unset: no ~30 s of
    retries; a cached model translates, an absent one is one line naming the endpoint and
    HF_HUB_OFFLINE=1."""
    with socket.socket() as s:  # a free port, closed again: connections to it are refused
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    hub_cache(tmp_path / "hub", "test-org/opus-mt-tiny", marian_dir)
    env = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": endpoint, "HF_HUB_ETAG_TIMEOUT": "1",
           "HTTPS_PROXY": "", "HTTP_PROXY": "", "ALL_PROXY": "", "https_proxy": "",
           "http_proxy": "", "all_proxy": ""}
    cached = qkv(tmp_path, "translate", "--model", "hf:test-org/opus-mt-tiny", "--precision",
                 "fp32", stdin="a small house\n", **env)
    assert cached.returncode == 0 and cached.stdout.strip(), cached.stderr
    r = qkv(tmp_path, "translate", "--model", "hf:test-org/absent", stdin="a\n", **env)
    lines = [line for line in r.stderr.splitlines() if line.startswith("qkv translate: error:")]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert f"no connection to {endpoint} within 3 s" in lines[0], lines
    assert "HF_HUB_OFFLINE=1" in lines[0]
