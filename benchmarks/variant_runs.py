"""The machinery of benchmarks/variants.py: a table's shared settings and the training of one
variant (`Run`), scoring by greedy translation, the side-by-side comparison over seeds
(`compare`, `median_row`) and the markdown of a table."""

from __future__ import annotations

import argparse
import csv
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = {  # `qkv demo`'s recipe
    "corpus": "synthetic", "synthetic_train": 20000, "synthetic_valid": 200,
    "synthetic_max_value": 999_999, "preset": "tiny", "vocab_size": 100, "max_tokens": 2048,
    "schedule": "inverse_sqrt", "lr": 2e-3, "warmup": 200, "valid_bleu": False,
    "valid_metric": "loss", "tensorboard": False, "keep_checkpoints": 1,
}
MULTI30K = {"src_lang": "de", "tgt_lang": "en", "valid_bleu": False, "valid_metric": "loss",
            "tensorboard": False, "keep_checkpoints": 1}


class Run:
    """The settings shared by the variants of a table, and the training of one variant."""

    def __init__(self, args: argparse.Namespace, defaults: tuple[float | None, int | None]) -> None:
        """defaults: the table's (budget seconds, steps) per variant, one of them None."""
        self.args = args
        self.out = Path(args.out)
        default_budget, default_steps = defaults
        if args.budget is None and args.steps is None:
            args.budget, args.steps = default_budget, default_steps
        self.budget, self.steps = args.budget, args.steps

    def chosen(self, names: Sequence[str]) -> list[str]:
        """The variants of this table to run: all, or those named by --variants (in the table's
        order); a name the table lacks is an error."""
        if not self.args.variants:
            return list(names)
        unknown = sorted(set(self.args.variants) - set(names))
        if unknown:
            raise SystemExit(f"--variants: no {', '.join(unknown)} in this table: {list(names)}")
        return [n for n in names if n in self.args.variants]

    def named(self, name: str, seed: int, runs: int | None = None) -> str:
        """A run's directory name: `name`, with "-seed{seed}" when a variant has several runs
        (runs: how many; default --seeds)."""
        return f"{name}-seed{seed}" if (runs or self.args.seeds) > 1 else name

    def limits(self, data: str = "synthetic") -> dict[str, Any]:
        """The stopping keys: a time budget (equal CPU time) or a number of updates (on Multi30k,
        --multi30k-steps), and the warm-up: with --steps a quarter of the updates, at most 200;
        with --budget the recipe's (on Multi30k 1,000 updates); --multi30k-warmup replaces
        either on Multi30k."""
        warmup = self.args.multi30k_warmup if data == "multi30k" else None
        if self.steps is not None:
            steps = self.args.multi30k_steps if data == "multi30k" else self.steps
            return {"max_steps": steps, "valid_every": steps, "log_every": min(50, steps),
                    "warmup": warmup or min(200, max(1, steps // 4))}
        every = self.args.check_every
        budget = self.args.multi30k_budget if data == "multi30k" else None
        return {"max_steps": 10**7, "max_hours": (budget or self.budget) / 3600,
                "valid_every": every, "log_every": every, **({"warmup": warmup} if warmup else {})}

    def recipe(self, data: str, **overrides: Any) -> dict[str, Any]:
        """The recipe of `data` ("synthetic" or "multi30k"), its limits and the overrides; a
        "model" dict merges with the recipe's."""
        if data == "synthetic":
            base: dict[str, Any] = dict(SYNTHETIC)
        else:
            import yaml

            base = yaml.safe_load((ROOT / "configs" / "multi30k-small.yaml").read_text())
            base.update(MULTI30K, data_dir=self.args.data_dir)
        model = {**base.pop("model", {}), **overrides.pop("model", {})}
        return {**base, **self.limits(data), "threads": self.args.threads, "seed": self.args.seed,
                **overrides, "model": model}

    def train(self, name: str, recipe: dict[str, Any]) -> dict[str, Any]:
        """Train one variant into OUT/name (a previous run there is replaced) -> its updates, its
        warm-up and the rate of its last update (% of the peak: below 100 the run stopped inside
        its warm-up), training seconds, parameters, median training tokens/s and log rows."""
        from qkv.runtime.process import configure_process
        from qkv.train import Trainer, load_train_config
        from qkv.train.schedule import lr_multiplier

        cfg = load_train_config(None, recipe)
        shutil.rmtree(self.out / name, ignore_errors=True)
        configure_process(threads=cfg.threads)
        start = time.perf_counter()
        trainer = Trainer(cfg, self.out / name, overwrite=True)
        params = sum(p.numel() for p in trainer.model.parameters())
        result = trainer.train()
        seconds = time.perf_counter() - start
        with open(self.out / name / "log.csv", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        speeds = [float(r["tokens_per_s"]) for r in rows if r.get("tokens_per_s")]
        print(f"  {name}: {result.step} updates, {seconds:.0f} s with data preparation",
              file=sys.stderr, flush=True)
        reached = lr_multiplier(cfg.schedule, cfg.warmup, cfg.max_steps)(max(result.step - 1, 0))
        return {"variant": name, "dir": str(self.out / name), "steps": result.step,
                "warmup": cfg.warmup, "lr_pct_of_peak": round(100 * reached, 1),
                "train_s": round(last(rows, "elapsed_s") or 0.0, 1), "params": params,
                "train_tok_s": round(statistics.median(speeds)) if speeds else None, "log": rows}


# --- scoring ------------------------------------------------------------------------------------


def synthetic_test(recipe: dict[str, Any], n_test: int) -> tuple[list[str], list[str]]:
    """The demo's test split of this recipe: held-out numbers and every 1- and 2-digit one."""
    from qkv.data.synthetic import synthetic_splits

    _, _, test = synthetic_splits(recipe["seed"], recipe["synthetic_train"],
                                  recipe["synthetic_valid"], n_test,
                                  target=recipe.get("synthetic_target", "en"),
                                  max_value=recipe["synthetic_max_value"])
    return test.src, test.tgt


def multi30k_valid(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    from qkv.data.named import load_named

    val = load_named("multi30k", "val", "de", "en", args.data_dir)
    return val.src[: args.n_test], val.tgt[: args.n_test]


def translate(model_dir: str, src: list[str]) -> tuple[list[str], float]:
    """Greedy translations and sentences per second."""
    from qkv.apps.translator import Translator
    from qkv.decode.options import DecodeOptions

    translator = Translator.load(model_dir)
    start = time.perf_counter()
    hyps = translator.translate(src, DecodeOptions(beam=1))
    return hyps, len(src) / (time.perf_counter() - start)


def score(data: str, model_dir: str, src: list[str], ref: list[str]) -> dict[str, float]:
    """{"exact_match" % (synthetic) or "bleu" (multi30k), "sent_per_s"} of greedy decoding."""
    hyps, speed = translate(model_dir, src)
    if data == "synthetic":
        right = sum(h == r for h, r in zip(hyps, ref, strict=True))
        return {"exact_match": round(100 * right / len(ref), 1), "sent_per_s": round(speed, 1)}
    from sacrebleu.metrics import BLEU

    bleu = BLEU(trg_lang="en").corpus_score(hyps, [ref]).score
    return {"bleu": round(bleu, 2), "sent_per_s": round(speed, 1)}


def last(rows: list[dict[str, str]], column: str) -> float | None:
    """The last value of a log.csv column (None if it has none)."""
    values = [float(r[column]) for r in rows if r.get(column)]
    return round(values[-1], 4) if values else None


# --- the tables ---------------------------------------------------------------------------------


def datasets(args: argparse.Namespace) -> list[str]:
    if args.multi30k_only:
        if not args.data_dir:
            raise SystemExit("--multi30k-only needs --data-dir")
        return ["multi30k"]
    return ["synthetic", "multi30k"] if args.data_dir else ["synthetic"]


def seeds(run: Run, data: str = "synthetic") -> range:
    """The seeds of a variant: --seed, --seed + 1, ... (--seeds of them; on Multi30k
    --multi30k-seeds)."""
    count = run.args.multi30k_seeds if data == "multi30k" else run.args.seeds
    return range(run.args.seed, run.args.seed + count)


Overrides = dict[str, Any] | Callable[[str], dict[str, Any]]  # fixed, or per dataset


def compare(run: Run, variants: dict[str, Overrides]) -> list[dict[str, Any]]:
    """Each variant (name -> recipe overrides, or a function of the dataset giving them) on each
    dataset: trained, then scored greedily. With --seeds N (on Multi30k --multi30k-seeds N): N
    runs (each seed its own initialisation and batch order, on the synthetic task its own data
    split, shared by the variants), the medians and every run's score."""
    rows = []
    for data in datasets(run.args):
        data_seeds = seeds(run, data)
        for name in run.chosen(list(variants)):
            spec, runs = variants[name], []
            for seed in data_seeds:
                overrides = spec(data) if callable(spec) else spec
                recipe = run.recipe(data, seed=seed, **overrides)
                result = run.train(run.named(f"{data}-{name}", seed, len(data_seeds)), recipe)
                if data == "synthetic":
                    src, ref = synthetic_test(recipe, run.args.n_test)
                else:
                    src, ref = multi30k_valid(run.args)
                runs.append({**result, **score(data, result["dir"], src, ref),
                             "valid_loss": last(result["log"], "valid_loss")})
            rows.append({"data": data, **median_row(runs), "variant": name})
    return rows


def median_row(runs: list[dict[str, Any]],
               per_seed: Sequence[str] = ("exact_match", "bleu", "valid_loss")
               ) -> dict[str, Any]:
    """One row of a variant's runs: each number's median; with several runs, every run's value
    of the `per_seed` columns too (the spread), as "a / b / c"."""
    row = dict(runs[0])
    for key, value in row.items():
        if isinstance(value, int | float) and key != "params":
            median = statistics.median(r[key] for r in runs if r[key] is not None)
            row[key] = int(median) if isinstance(value, int) else round(median, 4)
    if len(runs) > 1:
        row["seeds"] = len(runs)
        for column in per_seed:
            if row.get(column) is not None:
                row[f"{column}_per_seed"] = " / ".join(
                    "—" if r[column] is None else f"{r[column]:g}" for r in runs
                )
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    """A markdown table of the rows' columns (the training logs and directories left out)."""
    columns = list(dict.fromkeys(c for r in rows for c in r if c not in ("log", "dir")))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = ["—" if row.get(c) is None else str(row.get(c)) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
