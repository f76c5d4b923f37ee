"""`TrainConfig`: the training recipe. YAML files in configs/ set it; every `--key value` on the
command line overrides one key (`--model.d_model 256` for the model); an unknown key is an error
that names it."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..config import PRESETS, TransformerConfig, dataclass_from_dict
from ..runtime.precision import PRECISIONS
from ..runtime.process import TRAINING_PRIMITIVE_CACHE
from .distributed import resolve_device
from .freeze import FREEZE_GROUPS
from .schedule import lr_multiplier

# each task's validation metrics, by which the best model is kept (the first is the default)
VALID_METRICS = {
    "translate": ("bleu", "loss"),
    "lm": ("loss",),
    "mlm": ("loss",),
    "classify": ("accuracy", "macro_f1", "loss"),
}


def validation_score(metric: str, metrics: dict[str, float]) -> float:
    """One validation's score under `metric` (a VALID_METRICS name), higher is better: the
    metric itself, or the negated loss for "loss"."""
    return -metrics["valid_loss"] if metric == "loss" else metrics[f"valid_{metric}"]


# the data keys each task reads
TASK_DATA_KEYS = {
    "translate": (
        "corpus",
        "train_src",
        "train_tgt",
        "train_tsv",
        "valid_src",
        "valid_tgt",
        "valid_tsv",
        "init_from",
        "mix_src",
        "mix_tgt",
    ),
    "lm": ("corpus", "train_text", "valid_text", "init_from"),
    "mlm": ("corpus", "train_text", "valid_text"),
    "classify": ("train_tsv", "valid_tsv", "init_from"),
}


# the defaults of a translation (or lm) run that starts from a trained model (init_from), where the
# recipe does not set them: a peak rate and a warm-up for adapting a model, not for training one
# from scratch, and the loss in chunks of 1,024 target tokens: a trained model's vocabulary is
# often large (OPUS-MT's 58,101), and its logits never need to exist whole (docs/fine-tuning.md)
FINE_TUNE_DEFAULTS: dict[str, Any] = {"lr": 1e-4, "warmup": 100, "loss_chunk_tokens": 1024}
FINE_TUNES = ("translate", "lm")  # the tasks whose run from a trained model they suit

# keys that must be positive
POSITIVE_KEYS = (
    "max_tokens",
    "accum_steps",
    "max_steps",
    "valid_every",
    "log_every",
    "vocab_size",
    "max_len",
    "keep_checkpoints",
    "max_nonfinite_updates",
    "tokenizer_sample",
)
# keys that must be positive unless None
OPTIONAL_POSITIVE_KEYS = ("max_hours", "loss_chunk_tokens", "max_epochs", "patience")


def _check(ok: bool, msg: str) -> None:
    """A ValueError "TrainConfig: msg" unless `ok`."""
    if not ok:
        raise ValueError(f"TrainConfig: {msg}")


@dataclass
class TrainConfig:
    # --- what is trained (qkv.train.tasks): "translate" (encoder-decoder), "lm" (decoder-only
    # causal language model), "mlm" (encoder-only masked-token pretraining), "classify" (an
    # encoder-only classifier of text<TAB>label lines)
    task: str = "translate"
    # lm, mlm: a text file, one text per line (or a corpus: its src_lang side; synthetic: the
    # number words)
    train_text: str | None = None
    valid_text: str | None = None
    # start from a trained model: translate: a qkv translation model directory, a Marian (OPUS-MT)
    # directory or a Hub name hf:ORG/NAME[@REV] (its tokenizer, shape and weights;
    # qkv.train.init); classify: an mlm model directory (its tokenizer, shape and encoder weights)
    init_from: str | None = None
    # translate: the parts of the model training leaves as they are (qkv.train.freeze):
    # embeddings, encoder, decoder, output; on the command line --freeze embeddings,encoder
    freeze: tuple[str, ...] = ()
    # translate from a trained model: refuse its tokenizer when more than this fraction of the
    # training pieces of a side are unknown to it (qkv.train.coverage)
    max_unk_rate: float = 0.01
    # translate: general-domain pairs mixed into every epoch, mix_ratio of its pairs (0.2: one in
    # five), a sample drawn afresh each epoch (qkv.train.mix)
    mix_src: str | None = None
    mix_tgt: str | None = None
    mix_ratio: float = 0.0
    # --- data: a named corpus, your own files, or the built-in synthetic corpus
    corpus: str | None = None  # "multi30k", "tatoeba-zh-en", "synthetic"; None: the files below
    src_lang: str | None = None
    tgt_lang: str | None = None
    data_dir: str | None = None  # where named corpora live (else $QKV_DATA_DIR, else the cache)
    download: bool = False
    train_split: str = "train"
    valid_split: str | None = None  # None: the corpus's validation split
    train_src: str | None = None
    train_tgt: str | None = None
    train_tsv: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    valid_tsv: str | None = None
    synthetic_target: str = "en"  # synthetic corpus: digits -> "en" or "zh" number words
    synthetic_train: int = 20000
    synthetic_valid: int = 500
    synthetic_max_value: int = 999_999
    max_len: int = 200  # pairs with a side longer than this many subwords are dropped (and counted)
    max_ratio: float | None = None  # and pairs whose subword length ratio exceeds this
    # where the training data is kept once encoded (memory-mapped, reused by every run on the
    # same files and settings; safe to delete); None: <cache>/prepared ($QKV_CACHE_DIR)
    prepared_dir: str | None = None
    # --- subwords (SentencePiece)
    vocab_size: int = 8000
    subword: str = "unigram"  # or "bpe"
    joint_vocab: bool = True
    character_coverage: float | None = None  # None: 0.9995 for CJK text, 1.0 otherwise
    # SentencePiece trains on a seeded reservoir sample of this many sentences (per model) of a
    # larger corpus; its memory grows with the sample (docs/benchmarks.md)
    tokenizer_sample: int = 1_000_000
    # > 0: the training pairs are re-segmented every epoch: a BPE model skips each merge with this
    # probability (BPE-dropout); a unigram model samples its segmentation with SentencePiece's
    # alpha = this value, where *smaller* samples more widely (0.1: Tatoeba's English ~60% more
    # pieces, 0.5: ~2% more)
    subword_dropout: float = 0.0
    # lowercase all text (training, validation, translation input); the model writes lowercase.
    # None (a run from a trained model that does not set it): the model's tokenizer decides
    lowercase: bool | None = False
    # --- model: a preset plus any TransformerConfig field
    preset: str = "base"
    model: dict[str, Any] = field(default_factory=dict)
    # --- batching
    max_tokens: int = 4096  # per batch (padded source or target tokens), per device
    accum_steps: int = 1  # batches per optimizer update
    # --- optimisation (paper 5.3, 5.4)
    lr: float | None = None  # peak learning rate; None: the paper's (d_model * warmup)^-0.5
    schedule: str = "noam"
    warmup: int = 4000
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    # the output projection + loss N target tokens at a time: less memory, slower steps
    # (TranslationLoss; docs/benchmarks.md); None: all tokens at once
    loss_chunk_tokens: int | None = None
    clip_norm: float = 0.0  # 0: no clipping
    # an update whose loss or gradients are not finite (NaN, inf) is skipped; this many in a row
    # stop the run with an error (the learning rate is likely too high)
    max_nonfinite_updates: int = 5
    max_steps: int = 100_000
    max_epochs: int | None = None
    # training time budget (across resumes): stop at the last checkpoint within it
    max_hours: float | None = None
    # --- validation and checkpoints
    valid_every: int = 1000  # updates; also when checkpoints are written
    # the model kept as OUT is the best by: "bleu" or "loss" (translate), "loss" (lm, mlm),
    # "accuracy", "macro_f1" or "loss" (classify); None: the task's first
    valid_metric: str | None = None
    valid_bleu: bool = True  # greedy-decode the validation set and score it with sacreBLEU
    valid_max_sentences: int | None = None  # decode only the first N validation sentences
    patience: int | None = None  # stop after this many validations without improvement
    keep_checkpoints: int = 10  # most recent step checkpoints kept (for `qkv average`); >= 1
    # also keep the checkpoints of the N consecutive validations with the best mean score so far
    # (`qkv average --best N` after a run that trains past its best); 0: off
    keep_best_checkpoints: int = 0
    log_every: int = 100
    tensorboard: bool = True
    # --- machine
    seed: int = 1234
    device: str = "auto"  # "auto": cuda if available, else cpu
    # torch intra-op threads on the CPU, which `qkv train` sets through configure_process
    # (qkv.runtime.process); None: torch's default
    threads: int | None = None
    # "auto", "fp32" or "bf16": bf16 autocasts forward and loss (weights and optimizer state stay
    # fp32); "auto" picks bf16 where the device computes it natively (CUDA with bf16, a CPU with
    # AVX512_BF16 or AMX-BF16) and, on a CPU, the model is at least 256 wide (narrower ones run
    # slower in bf16, docs/benchmarks.md); `qkv.runtime.precision`
    precision: str = "auto"

    def __post_init__(self) -> None:
        self.adam_betas = tuple(self.adam_betas)  # type: ignore[assignment]
        if self.valid_metric is None and self.task in VALID_METRICS:
            self.valid_metric = VALID_METRICS[self.task][0]
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first key with an impossible value."""
        self._check_choices()
        self._check_counts()
        self._check_optimisation()
        self._check_data()
        self._check_model()
        self._check_adaptation()

    def _check_choices(self) -> None:
        """The keys that name one of a few choices."""
        _check(self.preset in PRESETS, f"preset={self.preset!r}; choose from {sorted(PRESETS)}")
        _check(
            self.precision in PRECISIONS,
            f"precision={self.precision!r}; choose from {', '.join(PRECISIONS)}",
        )
        _check(
            self.subword in ("unigram", "bpe"),
            f"subword={self.subword!r}; choose 'unigram' or 'bpe'",
        )
        _check(self.task in VALID_METRICS, f"task={self.task!r}; choose from {list(VALID_METRICS)}")
        metrics = VALID_METRICS[self.task]
        _check(
            self.valid_metric in metrics,
            f"valid_metric={self.valid_metric!r}; task {self.task!r} chooses from {list(metrics)}",
        )
        _check(
            self.valid_metric != "bleu" or self.valid_bleu,
            "valid_metric 'bleu' needs valid_bleu: true",
        )

    def _check_counts(self) -> None:
        """Sizes, counts and budgets."""
        for name in POSITIVE_KEYS:
            value = getattr(self, name)
            _check(value > 0, f"{name} must be positive, got {value}")
        _check(
            0 <= self.keep_best_checkpoints <= self.keep_checkpoints,
            f"keep_best_checkpoints must be 0 (off) up to keep_checkpoints "
            f"({self.keep_checkpoints}: a window is kept whole until it is validated), "
            f"got {self.keep_best_checkpoints}",
        )
        for name in OPTIONAL_POSITIVE_KEYS:
            value = getattr(self, name)
            _check(value is None or value > 0, f"{name} must be positive, got {value}")
        for name in ("synthetic_train", "synthetic_valid"):
            _check(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")

    def _check_optimisation(self) -> None:
        """The learning-rate schedule, the optimiser and the regularisers."""
        try:  # the schedule checks its own arguments (an unknown name, no room to decay)
            lr_multiplier(self.schedule, self.warmup, self.max_steps)
        except ValueError as e:
            raise ValueError(f"TrainConfig: {e}") from e
        _check(
            self.lr is None or (math.isfinite(self.lr) and self.lr > 0),
            f"lr must be positive, got {self.lr}",
        )
        _check(self.warmup >= 0, f"warmup must be >= 0, got {self.warmup}")
        _check(
            all(0.0 <= b < 1.0 for b in self.adam_betas),
            f"adam_betas must each be in [0, 1), got {list(self.adam_betas)}",
        )
        for name in ("adam_eps", "weight_decay", "clip_norm"):
            value = getattr(self, name)
            _check(math.isfinite(value) and value >= 0, f"{name} must be >= 0, got {value}")
        _check(0.0 <= self.label_smoothing < 1.0, "label_smoothing must be in [0, 1)")
        _check(
            0.0 <= self.subword_dropout < 1.0,
            f"subword_dropout must be in [0, 1), got {self.subword_dropout}",
        )

    def _check_data(self) -> None:
        """The task's data keys are set, and no key of another task's data is."""
        keys = TASK_DATA_KEYS[self.task]
        every_key = {k for task_keys in TASK_DATA_KEYS.values() for k in task_keys}
        foreign = sorted(k for k in every_key - set(keys) if getattr(self, k) is not None)
        _check(not foreign, f"task {self.task!r} reads {', '.join(keys)}, not {', '.join(foreign)}")
        if self.task == "translate":
            has_pair = self.train_src is not None and self.train_tgt is not None
            _check(
                self.corpus is not None or self.train_tsv is not None or has_pair,
                "no training data: set corpus (multi30k, tatoeba-zh-en, synthetic) or "
                "train_src + train_tgt (or train_tsv)",
            )
        elif self.task in ("lm", "mlm"):
            _check(
                self.corpus is not None or self.train_text is not None,
                f"no training data: task {self.task!r} needs train_text (a text file, one text "
                "per line) or a corpus",
            )
        else:
            _check(
                self.train_tsv is not None,
                "no training data: task 'classify' needs train_tsv (text<TAB>label lines)",
            )
        _check(
            self.task == "translate" or self.joint_vocab, f"task {self.task!r} needs joint_vocab"
        )
        named = self.corpus is not None and self.corpus != "synthetic"
        if self.task == "translate":
            _check(
                not named or bool(self.src_lang and self.tgt_lang),
                f"corpus {self.corpus!r} needs src_lang and tgt_lang",
            )
        else:
            _check(
                not named or bool(self.src_lang),
                f"task {self.task!r} on corpus {self.corpus!r} reads the side src_lang: set it",
            )

    def _check_model(self) -> None:
        """The model keys, checked now rather than after the data preparation."""
        arch = self.model_config(1000, 1000).arch
        _check(
            arch == "transformer" or self.task == "translate",
            f"model.arch {arch!r} is an encoder-decoder: it trains on task 'translate'",
        )

    def _check_adaptation(self) -> None:
        """The keys that adapt a model: freeze, max_unk_rate, mixing."""
        for group in self.freeze:
            choices = ", ".join(FREEZE_GROUPS)
            _check(group in FREEZE_GROUPS, f"freeze: no part {group!r}; choose from {choices}")
        _check(
            not self.freeze or self.task == "translate",
            f"freeze is for task 'translate', not {self.task!r}",
        )
        mixed = self.mix_src is not None or self.mix_tgt is not None
        _check(
            not mixed or (self.mix_src is not None and self.mix_tgt is not None),
            "mix_src and mix_tgt go together: the two sides of the general pairs",
        )
        _check(
            (0.0 < self.mix_ratio < 1.0) if mixed else self.mix_ratio == 0.0,
            f"mix_ratio must be in (0, 1) with mix_src and mix_tgt, and 0 without them; "
            f"got {self.mix_ratio}",
        )
        _check(
            self.lowercase is not None or self.init_from is not None,
            "lowercase must be true or false (null only with init_from: the model's tokenizer "
            "decides)",
        )
        _check(
            0.0 <= self.max_unk_rate <= 1.0,
            f"max_unk_rate must be in [0, 1], got {self.max_unk_rate}",
        )

    def model_config(self, src_vocab_size: int, tgt_vocab_size: int) -> TransformerConfig:
        """The TransformerConfig of this recipe, for the vocabulary sizes of the trained
        tokenizer."""
        overrides = {
            "src_vocab_size": src_vocab_size,
            "share_embeddings": self.joint_vocab,
            **self.model,
        }
        if not self.joint_vocab:
            overrides.setdefault("tgt_vocab_size", tgt_vocab_size)
        return TransformerConfig.preset(self.preset, **overrides)

    def process_settings(self) -> dict[str, Any]:
        """The arguments of `qkv.runtime.process.configure_process` this recipe asks for: its
        threads and seed; when it trains on the CPU, keep_freed_memory and a bounded oneDNN
        primitive cache (the two together keep RSS flat over variable-length batches); no cuDNN
        attention (it builds a graph per batch shape on CUDA).

            configure_process(**cfg.process_settings())
        """
        on_cpu = resolve_device(self.device).type == "cpu"
        return {
            "threads": self.threads,
            "seed": self.seed,
            "keep_freed_memory": on_cpu,
            "cudnn_attention": False,
            "onednn_primitive_cache": TRAINING_PRIMITIVE_CACHE if on_cpu else None,
        }

    def languages(self) -> dict[str, str]:
        """The languages of the training data, for the model directory's config.json: src_lang and
        tgt_lang when both are set; the synthetic corpus: "digits" to synthetic_target. Empty when
        unknown (a server then needs them on its command line)."""
        src, tgt = self.src_lang, self.tgt_lang
        if self.corpus == "synthetic":
            src, tgt = src or "digits", tgt or self.synthetic_target
        return {"src_lang": src, "tgt_lang": tgt} if src and tgt else {}

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["adam_betas"] = list(self.adam_betas)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        return dataclass_from_dict(cls, d)


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """['--lr', '0.001', '--model.d_model', '256', '--tensorboard', 'false'] -> a nested dict of
    YAML-typed values."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        key = args[i]
        if not key.startswith("--") or len(key) == 2:
            raise ValueError(f"expected --key value, got {key!r}")
        key = key[2:]
        if "=" in key:
            key, raw = key.split("=", 1)
            i += 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            raw = args[i + 1]
            i += 2
        else:
            raw = "true"  # a bare flag
            i += 1
        key = key.replace("-", "_")  # --data-dir == --data_dir (a value keeps its dashes: 2e-3)
        # "2e-3" stays a string here; dataclass_from_dict makes float fields floats
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw  # not a YAML scalar ("[0.9"): the typed parser names the key and value
        if key.startswith("model."):
            out.setdefault("model", {})[key[len("model.") :]] = value
        else:
            out[key] = value
    return out


def _yaml_problem(e: yaml.YAMLError) -> str:
    """'line 3, column 7: mapping values are not allowed here' of a YAML error."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is None:
        return problem
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def load_train_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """Read a YAML recipe (or start from the defaults) and apply overrides; model overrides
    merge."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"config file not found: {path}")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError as e:
            raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML ({_yaml_problem(e)})") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of config keys")
        data = loaded
    if not isinstance(data.get("model") or {}, dict):
        raise ValueError(f"model must be a mapping of model keys, got {data['model']!r}")
    overrides = dict(overrides or {})
    override_model = overrides.pop("model", None) or {}
    if not isinstance(override_model, dict):
        raise ValueError(
            f"TrainConfig: model must be a mapping of model keys (--model.KEY value), "
            f"got {override_model!r}"
        )
    model = {**(data.get("model") or {}), **override_model}
    merged = {**data, **overrides}
    if isinstance(merged.get("freeze"), str):  # --freeze embeddings,encoder
        merged["freeze"] = [g.strip() for g in merged["freeze"].split(",") if g.strip()]
    if merged.get("init_from") is not None and merged.get("task", "translate") in FINE_TUNES:
        merged = {**FINE_TUNE_DEFAULTS, **merged}
    if merged.get("init_from") is not None:  # the model's tokenizer decides, unless told
        merged = {"lowercase": None, **merged}
    if model:
        merged["model"] = model
    return TrainConfig.from_dict(merged)
