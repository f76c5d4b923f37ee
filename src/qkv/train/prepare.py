"""From raw parallel text to id sequences ready for batching: load, clean, train or load the
tokenizer, encode, filter over-long pairs. Every drop is counted and reported."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..data.corpus import ParallelCorpus, clean, load_parallel, load_tsv
from ..data.named import get_corpus, load_named
from ..data.synthetic import synthetic_splits
from ..data.tokenizer import SubwordTokenizer, seed_sampling
from .recipe import TrainConfig

log = logging.getLogger("qkv.train")


@dataclass
class EncodedData:
    tokenizer: SubwordTokenizer
    train: ParallelCorpus  # raw text of the pairs kept, for segmentations sampled per epoch
    train_src: list[list[int]]  # their ids, segmented deterministically
    train_tgt: list[list[int]]
    valid: ParallelCorpus | None  # raw text, for BLEU
    valid_src: list[list[int]]
    valid_tgt: list[list[int]]


def validation_split(name: str) -> str:
    splits = get_corpus(name).splits
    for candidate in ("val", "valid", "dev"):
        if candidate in splits:
            return candidate
    raise ValueError(f"corpus {name!r} has no validation split; set valid_split (one of {splits})")


def load_corpora(cfg: TrainConfig) -> tuple[ParallelCorpus, ParallelCorpus | None]:
    """The raw training and validation corpora the config names."""
    if cfg.corpus == "synthetic":
        train, valid, _ = synthetic_splits(
            cfg.seed,
            cfg.synthetic_train,
            cfg.synthetic_valid,
            0,
            target=cfg.synthetic_target,
            max_value=cfg.synthetic_max_value,
        )
        return train, valid
    if cfg.corpus is not None:
        assert cfg.src_lang and cfg.tgt_lang
        args = (cfg.src_lang, cfg.tgt_lang, cfg.data_dir, cfg.download)
        valid_split = cfg.valid_split or validation_split(cfg.corpus)
        train = load_named(cfg.corpus, cfg.train_split, *args)
        return train, load_named(cfg.corpus, valid_split, *args)
    if cfg.train_tsv:
        train = load_tsv(cfg.train_tsv)
    else:
        train = load_parallel(cfg.train_src, cfg.train_tgt)  # type: ignore[arg-type]
    valid = None
    if cfg.valid_tsv:
        valid = load_tsv(cfg.valid_tsv)
    elif cfg.valid_src and cfg.valid_tgt:
        valid = load_parallel(cfg.valid_src, cfg.valid_tgt)
    return train, valid


def training_source(cfg: TrainConfig) -> str:
    """The training data the config names, for messages."""
    if cfg.corpus is not None:
        return f"the {cfg.corpus} corpus ({cfg.train_split} split)"
    if cfg.train_tsv:
        return str(cfg.train_tsv)
    return f"{cfg.train_src} + {cfg.train_tgt}"


def filter_long(
    src: list[list[int]], tgt: list[list[int]], max_len: int, max_ratio: float | None
) -> tuple[list[int], int, int]:
    """Indices of pairs to keep; counts of pairs dropped as too long and as over the length
    ratio."""
    keep: list[int] = []
    too_long = 0
    ratio = 0
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        shorter, longer = sorted((len(s), len(t)))
        if longer > max_len:
            too_long += 1
        elif max_ratio is not None and longer > max_ratio * max(1, shorter):
            ratio += 1
        else:
            keep.append(i)
    return keep, too_long, ratio


def _clean_corpora(cfg: TrainConfig) -> tuple[ParallelCorpus, ParallelCorpus | None]:
    """The corpora the config names, cleaned; a ValueError when no training pair is left."""
    train, valid = load_corpora(cfg)
    train, report = clean(train)
    log.info("training data: %s", report)
    if not train.src:
        raise ValueError(
            f"no training pairs in {training_source(cfg)} (it is empty, or every pair has an "
            "empty side)"
        )
    if valid is not None:
        valid, vreport = clean(valid)
        log.info("validation data: %s", vreport)
    return train, valid


def _tokenizer(
    cfg: TrainConfig,
    train: ParallelCorpus,
    out_dir: Path,
    train_tokenizer: bool,
    tokenizer_dir: Path | None,
) -> SubwordTokenizer:
    """The tokenizer trained on `train` into out_dir, or loaded from tokenizer_dir (default
    out_dir)."""
    if not train_tokenizer:
        return SubwordTokenizer.load(tokenizer_dir or out_dir)
    return SubwordTokenizer.train(
        train.src,
        train.tgt,
        out_dir,
        vocab_size=cfg.vocab_size,
        model_type=cfg.subword,
        joint=cfg.joint_vocab,
        character_coverage=cfg.character_coverage,
        seed=cfg.seed,
        lowercase=cfg.lowercase,
    )


def _encode_valid(
    tokenizer: SubwordTokenizer, valid: ParallelCorpus | None, max_len: int
) -> tuple[list[list[int]], list[list[int]]]:
    """The validation pairs' ids: never dropped, over-long ones cut to max_len subwords."""
    if valid is None:
        return [], []
    valid_src = [s[:max_len] for s in tokenizer.encode_src(valid.src)]
    valid_tgt = [t[:max_len] for t in tokenizer.encode_tgt(valid.tgt)]
    return valid_src, valid_tgt


def prepare_data(
    cfg: TrainConfig, out_dir: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None
) -> EncodedData:
    """Load and clean the corpora, train (into out_dir) or load (from tokenizer_dir, default
    out_dir) the tokenizer, encode and filter."""
    train, valid = _clean_corpora(cfg)
    tokenizer = _tokenizer(cfg, train, out_dir, train_tokenizer, tokenizer_dir)
    if tokenizer.lowercase and valid is not None:
        # the tokenizer lowercases what it encodes, so the model writes lowercase: BLEU references
        # are lowercased to match
        valid = ParallelCorpus(valid.src, [t.lower() for t in valid.tgt])
    src = tokenizer.encode_src(train.src)
    tgt = tokenizer.encode_tgt(train.tgt)
    keep, too_long, ratio = filter_long(src, tgt, cfg.max_len, cfg.max_ratio)
    if too_long or ratio:
        log.info(
            "dropped %d pairs longer than %d subwords and %d over the length ratio %s; %d remain",
            too_long,
            cfg.max_len,
            ratio,
            cfg.max_ratio,
            len(keep),
        )
    if not keep:
        raise ValueError("no training pairs left after cleaning and length filtering")
    valid_src, valid_tgt = _encode_valid(tokenizer, valid, cfg.max_len)
    return EncodedData(
        tokenizer=tokenizer,
        train=ParallelCorpus([train.src[i] for i in keep], [train.tgt[i] for i in keep]),
        train_src=[src[i] for i in keep],
        train_tgt=[tgt[i] for i in keep],
        valid=valid,
        valid_src=valid_src,
        valid_tgt=valid_tgt,
    )


def sample_segmentation(
    data: EncodedData, dropout: float, seed: int, max_len: int
) -> tuple[list[list[int]], list[list[int]]]:
    """The training pairs' ids under one draw of subword dropout (BPE-dropout), reproducible from
    `seed`.

    A pair whose sampled form has a side longer than `max_len` keeps its deterministic ids, so the
    set of pairs, and their number, is that of `data` in every draw.
    """
    seed_sampling(seed)
    src = data.tokenizer.encode_src(data.train.src, dropout)
    tgt = data.tokenizer.encode_tgt(data.train.tgt, dropout)
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        if len(s) > max_len or len(t) > max_len:
            src[i] = data.train_src[i]
            tgt[i] = data.train_tgt[i]
    return src, tgt
