"""Which language pair a served model translates: recorded in config.json by training, or given with
`--pair`; and the one-line errors of `qkv serve` before it listens (run in-process)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from qkv.apps.cli import main
from qkv.apps.server import load_models
from qkv.modeldir import load_languages
from qkv.train import load_train_config


def with_languages(model_dir: Path, tmp_path: Path, **languages: str) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, **languages}))
    return copy


def test_training_records_the_pair_of_its_data() -> None:
    synthetic = load_train_config(None, {"corpus": "synthetic", "synthetic_target": "zh"})
    assert synthetic.languages() == {"src_lang": "digits", "tgt_lang": "zh"}
    named = load_train_config(None, {"corpus": "multi30k", "src_lang": "de", "tgt_lang": "en"})
    assert named.languages() == {"src_lang": "de", "tgt_lang": "en"}
    files = load_train_config(None, {"train_src": "a.txt", "train_tgt": "b.txt"})
    assert files.languages() == {}


def test_a_model_directory_that_records_its_pair_is_served_for_it(model_dir: Path, tmp_path: Path) -> None:
    recorded = with_languages(model_dir, tmp_path, src_lang="en", tgt_lang="zh")
    assert load_languages(recorded) == ("en", "zh")
    [model] = load_models([str(recorded)])
    assert (model.source, model.target, model.pair) == ("en", "zh", "en-zh")
    [given] = load_models([str(recorded)], pairs=["de-fr"])  # --pair wins
    assert given.pair == "de-fr"


def test_a_model_without_a_pair_needs_one(model_dir: Path) -> None:
    assert load_languages(model_dir) is None
    with pytest.raises(ValueError, match="--pair SRC-TGT"):
        load_models([str(model_dir)])
    with pytest.raises(ValueError, match="one --pair per model"):
        load_models([str(model_dir), str(model_dir)], pairs=["en-zh"])
    with pytest.raises(ValueError, match="looks like en-de"):
        load_models([str(model_dir)], pairs=["english"])


def test_serve_errors_are_one_line_before_listening(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--model", str(model_dir), "--port", "0"]) == 2
    assert "give them with --pair" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert main(["serve", "--model", str(model_dir), "--pair", "en-zh", "--port", port]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in err
    assert main(["serve", "--model", str(model_dir), "--pair", "en-zh", "--max-queue", "0"]) == 2
    assert "--max-queue must be >= 1" in capsys.readouterr().err
