"""More than one device: `torchrun --nproc_per_node N -m qkv train ...` runs the same training under
DistributedDataParallel (NCCL on GPUs, gloo on CPUs). Rank 0 writes every file."""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


@dataclass
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(device: str) -> torch.device:
    """A config's device name as a torch.device; "auto" is cuda where available, else cpu."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def init_distributed(device: str) -> tuple[DistEnv, torch.device]:
    """Join the process group torchrun set up (if any) and pick this process's device."""
    env = DistEnv(
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
    )
    dev = resolve_device(device)
    if dev.type == "cuda":
        dev = torch.device("cuda", env.local_rank if env.enabled else (dev.index or 0))
        if dev.index >= (count := torch.cuda.device_count()):
            raise ValueError(
                f"process {env.local_rank} of this machine trains on {dev}, but it has {count} "
                f"CUDA device(s): start at most {count} processes per machine (torchrun "
                "--nproc-per-node) or train on the CPU (--device cpu)"
            )
        torch.cuda.set_device(dev)
    if env.enabled and not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return env, dev


def all_reduce_sum(value: float, env: DistEnv, device: torch.device) -> float:
    """Sum a number over all processes (identity on one)."""
    if not env.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def barrier(env: DistEnv) -> None:
    if env.enabled:
        dist.barrier()


def all_gather(value: T, env: DistEnv) -> list[T]:
    """Every process's `value` (any picklable object), in rank order, on all ranks."""
    if not env.enabled:
        return [value]
    values: list[T | None] = [None] * env.world_size
    dist.all_gather_object(values, value)
    return [v for v in values if v is not None]


def cleanup(env: DistEnv) -> None:
    """Leave the process group once every rank is done: a rank that tears its gloo group down while
    another still uses it can be aborted ("terminate called without an active exception"). The
    caller drops its DistributedDataParallel first: its reducer holds the group and the work of
    its last all-reduce, tensors that Python owns; left to the interpreter's exit, gloo's threads
    free them after Python has gone, and the process aborts (SIGABRT). Collected here, they go
    while Python runs."""
    if env.enabled and dist.is_initialized():
        gc.collect()  # the dropped DistributedDataParallel (modules hold reference cycles)
        dist.barrier()
        dist.destroy_process_group()
        gc.collect()
