"""Ablations of a training recipe: train several variants side by side, then average and beam-search each on
the validation split (never the test split) and print one table.

    python -m benchmarks.ablate configs/multi30k-small.yaml --data-dir ../shared/data --out runs/ablate \
        --variant anchor= --variant post-norm=--model.norm_first=false --variant drop0.2=--model.dropout=0.2

A variant is NAME=OVERRIDES, its overrides `--key=value` pairs separated by spaces (the `qkv train` syntax).
Each variant runs as its own `qkv train` process (`--parallel` at a time); on a GPU several share the card.
Results: OUT/ablate.json and a table (best greedy validation BLEU during training and its step, then the
averaged model's tokenized lowercase BLEU with beam search, the Multi30k metric).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import time
from pathlib import Path

from benchmarks import common
from benchmarks.common import QKV, parse_scores


def run(cmd: list[str], log: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - the process owns it
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--out", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--variant", action="append", required=True, help="NAME=--key=value --key=value")
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--last", type=int, default=10, help="checkpoints to average")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--device", default="cpu", help="for evaluation; training follows the recipe's `device`")
    p.add_argument("--split", default="val")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(common.describe(common.machine(), common.versions("torch")), flush=True)
    variants = [v.split("=", 1) for v in args.variant]
    pending, running, start = list(variants), [], time.time()
    while pending or running:
        while pending and len(running) < args.parallel:
            name, overrides = pending.pop(0)
            cmd = [*QKV, "train", args.config, "--out", str(out / name), "--data_dir", args.data_dir,
                   *overrides.split()]
            running.append((name, run(cmd, out / f"{name}.train.log"), time.time()))
        time.sleep(2)
        for item in list(running):
            name, proc, t0 = item
            if proc.poll() is not None:
                running.remove(item)
                print(f"{name}: exit {proc.returncode} after {time.time() - t0:.0f} s", flush=True)
    rows = []
    for name, overrides in variants:
        d = out / name
        with open(d / "log.csv") as f:
            log = [r for r in csv.DictReader(f) if r["valid_bleu"]]
        best = max(log, key=lambda r: float(r["valid_bleu"]), default=None)
        row = {"variant": name, "overrides": overrides, "steps": int(log[-1]["step"]) if log else 0,
               "train_s": float(log[-1]["elapsed_s"]) if log else None,
               "best_greedy_bleu": float(best["valid_bleu"]) if best else None,
               "best_step": int(best["step"]) if best else None,
               "curve": [(int(r["step"]), float(r["valid_bleu"])) for r in log]}
        avg = out / f"{name}-avg"
        subprocess.run([*QKV, "average", "--model", str(d), "--last", str(args.last), "--out", str(avg)], check=True,
                       stdout=subprocess.DEVNULL)
        corpus, pair = _corpus_and_pair(d)
        for which, model in (("best", d), ("avg", avg)):  # the best single model vs the averaged one
            res = subprocess.run([*QKV, "evaluate", "--model", str(model), "--corpus", corpus, "--split",
                                  args.split, "--pair", pair, "--beam", str(args.beam), "--data-dir",
                                  args.data_dir, "--device", args.device], capture_output=True, text=True)
            row.update({f"{which}_beam_{k}": v for k, v in parse_scores(res.stdout + res.stderr).items()})
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
    (out / "ablate.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'variant':<16} {'steps':>6} {'best greedy':>11} {'@step':>6} {'best+beam':>10} {'avg+beam':>9}"
          "   (greedy: sacreBLEU; beam: tokenized lowercase BLEU)")
    for r in rows:
        print(f"{r['variant']:<16} {r['steps']:>6} {r['best_greedy_bleu'] or 0:>11.2f} {r['best_step'] or 0:>6} "
              f"{r.get('best_beam_tok_bleu') or 0:>10.2f} {r.get('avg_beam_tok_bleu') or 0:>9.2f}")
    print(f"total {time.time() - start:.0f} s")
    return 0


def _corpus_and_pair(run_dir: Path) -> tuple[str, str]:
    import yaml

    cfg = yaml.safe_load((run_dir / "train_config.yaml").read_text())
    return cfg["corpus"], f"{cfg['src_lang']}-{cfg['tgt_lang']}"


if __name__ == "__main__":
    raise SystemExit(main())
