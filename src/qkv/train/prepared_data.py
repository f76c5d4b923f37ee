"""From raw parallel text to id sequences ready for batching, made once and memory-mapped.

Three stages, each a directory built once under the prepared-data folder (`prepared_dir`, default
`<cache>/prepared`; `qkv.data.store`) and found again by a fingerprint of what it is made from:

    text-KEY       the cleaned pairs' text (empty pairs dropped)  <- the input files' sha256
    tokenizer-KEY  the SentencePiece model trained on that text   <- + the tokenizer settings
    ids-KEY        the pairs' ids, over-long pairs dropped        <- + the tokenizer, max_len

Every stage streams: the files are read a line at a time, SentencePiece trains on a seeded
reservoir sample of the text (`input_sentence_size`), and pairs are encoded a chunk at a time, so
memory does not grow with the corpus. A second run on the same files and settings, a resumed run
and every torchrun rank read the same files (`qkv.data.ondisk`). Every drop is counted and reported.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config import cache_dir
from ..data.corpus import ParallelCorpus, clean, iter_parallel, iter_tsv, load_parallel, load_tsv
from ..data.named import get_corpus, load_named, named_paths
from ..data.ondisk import SequenceWriter, TextLines, TokenArray, id_dtype
from ..data.store import built_once, file_sha256
from ..data.synthetic import synthetic_splits
from ..data.tokenizer import SubwordTokenizer, seed_sampling
from .recipe import TrainConfig

log = logging.getLogger("qkv.train")

FORMAT = 1  # the layout of prepared data: a new layout is a new fingerprint
CHUNK = 50_000  # pairs encoded at a time


@dataclass
class EncodedData:
    tokenizer: SubwordTokenizer
    text_src: TextLines  # the cleaned pairs' text, for segmentations sampled per epoch
    text_tgt: TextLines
    rows: np.ndarray  # (N,) the cleaned pair each training pair is
    train_src: TokenArray  # the training pairs' ids, segmented deterministically
    train_tgt: TokenArray
    valid: ParallelCorpus | None  # raw text, for BLEU
    valid_src: list[list[int]]
    valid_tgt: list[list[int]]
    fingerprints: dict[str, str] = field(default_factory=dict)  # of train_src and train_tgt


def validation_split(name: str) -> str:
    splits = get_corpus(name).splits
    for candidate in ("val", "valid", "dev"):
        if candidate in splits:
            return candidate
    raise ValueError(f"corpus {name!r} has no validation split; set valid_split (one of {splits})")


def load_corpora(cfg: TrainConfig) -> tuple[ParallelCorpus, ParallelCorpus | None]:
    """The raw training and validation corpora the config names, in memory."""
    if cfg.corpus == "synthetic":
        train, valid, _ = _synthetic(cfg)
        return train, valid
    if cfg.corpus is not None:
        assert cfg.src_lang and cfg.tgt_lang
        args = (cfg.src_lang, cfg.tgt_lang, cfg.data_dir, cfg.download)
        train = load_named(cfg.corpus, cfg.train_split, *args)
        return train, _load_valid(cfg)
    if cfg.train_tsv:
        return load_tsv(cfg.train_tsv), _load_valid(cfg)
    return load_parallel(cfg.train_src, cfg.train_tgt), _load_valid(cfg)  # type: ignore[arg-type]


def _synthetic(cfg: TrainConfig) -> tuple[ParallelCorpus, ParallelCorpus, ParallelCorpus]:
    return synthetic_splits(
        cfg.seed,
        cfg.synthetic_train,
        cfg.synthetic_valid,
        0,
        target=cfg.synthetic_target,
        max_value=cfg.synthetic_max_value,
    )


def _load_valid(cfg: TrainConfig) -> ParallelCorpus | None:
    """The raw validation corpus the config names (None when it names none)."""
    if cfg.corpus == "synthetic":
        return _synthetic(cfg)[1]
    if cfg.corpus is not None:
        assert cfg.src_lang and cfg.tgt_lang
        split = cfg.valid_split or validation_split(cfg.corpus)
        return load_named(cfg.corpus, split, cfg.src_lang, cfg.tgt_lang, cfg.data_dir, cfg.download)
    if cfg.valid_tsv:
        return load_tsv(cfg.valid_tsv)
    if cfg.valid_src and cfg.valid_tgt:
        return load_parallel(cfg.valid_src, cfg.valid_tgt)
    return None


def training_source(cfg: TrainConfig) -> str:
    """The training data the config names, for messages."""
    if cfg.corpus is not None:
        return f"the {cfg.corpus} corpus ({cfg.train_split} split)"
    if cfg.train_tsv:
        return str(cfg.train_tsv)
    return f"{cfg.train_src} + {cfg.train_tgt}"


class _Source:
    """The training pairs the config names: what identifies them, and a stream of them."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        if cfg.corpus == "synthetic":
            self.files: tuple[Path, ...] = ()
        elif cfg.corpus is not None:
            assert cfg.src_lang and cfg.tgt_lang
            args = (cfg.src_lang, cfg.tgt_lang, cfg.data_dir, cfg.download)
            self.files = named_paths(cfg.corpus, cfg.train_split, *args)
        elif cfg.train_tsv:
            self.files = (Path(cfg.train_tsv),)
        else:
            self.files = (Path(cfg.train_src), Path(cfg.train_tgt))  # type: ignore[arg-type]

    def identity(self) -> dict[str, Any]:
        """What the pairs are: the files' sha256 (not their names), or the synthetic settings."""
        cfg = self.cfg
        if cfg.corpus == "synthetic":
            keys = ("seed", "synthetic_train", "synthetic_valid", "synthetic_target")
            return {k: getattr(cfg, k) for k in (*keys, "synthetic_max_value")}
        for path in self.files:
            if not path.is_file():
                raise ValueError(f"file not found: {path}")
        kind = "tsv" if self.cfg.train_tsv else "parallel"
        return {kind: [file_sha256(path) for path in self.files]}

    def pairs(self) -> Iterator[tuple[str, str]]:
        if self.cfg.corpus == "synthetic":
            train = _synthetic(self.cfg)[0]
            return zip(train.src, train.tgt, strict=True)
        if self.cfg.train_tsv:
            return iter_tsv(self.files[0])
        return iter_parallel(*self.files)


def fingerprint_of(*parts: Any) -> str:
    """A short sha256 of JSON-able parts: the name of a prepared directory."""
    text = json.dumps([FORMAT, *parts], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def prepared_root(cfg: TrainConfig) -> Path:
    return Path(cfg.prepared_dir).expanduser() if cfg.prepared_dir else cache_dir() / "prepared"


def _build_text(source: _Source, what: str) -> Any:
    """The builder of the text stage: the pairs with an empty side dropped, written as they
    stream by."""

    def build(tmp: Path) -> dict[str, Any]:
        writers = SequenceWriter(tmp, "src", np.uint8), SequenceWriter(tmp, "tgt", np.uint8)
        counts = {"kept": 0, "empty": 0}
        pairs = source.pairs()
        while chunk := [pair for _, pair in zip(range(CHUNK), pairs, strict=False)]:
            kept, report = clean(ParallelCorpus([s for s, _ in chunk], [t for _, t in chunk]))
            writers[0].add_texts(kept.src)
            writers[1].add_texts(kept.tgt)
            counts["kept"] += report.kept
            counts["empty"] += report.empty
        for writer in writers:
            writer.close()
        if not counts["kept"]:
            raise ValueError(
                f"no training pairs in {what} (it is empty, or every pair has an empty side)"
            )
        return counts

    return build


def _build_tokenizer(cfg: TrainConfig, text_dir: Path) -> Any:
    def build(tmp: Path) -> dict[str, Any]:
        SubwordTokenizer.train(
            TextLines(text_dir, "src"),
            TextLines(text_dir, "tgt"),
            tmp,
            vocab_size=cfg.vocab_size,
            model_type=cfg.subword,
            joint=cfg.joint_vocab,
            character_coverage=cfg.character_coverage,
            seed=cfg.seed,
            max_sentences=cfg.tokenizer_sample,
            lowercase=cfg.lowercase,
        )
        return {}

    return build


def tokenizer_digest(tokenizer: SubwordTokenizer) -> str:
    """A sha256 of what decides a tokenizer's ids: its settings and SentencePiece models."""
    h = hashlib.sha256(json.dumps(tokenizer.config, sort_keys=True).encode())
    for proto in tokenizer.sentencepiece_models:
        h.update(proto)
    return h.hexdigest()


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


def sequences_fingerprint(array: TokenArray) -> str:
    """`tasks.base.fingerprint` of a mapped array (lengths, then ids, as int64), read a chunk at
    a time."""
    h = hashlib.sha256(array.lengths.astype(np.int64).tobytes())
    for ids in array.id_chunks():
        h.update(ids.astype(np.int64).tobytes())
    return h.hexdigest()[:16]


def _build_ids(cfg: TrainConfig, text_dir: Path, tokenizer: SubwordTokenizer) -> Any:
    """The builder of the ids stage: the cleaned pairs encoded a chunk at a time, the pairs with
    a side over max_len subwords (or over the length ratio) dropped and counted."""

    def build(tmp: Path) -> dict[str, Any]:
        dtype = id_dtype(max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size))
        writers = SequenceWriter(tmp, "src", dtype), SequenceWriter(tmp, "tgt", dtype)
        texts = TextLines(text_dir, "src").chunks(CHUNK), TextLines(text_dir, "tgt").chunks(CHUNK)
        rows, too_long, ratio, start = [], 0, 0, 0
        for src_texts, tgt_texts in zip(*texts, strict=True):
            src, tgt = tokenizer.encode_src(src_texts), tokenizer.encode_tgt(tgt_texts)
            keep, long_here, ratio_here = filter_long(src, tgt, cfg.max_len, cfg.max_ratio)
            writers[0].add_ids([src[i] for i in keep])
            writers[1].add_ids([tgt[i] for i in keep])
            rows.append(np.asarray(keep, dtype=np.int64) + start)
            too_long, ratio, start = too_long + long_here, ratio + ratio_here, start + len(src)
        pairs, _ = (writer.close() for writer in writers)
        if not pairs:
            raise ValueError("no training pairs left after cleaning and length filtering")
        np.save(tmp / "rows.npy", np.concatenate(rows))
        fingerprints = {
            f"train_{side}": sequences_fingerprint(TokenArray(tmp, side, dtype))
            for side in ("src", "tgt")
        }
        counts = {"pairs": pairs, "too_long": too_long, "ratio": ratio}
        return {**counts, "dtype": dtype.name, "fingerprints": fingerprints}

    return build


def _encode_valid(
    tokenizer: SubwordTokenizer, valid: ParallelCorpus | None, max_len: int
) -> tuple[list[list[int]], list[list[int]]]:
    """The validation pairs' ids: never dropped, over-long ones cut to max_len subwords."""
    if valid is None:
        return [], []
    valid_src = [s[:max_len] for s in tokenizer.encode_src(valid.src)]
    valid_tgt = [t[:max_len] for t in tokenizer.encode_tgt(valid.tgt)]
    return valid_src, valid_tgt


def _valid(cfg: TrainConfig, tokenizer: SubwordTokenizer) -> ParallelCorpus | None:
    """The validation corpus, cleaned (and lowercased for a lowercasing tokenizer)."""
    valid = _load_valid(cfg)
    if valid is None:
        return None
    valid, report = clean(valid)
    log.info("validation data: %s", report)
    if tokenizer.lowercase:
        # the tokenizer lowercases what it encodes, so the model writes lowercase: BLEU references
        # are lowercased to match
        valid = ParallelCorpus(valid.src, [t.lower() for t in valid.tgt])
    return valid


def _tokenizer(
    cfg: TrainConfig, text_key: str, text_dir: Path, out_dir: Path, tokenizer_dir: Path | None
) -> SubwordTokenizer:
    """The tokenizer loaded from tokenizer_dir, or else trained on the text (once: it is kept
    under the prepared folder) and saved into out_dir."""
    if tokenizer_dir is not None:
        return SubwordTokenizer.load(tokenizer_dir)
    settings = [cfg.vocab_size, cfg.subword, cfg.joint_vocab, cfg.character_coverage]
    sample = [cfg.seed, cfg.lowercase, cfg.tokenizer_sample]
    key = fingerprint_of("tokenizer", text_key, *settings, *sample)
    build = _build_tokenizer(cfg, text_dir)
    directory, _ = built_once(prepared_root(cfg), f"tokenizer-{key}", build)
    tokenizer = SubwordTokenizer.load(directory)
    tokenizer.save(out_dir)
    return tokenizer


def prepare_data(
    cfg: TrainConfig, out_dir: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None
) -> EncodedData:
    """The training data the config names, prepared (or found prepared) and mapped; the
    tokenizer trained (into out_dir) or loaded (from tokenizer_dir, default out_dir); the
    validation data encoded in memory."""
    root, source = prepared_root(cfg), _Source(cfg)
    text_key = fingerprint_of("text", source.identity())
    build_text = _build_text(source, training_source(cfg))
    text_dir, text = built_once(root, f"text-{text_key}", build_text)
    log.info("training data: kept %d of %d pairs (dropped %d empty); prepared in %s",
             text["kept"], text["kept"] + text["empty"], text["empty"], text_dir)
    if not train_tokenizer:
        tokenizer_dir = tokenizer_dir or out_dir
    tokenizer = _tokenizer(cfg, text_key, text_dir, out_dir, tokenizer_dir)
    encoding = [tokenizer_digest(tokenizer), cfg.max_len, cfg.max_ratio]
    ids_key = fingerprint_of("ids", text_key, *encoding)
    ids_dir, ids = built_once(root, f"ids-{ids_key}", _build_ids(cfg, text_dir, tokenizer))
    if ids["too_long"] or ids["ratio"]:
        log.info(
            "dropped %d pairs longer than %d subwords and %d over the length ratio %s; %d remain",
            ids["too_long"], cfg.max_len, ids["ratio"], cfg.max_ratio, ids["pairs"],
        )
    valid = _valid(cfg, tokenizer)
    valid_src, valid_tgt = _encode_valid(tokenizer, valid, cfg.max_len)
    return EncodedData(
        tokenizer=tokenizer,
        text_src=TextLines(text_dir, "src"),
        text_tgt=TextLines(text_dir, "tgt"),
        rows=np.load(ids_dir / "rows.npy", mmap_mode="r"),
        train_src=TokenArray(ids_dir, "src", ids["dtype"]),
        train_tgt=TokenArray(ids_dir, "tgt", ids["dtype"]),
        valid=valid,
        valid_src=valid_src,
        valid_tgt=valid_tgt,
        fingerprints=ids["fingerprints"],
    )


def sample_segmentation(
    data: EncodedData, dropout: float, seed: int, max_len: int, directory: Path
) -> tuple[TokenArray, TokenArray]:
    """The training pairs' ids under one draw of subword dropout (BPE-dropout), reproducible from
    `seed`, written into `directory` (a chunk of pairs at a time) and mapped.

    SentencePiece's sampler restarts from its seed on every call: chunk k > 0 draws from a seed
    derived from (seed, k), and a corpus of one chunk draws exactly as one call on all its text.
    A pair whose sampled form has a side longer than `max_len` keeps its deterministic ids, so the
    set of pairs, and their number, is that of `data` in every draw.
    """
    dtype = data.train_src.dtype
    writers = SequenceWriter(directory, "src", dtype), SequenceWriter(directory, "tgt", dtype)
    tok = data.tokenizer
    for k, start in enumerate(range(0, len(data.rows), CHUNK)):
        rows = data.rows[start : start + CHUNK]
        chunk_seed = seed if k == 0 else int(np.random.SeedSequence([seed, k]).generate_state(1)[0])
        seed_sampling(chunk_seed)
        src = tok.encode_src(next(data.text_src.chunks(CHUNK, rows)), dropout)
        seed_sampling(chunk_seed)
        tgt = tok.encode_tgt(next(data.text_tgt.chunks(CHUNK, rows)), dropout)
        for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
            if len(s) > max_len or len(t) > max_len:
                src[i], tgt[i] = data.train_src[start + i], data.train_tgt[start + i]
        writers[0].add_ids(src)
        writers[1].add_ids(tgt)
    for writer in writers:
        writer.close()
    return TokenArray(directory, "src", dtype), TokenArray(directory, "tgt", dtype)
