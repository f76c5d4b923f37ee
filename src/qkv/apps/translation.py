"""What a translation takes and returns: a `Job` (sentences encoded once, with their terms and the
work they may take: `Translator.prepare`'s, what `Translator.decode` decodes), and a `Translation`
(the text, its score and tokens, the n-best list, and on request the attention, the word alignment
and every attention map), made from the hypotheses of a search by `translation_of`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from ..data.tokenizer import SubwordTokenizer
from ..decode.alignment import hard_alignment
from ..decode.constrained import Constraints, search_width
from ..decode.options import DecodeOptions
from ..decode.search import Hypothesis
from ..model import AttentionWeights


@dataclass
class Translation:
    """One translated sentence.

    text: the best hypothesis, detokenized.
    score: its log-prob with the length penalty (`qkv.decode.search.length_penalty`).
    tokens: its target ids (eos excluded).
    nbest: (text, score) of the n best hypotheses, best first.
    attention: on request, the best hypothesis's last-layer cross-attention averaged over heads,
        (T, S) with T = len(tokens) + 1 (the last row predicted eos) and S = source tokens + eos.
    source_tokens, target_tokens: with attention, alignment or attention_maps: the subword pieces
        the model read and wrote, as SentencePiece spells them ("▁" before a word), eos ("</s>")
        included: the columns and rows of `attention`.
    alignment: on request, hard word alignments from `attention`: (source word, target word)
        pairs, 0-based whitespace words (`qkv.decode.alignment`).
    attention_maps: on request, every layer's and head's attention of the best hypothesis:
        encoder (H, S, S), decoder (H, T, T), cross (H, T, S) per layer (`decode.search`).
    An empty input line is not decoded: its tokens and alignment are empty, its maps None.
    """

    text: str
    score: float
    tokens: list[int]
    nbest: list[tuple[str, float]]
    attention: Tensor | None = None
    source_tokens: list[str] | None = None
    target_tokens: list[str] | None = None
    alignment: list[tuple[int, int]] | None = None
    attention_maps: AttentionWeights | None = None


@dataclass(frozen=True)
class Extras:
    """What a translation carries on request besides its text and score."""

    attention: bool = False
    alignment: bool = False
    maps: bool = False

    @property
    def weights(self) -> bool:
        """Whether any of them needs the attention weights (and the tokens)."""
        return self.attention or self.alignment or self.maps

    def empty(self) -> Translation:
        """The Translation of an empty line, which is not decoded: no tokens, no alignment."""
        return Translation(
            "",
            0.0,
            [],
            [("", 0.0)],
            source_tokens=[] if self.weights else None,
            target_tokens=[] if self.weights else None,
            alignment=[] if self.alignment else None,
        )


@dataclass(frozen=True, eq=False)
class Job:
    """Sentences ready to decode (`Translator.prepare`): each text's source ids, encoded once and
    cut to leave room for eos within the translator's source limit; `cut`: text -> its whole
    length in subword tokens, where its ids are cut; `constraints`: each text's glossary terms
    as target-token sequences (None: no term, the plain search); `extras`: what each
    `Translation` carries besides its text."""

    texts: list[str]
    options: DecodeOptions
    ids: list[list[int]]
    constraints: list[Constraints] | None = None
    extras: Extras = Extras()
    cut: dict[int, int] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def widths(self) -> list[int]:
        """The hypotheses each sentence's search keeps: the beam, and for a sentence with terms
        the constrained search's width besides (`decode.constrained.search_width`)."""
        beam = self.options.beam
        terms = self.constraints or [[]] * len(self.ids)
        return [beam + (search_width(beam, c) if c else 0) for c in terms]

    @functools.cached_property
    def work(self) -> int:
        """The decode tokens it may take (`DecodeOptions.work` of its sentences and widths)."""
        return self.options.work(map(len, self.ids), self.widths)

    def rows(self, indices: Sequence[int], extras: Extras | None = None) -> Job:
        """The job of these sentences only, in this order (extras: theirs; None: this job's)."""
        cons = self.constraints
        return Job(
            [self.texts[i] for i in indices],
            self.options,
            [self.ids[i] for i in indices],
            None if cons is None else [cons[i] for i in indices],
            self.extras if extras is None else extras,
            {k: self.cut[i] for k, i in enumerate(indices) if i in self.cut},
        )

    @staticmethod
    def joined(jobs: Sequence[Job]) -> Job:
        """The sentences of jobs that share their options, one after another, as one job (with
        the extras any of them asks for; constraints where any has them)."""
        options = jobs[0].options
        if any(job.options != options for job in jobs):
            raise ValueError("jobs joined into one must share their decoding options")
        ids = [seq for job in jobs for seq in job.ids]
        constraints = None
        if any(job.constraints for job in jobs):
            constraints = [c for job in jobs for c in (job.constraints or [[]] * len(job.ids))]
        names = [f.name for f in dataclasses.fields(Extras)]
        extras = Extras(*(any(getattr(job.extras, name) for job in jobs) for name in names))
        cut, start = {}, 0
        for job in jobs:
            cut.update({start + i: n for i, n in job.cut.items()})
            start += len(job.ids)
        texts = [t for job in jobs for t in job.texts]
        return Job(texts, options, ids, constraints, extras, cut)


def translation_of(
    tokenizer: SubwordTokenizer,
    hyps: list[Hypothesis],
    src_ids: list[int],
    maps: AttentionWeights | None,
    extras: Extras,
) -> Translation:
    """The Translation of a sentence's hypotheses (best first) and the best one's maps (with
    `extras` asking for them), detokenized by `tokenizer`."""
    texts = tokenizer.decode_tgt([h.tokens for h in hyps])
    nbest = [(text, h.score) for text, h in zip(texts, hyps, strict=True)]
    best = hyps[0]
    result = Translation(texts[0], best.score, best.tokens, nbest)
    if maps is None:
        return result
    eos = tokenizer.eos_id
    result.source_tokens = tokenizer.src_sp.id_to_piece([*src_ids, eos])
    result.target_tokens = tokenizer.tgt_sp.id_to_piece([*best.tokens, eos])
    attention = maps.cross[-1].mean(dim=0)  # (T, S): the last layer, heads averaged
    if extras.attention:
        result.attention = attention
    if extras.alignment:  # eos rows and columns left out
        pieces = result.source_tokens[:-1], result.target_tokens[:-1]
        result.alignment = hard_alignment(attention[:-1, :-1], *pieces)
    if extras.maps:
        result.attention_maps = maps
    return result


__all__ = ["Extras", "Job", "Translation", "translation_of"]
