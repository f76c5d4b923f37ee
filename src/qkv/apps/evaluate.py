"""Scoring translations the way the field does.

* `bleu` and `chrf`: sacreBLEU (Post, 2018) on detokenized text against raw references, with its
  signature, so that scores are comparable across papers. The BLEU tokenizer follows the target
  language (13a by default, `zh` for Chinese).
* `tokenized_bleu`: BLEU on lowercased, punctuation-normalized, Moses-tokenized text, as in
  multi-bleu.perl on the official Multi30k `*.lc.norm.tok.*` references. This is the number most
  Multi30k papers report; it is not comparable to sacreBLEU.
* `format_table`: the scores of several test sets as one table, a row each.

`CorpusScorer` takes a test set a sentence at a time, in the memory of one block of sentences,
and gives the scores `score` gives for the whole set at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.bleu import BLEUScore
from sacrebleu.metrics.chrf import CHRFScore
from sacremoses import MosesPunctNormalizer, MosesTokenizer


def _check_lengths(hyps: list[str], refs: list[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not refs:
        raise ValueError("no sentences to score")


def bleu(
    hyps: list[str],
    refs: list[str],
    lang: str | None = None,
    tokenize: str | None = None,
    lowercase: bool = False,
) -> tuple[BLEUScore, str]:
    """Corpus BLEU of detokenized hypotheses against one reference each -> (BLEUScore, signature).

    lang: target language; sacreBLEU picks its tokenizer from it (zh -> "zh", ja -> "ja-mecab",
        ko -> "ko-mecab", others -> "13a"). tokenize: a sacreBLEU tokenizer name, overriding lang.
    lowercase: case-insensitive (the signature says `case:lc`), for models that write lowercase.
    """
    _check_lengths(hyps, refs)
    metric = BLEU(tokenize=tokenize, trg_lang=lang or "", lowercase=lowercase)
    score = metric.corpus_score(hyps, [refs])
    return score, str(metric.get_signature())


def chrf(hyps: list[str], refs: list[str], lowercase: bool = False) -> tuple[CHRFScore, str]:
    """Corpus chrF2 (character n-gram F-score) against one reference each -> (CHRFScore, signature);
    `lowercase`: case-insensitive (`case:lc` in the signature)."""
    _check_lengths(hyps, refs)
    metric = CHRF(lowercase=lowercase)
    score = metric.corpus_score(hyps, [refs])
    return score, str(metric.get_signature())


@lru_cache
def _moses(lang: str) -> tuple[MosesPunctNormalizer, MosesTokenizer]:
    return MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)


def tokenize_lowercase(text: str, lang: str) -> str:
    """lowercase.perl | normalize-punctuation.perl -l lang | tokenizer.perl -l lang: the Multi30k
    recipe.

    Like tokenizer.perl, the output escapes XML special characters ("&apos;", "&quot;", "&amp;",
    ...), as the official tokenized references do.
    """
    normalizer, tokenizer = _moses(lang)
    return tokenizer.tokenize(normalizer.normalize(text.lower()), escape=True, return_str=True)


def tokenized_bleu(hyps: list[str], tok_refs: list[str], lang: str) -> tuple[BLEUScore, str]:
    """BLEU of tokenize_lowercase(hyps) against references lowercased and tokenized that way."""
    _check_lengths(hyps, tok_refs)
    metric = BLEU(tokenize="none", force=True)
    score = metric.corpus_score([tokenize_lowercase(h, lang) for h in hyps], [tok_refs])
    return score, str(metric.get_signature())


@dataclass
class Scores:
    """sacreBLEU BLEU and chrF; tokenized lowercase BLEU when tokenized references are given."""

    bleu: BLEUScore
    chrf: CHRFScore
    tok_bleu: BLEUScore | None
    signatures: dict[str, str]

    def format(self) -> str:
        """One line per metric, in sacreBLEU's 'NAME|signature = score ...' format."""
        lines = [
            self.bleu.format(signature=self.signatures["bleu"]),
            self.chrf.format(signature=self.signatures["chrf"]),
        ]
        if self.tok_bleu is not None:
            line = self.tok_bleu.format(signature=self.signatures["tok_bleu"])
            lines.append(f"{line}  [lowercased, Moses-normalized and -tokenized]")
        return "\n".join(lines)


def score(
    hyps: list[str],
    refs: list[str],
    lang: str,
    tok_refs: list[str] | None = None,
    lowercase: bool = False,
) -> Scores:
    """All the scores of detokenized hypotheses against raw references (and tokenized ones, if
    given); `lowercase`: BLEU and chrF case-insensitive, for a model that writes lowercase."""
    _check_lengths(hyps, refs)
    if tok_refs is not None:
        _check_lengths(hyps, tok_refs)
    scorer = CorpusScorer(lang, tok_refs is not None, lowercase)
    for i, (hyp, ref) in enumerate(zip(hyps, refs, strict=True)):
        scorer.add(hyp, ref, None if tok_refs is None else tok_refs[i])
    return scorer.scores()


SCORE_BLOCK = 1000  # CorpusScorer computes the statistics of this many sentences at a time


@dataclass
class CorpusScorer:
    """The scores of `score`, given a sentence at a time (`add`), in bounded memory.

    A sacreBLEU corpus score is a function of sums over the sentences: BLEU's n-gram matches and
    totals and the two lengths, chrF's character and word n-gram counts. `Metric.corpus_score`
    is `_aggregate_and_compute(_extract_corpus_statistics(hyps, refs))`, whose aggregate is the
    elementwise sum of the sentences' statistics. So the scorer keeps a running sum per metric,
    adds the statistics of each block of `block` sentences, and holds one block of strings, not
    the test set; the sums are integers, so the scores are exactly `corpus_score`'s on the whole
    set (a test compares them). Holding every hypothesis and reference instead (the simplest
    way) grows with the test set: ~200 bytes a pair, 0.2 GB for a million lines. The two
    methods are underscored but are sacreBLEU's own way to score from statistics (its
    significance tests call them) and are pinned with sacreBLEU's version in pyproject.toml.
    One difference: sacreBLEU's warning about hypotheses that look tokenized counts per block.
    """

    lang: str
    tokenized: bool = False  # also tokenized lowercase BLEU: `add` takes tok_ref
    lowercase: bool = False
    block: int = SCORE_BLOCK
    count: int = 0
    _metrics: dict[str, Any] = field(default_factory=dict)
    _sums: dict[str, list[Any]] = field(default_factory=dict)
    _held: list[tuple[str, str, str | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        lc = self.lowercase
        self._metrics["bleu"] = BLEU(trg_lang=self.lang or "", lowercase=lc)
        self._metrics["chrf"] = CHRF(lowercase=lc)
        if self.tokenized:
            self._metrics["tok_bleu"] = BLEU(tokenize="none", force=True)

    def add(self, hyp: str, ref: str, tok_ref: str | None = None) -> None:
        """One sentence: its hypothesis, its reference and (with `tokenized`) its lowercased
        Moses-tokenized reference."""
        if (tok_ref is not None) != self.tokenized:
            raise ValueError("a tokenized reference is given exactly when the scorer is tokenized")
        self._held.append((hyp, ref, tok_ref))
        self.count += 1
        if len(self._held) >= self.block:
            self._add_held()

    def _add_held(self) -> None:
        """Add the statistics of the sentences held to the sums, and let them go."""
        if not self._held:
            return
        hyps, refs, tok_refs = (list(column) for column in zip(*self._held, strict=True))
        for name, metric in self._metrics.items():
            if name == "tok_bleu":
                given = [tokenize_lowercase(h, self.lang) for h in hyps], tok_refs
            else:
                given = hyps, refs
            stats = metric._extract_corpus_statistics(given[0], [given[1]])
            if name in self._sums:
                stats.append(self._sums[name])
            self._sums[name] = [sum(column) for column in zip(*stats, strict=True)]
        self._held = []

    def scores(self) -> Scores:
        """The scores of every sentence added, with their signatures."""
        self._add_held()
        if not self.count:
            raise ValueError("no sentences to score")
        done = {n: m._aggregate_and_compute([self._sums[n]]) for n, m in self._metrics.items()}
        signatures = {n: str(m.get_signature()) for n, m in self._metrics.items()}
        return Scores(done["bleu"], done["chrf"], done.get("tok_bleu"), signatures)


def format_table(rows: list[tuple[str, int, Scores]]) -> str:
    """The scores of several test sets, (name, sentences, scores) each, as one table: a row per
    test set (tokenized BLEU where any has it), then the metrics' signatures, each once."""
    tok = any(scores.tok_bleu is not None for _, _, scores in rows)
    header = ["test set", "sentences", "BLEU", "chrF2"] + (["tok BLEU"] if tok else [])
    table = [header]
    for name, n, scores in rows:
        row = [name, str(n), f"{scores.bleu.score:.2f}", f"{scores.chrf.score:.2f}"]
        if tok:
            row.append("-" if scores.tok_bleu is None else f"{scores.tok_bleu.score:.2f}")
        table.append(row)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in table
    ]
    names = {"bleu": "BLEU", "chrf": "chrF2", "tok_bleu": "tok BLEU"}
    for key, name in names.items():
        signatures = dict.fromkeys(s.signatures[key] for _, _, s in rows if key in s.signatures)
        lines += [f"{name}: {signature}" for signature in signatures]
    if tok:
        lines[-1] += "  [lowercased, Moses-normalized and -tokenized]"
    return "\n".join(lines)
