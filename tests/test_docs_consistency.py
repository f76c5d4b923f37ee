"""Consistency checks: docs against their own sources, without recomputing anything.

docs/benchmarks.md's training-memory notes against the RSS samples they read (the CSVs count MiB).
docs/zh/concepts.md translates docs/concepts.md. These tests do not recompute anything; they check
that the two pages state the same things: the same tables row by row (the variant tables cell for
cell), the same mistakes with the same tests, and the same numbers in every reading and caption.
Word order differs between the languages, so a row or paragraph is compared by the multiset of its
numbers.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EN = ROOT / "docs" / "concepts.md"
ZH = ROOT / "docs" / "zh" / "concepts.md"
NUMBER = re.compile(r"(?<![\w.])[−-]?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?")
TEST_NAME = re.compile(r"`(test_\w+)`")


def numbers(text: str) -> Counter[str]:
    """The numbers of `text` (1,654 and 1654 alike; − and - alike), as a multiset."""
    return Counter(n.replace(",", "").replace("−", "-") for n in NUMBER.findall(text))


def tables(text: str) -> list[list[str]]:
    """Each markdown table of `text` as its lines."""
    out: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("|"):
            out[-1].append(line)
        elif out[-1]:
            out.append([])
    return [t for t in out if t]


def paragraphs(text: str, starts: tuple[str, ...]) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.startswith(starts)]


def table_drift(en: str, zh: str) -> list[str]:
    """Where the tables of the two pages differ: one line per table or row."""
    te, tz = tables(en), tables(zh)
    if len(te) != len(tz):
        return [f"{len(te)} tables in English, {len(tz)} in Chinese"]
    drift = []
    for k, (a, b) in enumerate(zip(te, tz, strict=True)):
        if len(a) != len(b):
            drift.append(f"table {k + 1}: {len(a)} lines in English, {len(b)} in Chinese")
            continue
        same_header = a[0] == b[0]  # a variant table: the rows are data, equal cell for cell
        for row_a, row_b in zip(a[2:], b[2:], strict=True):
            if (same_header and row_a != row_b) or numbers(row_a) != numbers(row_b):
                drift.append(f"table {k + 1}: {row_a[:70]!r} against {row_b[:70]!r}")
    return drift


def text_drift(en: str, zh: str) -> list[str]:
    """Where the mistakes, readings and captions of the two pages differ."""
    pairs = [
        (paragraphs(en, ("Reading:",)), paragraphs(zh, ("解读：",))),
        (
            [p for p in en.splitlines() if p.startswith("- **")],
            [p for p in zh.splitlines() if p.startswith("- **")],
        ),
        (
            paragraphs(en[en.index("## The pictures") :], ("**", "Each cell")),
            paragraphs(zh[zh.index("## 图示") :], ("**", "每个格子")),
        ),
    ]
    drift = []
    for en_parts, zh_parts in pairs:
        if len(en_parts) != len(zh_parts):
            drift.append(f"{len(en_parts)} parts in English, {len(zh_parts)} in Chinese")
            continue
        for a, b in zip(en_parts, zh_parts, strict=True):
            if numbers(a) != numbers(b) or TEST_NAME.findall(a) != TEST_NAME.findall(b):
                missing, extra = numbers(a) - numbers(b), numbers(b) - numbers(a)
                drift.append(f"{a[:60]!r}: Chinese lacks {dict(missing)}, adds {dict(extra)}")
    return drift


def test_consistency_zh_concepts_tables_agree_with_the_english_row_by_row() -> None:
    en, zh = EN.read_text(encoding="utf-8"), ZH.read_text(encoding="utf-8")
    assert table_drift(en, zh) == []


def test_consistency_zh_concepts_mistakes_readings_and_captions_carry_the_english_numbers() -> None:
    en, zh = EN.read_text(encoding="utf-8"), ZH.read_text(encoding="utf-8")
    assert text_drift(en, zh) == []


def test_consistency_checks_see_a_changed_number_a_dropped_row_and_a_dropped_caveat() -> None:
    en, zh = EN.read_text(encoding="utf-8"), ZH.read_text(encoding="utf-8")
    row = next(line for line in zh.splitlines() if line.startswith("| synthetic | dot |"))
    assert table_drift(en, zh.replace(row, row.replace("0.7903", "0.7904"))) != []
    assert table_drift(en, zh.replace(row + "\n", "")) != []
    reading = paragraphs(zh, ("解读：",))[-1]  # the classifier's, its tokenizer caveat cut off
    assert text_drift(en, zh.replace(reading, reading[: reading.index("这也是")])) != []


def test_consistency_training_memory_notes_read_the_csvs_in_mib() -> None:
    """Each peak the notes give, "N MiB (X GiB)", is the CSV's largest sample, X = N / 1024."""
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").replace("**", "")
    text = " ".join(page.split())
    results = ROOT / "docs" / "results"
    for name in ("tcmalloc-resumed", "bf16-1000-updates", "epyc-bf16-1000-updates"):
        with open(results / f"train-memory-{name}.csv", encoding="utf-8") as f:
            peak = max(float(row["rss_mib"]) for row in csv.DictReader(f))
        assert f"{peak:,.0f} MiB ({peak / 1024:.2f} GiB)" in text, name
    for mib, gib in re.findall(r"([\d,]+) MiB \(([\d.]+) GiB\)", text):
        assert f"{float(mib.replace(',', '')) / 1024:.2f}" == gib, (mib, gib)
