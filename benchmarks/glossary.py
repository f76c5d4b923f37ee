"""What a glossary does to a translation model: term use, BLEU with and without it, and its speed.

    python -m benchmarks.glossary --model runs/quality/multi30k-en-de-small-avg \
        --data-dir ../shared/data --out docs/results/glossary.json

Multi30k en→de, test_2016_flickr (--split val: the validation split, to choose settings). The
glossary is extracted from the evaluated split's reference side:
for each source word, the target word it goes with most often in the training data (Dice
coefficient over sentence pairs, at least --dice); a pair is a term when the source word is rare in
training (in at most --rare training sentences, where a model errs most) and its target word occurs
in the reference of a test sentence holding the source word. The model never sees the glossary.
Two ways to use it, each decoding the split with beam search (--beam, --alpha) without and
with the terms (lexically constrained beam search, as `qkv translate --glossary` runs it):

- one_glossary: the whole glossary for every sentence, as a user's terms file is used: a
  sentence's terms are every source term it holds, whether or not its reference uses that target;
- reference_terms: each sentence only the terms whose target its own reference uses (the
  terminology setup of Dinu et al., 2019).

Reported for each: the share of term occurrences whose target term appears in the output as a
whole word; cased sacreBLEU on the sentences with terms, on those without, and on all; and the time
to decode the sentences with terms in batches of 32, without and with their terms (same batches,
one thread, median of --repeat).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import re
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

import sacrebleu
import torch

from qkv.apps.glossary import Glossary
from qkv.apps.translator import Translator
from qkv.decode import constrained
from qkv.decode.options import DecodeOptions

WORD = re.compile(r"\w+")


def read(data: Path, split: str, lang: str) -> list[str]:
    with gzip.open(data / "multi30k" / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def best_targets(src: list[str], tgt: list[str]) -> tuple[dict[str, tuple[str, float]], Counter]:
    """For each source word (lower case), its target word of highest Dice coefficient over the
    sentence pairs, with that coefficient; and each source word's count of sentences."""
    df_s: Counter = Counter()
    df_t: Counter = Counter()
    co: defaultdict[str, Counter] = defaultdict(Counter)
    for s, t in zip(src, tgt, strict=True):
        ws, wt = set(WORD.findall(s.lower())), set(WORD.findall(t))
        df_s.update(ws)
        df_t.update(wt)
        for w in ws:
            co[w].update(wt)
    best = {}
    for w, partners in co.items():
        if not partners:
            continue
        dice = {t: 2 * n / (df_s[w] + df_t[t]) for t, n in partners.items()}
        t = max(sorted(dice), key=dice.get)  # ties: the first in sorted order
        best[w] = (t, dice[t])
    return best, df_s


def extract(
    train: tuple[list[str], list[str]], test: tuple[list[str], list[str]], dice: float, rare: int
) -> Glossary:
    """The glossary of the module docstring."""
    best, df = best_targets(*train)
    terms = {}
    for s, ref in zip(*test, strict=True):
        in_ref = set(WORD.findall(ref))
        for w in set(WORD.findall(s.lower())):
            t, d = best.get(w, ("", 0.0))
            if w.isalpha() and len(w) > 2 and d >= dice and df[w] <= rare and t in in_ref:
                terms[w] = t
    return Glossary(terms)


def used(term: str, text: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(term) + r"(?!\w)", text) is not None


def scores(outputs: list[str], refs: list[str], found: list[list[str]]) -> dict:
    """Term use and BLEU on the sentences with terms, without, and all."""
    occurrences = [(t, out) for out, terms in zip(outputs, found, strict=True) for t in terms]
    with_terms = [i for i, terms in enumerate(found) if terms]
    without = [i for i, terms in enumerate(found) if not terms]

    def bleu(rows: list[int]) -> float | None:
        if not rows:
            return None
        return round(
            sacrebleu.corpus_bleu([outputs[i] for i in rows], [[refs[i] for i in rows]]).score, 2
        )

    return {
        "term_use": round(100 * sum(used(t, out) for t, out in occurrences) / len(occurrences), 2),
        "bleu_with_terms": bleu(with_terms),
        "bleu_without_terms": bleu(without),
        "bleu_all": bleu(list(range(len(outputs)))),
    }


def decode(
    translator: Translator,
    texts: list[str],
    options: DecodeOptions,
    constraints: list[list[list[int]]] | None,
) -> tuple[list[str], float]:
    """The translations of `texts` in batches of 32 (sorted by length), each sentence with its
    constraints (None: plain beam search), and the seconds they took."""
    job = dataclasses.replace(translator.prepare(texts, options), constraints=constraints)
    order = sorted(range(len(texts)), key=lambda i: -len(job.ids[i]))
    out = [""] * len(texts)
    start = time.perf_counter()
    for k in range(0, len(order), 32):
        batch = order[k : k + 32]
        done = translator.decode(job.rows(batch), batch_tokens=1 << 30)  # one batch: these 32
        for i, t in zip(batch, done, strict=True):
            out[i] = t.text if t is not None else ""
    return out, time.perf_counter() - start


def per_sentence(glossary: Glossary, sources: list[str], refs: list[str]) -> list[list[str]]:
    """Each sentence's terms whose target its own reference uses (Dinu et al., 2019)."""
    return [
        [t for t in glossary.targets_in(s) if used(t, r)]
        for s, r in zip(sources, refs, strict=True)
    ]


def run(
    translator: Translator,
    glossary: Glossary,
    data: tuple[list[str], list[str]],
    found: list[list[str]],
    options: DecodeOptions,
    repeat: int,
) -> dict:
    """Decode every sentence of data (sources, references) without and with its target terms
    `found` (of `glossary`); score; time the sentences with terms (median of `repeat`)."""
    src, refs = data
    tokenizer = translator.tokenizer
    cons = [
        Glossary({k: t for k, t in glossary.terms_in(s) if t in f}).constraints([s], tokenizer)[0]
        for s, f in zip(src, found, strict=True)
    ]
    plain, _ = decode(translator, src, options, None)
    forced, _ = decode(translator, src, options, cons)
    rows = [i for i, f in enumerate(found) if f]
    texts = [src[i] for i in rows]
    timed = {
        name: statistics.median(decode(translator, texts, options, c)[1] for _ in range(repeat))
        for name, c in (("without", None), ("with", [cons[i] for i in rows]))
    }
    return {
        "sentences_with_terms": len(rows),
        "term_occurrences": sum(map(len, found)),
        "without_glossary": scores(plain, refs, found),
        "with_glossary": scores(forced, refs, found),
        "seconds_batch32": {
            **{k: round(v, 2) for k, v in timed.items()},
            "ratio": round(timed["with"] / timed["without"], 2),
        },
        "examples": [
            {"source": s, "terms": f, "without": a, "with": b, "reference": r}
            for s, f, a, b, r in zip(src, found, plain, forced, refs, strict=True)
            if f and a != b
        ][:6],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--dice", type=float, default=0.3)
    p.add_argument("--rare", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--split", default="test_2016_flickr", help="the split evaluated (val: to choose settings)"
    )
    p.add_argument(
        "--length-slack",
        type=int,
        default=constrained.LENGTH_SLACK,
        help="tokens a constrained translation may add past the plain one's and its "
        "terms' (a large value: no bound)",
    )
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    torch.set_num_threads(1)
    data = Path(args.data_dir)
    train = read(data, "train", "en"), read(data, "train", "de")
    src, refs = read(data, args.split, "en"), read(data, args.split, "de")
    constrained.LENGTH_SLACK = args.length_slack
    glossary = extract(train, (src, refs), args.dice, args.rare)
    translator = Translator.load(args.model)
    options = DecodeOptions(beam=args.beam, alpha=args.alpha)
    result = {
        "model": args.model,
        "beam": args.beam,
        "alpha": args.alpha,
        "dice": args.dice,
        "rare": args.rare,
        "split": args.split,
        "length_slack": args.length_slack,
        "terms": len(glossary.terms),
        "decoding_path": translator.decoding_path,
        "one_glossary": run(
            translator,
            glossary,
            (src, refs),
            [glossary.targets_in(s) for s in src],
            options,
            args.repeat,
        ),
        "reference_terms": run(
            translator,
            glossary,
            (src, refs),
            per_sentence(glossary, src, refs),
            options,
            args.repeat,
        ),
    }
    print(json.dumps(result, ensure_ascii=False, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
