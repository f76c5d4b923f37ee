"""The tutorials' claims, measured: each table trains the variants of one choice side by side on
this machine and prints a markdown table (docs/concepts.md, "The variants, measured").

    python -m benchmarks.variants transformer-vs-rnn --budget 900 --data-dir ../shared/data
    python -m benchmarks.variants scores --steps 1500 [--multi30k-steps 400 --data-dir DIR]
    python -m benchmarks.variants positions --steps 1500 [--multi30k-steps 400 --data-dir DIR]
    python -m benchmarks.variants extrapolation --steps 3000
    python -m benchmarks.variants exposure-bias --steps 3000 --points 10
    python -m benchmarks.variants heads --steps 1500
    python -m benchmarks.variants norms --steps 1500 --depth 6
    python -m benchmarks.variants ffn --steps 1500
    python -m benchmarks.variants lm --budget 1800 --data-dir ../shared/data
    python -m benchmarks.variants classify --steps 800 --data-dir ../shared/data

Every variant is one `Trainer` run in this process (`qkv train`'s trainer, the recipe as a dict), on
`--threads` CPU threads, then scored by qkv's own translator, generator or classifier:

- synthetic: `qkv demo`'s task and recipe (numbers in digits -> words, the tiny preset); exact match
  of greedy translations of held-out numbers (the demo's test split, `--n-test` of 3-6 digits and
  every 1- and 2-digit number).
- multi30k (with `--data-dir`): de -> en with configs/multi30k-small.yaml's model; sacreBLEU of
  greedy translations of the first `--n-test` validation sentences (never the test split).
- `--budget S`: every variant trains S wall-clock seconds (the recipe's `max_hours`, checked at
  checkpoints every `--check-every` updates; on Multi30k `--multi30k-budget` if given): equal CPU
  time. `--steps N`: N updates each (on Multi30k `--multi30k-steps`, as its updates are ~20x the
  synthetic ones): equal updates. Each table has its default (the real runs: at most ~2 CPU hours
  per table).

The extrapolation table trains on numbers of up to 6 digits written in Chinese (`zh`): 7- and
8-digit numbers reuse 万, 千, 百 and 十, which the training numbers contain, while English would need
"million", never seen; 9 digits need 亿, never seen in either (so 0 there is the vocabulary, not the
positions). In the exposure-bias table, greedy decoding's exact match equals the share of sentences
whose every teacher-forced prediction is right (the same argmax at every step); the gap to read is
between the per-token accuracy under teacher forcing and what it predicts for whole sentences.
Results: OUT/TABLE.json and the table on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import logging
import random
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.variant_runs import (
    Run,
    compare,
    last,
    markdown,
    median_row,
    seeds,
    synthetic_test,
    translate,
)

DEFAULTS = {  # table -> (budget seconds per variant, steps per variant): one of them is used
    "transformer-vs-rnn": (900, None), "scores": (None, 1500), "positions": (None, 1500),
    "extrapolation": (None, 3000), "exposure-bias": (None, 3000), "heads": (None, 1500),
    "norms": (None, 1500), "ffn": (None, 1500), "lm": (1800, None), "classify": (None, 800),
}


MATCHED_GRU_WIDTH = {"synthetic": 92, "multi30k": 192}  # one GRU layer each side: ~ the Transformer
WIDE_NO_FFN = {"synthetic": 84, "multi30k": 152}  # d_ff 0 at about the d_ff 2d parameter count


def table_transformer_vs_rnn(run: Run) -> list[dict[str, Any]]:
    """The Transformer, the GRU + Bahdanau with one layer each side at the Transformer's width, and
    the same GRU widened to about the Transformer's parameter count (synthetic: 175k vs 173k;
    Multi30k: 2.64M vs 2.61M)."""
    rnn = {"arch": "rnn", "n_encoder_layers": 1, "n_decoder_layers": 1}

    def matched(data: str) -> dict[str, Any]:
        return {"model": {**rnn, "d_model": MATCHED_GRU_WIDTH[data]}}

    return compare(run, {"transformer": {}, "gru-bahdanau": {"model": rnn},
                         "gru-bahdanau-matched": matched})


def table_ffn(run: Run) -> list[dict[str, Any]]:
    """The position-wise feed-forward network's width d_ff: 0 (the sub-layer adds only its bias:
    no FFN), d_model, 2 d_model (the tiny preset's) and 4 d_model (the paper's ratio); and the
    size-matched control `d_ff-0d-wide`: no FFN, d_model widened to at least the 2d row's
    parameters (synthetic: 180k against 173k; Multi30k: 2.64M against 2.61M), so that a gap to
    the rows with an FFN is not only their extra parameters."""
    width = {"synthetic": 64, "multi30k": 128}

    def ffn(ratio: int) -> Callable[[str], dict[str, Any]]:
        return lambda data: {"model": {"d_ff": ratio * width[data]}}

    def wide(data: str) -> dict[str, Any]:
        return {"model": {"d_ff": 0, "d_model": WIDE_NO_FFN[data]}}

    return compare(run, {**{f"d_ff-{r}d": ffn(r) for r in (0, 1, 2, 4)}, "d_ff-0d-wide": wide})


def table_scores(run: Run) -> list[dict[str, Any]]:
    kinds = ("scaled_dot", "dot", "additive", "bilinear")
    return compare(run, {k: {"model": {"attention": k}} for k in kinds})


POSITIONS = ("none", "sinusoidal", "learned", "rope", "relative", "alibi")


def table_positions(run: Run) -> list[dict[str, Any]]:
    return compare(run, {k: {"model": {"positional": k}} for k in POSITIONS})


def table_heads(run: Run) -> list[dict[str, Any]]:
    """d_model fixed: the projections have the same size for any number of heads."""
    return compare(run, {f"{h}-heads": {"model": {"n_heads": h}} for h in (1, 2, 4, 8)})


def table_norms(run: Run) -> list[dict[str, Any]]:
    depth = {"n_encoder_layers": run.args.depth, "n_decoder_layers": run.args.depth}
    variants = {
        f"post-layernorm-L{run.args.depth}": {"norm_first": False, "norm": "layernorm"},
        f"pre-layernorm-L{run.args.depth}": {"norm_first": True, "norm": "layernorm"},
        f"pre-rmsnorm-L{run.args.depth}": {"norm_first": True, "norm": "rmsnorm"},
        f"pre-batchnorm-L{run.args.depth}": {"norm_first": True, "norm": "batchnorm"},
    }
    return compare(run, {k: {"model": {**depth, **v}} for k, v in variants.items()})


def table_extrapolation(run: Run) -> list[dict[str, Any]]:
    """Trained on up to 6 digits (zh words); on held-out 6-digit numbers and on random 7-, 8- and
    9-digit ones, per positional scheme: exact match and character accuracy (with --seeds N, the
    medians and every seed's 6-digit exact match and 7-, 8-digit character accuracy)."""
    rows = []
    for name in run.chosen(POSITIONS):
        runs = []
        for seed in seeds(run):
            tests = extrapolation_tests(seed, run.args.n_test)
            recipe = run.recipe("synthetic", synthetic_target="zh", vocab_size=500, seed=seed,
                                model={"positional": name})
            result = run.train(run.named(name, seed), recipe)
            src, ref = synthetic_test(recipe, run.args.n_test)
            six = [(s, r) for s, r in zip(src, ref, strict=True) if len(s.split()) == 6]
            tests[6] = [s for s, _ in six], [r for _, r in six]
            runs.append({**result, **extrapolation_scores(result["dir"], tests)})
        rows.append({**median_row(runs, ("exact_6_digits", "chars_7_digits", "chars_8_digits")),
                     "variant": name})
    return rows


def extrapolation_tests(seed: int, n: int) -> dict[int, tuple[list[str], list[str]]]:
    """n random k-digit numbers for k = 7, 8, 9: digits and Chinese words."""
    from qkv.data.synthetic import number_to_chinese

    rng = random.Random(seed)
    tests = {}
    for k in (7, 8, 9):
        numbers = [rng.randint(10 ** (k - 1), 10**k - 1) for _ in range(n)]
        tests[k] = [" ".join(str(x)) for x in numbers], [number_to_chinese(x) for x in numbers]
    return tests


def extrapolation_scores(model_dir: str, tests: dict[int, tuple[list[str], list[str]]]
                         ) -> dict[str, float]:
    """Per number length: exact match and character accuracy (1 - character edit distance /
    reference characters) of greedy translations, in %."""
    row = {}
    for k, (src, ref) in sorted(tests.items()):
        hyps, _ = translate(model_dir, src)
        edits = sum(edit_distance(list(h), list(r)) for h, r in zip(hyps, ref, strict=True))
        right = sum(h == r for h, r in zip(hyps, ref, strict=True))
        row[f"exact_{k}_digits"] = round(100 * right / len(ref), 1)
        row[f"chars_{k}_digits"] = round(100 * (1 - edits / sum(map(len, ref))), 1)
    return row


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance between two sequences (insertions, deletions, substitutions)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        diagonal, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (x != y))
    return row[-1]


def table_exposure_bias(run: Run) -> list[dict[str, Any]]:
    """One run per seed, a checkpoint every steps / points updates, each scored (see
    `exposure_rows`); with --seeds N, per checkpoint the medians and every seed's teacher-forced
    and greedy token accuracy."""
    if run.steps is None:
        raise ValueError("exposure-bias counts updates: give --steps")
    per_seed = [exposure_rows(run, seed) for seed in seeds(run)]
    return [median_row(list(runs), ("tf_token_acc", "greedy_token_acc"))
            for runs in zip(*per_seed, strict=True)]


def exposure_rows(run: Run, seed: int) -> list[dict[str, Any]]:
    """One run of `seed`, each checkpoint scored on the test split by teacher forcing (token
    accuracy, whole sentences right) and by greedy decoding (whole sentences right, and its token
    accuracy: 1 - token edit distance / reference tokens, the tokens it gets right when it feeds
    on its own output)."""
    import torch

    from qkv.apps.translator import Translator
    from qkv.data.batching import pad_sequences
    from qkv.data.tokenizer import SubwordTokenizer
    from qkv.decode.options import DecodeOptions
    from qkv.modeldir import WEIGHTS_FILE, load_model_dir, load_weights
    from qkv.train.checkpoints import list_checkpoints

    every = max(1, run.steps // run.args.points)
    recipe = run.recipe("synthetic", valid_every=every, log_every=every, seed=seed,
                        keep_checkpoints=run.args.points + 1)
    result = run.train(run.named("exposure-bias", seed), recipe)
    src, ref = synthetic_test(recipe, run.args.n_test)
    tok = SubwordTokenizer.load(result["dir"])
    model = load_model_dir(result["dir"]).eval()
    src_ids = pad_sequences([[*s, tok.eos_id] for s in tok.encode_src(src)], tok.pad_id)
    ref_ids = tok.encode_tgt(ref)
    ref_tokens = sum(len(r) for r in ref_ids)
    tgt = pad_sequences([[tok.bos_id, *t, tok.eos_id] for t in ref_ids], tok.pad_id)
    real = tgt[:, 1:] != tok.pad_id
    losses = {int(r["step"]): round(float(r["train_loss"]), 4)
              for r in result["log"] if r.get("train_loss")}
    rows = []
    for path in list_checkpoints(Path(result["dir"])):
        load_weights(path / WEIGHTS_FILE, model)
        with torch.no_grad():
            right = (model(src_ids, tgt[:, :-1]).argmax(-1) == tgt[:, 1:]) | ~real  # (B, T)
        token_acc = right[real].float().mean().item()
        hyps = Translator(model, tok).translate(src, DecodeOptions(beam=1))
        edits = sum(edit_distance(h, r) for h, r in zip(tok.encode_tgt(hyps), ref_ids,
                                                         strict=True))
        step = int(path.name.split("_")[-1])
        mean_len = real.sum(1).float().mean().item()
        rows.append({
            "step": step, "train_loss": losses.get(step),
            "tf_token_acc": round(100 * token_acc, 2),
            "tf_acc^len": round(100 * token_acc**mean_len, 1),
            "tf_sentences_right": round(100 * right.all(1).float().mean().item(), 1),
            "greedy_exact_match": round(100 * sum(h == r for h, r in zip(hyps, ref, strict=True))
                                        / len(ref), 1),
            "greedy_token_acc": round(100 * (1 - edits / ref_tokens), 2),
        })
    return rows


def table_lm(run: Run) -> list[dict[str, Any]]:
    """A decoder-only LM on the Multi30k English side (synthetic: the number words): validation
    perplexity and captions sampled from a few prompts."""
    from qkv.apps.generator import Generator
    from qkv.decode.options import DecodeOptions

    if run.args.data_dir:
        recipe = run.recipe("multi30k", task="lm", src_lang="en", tgt_lang=None)
        prompts = ["A man", "Two dogs", "A woman in a red", "Children"]
    else:
        recipe = run.recipe("synthetic", task="lm")
        prompts = ["four", "twenty", "nine hundred"]
    result = run.train("lm", recipe)
    generator = Generator.load(result["dir"])
    options = DecodeOptions(beam=1, sampling=True, temperature=0.8, top_k=40, seed=run.args.seed,
                            max_len_a=0.0, max_len_b=30)
    samples = generator.generate(prompts, options)
    return [{**result, "valid_ppl": last(result["log"], "valid_ppl"),
             "samples": " / ".join(f"{p} → {s}" for p, s in zip(prompts, samples, strict=True))}]


def language_id_data(run: Run) -> tuple[dict[int, Path], Path, Path]:
    """Language ID data: TSVs of text<TAB>language with `n` labelled lines per language for each
    `n` of --n-train, the validation TSV, and the unlabelled training texts for mlm (every
    training line, --n-unlabelled per language if given). Multi30k's de, en, fr and cs lines (the
    languages are line-aligned translations: each takes its own quarter of the lines), or the
    synthetic number words in en and zh."""
    from qkv.data.named import named_paths
    from qkv.data.synthetic import synthetic_corpus

    pool: dict[str, dict[str, list[str]]] = {"train": {}, "valid": {}}
    if run.args.data_dir:
        languages = ("de", "en", "fr", "cs")
        for lang in languages:
            for split, name in (("train", "train"), ("valid", "val")):
                other = "en" if lang != "en" else "de"
                path, _ = named_paths("multi30k", name, lang, other, run.args.data_dir)
                with gzip.open(path, "rt", encoding="utf-8") as f:
                    lines = [line.strip() for line in f if line.strip()]
                pool[split][lang] = lines[languages.index(lang)::4]
    else:
        n = max(*run.args.n_train, run.args.n_unlabelled or 0)
        for lang in ("en", "zh"):
            pool["train"][lang] = synthetic_corpus(n, 1, lang).tgt
            pool["valid"][lang] = synthetic_corpus(run.args.n_test, 2, lang).tgt

    def tsv(name: str, texts: dict[str, list[str]], n: int) -> Path:
        lines = [f"{t}\t{lang}" for lang, ts in texts.items() for t in ts[:n]]
        random.Random(run.args.seed).shuffle(lines)
        path = run.out / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    train = {n: tsv(f"langid.train{n}.tsv", pool["train"], n) for n in run.args.n_train}
    valid = tsv("langid.valid.tsv", pool["valid"], run.args.n_test)
    unlabelled = [t for ts in pool["train"].values() for t in ts[: run.args.n_unlabelled]]
    text = run.out / "langid.unlabelled.txt"
    text.write_text("\n".join(unlabelled) + "\n", encoding="utf-8")
    return train, valid, text


def table_classify(run: Run) -> list[dict[str, Any]]:
    """Language ID with each --n-train labelled lines per language, from scratch and from an mlm
    model trained on the unlabelled training lines (its updates listed in the row)."""
    train_tsvs, valid_tsv, text = language_id_data(run)
    shared = {"preset": "tiny", "vocab_size": 2000, "max_tokens": 4096, "schedule": "inverse_sqrt",
              "lr": 1e-3, "warmup": 200, "tensorboard": False, "keep_checkpoints": 1,
              "corpus": None,
              **run.limits(), "threads": run.args.threads, "seed": run.args.seed}
    mlm = run.train("mlm", {**shared, "task": "mlm", "train_text": str(text)})
    rows = []
    for n, train_tsv in train_tsvs.items():
        for name, init in (("scratch", None), ("from-mlm", mlm["dir"])):
            recipe = {**shared, "task": "classify", "train_tsv": str(train_tsv),
                      "valid_tsv": str(valid_tsv), "init_from": init}
            result = run.train(f"classify-{n}-{name}", recipe)
            rows.append({**result, "labelled_per_language": n,
                         "pretraining_steps": mlm["steps"] if init else 0,
                         "accuracy": last(result["log"], "valid_accuracy"),
                         "macro_f1": last(result["log"], "valid_macro_f1")})
    return rows


COMPARED = ("transformer-vs-rnn", "scores", "positions", "heads", "norms", "ffn")  # + Multi30k
TABLES: dict[str, Callable[[Run], list[dict[str, Any]]]] = {
    "transformer-vs-rnn": table_transformer_vs_rnn, "scores": table_scores,
    "positions": table_positions, "extrapolation": table_extrapolation,
    "exposure-bias": table_exposure_bias, "heads": table_heads, "norms": table_norms,
    "ffn": table_ffn, "lm": table_lm, "classify": table_classify,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table", choices=list(TABLES))
    p.add_argument("--out", default="runs/variants", help="run directories and TABLE.json")
    p.add_argument("--data-dir",
                   help="named corpora (Multi30k); without it, the synthetic task only")
    p.add_argument("--multi30k-only", action="store_true",
                   help="the compared tables' Multi30k rows only (the synthetic ones already run)")
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--budget", type=float, help="wall-clock seconds of training per variant")
    limit.add_argument("--steps", type=int, help="updates per variant")
    p.add_argument("--multi30k-steps", type=int, default=400,
                   help="with --steps: the updates of each Multi30k variant (~1.5 s each here)")
    p.add_argument("--multi30k-budget", type=float,
                   help="with --budget: the seconds of each Multi30k variant (default: --budget)")
    p.add_argument("--check-every", type=int, default=50,
                   help="with --budget: updates between checkpoints (where the budget is checked)")
    p.add_argument("--n-test", type=int, default=300, help="test sentences (numbers, lines)")
    p.add_argument("--n-train", type=int, nargs="+", default=[5000],
                   help="classify: labelled training lines per language (one or more sizes)")
    p.add_argument("--n-unlabelled", type=int,
                   help="classify: mlm training lines per language (default: all)")
    p.add_argument("--points", type=int, default=10, help="exposure-bias: checkpoints scored")
    p.add_argument("--depth", type=int, default=6, help="norms: encoder and decoder layers")
    p.add_argument("--seeds", type=int, default=1,
                   help="synthetic variants (compared tables, extrapolation, exposure-bias): "
                        "runs per variant, seeds --seed, --seed + 1, ... (medians and spread)")
    p.add_argument("--multi30k-seeds", type=int, default=1,
                   help="the same for the compared tables' Multi30k variants")
    p.add_argument("--multi30k-warmup", type=int,
                   help="warm-up updates on Multi30k (default: with --steps a quarter of them, "
                        "at most 200; with --budget the recipe's 1000)")
    p.add_argument("--variants", nargs="+",
                   help="only these variants of the table (e.g. to run its rows in two processes)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    run = Run(args, DEFAULTS[args.table])
    run.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = TABLES[args.table](run)
    total = time.perf_counter() - start
    (run.out / f"{args.table}.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "log"} for r in rows], indent=1))
    limit_text = (f"{run.budget:g} s of training per variant (equal CPU time)" if run.budget
                  else f"{run.steps} updates per variant (equal updates)")
    if run.steps is not None and args.data_dir and args.table in COMPARED:
        limit_text += f", {args.multi30k_steps} on Multi30k"
    elif run.budget and args.multi30k_budget and args.data_dir and args.table in COMPARED:
        limit_text += f", {args.multi30k_budget:g} s on Multi30k"
    if args.seeds > 1 and args.table in (*COMPARED, "extrapolation", "exposure-bias"):
        limit_text += f"; {args.seeds} seeds per synthetic variant (medians)"
    if args.data_dir and args.table in COMPARED:
        limit_text += f"; {args.multi30k_seeds} seed{'s' if args.multi30k_seeds > 1 else ''}"
        limit_text += " per Multi30k variant"
    print(f"### {args.table}\n")
    print(f"command: `python -m {shlex.join(['benchmarks.variants', *sys.argv[1:]])}`  ")
    print(f"machine: {common.describe(common.machine(), common.versions('torch'))}  ")
    threads = f"{args.threads} thread" + ("s" if args.threads > 1 else "")
    print(f"budget: {limit_text}, {threads}; the table took {total:.0f} s\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        raise SystemExit(main())
