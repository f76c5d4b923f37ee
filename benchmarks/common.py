"""What the benchmark scripts share: the paper's base shape (as a qkv model and as a Hugging Face
Marian config), random sentences of ids, the decoding workload, the timing helper, and the
description of the machine and software they run on.

The scripts run as modules from the repository root (`python -m benchmarks.speed`) and import it
as `benchmarks.common`. torch, qkv and transformers are imported inside the functions that need
them, so a script that only drives `python -m qkv` subprocesses stays light and a timed process
loads nothing it does not use (`timing_helper`: qkv's timing helper without the qkv package).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from qkv import Transformer, TransformerConfig

# --- the paper's base shape (Table 3) with a shared, tied vocabulary ------------------------------

VOCAB = 8000
D_MODEL, HEADS, D_FF, LAYERS = 512, 8, 2048, 6  # LAYERS encoder and LAYERS decoder layers
UNK, BOS, EOS = 1, 2, 3  # qkv's ids; speed.py's Marian model also puts its pad last (vocab - 1)
FIRST_WORD = 4  # random words: FIRST_WORD .. vocab - 2, so no special id and no pad (0 or last)

# --- the decoding workload (speed.py's defaults; investigations/decode_ab.py uses it as is) -------

SRC_LEN = 25  # random source tokens per sentence, eos added
NEW_TOKENS = 30  # every hypothesis is forced to exactly this many tokens (min_len = max_len)
BATCH1_SENTENCES = 8  # sentences decoded one at a time
BATCH32_SENTENCES = 64  # sentences decoded 32 at a time

QKV = [sys.executable, "-m", "qkv"]  # the command line, in this interpreter


def base_config(vocab: int = VOCAB, **overrides: Any) -> TransformerConfig:
    """The base shape as a qkv config: 6 + 6 layers, d_model 512, 8 heads, d_ff 2048, post-norm,
    ReLU, sinusoidal positions, one shared and tied vocabulary of `vocab` tokens."""
    from qkv import TransformerConfig

    shape = dict(
        src_vocab_size=vocab,
        d_model=D_MODEL,
        n_heads=HEADS,
        d_ff=D_FF,
        n_encoder_layers=LAYERS,
        n_decoder_layers=LAYERS,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
    )
    return TransformerConfig(**{**shape, **overrides})


def base_model(vocab: int = VOCAB, seed: int = 0) -> Transformer:
    """A qkv `Transformer` of the base shape with random weights (torch seeded with `seed`), in eval
    mode."""
    import torch

    from qkv import Transformer

    torch.manual_seed(seed)
    return Transformer(base_config(vocab)).eval()


def marian_config(vocab: int = VOCAB) -> Any:
    """The base shape as a Hugging Face `MarianConfig` (what `qkv.interop.marian.from_marian`
    imports): ReLU, post-norm, scaled embeddings, shared and tied vocabulary, pad last, decoder
    start (bos) 2, eos 3."""
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=vocab,
        d_model=D_MODEL,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=D_FF,
        decoder_ffn_dim=D_FF,
        max_position_embeddings=1024,
        activation_function="relu",
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=True,
        pad_token_id=vocab - 1,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )


def random_sentences(n: int, words: int, vocab: int = VOCAB, seed: int = 1) -> torch.Tensor:
    """(n, words + 1) ids: `words` random words (FIRST_WORD .. vocab - 2) then eos, drawn from a
    generator seeded with `seed` (the global RNG is left alone)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(FIRST_WORD, vocab - 1, (n, words + 1), generator=generator)
    ids[:, -1] = EOS
    return ids


# --- timing ---------------------------------------------------------------------------------------


def cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine since boot, CPU seconds of this process, all its
    threads and its child processes, ended or running, such as forked decoding workers). Busy is
    user + nice + system + irq + softirq + steal of /proc/stat's first line."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields)
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    own = os.times()
    return (
        busy,
        own.user + own.system + own.children_user + own.children_system + running_children(),
    )


def running_children() -> float:
    """CPU seconds of this process's running children (worker processes kept between calls), from
    /proc/<pid>/stat's utime and stime; 0 where /proc lists no children."""
    ticks = 0
    for task in Path("/proc/self/task").glob("*"):
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:  # ended meanwhile: os.times counts it once it is reaped
                continue
            after_name = stat.rsplit(")", 1)[1].split()  # fields 3 on; 14 and 15 are utime, stime
            ticks += int(after_name[11]) + int(after_name[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def timing_helper() -> ModuleType:
    """This checkout's timing helper, src/qkv/runtime/timing.py, loaded from its file as module
    `qkv_timing`: without the qkv package (which imports torch), so that a process timing
    CTranslate2 loads no torch, and the same helper whichever qkv a script decodes with (an A/B run
    of investigations/decode_ab.py puts another tree's src first on PYTHONPATH)."""
    if "qkv_timing" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "src" / "qkv" / "runtime" / "timing.py"
        spec = importlib.util.spec_from_file_location("qkv_timing", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["qkv_timing"] = module  # before it runs: dataclasses look the module up
        spec.loader.exec_module(module)
    return sys.modules["qkv_timing"]


def time_calls(run: Callable[[], Any], repeats: int, **options: Any) -> Any:
    """`qkv.runtime.timing.time_calls` (warm-up calls, then timed rounds; a `Timing` with the
    median and the best seconds per call), from `timing_helper`."""
    return timing_helper().time_calls(run, repeats, **options)


def timed(run: Callable[[], Any], repeats: int) -> tuple[dict[str, float], Any]:
    """One warm-up call, then `repeats` timed calls (`qkv.runtime.timing.time_calls`). Returns
    ({"seconds": the median, "best_seconds": the fastest, "other_cores": ..., "first_call_seconds":
    the warm-up}, the last call's result).

    Other processes make the times noisy: "other_cores" is the machine's busy CPU time minus this
    process's, per second of the timed calls (the cores that others kept busy, on average). A call
    that queues work on a GPU must synchronize before it returns."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    busy, own = cpu_seconds()
    timing = time_calls(run, repeats, warmup=0)
    busy_after, own_after = cpu_seconds()
    others = max(0.0, (busy_after - busy) - (own_after - own)) / timing.wall_seconds
    times = {
        "seconds": timing.seconds,
        "best_seconds": timing.best_seconds,
        "other_cores": others,
        "first_call_seconds": first,  # the warm-up: a captured step compiles in it
    }
    return times, timing.result


def memory_mb(field: str) -> float:
    """A /proc/self/status memory field in MB: VmRSS (now) or VmHWM (the peak since exec, unlike
    ru_maxrss, which a fork inherits)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


# --- the machine and the software -----------------------------------------------------------------

# The instruction sets that select PyTorch's, oneDNN's and CTranslate2's CPU kernels: float32 (avx2,
# fma, avx512f), bfloat16 (avx512_bf16, amx_bf16) and int8 (avx512_vnni, amx_int8) matrix products.
CPU_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


def cpu_model() -> str:
    """The processor's name: lscpu's `Model name`, else /proc/cpuinfo's `model name`, else
    platform's."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    names = [
        line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")
    ]
    if not names and Path("/proc/cpuinfo").exists():
        text = Path("/proc/cpuinfo").read_text()
        names = re.findall(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return names[0] if names else platform.processor() or platform.machine()


def cpu_flags() -> dict[str, bool]:
    """Which of CPU_FLAGS this processor has, read from /proc/cpuinfo when called ({} where it lists
    no flags)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    found = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    if found is None:
        return {}
    flags = set(found[1].split())
    return {flag: flag in flags for flag in CPU_FLAGS}


def machine() -> dict[str, Any]:
    """{"cpu": model name, "cores": logical cores, "cpu_flags": {flag: present}}."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "cpu_flags": cpu_flags()}


def versions(*packages: str) -> dict[str, str]:
    """Python's version and each installed package's (default: torch, transformers, ctranslate2),
    read from the installed metadata without importing them; packages not installed are left out."""
    from importlib import metadata

    found = {"python": platform.python_version()}
    for package in packages or ("torch", "transformers", "ctranslate2"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[package] = metadata.version(package)
    return found


def describe(host: dict[str, Any], software: dict[str, str]) -> str:
    """One line from machine() and versions(): CPU model, cores, which of CPU_FLAGS the CPU has and
    lacks, versions."""
    flags = host.get("cpu_flags") or {}
    has = " ".join(f for f, present in flags.items() if present) or "none"
    lacks = " ".join(f for f, present in flags.items() if not present)
    return (
        f"{host['cpu']}, {host['cores']} cores; CPU flags: {has}"
        + (f" (not: {lacks})" if lacks else "")
        + "; "
        + ", ".join(f"{name} {version}" for name, version in software.items())
    )


# --- the command line's scores --------------------------------------------------------------------


def parse_scores(text: str) -> dict[str, float]:
    """sacreBLEU lines printed by `qkv evaluate` -> {"bleu", "chrf", "tok_bleu"} (those present)."""
    scores = {}
    for line in text.splitlines():
        m = re.match(r"(BLEU|chrF2?)\|.*?= ([\d.]+)", line)
        if m:
            if m[1].startswith("chrF"):
                scores["chrf"] = float(m[2])
            else:
                scores["tok_bleu" if "lowercased" in line else "bleu"] = float(m[2])
    return scores
