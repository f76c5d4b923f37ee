"""benchmarks/heads.py and benchmarks/glossary.py: their measurements against hand computations
(word grouping of subword pieces, entropy, offset shares, Dice links, term use and glossary
extraction on a handful of sentence pairs)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def scripts(monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.syspath_prepend(str(ROOT))  # the benchmarks package
    from benchmarks import glossary, heads

    return heads, glossary


def test_pieces_group_into_words_and_maps_into_word_maps(scripts: tuple) -> None:
    heads, _ = scripts
    pieces = ["\u2581Ein", "\u2581Hund", "e", "\u2581läuft", "."]
    assert heads.words_of(pieces) == [0, 1, 1, 2, 2]
    assert heads.word_texts(pieces) == ["Ein", "Hunde", "läuft"]
    a = np.array([[0.5, 0.5], [0.2, 0.8], [0.0, 1.0]])  # 3 target pieces x 2 source pieces
    words = heads.word_level(a, rows=[0, 1, 1], cols=[0, 0])
    assert words == pytest.approx(np.array([[1.0], [1.0]]))
    words = heads.word_level(a, rows=[0, 1, 1], cols=[0, 1])
    assert words == pytest.approx(np.array([[0.5, 0.5], [0.1, 0.9]]))


def test_entropy_and_offset_shares(scripts: tuple) -> None:
    heads, _ = scripts
    assert heads.entropy(np.full((3, 4), 0.25)) == pytest.approx(math.log(4))
    assert heads.entropy(np.eye(3)) == pytest.approx(0.0, abs=1e-9)
    previous = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=float)  # row i looks at i - 1
    shares = heads.offset_shares(previous, (-1, 0, 1))
    assert shares == pytest.approx({"offset-1": 1.0, "offset+0": 1 / 3, "offset+1": 0.0})


def test_dice_links_terms_and_term_use(scripts: tuple) -> None:
    heads, glossary = scripts
    src = ["a dog runs", "a dog sleeps", "a cat sleeps", "the cat runs"]
    tgt = ["ein Hund läuft", "ein Hund schläft", "eine Katze schläft", "die Katze läuft"]
    best, df = glossary.best_targets(src, tgt)
    assert best["dog"] == ("Hund", 1.0) and best["cat"] == ("Katze", 1.0) and df["a"] == 3
    assert heads.links("A dog sleeps", ["Ein", "Hund", "schläft"], best) == {1: "dog", 2: "sleeps"}
    g = glossary.extract((src, tgt), (["the dog"], ["der Hund"]), dice=0.5, rare=2)
    assert g.terms == {"dog": "Hund"}  # "the" is rare but its best partner is not in the reference
    assert glossary.used("Hund", "Der Hund.") and not glossary.used("Hund", "Die Hunde.")
    refs = ["der Hund läuft über die Wiese", "die Katze schläft auf dem Dach"]
    outputs = ["der Hund läuft über die Wiese", "eine Katze liegt auf einem Dach"]
    scores = glossary.scores(outputs, refs, [["Hund"], ["Kater"]])
    assert scores["term_use"] == 50.0 and scores["bleu_with_terms"] < 100.0


def test_figure_data_and_summary_read_the_largest_offset_and_the_positional_heads(
    scripts: tuple,
) -> None:
    heads, _ = scripts
    one = np.ones((1, 2))
    stats = {
        "encoder": {
            "offset-1": np.array([[0.5, 0.1]]),
            "offset+0": np.array([[0.2, 0.3]]),
            "offset+1": np.array([[0.1, 0.2]]),
            "entropy": np.array([[0.814, 2.0]]),
        },
        "decoder": {
            "offset-1": np.array([[0.4, 0.1]]),
            "offset+0": np.array([[0.3, 0.6]]),
            "entropy": one,
        },
        "cross": {"alignment": np.array([[0.7, 0.9]]), "entropy": one},
    }
    data = heads.figure_data(stats, "t")
    assert data["encoder"] == {"share": [[0.5, 0.3]], "offset": [[-1, 0]], "entropy": [[0.81, 2.0]]}
    assert data["decoder"]["offset"] == [[-1, 0]] and data["cross"]["alignment"] == [[0.7, 0.9]]
    s = heads.summary(data)
    assert s["positional"] == {(1, 1): (0.5, -1)}  # 0.3 < POSITIONAL: not positional
    assert s["sharp_others"] == {} and s["spread_entropy"] == (2.0, 2.0)
    assert list(s["best_alignment"]) == [(1, 2), (1, 1)]
    assert s["decoder_max"] == {-1: 0.4, 0: 0.6}
