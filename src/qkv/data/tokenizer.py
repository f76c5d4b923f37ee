"""Subword tokenization with SentencePiece (Kudo & Richardson, 2018).

    tok = SubwordTokenizer.load(directory)   # tokenizer.json and spm.model (or one per side)
    ids = tok.encode_src(texts); texts_again = tok.decode_src(ids)

Ids follow the project convention: pad=0, unk=1, bos=2, eos=3. The tokenizer is lossless,
`decode(encode(text)) == text` up to runs of whitespace (no NFKC normalization; rare CJK characters
fall back to their UTF-8 bytes), because translations are scored on their detokenized text against
raw references. An imported Marian model's ids are its vocabulary's ("vocabulary" in
`tokenizer.json`), decoded as MarianTokenizer decodes them.

Details: docs/architecture.md, "The tokenizer".
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from pathlib import Path
from typing import Any

import sentencepiece as spm

from ..modeldir import (
    SPM_JOINT_FILE,
    SPM_SRC_FILE,
    SPM_TGT_FILE,
    TOKENIZER_FILE,
    CheckpointError,
    atomic_write_bytes,
    atomic_write_json,
    read_json,
)

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
CONFIG_TYPES = {"joint": bool, "model_type": str, "vocab_size": int, "lowercase": bool}
CONFIG_KEYS = tuple(CONFIG_TYPES)  # tokenizer.json; "vocabulary" too for vocabulary ids
SPECIALS = ("pad", "unk", "bos", "eos")
SPACE_SYMBOL = "\u2581"  # SentencePiece's "▁", the space that starts a word

# CJK ideographs (and extension A, compatibility ideographs), kana, and hangul.
_CJK = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u1100-\u11ff\uac00-\ud7af]"
)
CJK_FRACTION = 0.01  # above this fraction of CJK characters, the text counts as CJK


def auto_character_coverage(texts: Iterable[str]) -> float:
    """0.9995 for text in which more than 1% of the non-space characters are CJK, else 1.0."""
    n_cjk = n_chars = 0
    texts = iter(texts)
    while batch := list(islice(texts, 10_000)):  # one regex over many texts: a corpus goes fast
        joined = "".join(batch)
        n_cjk += len(_CJK.findall(joined))
        n_chars += len(joined) - joined.count(" ")
    return 0.9995 if n_cjk > CJK_FRACTION * max(n_chars, 1) else 1.0


def _train_model(
    texts: Callable[[], Iterator[str]],
    vocab_size: int,
    model_type: str,
    character_coverage: float | None,
    seed: int,
    num_threads: int,
    max_sentences: int,
) -> bytes:
    """Train one SentencePiece model in memory and return its serialized proto; `texts()` streams
    the sentences (twice when the character coverage is chosen from them)."""
    if character_coverage is None:
        character_coverage = auto_character_coverage(texts())
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=texts(),
        model_writer=model,
        model_type=model_type,
        vocab_size=vocab_size,
        hard_vocab_limit=False,  # a tiny corpus yields a smaller vocabulary instead of an error
        character_coverage=character_coverage,
        byte_fallback=character_coverage < 1.0,
        normalization_rule_name="identity",
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        num_threads=num_threads,
        input_sentence_size=max_sentences,  # a larger corpus: a seeded reservoir sample
        shuffle_input_sentence=True,
        minloglevel=2,  # errors only
    )
    return model.getvalue()


def seed_sampling(seed: int) -> None:
    """Seed SentencePiece's sampler: `encode_*(..., dropout > 0)` calls that follow (in this thread)
    then draw the same segmentations every time."""
    spm.set_random_generator_seed(seed)


def _encode(
    sp: spm.SentencePieceProcessor, texts: list[str], dropout: float, out_type: type = int
) -> list[list]:
    """Ids (or pieces, out_type=str) of `texts`; with `dropout` > 0, a segmentation sampled afresh
    on every call (subword regularization).

    For a BPE model this is BPE-dropout (Provilkov et al., 2020): each merge is skipped with
    probability `dropout`, so words come out in smaller, varying pieces (0.1 is the paper's value).
    For a unigram model it samples from the segmentation lattice with SentencePiece's smoothing
    `alpha` = `dropout` (Kudo, 2018). One thread, so that `seed_sampling` makes the draws
    reproducible.
    """
    if dropout == 0.0:
        return sp.encode(texts, out_type=out_type)
    return sp.encode(
        texts, out_type=out_type, enable_sampling=True, alpha=dropout, nbest_size=-1, num_threads=1
    )


def split_language_token(text: str) -> tuple[list[str], str]:
    """ ">>fra<< Hello" -> ([">>fra<<"], " Hello"): a leading target-language token, as
    MarianTokenizer splits it off before SentencePiece."""
    end = text.find("<<")
    if text.startswith(">>") and end != -1:
        return [text[: end + 2]], text[end + 2 :]
    return [], text


def marian_text(sp: spm.SentencePieceProcessor, pieces: list[str]) -> str:
    """The text of `pieces` as MarianTokenizer writes it (`convert_tokens_to_string` without
    special tokens): SentencePiece decodes the pieces it knows and passes the others through as
    they are, then every "▁" left becomes a space and the text is stripped."""
    return sp.decode_pieces(pieces).replace(SPACE_SYMBOL, " ").strip()


def check_unicode(texts: list[str], first: int = 0) -> None:
    """A ValueError naming the first text that is not valid Unicode: one holding a lone surrogate
    (U+D800..U+DFFF), as bytes decoded with errors="surrogateescape" do; texts[0] is named as the
    text of index `first` (a block of a longer input)."""
    for i, text in enumerate(texts, start=first):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"texts[{i}] holds a lone surrogate (U+{ord(text[e.start]):04X} at character "
                f"{e.start}), so it is not valid Unicode text"
            ) from None


def checked_texts(texts: Sequence[str], first: int = 0) -> list[str]:
    """`texts` as a list, checked to be strings of valid Unicode (a TypeError or ValueError naming
    the first that is not; texts[0] is the text of index `first` of the input)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of sentences, got one str; pass [text]")
    texts = list(texts)
    if not all(isinstance(t, str) for t in texts):
        kinds = sorted({type(t).__name__ for t in texts if not isinstance(t, str)})
        raise TypeError(f"texts must be strings, got {', '.join(kinds)}")
    check_unicode(texts, first)
    return texts


def _id_sequences(ids: Any, method: str) -> list[list[int]]:
    """`ids` as a list of id sequences; a TypeError in one line for a flat list of ids."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise TypeError(f"{method} takes a list of id sequences, got {type(ids).__name__}")
    ids = list(ids)
    for seq in ids:
        if isinstance(seq, str | bytes) or not isinstance(seq, Iterable):
            raise TypeError(
                f"{method} takes a list of id sequences ([[ids], ...]), got a list of "
                f"{type(seq).__name__}; for one sequence, pass [ids]"
            )
    return [list(seq) for seq in ids]


def check_config(config: Any) -> None:
    """ValueError naming the key for a tokenizer.json that lacks a key or has a value of the wrong
    type."""
    if not isinstance(config, dict):
        raise ValueError(f"expected a JSON object of settings, got {type(config).__name__}")
    missing = [key for key in CONFIG_KEYS if key not in config]
    if missing:
        raise ValueError(f"tokenizer config lacks {missing}")
    for key, kind in CONFIG_TYPES.items():
        value = config[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{key} must be {kind.__name__}, got {value!r}")
    vocabulary = config.get("vocabulary")
    if vocabulary is None:
        return
    if not isinstance(vocabulary, dict):
        raise ValueError(f"vocabulary must be an object, got {type(vocabulary).__name__}")
    for key in ("src", "tgt"):
        pieces = vocabulary.get(key)
        if not (key == "tgt" and pieces is None) and not (
            isinstance(pieces, list) and pieces and all(isinstance(p, str) for p in pieces)
        ):
            raise ValueError(f"vocabulary.{key} must be a list of pieces, got {pieces!r:.40}")
    for key in SPECIALS:
        if not isinstance(vocabulary.get(key), str):
            raise ValueError(f"vocabulary.{key} must be a piece, got {vocabulary.get(key)!r}")


class SubwordTokenizer:
    """A source and a target SentencePiece model, which are one and the same model when `joint`.

    pad_id, unk_id, bos_id, eos_id: 0, 1, 2, 3 with SentencePiece's ids; with a vocabulary, the
    places of its special pieces (Marian: eos 0, unk 1, and pad = bos = the last id).
    """

    def __init__(self, src_proto: bytes, tgt_proto: bytes, config: dict) -> None:
        """config: the settings of `tokenizer.json` (see `check_config`)."""
        check_config(config)
        self.config = dict(config)
        self._src_proto = src_proto
        self._tgt_proto = tgt_proto
        self.src_sp = spm.SentencePieceProcessor(model_proto=src_proto)
        if config["joint"]:
            self.tgt_sp = self.src_sp
        else:
            self.tgt_sp = spm.SentencePieceProcessor(model_proto=tgt_proto)
        vocabulary = config.get("vocabulary")
        self.src_pieces: list[str] | None = None  # with a vocabulary: its pieces, in id order
        self.tgt_pieces: list[str] | None = None
        if vocabulary is None:
            for sp in (self.src_sp, self.tgt_sp):
                got = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
                if got != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
                    raise ValueError(
                        f"SentencePiece model has special ids {got}, expected 0, 1, 2, 3"
                    )
            self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
            return
        self.src_pieces = vocabulary["src"]
        self.tgt_pieces = vocabulary["tgt"] or self.src_pieces
        self._src_index = {piece: i for i, piece in enumerate(self.src_pieces)}
        self._tgt_index = {piece: i for i, piece in enumerate(self.tgt_pieces)}
        ids = []
        for name in SPECIALS:
            piece = vocabulary[name]
            src_id, tgt_id = self._src_index.get(piece), self._tgt_index.get(piece)
            if src_id is None or src_id != tgt_id:
                raise ValueError(
                    f"the {name} piece {piece!r} must have one id in both vocabularies, got "
                    f"{src_id} (source) and {tgt_id} (target)"
                )
            ids.append(src_id)
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = ids

    @classmethod
    def train(
        cls,
        texts_src: Sequence[str],
        texts_tgt: Sequence[str],
        out_dir: str | Path,
        vocab_size: int = 8000,
        model_type: str = "unigram",
        joint: bool = True,
        character_coverage: float | None = None,
        seed: int = 0,
        num_threads: int = 1,
        max_sentences: int = 2_000_000,
        lowercase: bool = False,
    ) -> SubwordTokenizer:
        """Train on raw sentences and save to `out_dir`. The sentences are streamed (a mapped
        `qkv.data.ondisk.TextLines` is never read whole).

        vocab_size: the size of each model (an upper bound on tiny corpora).
        model_type: "unigram" or "bpe".
        joint: one model for both sides (the paper's shared vocabulary) or one model per side.
        character_coverage: None picks 0.9995 for CJK text and 1.0 otherwise, per model.
        seed, num_threads: training is deterministic for fixed values of both (the model depends on
            num_threads).
        max_sentences: train on a random sample of this many sentences (per model) of a larger
            corpus.
        lowercase: lowercase all text, here and in every `encode_*` call.
        """
        if model_type not in ("unigram", "bpe"):
            raise ValueError(f"model_type must be 'unigram' or 'bpe', got {model_type!r}")
        args = (vocab_size, model_type, character_coverage, seed, num_threads, max_sentences)

        def stream(*sides: Sequence[str]) -> Callable[[], Iterator[str]]:
            texts = chain.from_iterable
            return lambda: (t.lower() for t in texts(sides)) if lowercase else texts(sides)

        if joint:
            src_proto = tgt_proto = _train_model(stream(texts_src, texts_tgt), *args)
        else:
            src_proto = _train_model(stream(texts_src), *args)
            tgt_proto = _train_model(stream(texts_tgt), *args)
        config = {
            "joint": joint,
            "model_type": model_type,
            "vocab_size": vocab_size,
            "lowercase": lowercase,
        }
        tokenizer = cls(src_proto, tgt_proto, config)
        tokenizer.save(out_dir)
        return tokenizer

    @classmethod
    def load(cls, directory: str | Path) -> SubwordTokenizer:
        """Load a tokenizer saved by `save` (or `train`); a missing or incomplete file is a
        CheckpointError."""
        directory = Path(directory)
        config = read_json(directory / TOKENIZER_FILE)
        try:
            check_config(config)
        except ValueError as e:
            raise CheckpointError(f"{directory / TOKENIZER_FILE}: {e}") from None
        try:
            if config["joint"]:
                src_proto = tgt_proto = (directory / SPM_JOINT_FILE).read_bytes()
            else:
                src_proto = (directory / SPM_SRC_FILE).read_bytes()
                tgt_proto = (directory / SPM_TGT_FILE).read_bytes()
            return cls(src_proto, tgt_proto, config)
        except (KeyError, OSError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"cannot load the tokenizer in {directory}: {e}") from e

    def save(self, directory: str | Path) -> None:
        """Write `tokenizer.json` and the model file(s) to `directory`, each atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.config["joint"]:
            atomic_write_bytes(directory / SPM_JOINT_FILE, self._src_proto)
        else:
            atomic_write_bytes(directory / SPM_SRC_FILE, self._src_proto)
            atomic_write_bytes(directory / SPM_TGT_FILE, self._tgt_proto)
        atomic_write_json(directory / TOKENIZER_FILE, self.config)

    def same_as(self, other: SubwordTokenizer) -> bool:
        """Whether `other` segments and numbers every text as this one does (the same models and
        config)."""
        mine = (self.config, self._src_proto, self._tgt_proto)
        return mine == (other.config, other._src_proto, other._tgt_proto)

    @property
    def sentencepiece_models(self) -> tuple[bytes, bytes]:
        """The serialized source and target SentencePiece models (the same when `joint`)."""
        return self._src_proto, self._tgt_proto

    @property
    def lowercase(self) -> bool:
        """Whether texts are lowercased before they are encoded (the model then writes
        lowercase)."""
        return bool(self.config["lowercase"])

    @property
    def src_vocab_size(self) -> int:
        return len(self.src_vocabulary())

    @property
    def tgt_vocab_size(self) -> int:
        return len(self.tgt_vocabulary())

    def src_vocabulary(self) -> list[str]:
        """The source pieces in id order (each id's string)."""
        sp = self.src_sp
        return self.src_pieces or [sp.id_to_piece(i) for i in range(sp.get_piece_size())]

    def tgt_vocabulary(self) -> list[str]:
        """The target pieces in id order (each id's string)."""
        sp = self.tgt_sp
        return self.tgt_pieces or [sp.id_to_piece(i) for i in range(sp.get_piece_size())]

    def _normalize_case(self, texts: list[str]) -> list[str]:
        return [t.lower() for t in texts] if self.lowercase else texts

    def _encode_side(
        self,
        sp: spm.SentencePieceProcessor,
        index: dict[str, int] | None,
        texts: list[str],
        dropout: float,
    ) -> list[list[int]]:
        """SentencePiece's ids, or the vocabulary's ids of the pieces (unk for a piece it lacks),
        after a leading target-language token."""
        given = texts
        texts = self._normalize_case(texts)
        try:
            if index is None:
                return _encode(sp, texts, dropout)
            split = [split_language_token(text) for text in texts]  # (code, rest)
            pieces = _encode(sp, [rest for _, rest in split], dropout, out_type=str)
        except TypeError:  # SentencePiece's "List elements must be str or bytes"
            check_unicode(given)
            raise
        return [
            [index.get(p, self.unk_id) for p in code + seq]
            for (code, _), seq in zip(split, pieces, strict=True)
        ]

    def encode_src(self, texts: list[str], dropout: float = 0.0) -> list[list[int]]:
        """Sentences -> subword ids, without bos/eos (the batcher adds them); `dropout`: see
        `_encode`. A text with a lone surrogate is a ValueError naming it (`check_unicode`)."""
        index = None if self.src_pieces is None else self._src_index
        return self._encode_side(self.src_sp, index, texts, dropout)

    def encode_tgt(self, texts: list[str], dropout: float = 0.0) -> list[list[int]]:
        """Sentences -> subword ids, without bos/eos (the batcher adds them); `dropout`: see
        `_encode`."""
        index = None if self.tgt_pieces is None else self._tgt_index
        return self._encode_side(self.tgt_sp, index, texts, dropout)

    def _strip_specials(self, ids: list[int]) -> list[int]:
        """Cut `ids` at the first eos and drop pad and bos."""
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return [i for i in ids if i not in (self.pad_id, self.bos_id)]

    def _decode_side(
        self, sp: spm.SentencePieceProcessor, pieces: list[str] | None, ids: list[list[int]]
    ) -> list[str]:
        ids = [self._strip_specials(seq) for seq in ids]
        if pieces is None:
            return sp.decode(ids)
        return [marian_text(sp, [pieces[i] for i in seq if i != self.unk_id]) for seq in ids]

    @property
    def _vocabulary_decoder(self) -> spm.SentencePieceProcessor:
        """The model that writes the target text of vocabulary ids: with one vocabulary for both
        sides, the source model, as MarianTokenizer decodes a shared vocabulary."""
        shared = self.config["vocabulary"]["tgt"] is None
        return self.src_sp if shared else self.tgt_sp

    def decode_src(self, ids: list[list[int]]) -> list[str]:
        """A list of id sequences -> sentences; each sequence stops at its first eos, and pad and
        bos are skipped (with a vocabulary, unk too: see `marian_text`)."""
        ids = _id_sequences(ids, "decode_src")
        return self._decode_side(self.src_sp, self.src_pieces, ids)

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """A list of id sequences -> sentences; each sequence stops at its first eos, and pad and
        bos are skipped (with a vocabulary, unk too: see `marian_text`)."""
        ids = _id_sequences(ids, "decode_tgt")
        if self.tgt_pieces is None:
            return self._decode_side(self.tgt_sp, None, ids)
        return self._decode_side(self._vocabulary_decoder, self.tgt_pieces, ids)
