"""Faults while a model directory or a run is written: a full disk is one line naming the file and
loses nothing; the temporary files of killed writes are removed by later runs, and only those."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from safetensors import SafetensorError

import qkv.modeldir as modeldir
from qkv import Transformer, TransformerConfig
from qkv.apps.cli import main
from qkv.modeldir import remove_orphan_temporaries, save_model_dir, save_weights
from qkv.train.checkpoints import RngStates, list_checkpoints, remove_orphans, save_checkpoint

# what safetensors 0.8 says when the disk is full (older versions: "IoError(Os { code: 28, ...")
FULL_DISK = "Error while serializing: I/O error: No space left on device (os error 28)"
TINY_RUN: dict[str, Any] = {
    "corpus": "synthetic", "synthetic_train": 400, "synthetic_valid": 20,
    "synthetic_max_value": 9999, "preset": "tiny",
    "model": {"d_model": 32, "d_ff": 64, "n_heads": 2},
    "vocab_size": 60, "max_tokens": 400, "warmup": 10, "lr": 3e-3, "schedule": "inverse_sqrt",
    "valid_every": 3, "log_every": 1, "valid_bleu": False, "valid_metric": "loss",
    "tensorboard": False, "threads": 1, "max_steps": 6,
}


def tiny_model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.preset("tiny", src_vocab_size=40, dropout=0.0))


def full_disk_after(nbytes: int, message: str = FULL_DISK, when: str = "") -> Any:
    """A stand-in for safetensors' save_file that writes `nbytes` of the file and then fails as
    safetensors does on a full disk (only for paths containing `when`)."""
    real = modeldir.save_file

    def save_file(tensors: Any, filename: str, metadata: Any = None) -> None:
        if when not in filename:
            return real(tensors, filename, metadata=metadata)
        Path(filename).write_bytes(b"\0" * nbytes)
        raise SafetensorError(message)

    return save_file


def qkv(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def one_error_line(err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith(f"qkv {command}: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob(".*.tmp"))


def ended_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


# --- a full disk ---------------------------------------------------------------------------------
@pytest.mark.parametrize("message", [
    FULL_DISK,
    'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left '
    'on device" })',
])
def test_a_full_disk_writing_weights_is_an_os_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, message: str
) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"the previous weights")
    monkeypatch.setattr(modeldir, "save_file", full_disk_after(1000, message))
    with pytest.raises(OSError) as caught:
        save_weights(path, tiny_model())
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    assert caught.value.strerror == os.strerror(errno.ENOSPC)
    assert path.read_bytes() == b"the previous weights" and temporaries(tmp_path) == []


def test_a_safetensors_error_that_is_not_the_systems_is_raised_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(modeldir, "save_file", full_disk_after(0, "some other problem"))
    with pytest.raises(SafetensorError, match="some other problem"):
        save_weights(tmp_path / "model.safetensors", tiny_model())
    assert temporaries(tmp_path) == []


def test_a_full_disk_writing_a_tokenizer_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "spm.model"
    path.write_bytes(b"the previous model")

    def fill(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as write() raises it: no file name

    with pytest.raises(OSError) as caught:
        modeldir.atomic_write(path, fill)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    assert path.read_bytes() == b"the previous model" and temporaries(tmp_path) == []


def test_qkv_average_on_a_full_disk_is_one_line_and_keeps_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = save_model_dir(tmp_path / "run", tiny_model())
    for step in (1, 2):
        model = tiny_model()
        optimizer = torch.optim.Adam(model.parameters())
        rng = [RngStates.seeded(0, torch.device("cpu"))]
        save_checkpoint(run, step, model, optimizer, {"step": step}, rng)
    before = (run / "model.safetensors").read_bytes()
    monkeypatch.setattr(modeldir, "save_file", full_disk_after(4096))
    code, err = qkv(capsys, "average", "--model", run, "--last", "2")
    line = one_error_line(err, "average")
    assert code == 2 and "No space left on device" in line
    assert str(run / "model.safetensors") in line
    assert (run / "model.safetensors").read_bytes() == before and temporaries(run) == []


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY_RUN), encoding="utf-8")
    return path


def test_a_full_disk_as_safetensors_reports_it_stops_training_in_one_line(
    tmp_path: Path, recipe: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(modeldir, "save_file", full_disk_after(4096, when="step_00000006"))
    out = tmp_path / "run"
    code, err = qkv(capsys, "train", recipe, "--out", out)
    line = one_error_line(err, "train")
    assert code == 2 and "No space left on device" in line and "step_00000003" in line
    assert [p.name for p in list_checkpoints(out)] == ["step_00000003"] and temporaries(out) == []


# --- temporaries of killed writes -----------------------------------------------------------------
def test_only_the_temporaries_of_ended_processes_are_removed(tmp_path: Path) -> None:
    dead, alive, me = ended_pid(), os.getppid(), os.getpid()
    outside = tmp_path / "outside"
    outside.write_text("keep")
    folder = tmp_path / "model"
    folder.mkdir()
    orphans = [f".model.safetensors.{dead}.tmp", f".spm.model.{me}.tmp", f".config.json.{dead}.tmp"]
    kept = [
        f".tokenizer.json.{alive}.tmp",  # a process still writing
        f".notes.txt.{dead}.tmp",  # not a file qkv writes there
        "model.safetensors", ".model.safetensors.tmp", f".model.safetensors.{dead}.tmp.bak",
    ]
    for name in orphans + kept:
        (folder / name).write_bytes(b"x")
    (folder / f".spm.src.model.{dead}.tmp").symlink_to(outside)
    (folder / f".spm.tgt.model.{dead}.tmp").mkdir()
    removed = remove_orphan_temporaries(folder)
    assert sorted(p.name for p in removed) == sorted(orphans)
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([*kept, f".spm.src.model.{dead}.tmp", f".spm.tgt.model.{dead}.tmp"])
    assert outside.read_text() == "keep"


def test_a_write_killed_midway_is_cleaned_by_the_next_model_directory_write(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    killed = (
        "import os, signal, sys\n"
        "from qkv.modeldir import atomic_write\n"
        "def write(tmp):\n"
        "    tmp.write_bytes(b'half of the weights')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "atomic_write(sys.argv[1], write)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", killed, str(folder / "model.safetensors")])
    assert process.wait(timeout=120) == -signal.SIGKILL
    assert temporaries(folder) == [f".model.safetensors.{process.pid}.tmp"]
    (folder / f".spm.src.model.{process.pid}.tmp").write_bytes(b"a file this write does not name")
    save_model_dir(folder, tiny_model())
    assert temporaries(folder) == [] and (folder / "model.safetensors").is_file()


def test_remove_orphans_cleans_the_run_directory_and_its_checkpoints(tmp_path: Path) -> None:
    dead, alive = ended_pid(), os.getppid()
    (tmp_path / "checkpoints").mkdir()
    names = ("model.safetensors", "log.csv", "train_config.yaml")
    orphans = [f".{name}.{dead}.tmp" for name in names]
    for name in [*orphans, f".config.json.{alive}.tmp"]:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "checkpoints" / f".step_00000006.{dead}.tmp").mkdir()
    removed = remove_orphans(tmp_path)
    assert sorted(p.name for p in removed) == sorted([*orphans, f".step_00000006.{dead}.tmp"])
    assert temporaries(tmp_path) == [f".config.json.{alive}.tmp"]


def test_resume_removes_the_temporaries_of_a_killed_run(
    tmp_path: Path, recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert qkv(capsys, "train", recipe, "--out", out, "--max_steps", "3")[0] == 0
    dead, alive = ended_pid(), os.getppid()
    for name in ("model.safetensors", "spm.model", "tokenizer.json", "log.csv", "config.json"):
        (out / f".{name}.{dead}.tmp").write_bytes(b"left by a killed run")
    (out / f".config.json.{alive}.tmp").write_bytes(b"being written")
    code, err = qkv(capsys, "train", recipe, "--out", out, "--resume", "--max_steps", "4")
    assert code == 0, err
    assert temporaries(out) == [f".config.json.{alive}.tmp"]
