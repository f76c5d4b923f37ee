"""Adapting a model to a domain with `qkv train --init_from`, on Multi30k en->de (docs/results.md).

    python -m benchmarks.domain --data-dir ../shared/data --out runs/domain
    python -m benchmarks.domain --from-json docs/results/domain.json      # the table again

The topic is sports: an English sentence whose words match TOPIC (a word-boundary regex, case
insensitive) is a sports pair; the split files (sports and the rest, of train, val and
test_2016_flickr) are written under OUT/data. Per seed: a "general" model trained on the rest of
train (validated on the rest of val), then fine-tuned from it on the sports training pairs (validated
on the sports val pairs, the best by greedy BLEU kept): plain, with general pairs mixed in, and with
parts frozen. Each model is scored (greedy, sacreBLEU) on the sports test pairs and on the rest of
test_2016_flickr in one `qkv evaluate` call. `--lrs` first compares fine-tuning rates on the first
seed by the sports validation BLEU. Runs that exist are reused; the results go to --json.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import re
import statistics
import subprocess
from pathlib import Path

from benchmarks import common
from benchmarks.common import QKV

TOPIC_WORDS = """ball balls soccer football basketball baseball tennis volleyball hockey rugby golf
player players team teams game games athlete athletes race races racing racer racers bicycle bicycles
bike bikes biker bikers bicyclist bicyclists cyclist cyclists rider riders helmet helmets runner
runners running marathon jersey jerseys uniform uniforms field court sport sports match goal stadium
track skateboard skateboarder skateboarders skateboarding snowboard snowboarder snowboarding ski skis
skier skiing surf surfer surfers surfing surfboard swim swimmer swimmers swimming boxing boxer
wrestling wrestler wrestlers karate martial"""
TOPIC = re.compile(r"\b(?:" + "|".join(TOPIC_WORDS.split()) + r")\b", re.IGNORECASE)
SPLITS = ("train", "val", "test_2016_flickr")
GENERAL = [  # the general model: configs/multi30k-small.yaml's shape, a shorter run
    "configs/multi30k-small.yaml",
    "--max_steps",
    "450",
    "--warmup",
    "200",
    "--max_tokens",
    "4096",
    "--valid_every",
    "450",
    "--valid_metric",
    "loss",
    "--valid_bleu",
    "false",
]
FINE_TUNE = ["--max_steps", "125", "--valid_every", "25", "--patience", "3", "--max_tokens", "4096"]
VARIANTS = {  # name -> extra `qkv train` arguments (DATA: the split files' folder)
    "plain": [],
    "mixed": [
        "--mix_src",
        "DATA/general.train.en",
        "--mix_tgt",
        "DATA/general.train.de",
        "--mix_ratio",
        "0.5",
    ],
    "frozen": ["--freeze", "embeddings,encoder"],
}
MACHINE = ["--threads", "1", "--tensorboard", "false"]


def read_gz(path: Path) -> list[str]:
    """The lines of a gzipped text file."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def split(data_dir: Path, out: Path) -> dict[str, dict[str, int]]:
    """Writes OUT/{sports,general}.{split}.{en,de}; returns the pairs of each part and split."""
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, dict[str, int]] = {"sports": {}, "general": {}}
    for name in SPLITS:
        en, de = (read_gz(data_dir / "multi30k" / f"{name}.{lang}.gz") for lang in ("en", "de"))
        short = name.split("_")[0]  # test_2016_flickr -> test
        for part in ("sports", "general"):
            rows = [
                (e, d)
                for e, d in zip(en, de, strict=True)
                if bool(TOPIC.search(e)) == (part == "sports")
            ]
            for i, lang in enumerate(("en", "de")):
                text = "".join(row[i] + "\n" for row in rows)
                (out / f"{part}.{short}.{lang}").write_text(text, encoding="utf-8")
            counts[part][short] = len(rows)
    return counts


def qkv(*args: str) -> str:
    """`python -m qkv ARGS` under `nice -n 10` (PYTHONPATH as given); its stdout and stderr."""
    print("+ qkv " + " ".join(args), flush=True)
    res = subprocess.run(["nice", "-n", "10", *QKV, *args], text=True, capture_output=True)
    if res.returncode:
        raise SystemExit(f"qkv {args[0]} failed:\n{res.stdout}{res.stderr}")
    return res.stdout + res.stderr


def train(out: Path, data: Path, part: str, seed: int, extra: list[str]) -> None:
    """`qkv train EXTRA` (a recipe first, if any) on the PART pairs of `data` into `out`, unless
    it holds a model already."""
    if (out / "model.safetensors").exists():
        return
    args = [a.replace("DATA", str(data)) for a in extra]
    files = [f"--{k}_{s}" for k in ("train", "valid") for s in ("src", "tgt")]
    paths = [str(data / f"{part}.{k}.{lang}") for k in ("train", "val") for lang in ("en", "de")]
    pairs = [x for pair in zip(files, paths, strict=True) for x in pair]
    qkv(
        "train",
        *args,
        "--corpus",
        "null",
        *pairs,
        "--seed",
        str(seed),
        *MACHINE,
        "--out",
        str(out),
        "--overwrite",
    )


def evaluate(model: Path, data: Path) -> dict[str, float]:
    """Greedy sacreBLEU of `model` on the sports and the general test pairs (one call)."""
    sets = {part: data / f"{part}.test" for part in ("sports", "general")}
    args = [x for path in sets.values() for x in ("--src", f"{path}.en", "--ref", f"{path}.de")]
    text = qkv("evaluate", "--model", str(model), *args, "--beam", "1", "--precision", "fp32")
    print(text)
    scores = {}
    for part, path in sets.items():
        row = next(line.split() for line in text.splitlines() if line.startswith(f"{path}.en"))
        scores[part] = float(row[2])
    return scores


def best_valid(run: Path) -> float:
    """The best validation BLEU of a run's log.csv."""
    with open(run / "log.csv", newline="") as f:
        return max(float(r["valid_bleu"]) for r in csv.DictReader(f) if r["valid_bleu"])


def steps(run: Path) -> int:
    """The last update of a run's log.csv."""
    with open(run / "log.csv", newline="") as f:
        return int(list(csv.DictReader(f))[-1]["step"])


def fine_tune(general: Path, out: Path, data: Path, seed: int, lr: str, extra: list[str]) -> dict:
    """A fine-tuned model of `general` on the sports pairs: its scores, validation BLEU, updates."""
    train(out, data, "sports", seed, ["--init_from", str(general), "--lr", lr, *FINE_TUNE, *extra])
    return {**evaluate(out, data), "valid_bleu": best_valid(out), "steps": steps(out)}


def run_seed(seed: int, lr: str, data: Path, runs: Path) -> dict:
    """The general model of `seed` and its fine-tuned variants, scored."""
    general = runs / f"general-{seed}"
    train(general, data, "general", seed, GENERAL)
    row = {"general": {**evaluate(general, data), "steps": steps(general)}}
    for name, extra in VARIANTS.items():
        row[name] = fine_tune(general, runs / f"{name}-lr{lr}-{seed}", data, seed, lr, extra)
    return row


def choose_lr(lrs: list[str], seed: int, data: Path, runs: Path) -> dict[str, float]:
    """Plain fine-tuning of the first seed's general model at each rate: sports valid BLEU."""
    general = runs / f"general-{seed}"
    train(general, data, "general", seed, GENERAL)
    found = {}
    for lr in lrs:
        out = runs / f"plain-lr{lr}-{seed}"
        train(out, data, "sports", seed, ["--init_from", str(general), "--lr", lr, *FINE_TUNE])
        found[lr] = best_valid(out)
        print(f"lr {lr}: best sports validation BLEU {found[lr]:.2f} ({steps(out)} updates)")
    return found


def spread(values: list[float]) -> str:
    """The mean ± the sample standard deviation."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {sd:.2f}"


def table(results: dict) -> str:
    """The markdown table: a row per model and seed, then the mean ± spread of the seeds."""
    seeds = results["seeds"]
    lines = [
        "| model | seed | updates | sports val BLEU | sports test BLEU | general test BLEU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in ("general", *VARIANTS):
        rows = [seeds[s][name] for s in seeds]
        for seed, r in zip(seeds, rows, strict=True):
            valid = f"{r['valid_bleu']:.2f}" if "valid_bleu" in r else "-"
            lines.append(
                f"| {name} | {seed} | {r['steps']} | {valid} | {r['sports']:.2f} | "
                f"{r['general']:.2f} |"
            )
        means = [spread([r[k] for r in rows]) for k in ("sports", "general")]
        lines.append(f"| **{name}** | mean ± sd | | | **{means[0]}** | **{means[1]}** |")
    lines.append("")
    lines.append("| fine-tuned | sports gain | general change |")
    lines.append("|---|---:|---:|")
    for name in VARIANTS:
        gain = [seeds[s][name]["sports"] - seeds[s]["general"]["sports"] for s in seeds]
        drop = [seeds[s][name]["general"] - seeds[s]["general"]["general"] for s in seeds]
        lines.append(f"| {name} | {spread(gain)} | {spread(drop)} |")
    if results.get("lr_search"):
        found = results["lr_search"]
        lines.append(
            "\nfine-tuning rate (plain, seed " + str(next(iter(seeds))) + "), best sports "
            "val BLEU: " + ", ".join(f"{lr}: {b:.2f}" for lr, b in found.items())
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument(
        "--out", default="runs/domain", help="split files and runs (default: runs/domain)"
    )
    p.add_argument("--json", default="docs/results/domain.json", help="where the results go")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--lr", default="1e-4", help="fine-tuning peak rate, unless --lrs compares")
    p.add_argument(
        "--lrs",
        help="rates to compare on the first seed (comma-separated); the best "
        "by sports validation BLEU fine-tunes every seed",
    )
    p.add_argument("--from-json", metavar="JSON", help="print the table of a results file and exit")
    args = p.parse_args()
    if args.from_json:
        print(table(json.loads(Path(args.from_json).read_text())))
        return 0
    out = Path(args.out)
    counts = split(Path(args.data_dir), out / "data")
    print(json.dumps(counts))
    seeds = [int(s) for s in args.seeds.split(",")]
    found = choose_lr(args.lrs.split(","), seeds[0], out / "data", out) if args.lrs else {}
    lr = max(found, key=found.__getitem__) if found else args.lr
    results = {
        "topic_words": TOPIC_WORDS.split(),
        "rule": TOPIC.pattern + " (case-insensitive, English)",
        "counts": counts,
        "general_recipe": GENERAL,
        "fine_tune": FINE_TUNE,
        "lr": lr,
        "lr_search": found,
        "variants": VARIANTS,
        "decoding": "greedy",
        "seeds": {},
        "machine": common.machine(),
        "versions": common.versions("torch", "sacrebleu"),
    }
    for seed in seeds:
        results["seeds"][str(seed)] = run_seed(seed, lr, out / "data", out)
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
