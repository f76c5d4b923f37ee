"""Fine-tuning speed and memory: `qkv train --init_from` against a plain Hugging Face training loop
on a random-weight model of OPUS-MT's base shape (6 + 6 layers, d_model 512, 58,101 joint tokens).

    pip install -e '.[bench]'
    python -m benchmarks.finetune_speed --data-dir ../shared/data     # docs/benchmarks.md's table
    python -m benchmarks.finetune_speed --quick --corpus synthetic     # a smoke run (tiny model)

It writes a Marian directory (benchmarks/finetune_setup.py) and the training pairs (the first
--pairs English-German pairs of Multi30k, or synthetic ones), takes the batches that `qkv train`
makes for the recipe, then alternates, --repeats times, two runs each in a fresh process:

* qkv: `python -m qkv train --init_from MARIAN_DIR ...` itself (the command line's own process
  set-up: tcmalloc, threads, kept freed memory), --warmup-updates + --updates updates, a log row per
  update; the timed updates' seconds are the difference of their log rows' elapsed_s.
* Hugging Face: `MarianMTModel.from_pretrained(MARIAN_DIR)` trained by a plain loop (forward with
  the source's attention mask, F.cross_entropy with the same label smoothing over the logits,
  backward, the gradient norm, fused AdamW (the Trainer's default) with qkv's betas, eps and
  weight decay, the same warm-up schedule) on the same batches, the same tensors in the same
  order; system allocator, torch's threads (--hf-allocator tcmalloc runs it with qkv's allocator).

Both train in --precision (fp32, or bf16 autocast with fp32 weights) with the same dropout. Target
tokens/s: the non-pad target tokens of the timed updates over their seconds; peak RSS: the
process's ru_maxrss (os.wait4), set-up included. It prints the machine, a Markdown table of the
medians and the ratio, and writes every run to --json. With --dropout 0 the first update's loss
per token is the same function of the same weights and batch in both: the script prints both
(a check that the two train the same model on the same batches; tests/test_finetune_speed_script.py).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import common, finetune_setup
from benchmarks.speed_tables import markdown

ENV = {
    **os.environ,
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
}
ENGINES = ("qkv", "hf")
NAMES = {"qkv": "qkv train --init_from", "hf": "HF transformers loop"}
RSS_TARGET_GIB = 4.0
SPEEDUP_TARGET = 1.2


# --- the Hugging Face loop (a worker process) ----------------------------------------------------


def hf_worker(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    """Train MarianMTModel on work/batches.pt (finetune_setup.training_batches) as qkv's recipe
    says; returns the first update's loss per token and each update's end time."""
    import torch
    import torch.nn.functional as F
    from transformers import MarianMTModel

    imports_mb = common.memory_mb("VmRSS")
    found = torch.load(work / "batches.pt")
    pad, eps = found["pad_id"], found["label_smoothing"]
    model = MarianMTModel.from_pretrained(work / "marian", dropout=spec["dropout"])
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=found["lr"],
        betas=tuple(found["adam_betas"]),
        eps=found["adam_eps"],
        weight_decay=found["weight_decay"],
        fused=True,  # Seq2SeqTrainer's default optimizer on torch >= 2.8 (adamw_torch_fused)
    )
    warmup = max(found["lr_warmup"], 1)
    assert found["schedule"] == "noam", found["schedule"]  # qkv's noam: lr_multiplier
    noam = lambda done: min(1.0, (done + 1) / warmup, (warmup / (done + 1)) ** 0.5)  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, noam)
    bf16 = spec["precision"] == "bf16"
    params = list(model.parameters())
    marks, losses = [time.perf_counter()], []
    for src, tgt_in, tgt_out in found["batches"]:
        labels = tgt_out.masked_fill(tgt_out == pad, -100)
        n = int((labels != -100).sum())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(
                input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt_in
            ).logits
            loss = F.cross_entropy(
                logits.float().flatten(0, 1),
                labels.flatten(),
                label_smoothing=eps,
                reduction="sum",
            )
        (loss / n).backward()
        if found["clip_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(params, found["clip_norm"])
        else:  # qkv computes the norm at every update (it skips non-finite ones)
            torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item() / n)
        marks.append(time.perf_counter())
    elapsed = [m - marks[0] for m in marks]  # elapsed[k]: after update k (0: the start)
    return {
        "elapsed_s": elapsed,
        "first_update_loss": losses[0],
        "imports_rss_mb": imports_mb,
        "threads": torch.get_num_threads(),
    }


# --- running one measurement ----------------------------------------------------------------------


def run_child(command: list[str], env: dict[str, str], log: Path) -> tuple[int, float]:
    """Run `command`, its output into `log`; (exit status, the process's peak RSS in MiB)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024  # kB on Linux


def qkv_log_elapsed(out: Path, updates: int) -> tuple[list[float], float]:
    """(elapsed_s after update k for k = 0..updates, update 1's training loss) from a log.csv
    with a row per update (elapsed_s counts from the first update's start)."""
    with open(out / "log.csv", newline="") as f:
        rows = {int(r["step"]): r for r in csv.DictReader(f) if r.get("train_loss")}
    return [0.0] + [float(rows[k]["elapsed_s"]) for k in range(1, updates + 1)], float(
        rows[1]["train_loss"]
    )


def measure(
    engine: str,
    repeat: int,
    work: Path,
    args: argparse.Namespace,
    overrides: list[str],
    tokens: list[int],
) -> dict[str, Any]:
    """One run of `engine` in a fresh process; its tokens/s over the timed updates and peak RSS."""
    from qkv.runtime.process import tcmalloc_library, with_tcmalloc

    updates, load = args.warmup_updates + args.updates, os.getloadavg()[0]
    log = work / f"{engine}-{repeat}.log"
    if engine == "qkv":
        out = work / f"qkv-run-{repeat}"
        command = [*common.QKV, "train", "--out", str(out), *overrides]
        env = ENV
    else:
        spec = {"dropout": args.dropout, "precision": args.precision}
        command = [sys.executable, "-m", "benchmarks.finetune_speed", "--worker", json.dumps(spec)]
        command += ["--workdir", str(work)]
        library = tcmalloc_library() if args.hf_allocator == "tcmalloc" else None
        env = ENV if library is None else with_tcmalloc(ENV, library)
    started = time.perf_counter()
    status, peak_mb = run_child(command, env, log)
    text = log.read_text()
    if status != 0:
        print(text[-4000:], file=sys.stderr)
        raise SystemExit(f"finetune_speed: the {engine} run failed (exit {status})")
    if engine == "qkv":
        elapsed, first_loss = qkv_log_elapsed(out, updates)
        shutil.rmtree(out)  # its checkpoint: ~1 GB at the base shape
        extra: dict[str, Any] = {}
    else:
        result = json.loads(next(x for x in text.splitlines() if x.startswith("RESULT "))[7:])
        elapsed, first_loss = result.pop("elapsed_s"), result.pop("first_update_loss")
        extra = result
    w = args.warmup_updates
    seconds = elapsed[updates] - elapsed[w]
    timed_tokens = sum(tokens[w:updates])
    row = {
        "engine": engine,
        "repeat": repeat,
        "tokens_per_second": timed_tokens / seconds,
        "timed_seconds": seconds,
        "timed_target_tokens": timed_tokens,
        "update_seconds": [b - a for a, b in itertools.pairwise(elapsed)],
        "first_update_loss": first_loss,
        "peak_rss_mb": peak_mb,
        "process_seconds": time.perf_counter() - started,
        "load_average": [load, os.getloadavg()[0]],
        **extra,
    }
    print(
        f"  {NAMES[engine]:<22} repeat {repeat}: {row['tokens_per_second']:8.1f} target tokens/s,"
        f" peak RSS {peak_mb:6.0f} MiB, {row['process_seconds']:5.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return row


# --- the report -----------------------------------------------------------------------------------


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per engine the medians over its repeats; qkv ÷ HF tokens/s; qkv's peak RSS in GiB."""
    out: dict[str, Any] = {}
    for engine in ENGINES:
        mine = [r for r in runs if r["engine"] == engine]
        out[engine] = {
            "tokens_per_second": statistics.median(r["tokens_per_second"] for r in mine),
            "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in mine),
            "max_peak_rss_mb": max(r["peak_rss_mb"] for r in mine),
            "first_update_loss": mine[0]["first_update_loss"],
            "repeats": len(mine),
        }
    out["speedup"] = out["qkv"]["tokens_per_second"] / out["hf"]["tokens_per_second"]
    out["qkv_peak_rss_gib"] = out["qkv"]["max_peak_rss_mb"] / 1024
    out["meets_speedup_target"] = out["speedup"] >= SPEEDUP_TARGET
    out["meets_rss_target"] = out["qkv_peak_rss_gib"] <= RSS_TARGET_GIB
    return out


def table(runs: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    rows = []
    for engine in ENGINES:
        each = [r for r in runs if r["engine"] == engine]
        s = summary[engine]
        rows.append(
            [
                NAMES[engine],
                f"{s['tokens_per_second']:,.0f}",
                " / ".join(f"{r['tokens_per_second']:,.0f}" for r in each),
                f"{s['peak_rss_mb'] / 1024:.2f}",
                f"{s['max_peak_rss_mb'] / 1024:.2f}",
                f"{s['first_update_loss']:.6f}",
                f"{s['tokens_per_second'] / summary['hf']['tokens_per_second']:.2f}",
            ]
        )
    header = [
        "engine",
        "target tokens/s (median)",
        "each run",
        "peak RSS GiB (median)",
        "peak RSS GiB (max)",
        "update 1 loss/token",
        "÷ HF",
    ]
    return markdown(header, rows)


def report(
    args: argparse.Namespace,
    setup: dict[str, Any],
    runs: list[dict[str, Any]],
    summary: dict[str, Any],
) -> None:
    shape = setup["shape"]
    print(
        f"\nModel: random MarianMTModel, {shape['layers']}+{shape['layers']} layers, d_model "
        f"{shape['d_model']}, {shape['heads']} heads, FFN {shape['ffn']}, {shape['vocab']:,} joint "
        f"tokens ({setup['parameters']:,} parameters); {args.precision}, dropout {args.dropout}"
        + (f"; qkv --loss_chunk_tokens {args.loss_chunk_tokens}" if args.loss_chunk_tokens else "")
    )
    print(
        f"Batches: qkv's sampler for --max_tokens {args.max_tokens} on {setup['pairs']:,} "
        f"{args.corpus} pairs; updates {args.warmup_updates + 1}-"
        f"{args.warmup_updates + args.updates} timed ({setup['timed_target_tokens']:,} target "
        f"tokens, {setup['timed_sentences']:,} pairs) after {args.warmup_updates} warm-up; "
        f"{args.repeats} repeats, alternated; HF allocator: {args.hf_allocator}"
    )
    print("\n" + table(runs, summary))
    print(
        f"\nqkv ÷ HF: {summary['speedup']:.2f}x (target >= {SPEEDUP_TARGET}); qkv peak RSS "
        f"{summary['qkv_peak_rss_gib']:.2f} GiB (target <= {RSS_TARGET_GIB:.0f} GiB)"
    )


# --- the run --------------------------------------------------------------------------------------


def prepare(work: Path, args: argparse.Namespace) -> tuple[dict[str, Any], list[str], list[int]]:
    """The model directory, pairs and batches; (setup facts, qkv's overrides, target tokens per
    update)."""
    shape = finetune_setup.SHAPES["quick" if args.quick else "base"]
    pairs = finetune_setup.write_pairs(work, args.corpus, Path(args.data_dir), args.pairs)
    print("building the Marian directory ...", file=sys.stderr, flush=True)
    parameters = finetune_setup.build_marian_dir(work / "marian", shape, pairs)
    overrides = finetune_setup.qkv_overrides(work, pairs, args)
    print("preparing the data and taking qkv's batches ...", file=sys.stderr, flush=True)
    found = finetune_setup.training_batches(work, overrides, args.warmup_updates + args.updates)
    if len(found["batches"]) < args.warmup_updates + args.updates:
        raise SystemExit("finetune_speed: too few pairs for the updates: raise --pairs")
    pad, w = found["pad_id"], args.warmup_updates
    tokens = [int((tgt_out != pad).sum()) for _, _, tgt_out in found["batches"]]
    setup = {
        "shape": shape,
        "parameters": parameters,
        "pairs": args.pairs,
        "pad_id": pad,
        "target_tokens_per_update": tokens,
        "batch_shapes": [[list(t.shape) for t in b] for b in found["batches"]],
        "timed_target_tokens": sum(tokens[w:]),
        "timed_sentences": sum(len(b[0]) for b in found["batches"][w:]),
        "lr": found["lr"],
        "lr_warmup": found["lr_warmup"],
        "label_smoothing": found["label_smoothing"],
        "qkv_train_flags": overrides,
    }
    return setup, overrides, tokens


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model and few updates: a smoke run of both paths",
    )
    parser.add_argument(
        "--json",
        help="where to write the results (default: benchmarks/results/finetune-speed.json, "
        "with --quick finetune-speed-quick.json)",
    )
    parser.add_argument("--corpus", choices=["multi30k", "synthetic"], default="multi30k")
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("QKV_DATA_DIR", "../shared/data"),
        help="the folder holding multi30k/ (default: $QKV_DATA_DIR, else %(default)s)",
    )
    parser.add_argument("--pairs", type=int, default=8000, help="training pairs (the first N)")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=4096,
        help="qkv's --max_tokens: padded source or target tokens per batch",
    )
    parser.add_argument("--warmup-updates", type=int, default=3, help="updates before the timing")
    parser.add_argument("--updates", type=int, default=10, help="timed updates")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each engine, alternated")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--dropout", type=float, default=0.1, help="OPUS-MT's: 0.1")
    parser.add_argument(
        "--loss-chunk-tokens",
        type=int,
        help="qkv's --loss_chunk_tokens (the HF loop is unchanged); default: qkv's fine-tuning "
        "default (1,024)",
    )
    parser.add_argument(
        "--hf-allocator",
        choices=["glibc", "tcmalloc"],
        default="glibc",
        help="the HF loop's allocator (qkv's command line uses tcmalloc where it is installed)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.max_tokens = min(args.pairs, 400), min(args.max_tokens, 512)
        args.warmup_updates, args.updates, args.repeats = 1, 2, 1
    if args.json is None:
        quick = "-quick" if args.quick else ""
        args.json = f"benchmarks/results/finetune-speed{quick}.json"
    if args.warmup_updates < 1 or args.updates < 1:
        parser.error("--warmup-updates and --updates must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    if args.worker:
        result = hf_worker(json.loads(args.worker), Path(args.workdir))
        print("RESULT " + json.dumps(result), flush=True)
        return
    from qkv.runtime.process import tcmalloc_library

    started = time.perf_counter()
    machine = common.machine()
    versions = common.versions("torch", "transformers", "sentencepiece")
    print(common.describe(machine, versions), flush=True)
    with tempfile.TemporaryDirectory(prefix="qkv-finetune-speed-") as tmp:
        work = Path(tmp)
        setup, overrides, tokens = prepare(work, args)
        runs = [
            measure(engine, repeat, work, args, overrides, tokens)
            for repeat in range(1, args.repeats + 1)
            for engine in ENGINES
        ]
    summary = summarize(runs)
    report(args, setup, runs, summary)
    result = {
        "benchmark": "finetune-speed",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "versions": versions,
        "settings": {k: v for k, v in vars(args).items() if k not in ("worker", "workdir")},
        "allocators": {
            "qkv": tcmalloc_library() or "glibc, freed memory kept",
            "hf": args.hf_allocator,
        },
        "setup": setup,
        "summary": summary,
        "runs": runs,
        "seconds": time.perf_counter() - started,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json} ({result['seconds']:.0f} s in all)")


if __name__ == "__main__":
    main()
