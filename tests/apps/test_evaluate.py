import gzip

import pytest

from qkv.apps.evaluate import Scores, bleu, chrf, score, tokenize_lowercase, tokenized_bleu
from shared_corpora import SHARED_DATA

DATA = SHARED_DATA
MULTI30K = DATA / "multi30k"


def test_identical_hypotheses_score_100():
    refs = ["A man in an orange hat staring at something.", "A Boston Terrier is running on lush grass."]
    bleu_score, signature = bleu(refs, refs)
    assert bleu_score.score == pytest.approx(100.0)
    assert "tok:13a" in signature and "nrefs:1" in signature
    chrf_score, signature = chrf(refs, refs)
    assert chrf_score.score == pytest.approx(100.0)
    assert "nc:6" in signature


def test_bleu_by_hand():
    # n-gram precisions 5/6, 3/5, 2/4, 1/3 and equal lengths (BP = 1): BLEU = (1/12)^(1/4).
    bleu_score, _ = bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert bleu_score.score == pytest.approx(100 * (1 / 12) ** 0.25, abs=1e-6)


def test_chinese_uses_the_zh_tokenizer():
    hyps, refs = ["我们今天去公园。"], ["我们今天去公园，天气很好。"]
    zh_score, signature = bleu(hyps, refs, lang="zh")
    assert "tok:zh" in signature and zh_score.score > 10
    assert bleu(hyps, refs)[0].score == 0  # 13a keeps each unspaced sentence as one token


def test_tokenize_lowercase_by_hand():
    assert tokenize_lowercase('A man\'s "red" hat & a dog.', "en") == (
        "a man &apos;s &quot; red &quot; hat &amp; a dog ."
    )
    assert tokenize_lowercase("Ein Mann mit einem Hut, der „etwas“ anstarrt.", "de") == (
        "ein mann mit einem hut , der &quot; etwas &quot; anstarrt ."
    )


def test_tokenized_bleu_and_scores():
    hyps = ["A man's hat.", "Two dogs play."]
    result = score(hyps, hyps, "en", tok_refs=["a man &apos;s hat .", "two dogs play ."])
    assert isinstance(result, Scores)
    assert [result.bleu.score, result.chrf.score, result.tok_bleu.score] == pytest.approx([100.0] * 3)
    assert "tok:none" in result.signatures["tok_bleu"]
    lines = result.format().splitlines()
    assert len(lines) == 3 and lines[0].startswith("BLEU|nrefs:1") and lines[1].startswith("chrF2|")
    assert score(hyps, hyps, "en").tok_bleu is None


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError):
        tokenized_bleu(["a"], [], "en")
    with pytest.raises(ValueError, match="no sentences to score"):
        score([], [], "en")


@pytest.mark.data
@pytest.mark.skipif(not MULTI30K.is_dir(), reason="Multi30k is not in ../shared/data")
@pytest.mark.parametrize("lang", ["de", "en", "fr", "cs"])
def test_reproduces_official_tokenized_references(lang):
    """Independent oracle: the official lc.norm.tok references were made with the Moses perl scripts."""
    with gzip.open(MULTI30K / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
        raw = f.read().splitlines()
    official = (MULTI30K / "tok" / f"test_2016_flickr.lc.norm.tok.{lang}").read_text("utf-8").splitlines()
    assert len(raw) == len(official) == 1000
    ours = [tokenize_lowercase(line, lang) for line in raw]
    match_rate = sum(a == b for a, b in zip(ours, official, strict=True)) / len(raw)
    assert match_rate >= 0.99
    assert tokenized_bleu(raw, official, lang)[0].score >= 99.0


def test_lowercase_scores_equal_scores_of_lowercased_text():
    hyps = ["a man rides a bike .", "two dogs play in the snow"]
    refs = ["A man rides a red bike.", "Two dogs are playing in the snow."]
    lowered = score(hyps, refs, "en", lowercase=True)
    by_hand = score(hyps, [r.lower() for r in refs], "en")
    assert lowered.bleu.score == pytest.approx(by_hand.bleu.score) and lowered.bleu.score > 0
    assert lowered.chrf.score == pytest.approx(by_hand.chrf.score)
    assert score(hyps, refs, "en").bleu.score < lowered.bleu.score
    assert "case:lc" in lowered.signatures["bleu"] and "case:lc" in lowered.signatures["chrf"]
