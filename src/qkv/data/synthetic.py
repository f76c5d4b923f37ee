"""A synthetic translation task made by code: numbers in digits -> the same numbers in words.

    source: "4 0 5 2"   ->   target (en): "four thousand fifty-two"
                             target (zh): "四千零五十二"

It needs no download and is learnable in minutes on a CPU, yet it has what makes translation more
than a lookup table: words that depend on context (the "1" of "1 5" becomes "fifteen"), words with
no source counterpart ("thousand", 万, 零), and outputs longer than their inputs.
Digits are separated by spaces so that even a tiny subword vocabulary sees one token per digit.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

from qkv.data.corpus import DataError, ParallelCorpus

MAX_NUMBER = 999_999_999  # both spellers are exact for 0..MAX_NUMBER

_ONES = (
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"),
    *(
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
    ),
    "nineteen",
)
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_ZH_DIGITS = "零一二三四五六七八九"


def _check_range(n: int) -> None:
    """Reject numbers the spellers do not cover."""
    if not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"numbers must be in 0..{MAX_NUMBER}, got {n}")


def _english_below_1000(n: int) -> str:
    """1..999 in words: "four hundred fifty-two" (American style, no "and")."""
    hundreds, rest = divmod(n, 100)
    words = [f"{_ONES[hundreds]} hundred"] if hundreds else []
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_TENS[tens] + (f"-{_ONES[ones]}" if ones else ""))
    elif rest:
        words.append(_ONES[rest])
    return " ".join(words)


def number_to_english(n: int) -> str:
    """Spell 0..999_999_999 in English words, e.g. 4052 -> "four thousand fifty-two"."""
    _check_range(n)
    if n == 0:
        return "zero"
    words = []
    for scale, name in ((1_000_000, " million"), (1_000, " thousand"), (1, "")):
        count, n = divmod(n, scale)
        if count:
            words.append(_english_below_1000(count) + name)
    return " ".join(words)


def _chinese_below_10000(n: int) -> str:
    """1..9999 in Chinese, one 零 per run of inner zeros: 1001 -> 一千零一, 1010 -> 一千零一十."""
    out = []
    zero_pending = False
    for digit, unit in zip(f"{n:04d}", ("千", "百", "十", ""), strict=True):
        if digit == "0":
            zero_pending = bool(out)
        else:
            out.append(("零" if zero_pending else "") + _ZH_DIGITS[int(digit)] + unit)
            zero_pending = False
    return "".join(out)


def number_to_chinese(n: int) -> str:
    """Spell 0..999_999_999 in Chinese numerals: 4052 -> "四千零五十二", 100010 -> "十万零一十".

    Digits are grouped by four (亿, 万, units). A 零 marks skipped places between groups too
    (10010 -> 一万零一十, 100000001 -> 一亿零一), and a leading 一十 is said 十
    (15 -> 十五, 150000 -> 十五万). 2 is always 二 (二千, 二万), the form used when reading
    digits aloud; speech often says 两 instead.
    """
    _check_range(n)
    if n == 0:
        return "零"
    out = []
    zero_pending = False
    for group, unit in ((n // 100_000_000, "亿"), (n // 10_000 % 10_000, "万"), (n % 10_000, "")):
        if group == 0:
            zero_pending = bool(out)
            continue
        if out and (zero_pending or group < 1000):
            out.append("零")
        out.append(_chinese_below_10000(group) + unit)
        zero_pending = False
    text = "".join(out)
    return text[1:] if text.startswith("一十") else text


SPELLERS = {"en": number_to_english, "zh": number_to_chinese}


def _sample_numbers(rng: random.Random, n: int, max_value: int, unique: bool) -> list[int]:
    """Draw n numbers in 0..max_value: a digit count uniformly at random, then a number that long.

    Uniform sampling would make nearly every number as long as max_value; this way short numbers are
    as common as long ones. With `unique`, exhausted digit counts drop out of the draw.
    """
    digit_counts = range(1, len(str(max_value)) + 1)
    buckets = [(10 ** (k - 1) if k > 1 else 0, min(10**k - 1, max_value)) for k in digit_counts]
    used: dict[int, set[int]] = {i: set() for i in range(len(buckets))}
    numbers = []
    while len(numbers) < n:
        i = rng.choice(list(used))
        low, high = buckets[i]
        number = rng.randint(low, high)
        if unique:
            if number in used[i]:
                continue
            used[i].add(number)
            if len(used[i]) == high - low + 1:
                del used[i]
        numbers.append(number)
    return numbers


def synthetic_corpus(
    n_pairs: int, seed: int, target: str = "en", max_value: int = 999_999, unique: bool = False
) -> ParallelCorpus:
    """`n_pairs` (spaced digits, words) pairs, the same for the same arguments.

    `target` is "en" or "zh"; numbers lie in 0..max_value; with `unique` no number appears twice.
    """
    if target not in SPELLERS:
        raise DataError(f"unknown synthetic target {target!r}; choose from: {', '.join(SPELLERS)}")
    if not 0 <= max_value <= MAX_NUMBER:
        raise DataError(f"max_value must be in 0..{MAX_NUMBER}, got {max_value}")
    if unique and n_pairs > max_value + 1:
        raise DataError(f"cannot draw {n_pairs} distinct numbers from 0..{max_value}")
    numbers = _sample_numbers(random.Random(seed), n_pairs, max_value, unique)
    spell = SPELLERS[target]
    return ParallelCorpus([" ".join(str(n)) for n in numbers], [spell(n) for n in numbers])


# digit counts with at most this many numbers (1 and 2 digits) are not held out: training sees each
# of their numbers many times, and the test split holds every one of them
SMALL_DIGIT_COUNT = 100
# the share of the numbers of a larger digit count that is held out (never trained on)
HELD_OUT_SHARE = 4  # one in 4


def digit_buckets(max_value: int) -> list[tuple[int, int]]:
    """(lowest, highest) number of each digit count 1..len(str(max_value)) within 0..max_value."""
    counts = range(1, len(str(max_value)) + 1)
    return [(10 ** (k - 1) if k > 1 else 0, min(10**k - 1, max_value)) for k in counts]


def _held_out(seed: int, n: int) -> bool:
    """Whether number n (of a large digit count) is reserved for validation and test: a fixed
    quarter of the numbers, chosen by a hash of (seed, n), so that the split of the numbers does
    not depend on how many pairs are drawn."""
    return zlib.crc32(f"{seed}:{n}".encode()) % HELD_OUT_SHARE == 0


def _draw_split(
    rng: random.Random,
    n: int,
    buckets: list[tuple[int, int]],
    accept: Callable[[int, int], bool],
    taken: set[int] | None,
) -> list[int]:
    """n numbers: a digit count uniformly at random, then a number of it that `accept(bucket, n)`
    allows; with `taken`, numbers are unique (and added to it) and exhausted digit counts drop
    out of the draw."""
    numbers: list[int] = []
    live = list(range(len(buckets)))
    while len(numbers) < n and live:
        i = rng.choice(live)
        low, high = buckets[i]
        for _ in range(100 + 20 * (high - low)):  # enough tries to find any allowed number left
            number = rng.randint(low, high)
            if accept(i, number) and (taken is None or number not in taken):
                break
        else:  # this digit count has no allowed number left: it drops out
            live.remove(i)
            continue
        if taken is not None:
            taken.add(number)
        numbers.append(number)
    return numbers


def synthetic_splits(
    seed: int, n_train: int, n_valid: int, n_test: int, target: str = "en", max_value: int = 999_999
) -> tuple[ParallelCorpus, ParallelCorpus, ParallelCorpus]:
    """(train, valid, test) synthetic corpora in which every digit count gets its share.

    Each pair's digit count is drawn uniformly, so 1- and 2-digit numbers (only 100 of them) are as
    common in training as 6-digit ones: their numbers repeat. Numbers of larger digit counts are
    held out: a fixed quarter of them (by a hash of the seed) never appears in training, and
    validation and test draw from it, without repeats and disjoint from each other. The small
    digit counts cannot be held out (training needs them all), so the test split holds every one
    of their numbers, after `n_test` held-out numbers of the larger digit counts; validation draws
    them like training does.

    Each split depends only on the arguments before it: the training pairs are the same for any
    n_valid and n_test, the validation pairs for any n_test.
    """
    spell = SPELLERS.get(target)
    if spell is None:
        raise DataError(f"unknown synthetic target {target!r}; choose from: {', '.join(SPELLERS)}")
    if not 0 <= max_value <= MAX_NUMBER:
        raise DataError(f"max_value must be in 0..{MAX_NUMBER}, got {max_value}")
    buckets = digit_buckets(max_value)
    small = [high - low + 1 <= SMALL_DIGIT_COUNT for low, high in buckets]
    large = [b for b, s in zip(buckets, small, strict=True) if not s]

    def trainable(i: int, n: int) -> bool:
        return small[i] or not _held_out(seed, n)

    def held(i: int, n: int) -> bool:
        return not small[i] and _held_out(seed, n)

    train = _draw_split(random.Random(seed), n_train, buckets, trainable, None)
    taken: set[int] = set()
    valid = _draw_split(
        random.Random(f"{seed}:valid"), n_valid, buckets, lambda i, n: small[i] or held(i, n), None
    )
    taken.update(n for n in valid if not small[len(str(n)) - 1])
    test = _draw_split(
        random.Random(f"{seed}:test"), n_test, large, lambda i, n: _held_out(seed, n), taken
    )
    if n_test:
        for (low, high), is_small in zip(buckets, small, strict=True):
            test += range(low, high + 1) if is_small else []

    def corpus(numbers: list[int]) -> ParallelCorpus:
        return ParallelCorpus([" ".join(str(n)) for n in numbers], [spell(n) for n in numbers])

    return corpus(train), corpus(valid), corpus(test)
