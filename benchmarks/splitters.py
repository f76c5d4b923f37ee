"""Which sentence splitter finds the boundaries of paragraphs made of consecutive test sentences:
pysbd and sentencex on Multi30k (en, de) and Tatoeba (en, zh) test sentences.

    pip install pysbd sentencex
    python -m benchmarks.splitters --data-dir ../shared/data

Each paragraph joins 2-6 consecutive test sentences (with a space; Chinese without). A paragraph
counts when the splitter gives back exactly its sentences; "splittable" counts the paragraphs whose
sentences all end with a sentence mark (no splitter can find the others' boundaries). Tatoeba
"sentences" sometimes hold two ("Don't be silly. I can't do it."), which a splitter rightly cuts.
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import time
from pathlib import Path

import pysbd
import sentencex

SETS = {
    "multi30k en": ("en", "multi30k/test_2016_flickr.en.gz"),
    "multi30k de": ("de", "multi30k/test_2016_flickr.de.gz"),
    "tatoeba en": ("en", "tatoeba-zh-en/test.en.gz"),
    "tatoeba zh": ("zh", "tatoeba-zh-en/test.zh.gz"),
}
ENDS = re.compile(r"[.!?。！？…\"'”»)]$")


def paragraphs(sentences: list[str], n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(2, 6)
        i = rng.randrange(len(sentences) - k)
        out.append(sentences[i : i + k])
    return out


def splitters(lang: str) -> dict:
    seg = pysbd.Segmenter(language=lang, clean=False, char_span=False)
    return {
        "pysbd": lambda t: [s.strip() for s in seg.segment(t) if s.strip()],
        "sentencex": lambda t: [s.strip() for s in sentencex.segment(lang, t) if s.strip()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--paragraphs", type=int, default=300)
    args = parser.parse_args()
    print("| set | splittable | pysbd exact | sentencex exact | pysbd s | sentencex s |")
    print("|---|--:|--:|--:|--:|--:|")
    for name, (lang, path) in SETS.items():
        with gzip.open(Path(args.data_dir) / path, "rt", encoding="utf-8") as f:
            sentences = [line.strip() for line in f if line.strip()]
        paras = paragraphs(sentences, args.paragraphs)
        joiner = "" if lang == "zh" else " "
        splittable = sum(all(ENDS.search(s) for s in p[:-1]) for p in paras)
        row = [name, str(splittable)]
        times = []
        for split in splitters(lang).values():
            start = time.perf_counter()
            exact = sum(split(joiner.join(p)) == p for p in paras)
            times.append(f"{time.perf_counter() - start:.2f}")
            row.append(str(exact))
        print("| " + " | ".join(row + times) + " |")


if __name__ == "__main__":
    main()
