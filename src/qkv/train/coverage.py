"""How well a trained model's tokenizer covers new training data, before a run from that model
(`init_from`) trains on it: the share of the pieces that are unknown to the vocabulary, and the
pieces per character (a tokenizer that falls back to bytes on a script it lacks writes more pieces
than characters). A side with more unknown pieces than `max_unk_rate` is refused, naming the
characters the vocabulary lacks: the model could neither read nor write that text.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..data.tokenizer import SubwordTokenizer


@dataclass
class SideCoverage:
    unk_rate: float  # unknown pieces / pieces
    pieces_per_char: float
    missing: list[str]  # the characters the vocabulary lacks, most frequent first


def side_coverage(
    tokenizer: SubwordTokenizer, texts: list[str], ids: list[list[int]], source: bool
) -> SideCoverage:
    """The coverage of one side: `texts` and their ids (`source`: encoded as the source side)."""
    pieces = sum(len(x) for x in ids)
    unknown = sum(x.count(tokenizer.unk_id) for x in ids)
    chars = Counter(c for text in texts for c in text if not c.isspace())
    missing: list[str] = []
    if unknown:
        encode = tokenizer.encode_src if source else tokenizer.encode_tgt
        candidates = [c for c, _ in chars.most_common()]
        encoded = encode(candidates)
        missing = [c for c, x in zip(candidates, encoded, strict=True) if tokenizer.unk_id in x]
    n_chars = sum(len(text) for text in texts)
    return SideCoverage(unknown / max(pieces, 1), pieces / max(n_chars, 1), missing)


def check_coverage(
    tokenizer: SubwordTokenizer,
    texts: tuple[list[str], list[str]],
    ids: tuple[list[list[int]], list[list[int]]],
    max_unk_rate: float,
    name: str,
) -> str:
    """The line that says how the tokenizer of the model `name` covers the (source, target)
    `texts` with `ids`; a ValueError when a side has more unknown pieces than `max_unk_rate`."""
    sides = [side_coverage(tokenizer, texts[i], ids[i], source=i == 0) for i in (0, 1)]
    for side, coverage in zip(("source", "target"), sides, strict=True):
        if coverage.unk_rate > max_unk_rate:
            lacks = " ".join(repr(c) for c in coverage.missing[:8])
            raise ValueError(
                f"init_from {name}: its tokenizer cannot encode the training data: "
                f"{coverage.unk_rate:.1%} of the {side} pieces are unknown (max_unk_rate "
                f"{max_unk_rate:g}); its vocabulary lacks {lacks or 'some characters'}"
            )
    src, tgt = sides
    return (
        f"tokenizer of {name} on the training data: unknown pieces {src.unk_rate:.2%} (source), "
        f"{tgt.unk_rate:.2%} (target); pieces per character {src.pieces_per_char:.3f} (source), "
        f"{tgt.pieces_per_char:.3f} (target)"
    )


__all__ = ["SideCoverage", "check_coverage", "side_coverage"]
