"""Glossaries: reading and matching terms, and translations that use them.

Oracles: the terms themselves (a translation of a text holding a source term contains the
target term, as text and as tokens); the translator without a glossary (texts without terms
translate exactly as without one); the constrained search called directly on the same ids.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qkv.apps.glossary import Glossary
from qkv.apps.translator import Translator
from qkv.data.tokenizer import SubwordTokenizer
from qkv.decode.constrained import holds
from qkv.decode.options import DecodeOptions
from sentences import EN, ZH  # tests/sentences.py
from tiny_models import EndingTransformer, tiny_config


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory) -> Translator:
    tokenizer = SubwordTokenizer.train(EN, ZH, tmp_path_factory.mktemp("tok"), vocab_size=500)
    torch.manual_seed(0)
    model = EndingTransformer(tiny_config(src_vocab_size=tokenizer.src_vocab_size)).eval()
    return Translator(model, tokenizer)


def test_terms_match_whole_words_in_any_case_longest_first() -> None:
    g = Glossary.from_pairs([("cross", "Kreuz"), ("Red Cross", "Rotes Kreuz"), ("猫", "cat")])
    assert g.terms_in("The red cross, a Cross.") == [("red cross", "Rotes Kreuz"),
                                                     ("cross", "Kreuz")]
    assert g.terms_in("crosswalk and across") == []  # not whole words
    assert g.terms_in("The Red Cross.") == [("red cross", "Rotes Kreuz")]  # inside the longer
    assert g.terms_in("一只猫在睡觉。") == [("猫", "cat")]  # no spaces in Chinese
    tug = Glossary.from_pairs([("tug", "Tauziehen"), ("war", "Tauziehen")])
    assert tug.targets_in("A tug of war.") == ["Tauziehen"]  # asked for once


def test_a_bad_glossary_file_is_refused_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "terms.tsv"
    path.write_text("\ufeff# comment\n\ndog\tHund\ncat Katze\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"terms.tsv line 4: expected 'source term<TAB>target"):
        Glossary.read(path)
    path.write_text("dog\tHund\nDog\tKöter\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"entry 2: 'Dog' is already 'Hund', not 'Köter'"):
        Glossary.read(path)
    path.write_text("dog\t \n", encoding="utf-8")
    with pytest.raises(ValueError, match="a term must be non-empty text"):
        Glossary.read(path)
    path.write_bytes(b"dog\t\xff\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        Glossary.read(path)
    path.write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no terms"):
        Glossary.read(path)
    path.write_text("\ufeffdog\tHund\n# c\n\nred cross\tRotes Kreuz\n", encoding="utf-8")
    assert Glossary.read(path).terms == {"dog": "Hund", "red cross": "Rotes Kreuz"}
    with pytest.raises(ValueError, match="entry 1: expected"):
        Glossary.from_pairs(["dog"])  # type: ignore[list-item]


def test_each_translation_holds_the_target_terms_of_its_source(translator: Translator) -> None:
    g = Glossary.from_pairs([("man", "男人"), ("dogs", "狗"), ("park", "公园"), ("bench", "长椅")])
    texts = [*EN[:6], "no term here", "", "A man and two dogs in a park."]
    options = DecodeOptions(beam=5, nbest=2)
    got = translator.translate_detailed(texts, options, glossary=g)
    plain = translator.translate_detailed(texts, options)
    for text, t, p in zip(texts, got, plain, strict=True):
        wanted = [target for _, target in g.terms_in(text)]
        assert all(w in t.text for w in wanted), (text, t.text)
        if not wanted:  # untouched: the search of a sentence without terms is beam search's
            assert (t.text, t.tokens) == (p.text, p.tokens)
    assert sorted(w for _, w in g.terms_in(texts[-1])) == sorted(["男人", "狗", "公园"])
    constraints = translator.prepare(texts, options, g).constraints
    assert all(holds(t.tokens, c) for t, c in zip(got, constraints, strict=True))
    one_by_one = translator.translate_detailed(texts, options, glossary=g, batch_tokens=8)
    assert [(t.text, t.tokens) for t in one_by_one] == [(t.text, t.tokens) for t in got]
    in_workers = translator.translate(texts, options, glossary=g, batch_tokens=40, workers=2)
    translator.close()
    assert in_workers == [t.text for t in got]  # forked processes where the system forks


def test_a_glossary_needs_beam_search(translator: Translator) -> None:
    g = Glossary.from_pairs([("man", "男人")])
    for options in (DecodeOptions(beam=1), DecodeOptions(sampling=True)):
        with pytest.raises(ValueError, match="a glossary needs beam search"):
            translator.translate(EN[:1], options, glossary=g)


@pytest.mark.slow
def test_qkv_translate_glossary(model_dir: Path, tmp_path: Path) -> None:
    terms = tmp_path / "terms.tsv"
    terms.write_text("man\t男人\nbicycle\t自行车\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "qkv", "translate", "--model", str(model_dir), "--beam", "4",
           "--precision", "fp32", "--no-pack"]
    lines = f"{EN[0]}\n{EN[1]}\n"
    done = subprocess.run([*cmd, "--glossary", str(terms)], input=lines, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert "男人" in first and "自行车" in first
    plain = subprocess.run(cmd, input=lines, capture_output=True, text=True, timeout=120)
    assert plain.stdout.splitlines()[1] == second  # no term: as without the glossary
    terms.write_text("man 男人\n", encoding="utf-8")
    bad = subprocess.run([*cmd, "--glossary", str(terms)], input=lines, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0 and "line 1: expected 'source term<TAB>target term'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
