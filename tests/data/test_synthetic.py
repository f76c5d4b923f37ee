"""The synthetic digits -> words corpus: spelling checked against hand-written answers, sampling, splits."""

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


def test_splits_are_disjoint_and_sized():
    train, valid, test = synthetic_splits(seed=0, n_train=3000, n_valid=200, n_test=200, target="zh")
    assert (len(train), len(valid), len(test)) == (3000, 200, 200)
    sources = train.src + valid.src + test.src
    assert len(set(sources)) == len(sources)
    assert synthetic_splits(seed=0, n_train=3000, n_valid=200, n_test=200, target="zh")[2] == test


def test_splits_can_use_every_number():
    train, valid, test = synthetic_splits(seed=1, n_train=80, n_valid=10, n_test=10, max_value=99)
    numbers = {int(src.replace(" ", "")) for src in train.src + valid.src + test.src}
    assert numbers == set(range(100))


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
