"""The synthetic digits -> words corpus: spelling checked against hand-written answers, sampling, splits."""

from collections import Counter

import pytest

from qkv.data.corpus import DataError
from qkv.data.synthetic import (
    MAX_NUMBER,
    number_to_chinese,
    number_to_english,
    synthetic_corpus,
    synthetic_splits,
)

SPELLINGS = [
    # (number, English, Chinese), written by hand
    (0, "zero", "零"),
    (7, "seven", "七"),
    (10, "ten", "十"),
    (11, "eleven", "十一"),
    (19, "nineteen", "十九"),
    (20, "twenty", "二十"),
    (21, "twenty-one", "二十一"),
    (99, "ninety-nine", "九十九"),
    (100, "one hundred", "一百"),
    (101, "one hundred one", "一百零一"),
    (110, "one hundred ten", "一百一十"),
    (115, "one hundred fifteen", "一百一十五"),
    (1000, "one thousand", "一千"),
    (1001, "one thousand one", "一千零一"),
    (1010, "one thousand ten", "一千零一十"),
    (1100, "one thousand one hundred", "一千一百"),
    (4052, "four thousand fifty-two", "四千零五十二"),
    (10000, "ten thousand", "一万"),
    (10010, "ten thousand ten", "一万零一十"),
    (10100, "ten thousand one hundred", "一万零一百"),
    (11000, "eleven thousand", "一万一千"),
    (20000, "twenty thousand", "二万"),
    (100000, "one hundred thousand", "十万"),
    (100010, "one hundred thousand ten", "十万零一十"),
    (123456, "one hundred twenty-three thousand four hundred fifty-six", "十二万三千四百五十六"),
    (150000, "one hundred fifty thousand", "十五万"),
    (1000000, "one million", "一百万"),
    (1000100, "one million one hundred", "一百万零一百"),
    (1010000, "one million ten thousand", "一百零一万"),
    (10000000, "ten million", "一千万"),
    (12345, "twelve thousand three hundred forty-five", "一万二千三百四十五"),
    (
        12345678,
        "twelve million three hundred forty-five thousand six hundred seventy-eight",
        "一千二百三十四万五千六百七十八",
    ),
    (100000000, "one hundred million", "一亿"),
    (100000001, "one hundred million one", "一亿零一"),
    (100001000, "one hundred million one thousand", "一亿零一千"),
    (101000000, "one hundred one million", "一亿零一百万"),
    (110000000, "one hundred ten million", "一亿一千万"),
    (200020002, "two hundred million twenty thousand two", "二亿零二万零二"),
    (
        MAX_NUMBER,
        "nine hundred ninety-nine million nine hundred ninety-nine thousand nine hundred ninety-nine",
        "九亿九千九百九十九万九千九百九十九",
    ),
]


@pytest.mark.parametrize(("n", "english", "chinese"), SPELLINGS)
def test_spelling(n, english, chinese):
    assert number_to_english(n) == english
    assert number_to_chinese(n) == chinese


@pytest.mark.parametrize("spell", [number_to_english, number_to_chinese])
@pytest.mark.parametrize("n", [-1, MAX_NUMBER + 1])
def test_spelling_rejects_numbers_out_of_range(spell, n):
    with pytest.raises(ValueError, match=f"numbers must be in 0..{MAX_NUMBER}, got {n}"):
        spell(n)


@pytest.mark.parametrize(("target", "spell"), [("en", number_to_english), ("zh", number_to_chinese)])
def test_corpus_pairs_spaced_digits_with_words(target, spell):
    corpus = synthetic_corpus(500, seed=0, target=target, max_value=99_999)
    for src, tgt in zip(corpus.src, corpus.tgt, strict=True):
        digits = src.split(" ")
        assert all(len(d) == 1 and d.isdigit() for d in digits)
        n = int("".join(digits))
        assert n <= 99_999
        assert tgt == spell(n)
    lengths = {len(src.split()) for src in corpus.src}
    assert lengths == {1, 2, 3, 4, 5}, "short numbers must be as common as long ones"


def test_corpus_is_determined_by_the_seed():
    assert synthetic_corpus(200, seed=3) == synthetic_corpus(200, seed=3)
    assert synthetic_corpus(200, seed=3) != synthetic_corpus(200, seed=4)


def _digit_counts(corpus):
    return Counter(len(src.replace(" ", "")) for src in corpus.src)


def test_held_out_numbers_of_three_or_more_digits_are_never_trained_on_and_splits_are_sized():
    train, valid, test = synthetic_splits(seed=0, n_train=3000, n_valid=200, n_test=200, target="zh")
    assert (len(train), len(valid), len(test)) == (3000, 200, 200 + 100)  # + every 1-2 digit number
    long = lambda corpus: [s for s in corpus.src if len(s.replace(" ", "")) > 2]  # noqa: E731
    assert not set(long(valid)) & set(train.src) and not set(long(test)) & set(train.src)
    assert not set(long(valid)) & set(long(test))
    assert len(set(long(test))) == len(long(test))
    assert synthetic_splits(seed=0, n_train=3000, n_valid=200, n_test=200, target="zh")[2] == test
    # the training pairs do not depend on the sizes of the held-out splits
    assert synthetic_splits(seed=0, n_train=3000, n_valid=0, n_test=0, target="zh")[0] == train


def test_every_digit_count_gets_its_share_and_the_test_split_covers_all_short_numbers():
    """Every digit count gets its share of training, and the held-out set covers the 100
    one- and two-digit numbers (unique draws alone would use them all up at once)."""
    train, valid, test = synthetic_splits(seed=1234, n_train=20000, n_valid=200, n_test=500)
    counts = _digit_counts(train)
    assert sorted(counts) == [1, 2, 3, 4, 5, 6]
    assert all(abs(c - 20000 / 6) < 400 for c in counts.values()), counts
    assert sorted(_digit_counts(valid)) == [1, 2, 3, 4, 5, 6]
    test_numbers = {int(s.replace(" ", "")) for s in test.src}
    assert set(range(100)) <= test_numbers  # every 1- and 2-digit number is evaluated
    assert all(_digit_counts(test)[k] >= 100 for k in (3, 4, 5, 6))


def test_splits_of_small_ranges_use_every_number():
    train, valid, test = synthetic_splits(seed=1, n_train=80, n_valid=10, n_test=10, max_value=99)
    assert {int(src.replace(" ", "")) for src in test.src} == set(range(100))
    assert len(train) == 80 and len(valid) == 10


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": "fr"}, "unknown synthetic target 'fr'; choose from: en, zh"),
        ({"max_value": MAX_NUMBER + 1}, f"max_value must be in 0..{MAX_NUMBER}, got {MAX_NUMBER + 1}"),
        ({"max_value": 9, "unique": True}, "cannot draw 20 distinct numbers from 0..9"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(DataError) as error:
        synthetic_corpus(20, seed=0, **kwargs)
    assert str(error.value) == message
