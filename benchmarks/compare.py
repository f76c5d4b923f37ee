"""Compare two `speed.py --json` results row by row: the same workload before and after a change.

    python -m benchmarks.compare before.json after.json

Each decoding and training row is matched by its settings (engine, beam, batch, pack, quantize,
workers, ...). For every qkv row it prints tokens/s before and after, and qkv's ratio to the best
peer row (Hugging Face or CTranslate2) of the same workload and precision (float32 or int8; bf16
rows count as float32) in the same run, so that a slower or faster machine between the runs cancels out: a change helps where
the ratio rises.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# fields that are measurements, not settings
MEASURED = {
    "seconds", "best_seconds", "other_cores", "tokens_per_second", "best_tokens_per_second",
    "sentences_per_second", "peak_rss_mb", "imports_rss_mb", "load_average", "gflops_per_second",
    "best_gflops_per_second", "flops_per_step", "repeats", "first_call_seconds",
}
# fields that name one engine's settings; the rest of the key is the workload
ENGINE = {"engine", "pack", "quantize", "workers", "compute_type", "threads_label", "inter",
          "intra", "keep_freed_memory", "threads", "cache", "precision", "attention", "processes",
          "capture"}


def _rows(result: dict) -> list[dict]:
    return [*result.get("decoding", []), *result.get("training", [])]


def _key(row: dict, fields: set[str]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in row.items() if k in fields))


def _settings(row: dict) -> set[str]:
    return set(row) - MEASURED


def _speed(row: dict) -> float:
    return row.get("best_tokens_per_second", row["tokens_per_second"])


def _workload(row: dict) -> tuple:
    """The work done and the precision it is done in: int8 rows compete with int8 rows, bf16 rows
    with float32 ones (no peer here has a bf16 row that is not also a float row)."""
    int8 = row.get("quantize") == "int8" or str(row.get("compute_type", "")).startswith("int8")
    return (*_key(row, _settings(row) - ENGINE), ("precision", "int8" if int8 else "float32"))


def best_peer(rows: list[dict]) -> dict[tuple, float]:
    """Per workload and precision, the fastest tokens/s of any engine other than qkv."""
    best: dict[tuple, float] = {}
    for row in rows:
        if row["engine"] != "qkv":
            best[_workload(row)] = max(best.get(_workload(row), 0.0), _speed(row))
    return best


def compare(before: dict, after: dict) -> list[str]:
    peers = best_peer(_rows(before)), best_peer(_rows(after))
    old = {_key(r, _settings(r)): r for r in _rows(before) if r["engine"] == "qkv"}
    lines = [
        "| workload | qkv setting | before tok/s | after tok/s | after ÷ before "
        "| ÷ best peer before | ÷ best peer after |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in _rows(after):
        if row["engine"] != "qkv" or _key(row, _settings(row)) not in old:
            continue
        prev = old[_key(row, _settings(row))]
        work = _workload(row)
        setting = " ".join(f"{k}={v}" for k, v in _key(row, _settings(row) & ENGINE))
        ratios = [
            f"{_speed(r) / p[work]:.2f}" if work in p else ""
            for r, p in zip((prev, row), peers, strict=True)
        ]
        lines.append(
            f"| {' '.join(f'{k}={v}' for k, v in work)} | {setting} | {_speed(prev):.0f} "
            f"| {_speed(row):.0f} | {_speed(row) / _speed(prev):.2f} | {ratios[0]} | {ratios[1]} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    before, after = (json.loads(p.read_text()) for p in (args.before, args.after))
    print("\n".join(compare(before, after)))


if __name__ == "__main__":
    main()
