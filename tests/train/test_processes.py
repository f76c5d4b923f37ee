"""Training as real processes: `qkv train` killed with SIGKILL and resumed; two gloo processes under torchrun."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from qkv.train import TrainConfig, Trainer

Recipe = Callable[..., TrainConfig]


def cli_args(cfg: TrainConfig) -> list[str]:
    """The same recipe as --key value overrides for `qkv train`."""
    args = []
    for key, value in cfg.to_dict().items():
        if key == "model":
            args += [x for k, v in value.items() for x in (f"--model.{k}", str(v))]
        elif isinstance(value, tuple):  # freeze: a comma-separated list (adam_betas: the default)
            if value and key != "adam_betas":
                args += [f"--{key}", ",".join(map(str, value))]
        elif value is not None:
            args += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return args


def last_weights(run: Path) -> dict[str, torch.Tensor]:
    step_dirs = sorted((run / "checkpoints").glob("step_*"))
    return load_file(str(step_dirs[-1] / "model.safetensors"))


def test_killed_run_resumes_to_the_same_parameters(tmp_path: Path, recipe: Recipe) -> None:
    cfg = recipe(max_steps=150, valid_every=5, log_every=50)
    cmd = [sys.executable, "-m", "qkv", "train", "--out", str(tmp_path / "killed"), *cli_args(cfg)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = tmp_path / "killed" / "checkpoints" / "step_00000005"
    deadline = time.time() + 120
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    resumed = Trainer(cfg, tmp_path / "killed", resume=True)
    assert 5 <= resumed.step < 150
    resumed.train()
    Trainer(cfg, tmp_path / "straight").train()
    a, b = last_weights(tmp_path / "killed"), last_weights(tmp_path / "straight")
    for name in a:
        assert torch.equal(a[name], b[name]), name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# `qkv train` whose rank 1 looks at OUT 1.5 s after the process group is up
LATE_RANK = """import os, sys, time
from qkv.apps.cli import main
from qkv.train.rundir import RunDirectory
check = RunDirectory.check
def late(self, overwrite):
    time.sleep(1.5)
    check(self, overwrite)
if os.environ.get("LOCAL_RANK") == "1":
    RunDirectory.check = late
sys.exit(main())
"""


@pytest.mark.slow
def test_two_gloo_processes_match_one_process_with_the_same_global_batch(tmp_path: Path, recipe: Recipe) -> None:
    """DDP over 2 CPU processes == 1 process accumulating the same 2 batches per update."""
    no_dropout = {"dropout": 0.0, "attention_dropout": 0.0}
    prepared = tmp_path / "prepared"
    ddp_cfg = recipe(max_steps=4, valid_every=2, model=no_dropout, prepared_dir=str(prepared))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # rank 1 looks at OUT after rank 0 could write into it: it must see OUT as rank 0 saw it
    late = tmp_path / "late_rank.py"
    late.write_text(LATE_RANK, encoding="utf-8")
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
           "127.0.0.1", "--master_port", str(free_port()), str(late), "train", "--out", str(out),
           *cli_args(ddp_cfg)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]  # includes the replicas-in-sync check at each checkpoint
    single = recipe(max_steps=4, valid_every=2, accum_steps=2, model=no_dropout, prepared_dir=str(prepared))
    Trainer(single, tmp_path / "single").train()
    # both ranks and the single process read one prepared copy of the data
    assert sorted(p.name.split("-")[0] for p in prepared.iterdir() if not p.name.startswith(".")) == [
        "ids", "text", "tokenizer"]
    a, b = last_weights(out), last_weights(tmp_path / "single")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-4)
    start = load_file(str(tmp_path / "single" / "checkpoints" / "step_00000002" / "model.safetensors"))
    assert any(not torch.equal(start[n], b[n]) for n in b)  # training did move the weights


def test_more_processes_than_cuda_devices_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's second process on a one-GPU machine: a ValueError that says what to do, before any CUDA call."""
    from qkv.train.distributed import init_distributed

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"trains on cuda:1, but it has 1 CUDA device\(s\): start at most 1"):
        init_distributed("cuda")
