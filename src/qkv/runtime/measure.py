"""Measure and decide: how the runtime times its candidates, picks one, and remembers the verdict.

Several choices are measured on the machine at hand rather than read from a flag: the decoding
path (`runtime.choice`), torch's int8 library (`runtime.quantize`), the int8 kernel of a captured
step (`runtime.int8_choice`), bf16 matrix products for training (`runtime.precision`). They share
three things, kept here:

- `alternate`: the candidates called in turn, round after round (on `timing.time_calls`), so that
  a busy moment of the machine costs them alike;
- `fastest`: one rule for every pick, a default kept unless another is faster by a margin;
- the verdicts kept on disk (`cache_file`), keyed by what they depend on (`cache_key`): a choice
  is measured once per machine, torch version, thread count and shape.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from ..config import cache_dir
from .timing import Timing, time_calls

ROWS = (1, 32)  # the rows a decoding step is timed at: one sentence greedy; a batch
K = TypeVar("K")


def alternate(
    runs: Mapping[K, Callable[[], Any]], repeats: int, warmup: int = 1
) -> dict[K, Timing]:
    """Each of `runs` timed over `repeats` rounds of one call, the runs taking turns within every
    round, after `warmup` untimed rounds (taken in turn too). -> each run's `Timing` (`seconds`:
    its median call; `result`: what its last call returned)."""
    for _ in range(warmup):
        for run in runs.values():
            run()
    calls: dict[K, list[Timing]] = {key: [] for key in runs}
    for _ in range(repeats):
        for key, run in runs.items():
            calls[key].append(time_calls(run, 1, warmup=0))
    return {
        key: Timing(
            [t.rounds[0] for t in timed], 1, sum(t.wall_seconds for t in timed), timed[-1].result
        )
        for key, timed in calls.items()
    }


def fastest(timings: Mapping[K, Mapping[int, float]], margin: float = 1.0) -> K:
    """The candidate whose times, each divided by the best at its row count, sum least; the first
    candidate (a default) stays unless that sum is at most `margin` times its own (below 1: a
    margin the other must win by), and on a tie. Every candidate is timed at the same row counts."""
    rows = next(iter(timings.values()))
    best = {r: min(t[r] for t in timings.values()) for r in rows}
    sums = {key: sum(t[r] / best[r] for r in rows) for key, t in timings.items()}
    least, default = min(sums, key=sums.__getitem__), next(iter(sums))
    return least if sums[least] <= margin * sums[default] else default


def cache_file() -> Path:
    """Where verdicts are kept: $QKV_CACHE_DIR/decoding-paths.json (default ~/.cache/qkv)."""
    return cache_dir() / "decoding-paths.json"


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown CPU" where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


KEY_FLAGS = ("avx512f", "vnni", "bf16", "amx")  # CPU flags (parts of their names) kernels depend on


@functools.cache
def _code_digest() -> str:
    """A digest of runtime/'s sources: a verdict made by other code (paths, checks) is not kept."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def cache_key(shapes: list[tuple[int, int]], flags: set[str]) -> str:
    """What a verdict depends on: the CPU and the flags its kernels depend on, the code that made
    it (a digest of runtime/'s sources: its paths and checks), torch, threads and the shapes."""
    marks = ",".join(sorted(f for f in flags if any(k in f for k in KEY_FLAGS))) or "-"
    counted = sorted({s: shapes.count(s) for s in shapes}.items())
    layers = " ".join(f"{i}x{o}*{n}" for (i, o), n in counted)
    return (
        f"{cpu_model_name()} [{marks}] qkv code {_code_digest()} "
        f"torch {torch.__version__} threads {torch.get_num_threads()} | {layers}"
    )


def read_verdicts(path: Path) -> dict[str, dict]:
    """The verdicts kept in `path` by their `cache_key` ({} where there are none yet)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or unreadable: measure again
        return {}
    return data if isinstance(data, dict) else {}


def write_verdict(path: Path, key: str, verdict: dict) -> None:
    """Keep `verdict` in `path` under `key` (the others kept; nothing where `path` is read-only)."""
    data = read_verdicts(path)
    data[key] = verdict
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:  # a read-only home: the verdict is measured again next time
        pass


__all__ = [
    "ROWS",
    "alternate",
    "cache_file",
    "cache_key",
    "cpu_model_name",
    "fastest",
    "read_verdicts",
    "write_verdict",
]
