"""Speed of qkv against Hugging Face transformers and CTranslate2 on the paper's base shape, on CPU.

    pip install -e '.[bench]'
    python -m benchmarks.speed                 # the tables of docs/benchmarks.md
    python -m benchmarks.speed --quick         # smoke run of every path
    python -m benchmarks.speed --cache-off     # also qkv greedy without the decoder cache
    python -m benchmarks.speed --json benchmarks/results/speed.json

It builds one random base-shape model for Hugging Face, qkv and CTranslate2 (and a second one of
OPUS-MT's shape), checks that qkv computes what Hugging Face computes (exit 1 before any timing if
not), then times each row of the tables in a fresh subprocess (progress on stderr). It prints the
machine (CPU model, the CPU flags that select kernels, cores) and the versions, then the tables:
decoding tokens/s per engine and setting, each engine's best decoding row against each peer's,
the training step, and one attention layer against sequence length. It writes every number to
`--json`. The rows it runs are the tables below (DECODE_ROWS, TRAIN_ROWS); how they are measured:
docs/benchmarks.md, "Speed: qkv, Hugging Face and CTranslate2".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.common import D_MODEL, HEADS
from benchmarks.speed_check import check, check_line
from benchmarks.speed_engines import build, worker
from benchmarks.speed_tables import attention_table, decode_table, peer_table, train_table
from qkv.runtime.process import tcmalloc_library, with_tcmalloc

TGT_LEN = 25  # target tokens per training pair
ENV = {
    **os.environ,
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
}

# --- the rows: what each run times, in the order it runs and prints -------------------------------

# Each row is (when, settings). when: "always"; "bf16" where the CPU multiplies bf16 natively;
# "cache off" with --cache-off, greedy only.
DECODE_WORKLOADS = [(1, 1), (1, 32), (4, 1), (4, 32)]  # (beam, batch), each with every DECODE_ROW
DECODE_ROWS: list[tuple[str, dict[str, Any]]] = [
    ("always", dict(engine="qkv", pack=False)),
    ("always", dict(engine="qkv", quantize=None, workers=1, processes=False)),
    ("always", dict(engine="qkv", quantize=None, workers=2, processes=False)),
    ("always", dict(engine="qkv", quantize=None, workers=2, processes=True)),
    ("always", dict(engine="qkv", quantize="int8", workers=1, processes=False)),
    ("always", dict(engine="qkv", quantize="int8", workers=2, processes=False)),
    ("always", dict(engine="qkv", quantize="int8", workers=2, processes=True)),
    ("bf16", dict(engine="qkv", precision="bf16", workers=1, processes=False)),
    ("bf16", dict(engine="qkv", precision="bf16", workers=2, processes=False)),
    ("bf16", dict(engine="qkv", precision="bf16", workers=2, processes=True)),
    ("bf16", dict(engine="hf", precision="bf16")),
    ("always", dict(engine="qkv", pack=False, capture=True)),
    ("always", dict(engine="qkv", quantize="int8", capture=True)),
    ("always", dict(engine="qkv", quantize="int8", capture=True, workers=2, processes=True)),
    ("bf16", dict(engine="qkv", precision="bf16", pack=False, capture=True)),
    ("cache off", dict(engine="qkv", cache=False)),
    ("always", dict(engine="hf")),
    ("always", dict(engine="ct2", compute_type="float32", threads_label="default")),
    ("always", dict(engine="ct2", compute_type="float32", threads_label="2x1")),
    ("always", dict(engine="ct2", compute_type="int8", threads_label="default")),
    ("always", dict(engine="ct2", compute_type="int8", threads_label="2x1")),
    ("always", dict(engine="qkv", model="opus")),
    ("always", dict(engine="hf", model="opus")),
]
CT2_THREADS = {"default": (1, 0), "2x1": (2, 1)}  # threads_label -> (inter_threads, intra_threads)
TRAIN_ROWS: list[tuple[str, dict[str, Any]]] = [
    ("always", dict(engine="qkv", keep_freed_memory=False)),
    ("always", dict(engine="hf", keep_freed_memory=False)),
    ("always", dict(engine="qkv", keep_freed_memory=True)),
    ("always", dict(engine="hf", keep_freed_memory=True)),
    ("bf16", dict(engine="qkv", keep_freed_memory=True, precision="bf16")),
    ("bf16", dict(engine="hf", keep_freed_memory=True, precision="bf16")),
    ("bf16", dict(engine="hf", keep_freed_memory=True, precision="bf16", attention="eager")),
]
ATTENTION_LENGTHS = [128, 256, 512, 1024, 2048, 4096]  # up to --max-attention-length
ATTENTION_PATHS = [False, True]  # explicit: the fused path, then softmax(QK^T)V


def applies(when: str, bf16: bool, cache_off: bool) -> bool:
    """Whether a row marked `when` runs, given native bf16 and --cache-off (for this workload)."""
    return when == "always" or (when == "bf16" and bf16) or (when == "cache off" and cache_off)


def plan(args: argparse.Namespace, bf16: bool) -> dict[str, Any]:
    """The worker specs of this run: {"decoding": [...], "matmul": {...}, "training": [...],
    "attention": [...]}, each a row's settings with the workload's."""
    shared = {"vocab": args.vocab, "repeats": args.repeats}
    sentences = {1: args.batch1_sentences, 32: args.batch32_sentences}
    decoding = []
    for beam, batch in DECODE_WORKLOADS:
        workload = {
            **shared,
            "task": "decode",
            "beam": beam,
            "batch": batch,
            "sentences": sentences[batch],
            "new_tokens": args.new_tokens,
        }
        for when, settings in DECODE_ROWS:
            if applies(when, bf16, args.cache_off and beam == 1):
                spec = {**workload, **settings}
                if spec["engine"] == "ct2":
                    spec["inter"], spec["intra"] = CT2_THREADS[spec["threads_label"]]
                decoding.append(spec)
    training = []
    for when, settings in TRAIN_ROWS:
        if applies(when, bf16, cache_off=False):
            engine, rest = settings["engine"], {k: v for k, v in settings.items() if k != "engine"}
            training.append(
                {
                    **shared,
                    "task": "train",
                    "engine": engine,
                    "sentences": args.train_sentences,
                    "src_len": args.src_len,
                    "tgt_len": TGT_LEN,
                    **rest,
                }
            )
    attention = []
    for length in ATTENTION_LENGTHS:
        if length <= args.max_attention_length:
            for explicit in ATTENTION_PATHS:
                attention.append(
                    {**shared, "task": "attention", "length": length, "explicit": explicit}
                )
    matmul = {**shared, "task": "matmul", "size": args.matmul_size, "repeats": 5}
    return {"decoding": decoding, "matmul": matmul, "training": training, "attention": attention}


def worker_environment(spec: dict[str, Any]) -> dict[str, str]:
    """A worker's environment: qkv's rows run with tcmalloc preloaded where it is installed, as
    qkv's commands run on the CPU (`qkv.runtime.process.restart_with_tcmalloc`); the others with
    the system's allocator, as their libraries run."""
    library = tcmalloc_library() if spec.get("engine") == "qkv" else None
    return ENV if library is None else with_tcmalloc(ENV, library)


def run_worker(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    """Run one measurement in a fresh Python process; exit 1 with its stderr if it fails."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    command = [sys.executable, "-m", "benchmarks.speed", "--worker", json.dumps(spec)]
    command += ["--workdir", str(work)]
    proc = subprocess.run(command, capture_output=True, text=True, env=worker_environment(spec))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        raise SystemExit(f"worker failed: {spec}")
    result = {
        **spec,
        **json.loads(lines[-1][len("RESULT ") :]),
        "load_average": [load, os.getloadavg()[0]],
    }
    label = " ".join(f"{k}={v}" for k, v in spec.items() if k not in ("task", "vocab", "repeats"))
    print(
        f"  {spec['task']:<9} {label:<80} {time.perf_counter() - start:6.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return result


# --- the report -----------------------------------------------------------------------------------


def report(
    args: argparse.Namespace, results: dict[str, Any], load: list[float], seconds: float
) -> None:
    """Print the check's summary and the four tables."""
    correctness, decoding = results["check"], results["decoding"]
    matmul, peak = results["matmul_peak"], results["matmul_peak"]["gflops_per_second"]
    print(f"\nload average {load[0]:.2f} before, {load[1]:.2f} after; {seconds:.0f} s in all")
    logits = (
        f"{correctness['logits_max_abs_diff']:.1e} (packed "
        f"{correctness['packed_logits_max_abs_diff']:.1e})"
    )
    print("\n" + check_line(correctness, logits, " (packed)"))
    print(
        f"\nDecoding: {args.src_len} + eos source tokens, exactly {args.new_tokens} new tokens "
        f"per hypothesis; batch 1: {args.batch1_sentences} sentences, batch 32: "
        f"{args.batch32_sentences}; qkv ÷ engine > 1: qkv faster"
    )
    print(decode_table(decoding))
    print("\nEach engine's best row against each peer's best row (the same workload, this run)")
    print(peer_table(decoding))
    print(
        "\nTraining step (forward + backward + Adam; bf16 rows: bf16 autocast, fp32 master "
        f"weights); matmul peak fp32 {peak:.0f}, bf16 {_gflops(matmul)} GFLOP/s "
        f"({args.matmul_size}² matmul, {matmul['threads']} threads)"
    )
    print(train_table(results["training"], peak, matmul.get("bf16_gflops_per_second")))
    print(
        f"\nAttention: one encoder self-attention layer (d_model {D_MODEL}, {HEADS} heads, "
        "batch 1), forward"
    )
    print(attention_table(results["attention"]))


def _gflops(matmul: dict[str, Any]) -> str:
    bf16 = matmul.get("bf16_gflops_per_second")
    return "(not native here)" if bf16 is None else f"{bf16:.0f}"


# --- the run --------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small workloads: a smoke run of every path"
    )
    parser.add_argument(
        "--json", default="benchmarks/results/speed.json", help="where to write the results"
    )
    parser.add_argument("--vocab", type=int, default=common.VOCAB)
    parser.add_argument(
        "--src-len", type=int, default=common.SRC_LEN, help="source tokens (eos added)"
    )
    parser.add_argument(
        "--new-tokens", type=int, default=common.NEW_TOKENS, help="output tokens per hypothesis"
    )
    parser.add_argument(
        "--batch1-sentences",
        type=int,
        default=common.BATCH1_SENTENCES,
        help="sentences decoded one at a time",
    )
    parser.add_argument(
        "--batch32-sentences",
        type=int,
        default=common.BATCH32_SENTENCES,
        help="sentences decoded 32 at a time",
    )
    parser.add_argument(
        "--cache-off",
        action="store_true",
        help="also time qkv greedy decoding without the decoder cache (every step "
        "recomputes the prefix)",
    )
    parser.add_argument(
        "--train-sentences",
        type=int,
        default=160,
        help="pairs per training step (25 target tokens)",
    )
    parser.add_argument("--matmul-size", type=int, default=4096)
    parser.add_argument("--max-attention-length", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.batch1_sentences, args.batch32_sentences, args.train_sentences = 2, 32, 16
        args.matmul_size, args.max_attention_length, args.repeats = 1024, 512, 1
    return args


def main() -> None:
    args = parse_args()
    if args.worker:
        print(
            "RESULT " + json.dumps(worker(json.loads(args.worker), Path(args.workdir))), flush=True
        )
        return
    started, load_before = time.perf_counter(), os.getloadavg()
    machine, versions = common.machine(), common.versions()
    print(common.describe(machine, versions), flush=True)
    from qkv.runtime.precision import describe_hardware, native_bf16  # torch: not in CT2's workers

    specs = plan(args, bf16=native_bf16("cpu"))  # bf16 rows where the CPU multiplies bf16 natively
    print(describe_hardware("cpu"), flush=True)
    with tempfile.TemporaryDirectory(prefix="qkv-speed-") as tmp:
        work = Path(tmp)
        print(
            "building the model (HF), importing it into qkv, converting it to CTranslate2 ...",
            file=sys.stderr,
        )
        build(work, args)
        results = {"check": check(work, args)}
        results["decoding"] = [run_worker(spec, work) for spec in specs["decoding"]]
        results["matmul_peak"] = run_worker(specs["matmul"], work)
        results["training"] = [run_worker(spec, work) for spec in specs["training"]]
        results["attention"] = [run_worker(spec, work) for spec in specs["attention"]]

    load_after = os.getloadavg()[0]
    machine["load_average_before_after"] = [load_before[0], load_after]
    report(args, results, [load_before[0], load_after], time.perf_counter() - started)
    result = {
        "benchmark": "speed",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "versions": versions,
        "settings": vars(args),
        **results,
        "seconds": time.perf_counter() - started,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
