"""More than one device: `torchrun --nproc_per_node N -m qkv train ...` runs the same training under
DistributedDataParallel (NCCL on GPUs, gloo on CPUs). Rank 0 writes every file."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def init_distributed(device: str) -> tuple[DistEnv, torch.device]:
    """Join the process group torchrun set up (if any) and pick this process's device."""
    env = DistEnv(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                  int(os.environ.get("LOCAL_RANK", 0)))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        dev = torch.device("cuda", env.local_rank if env.enabled else (dev.index or 0))
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


def gather_rng_states(env: DistEnv) -> list[torch.Tensor]:
    """Every process's torch RNG state (for exact resume), gathered on all ranks."""
    state = torch.get_rng_state()
    if not env.enabled:
        return [state]
    states: list[torch.Tensor | None] = [None] * env.world_size
    dist.all_gather_object(states, state)
    return [s for s in states if s is not None]


def cleanup(env: DistEnv) -> None:
    if env.enabled and dist.is_initialized():
        dist.destroy_process_group()
