"""`qkv demo`: the whole path on a fresh machine, with no data and no network.

Train a small Transformer on the built-in synthetic corpus (numbers written as digits -> the same
numbers in words), translate held-out numbers it never saw, and report the exact-match accuracy
per digit count (1 to 6 digits) and overall: numbers of 3 or more digits are held out; the 100
numbers of 1 and 2 digits are all trained on (too few to hold any out) and all tested. The
output directory is an ordinary model directory: `qkv translate --model DIR` loads it. README.md
gives the time and accuracy of a full run.

`run_language_demo` does the same with real language in a time budget: English -> German on
Multi30k (read from the data folder), lowercase, a 3+3-layer model trained for what the budget
leaves after preparing the data, then test_2016_flickr translated as `qkv translate` does (beam 4)
and scored with the official tokenized lowercase BLEU, and the attention maps of one test sentence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..data.synthetic import synthetic_splits
from ..decode.options import DecodeOptions
from ..runtime.process import configure_process
from ..runtime.runtime_options import RuntimeOptions
from ..train import TrainConfig, Trainer, load_train_config
from .translator import Translator

DEMO_RECIPE = {
    "corpus": "synthetic",
    "synthetic_train": 20000,
    "synthetic_valid": 200,
    "synthetic_max_value": 999_999,
    "preset": "tiny",
    "vocab_size": 100,
    "max_tokens": 2048,
    "schedule": "inverse_sqrt",
    "lr": 2e-3,
    "warmup": 200,
    "max_steps": 1800,
    "valid_every": 600,
    "log_every": 50,
    "valid_bleu": False,
    "valid_metric": "loss",
    "tensorboard": False,
}


LANGUAGE_RECIPE = {  # the model of configs/multi30k-wide.yaml, for a short run
    "corpus": "multi30k",
    "src_lang": "en",
    "tgt_lang": "de",
    "lowercase": True,
    "vocab_size": 8000,
    "subword": "bpe",
    "joint_vocab": True,
    "preset": "base",
    "model": {
        "d_model": 256,
        "d_ff": 1024,
        "n_heads": 4,
        "n_encoder_layers": 3,
        "n_decoder_layers": 3,
        "dropout": 0.3,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "norm_first": True,
    },
    "max_tokens": 4096,  # more, smaller updates in the budget score higher (docs/results.md)
    "schedule": "inverse_sqrt",  # annealed to the budget it scores lower (docs/results.md)
    "lr": 5e-3,
    "warmup": 500,
    "clip_norm": 1.0,
    "label_smoothing": 0.1,
    "max_steps": 100_000,  # the time budget ends the run
    "valid_every": 50,  # the time budget is checked at each validation (a loss: a few seconds)
    "valid_bleu": False,
    "valid_metric": "loss",
    "keep_checkpoints": 1,
    "log_every": 50,
    "tensorboard": False,
}
LANGUAGE_TEST = "test_2016_flickr"
LANGUAGE_DECODING = DecodeOptions()  # qkv translate's defaults: beam 4, length penalty 0.6
DECODE_SECONDS = 60  # kept from the budget: decoding and scoring the test set, the figures


@dataclass
class LanguageResult:
    out_dir: Path
    tokenized_bleu: float  # on the official lowercased, tokenized references
    bleu: float  # sacreBLEU, case-insensitive
    steps: int
    train_seconds: float  # data preparation included
    seconds: float  # the whole run
    examples: list[tuple[str, str, str]]  # (source, hypothesis, reference)
    figures: list[Path]


def run_language_demo(
    out_dir: str | Path,
    data_dir: str | Path | None = None,
    minutes: float = 15.0,
    seed: int = 1234,
    overwrite: bool = False,
    test_sentences: int | None = None,
    **overrides: object,
) -> LanguageResult:
    """Train English -> German on Multi30k within `minutes` (data preparation included), then
    score beam-search translations of test_2016_flickr (its first `test_sentences`; default all)
    and draw the attention of its first sentence. `overrides` change any key of LANGUAGE_RECIPE."""
    from ..data.named import load_named, tokenized_reference_path
    from .attention_maps import write_attention
    from .evaluate import score

    start = time.perf_counter()
    hours = (60 * minutes - DECODE_SECONDS) / 3600
    if hours <= 0:
        raise ValueError(f"--minutes {minutes:g} leaves no time to train (at least 2 minutes)")
    recipe = {**LANGUAGE_RECIPE, "seed": seed, "max_hours": hours, **overrides}
    if data_dir is not None:
        recipe["data_dir"] = str(data_dir)
    cfg = load_train_config(None, recipe)
    configure_process(**cfg.process_settings())
    trained = Trainer(cfg, out_dir, overwrite=overwrite).train()
    train_seconds = time.perf_counter() - start
    test = load_named("multi30k", LANGUAGE_TEST, "en", "de", cfg.data_dir, cfg.download)
    tok_refs = tokenized_reference_path("multi30k", LANGUAGE_TEST, "de", cfg.data_dir, cfg.download)
    translator = Translator.load(out_dir)
    n = test_sentences or len(test.src)
    sources, targets = test.src[:n], test.tgt[:n]
    hyps = translator.translate(sources, LANGUAGE_DECODING)
    refs = tok_refs.read_text(encoding="utf-8").splitlines()[:n]
    scores = score(hyps, targets, "de", refs, lowercase=True)
    assert scores.tok_bleu is not None  # tokenized references were given
    figures = write_attention(translator, sources[:1], Path(out_dir) / "attention")
    return LanguageResult(
        Path(out_dir),
        scores.tok_bleu.score,
        scores.bleu.score,
        trained.step,
        train_seconds,
        time.perf_counter() - start,
        list(zip(sources, hyps, targets, strict=True))[:8],
        figures,
    )


@dataclass
class DemoResult:
    out_dir: Path
    accuracy: float
    examples: list[tuple[str, str, str]]  # (source, hypothesis, reference)
    train_seconds: float
    # digit count -> (correct, total) over the test numbers of that many digits
    by_digits: dict[int, tuple[int, int]] = field(default_factory=dict)


def demo_config(
    target: str = "en", steps: int | None = None, seed: int = 1234, **overrides: object
) -> TrainConfig:
    """The demo recipe for numbers in `target` words ("en" or "zh"), with any key overridden."""
    overrides = {"synthetic_target": target, "seed": seed, **overrides}
    if steps is not None:
        overrides["max_steps"] = steps
    return load_train_config(None, {**DEMO_RECIPE, **overrides})


def run_demo(
    out_dir: str | Path,
    target: str = "en",
    steps: int | None = None,
    n_test: int = 500,
    seed: int = 1234,
    overwrite: bool = False,
    **overrides: object,
) -> DemoResult:
    """Train on synthetic numbers, then translate `n_test` held-out ones with greedy decoding.
    `overrides` change any key of the demo recipe (e.g. a smaller synthetic_max_value for quick
    tests). The test set is `n_test` held-out numbers of 3 or more digits plus every number of 1
    and 2 digits."""
    cfg = demo_config(target, steps, seed, **overrides)
    configure_process(**cfg.process_settings())  # the recipe's threads, seed and allocator
    start = time.perf_counter()
    Trainer(cfg, out_dir, overwrite=overwrite).train()
    seconds = time.perf_counter() - start
    _, _, test = synthetic_splits(
        cfg.seed,
        cfg.synthetic_train,
        cfg.synthetic_valid,
        n_test,
        target=cfg.synthetic_target,
        max_value=cfg.synthetic_max_value,
    )
    translator = Translator.load(out_dir, RuntimeOptions(precision="fp32"))
    hyps = translator.translate(test.src, DecodeOptions(beam=1))
    correct = sum(h == r for h, r in zip(hyps, test.tgt, strict=True))
    examples = list(zip(test.src, hyps, test.tgt, strict=True))
    by_digits: dict[int, tuple[int, int]] = {}
    for src, hyp, ref in examples:
        k = len(src.replace(" ", ""))
        right, total = by_digits.get(k, (0, 0))
        by_digits[k] = (right + (hyp == ref), total + 1)
    # examples of every length first (the test set lists the short numbers last): rank within the
    # digit count, then the digit count
    rank: dict[int, int] = {}
    keyed = []
    for e in examples:
        k = len(e[0].replace(" ", ""))
        rank[k] = rank.get(k, 0) + 1
        keyed.append(((rank[k], k), e))
    examples = [e for _, e in sorted(keyed, key=lambda item: item[0])]
    return DemoResult(
        Path(out_dir), correct / len(hyps), examples, seconds, dict(sorted(by_digits.items()))
    )
