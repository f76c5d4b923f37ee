import json
import random
from collections.abc import Sequence

import pytest

from qkv.data.tokenizer import SubwordTokenizer, auto_character_coverage, seed_sampling
from qkv.modeldir import CheckpointError

EN_WORDS = "a man woman dog runs over green grass in the park child plays with red blue ball"
DE_WORDS = "ein mann frau hund läuft über grünes gras im park kind spielt mit rotem blauen ball"
# Frequent to rare (Zipf-like sampling below), so that coverage 0.9995 leaves some characters out.
ZH_CHARS = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产"
    "种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从"
    "业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又"
    "龘龖麤"
)


def sentences(words: Sequence[str], n: int, seed: int, sep: str = " ") -> list[str]:
    """`n` random sentences over `words`, the first ones being the most frequent."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(words))]
    return [sep.join(rng.choices(words, weights, k=rng.randint(3, 15))) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    return sentences(EN_WORDS.split(), 300, seed=0), sentences(DE_WORDS.split(), 300, seed=1)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
@pytest.mark.parametrize("joint", [True, False])
def test_round_trip_joint_and_separate(tmp_path, corpus, model_type, joint):
    src, tgt = corpus
    tok = SubwordTokenizer.train(src, tgt, tmp_path, vocab_size=100, model_type=model_type, joint=joint)
    assert tok.decode_src(tok.encode_src(src)) == src
    assert tok.decode_tgt(tok.encode_tgt(tgt)) == tgt
    files = {p.name for p in tmp_path.iterdir()}
    assert files == ({"spm.model"} if joint else {"spm.src.model", "spm.tgt.model"}) | {"tokenizer.json"}
    if joint:
        assert tok.src_vocab_size == tok.tgt_vocab_size
    else:  # each side's model only knows its own words
        assert "▁läuft" not in {tok.src_sp.id_to_piece(i) for i in range(tok.src_vocab_size)}


def test_special_ids_and_no_bos_eos_added(tmp_path, corpus):
    tok = SubwordTokenizer.train(*corpus, tmp_path, vocab_size=100)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert [tok.src_sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    for ids in tok.encode_tgt(corpus[1][:20]):
        assert ids and not {0, 2, 3} & set(ids)


def test_decode_stops_at_eos_and_skips_pad_and_bos(tmp_path, corpus):
    tok = SubwordTokenizer.train(*corpus, tmp_path, vocab_size=100)
    ids = tok.encode_tgt(["ein mann", "im park"])
    padded = [[tok.bos_id, *ids[0], tok.eos_id, *ids[1]], [tok.bos_id, *ids[1], tok.eos_id, tok.pad_id]]
    assert tok.decode_tgt(padded) == ["ein mann", "im park"]


def test_decode_refuses_a_flat_list_of_ids_in_one_line(tmp_path, corpus):
    """decode_* take a list of sequences; a flat list is one sequence's ids, not a batch."""
    tok = SubwordTokenizer.train(*corpus, tmp_path, vocab_size=100)
    ids = tok.encode_tgt(["ein mann"])[0]
    assert tok.decode_tgt([ids]) == tok.decode_tgt((tuple(ids),)) == ["ein mann"]
    for decode in (tok.decode_src, tok.decode_tgt):
        with pytest.raises(TypeError, match=r"list of id sequences .*got a list of int; for one sequence, pass \[ids\]"):
            decode(ids)
        with pytest.raises(TypeError, match="list of id sequences, got int"):
            decode(5)


def test_a_text_with_a_lone_surrogate_is_named_in_one_line(tmp_path, corpus):
    """A lone surrogate ("\\ud800", or "\\udcff" from bytes decoded with surrogateescape) is no Unicode
    text: SentencePiece's own error ("List elements must be str or bytes") would not say which."""
    tok = SubwordTokenizer.train(*corpus, tmp_path, vocab_size=100)
    for encode in (tok.encode_src, tok.encode_tgt):
        with pytest.raises(ValueError, match=r"texts\[1\] holds a lone surrogate \(U\+D800 at character 4\)"):
            encode(["ein mann", "4 0 \ud800"])
    with pytest.raises(ValueError, match=r"texts\[0\] holds a lone surrogate \(U\+DCFF at character 0\)"):
        tok.encode_src(["\udcff im park"], dropout=0.1)


def test_chinese_round_trip_with_auto_coverage(tmp_path):
    zh = [*sentences(ZH_CHARS, 400, seed=2, sep=""), "我们今天去公园，天气很好。"]
    en = sentences(EN_WORDS.split(), 400, seed=3)
    assert auto_character_coverage(zh) == 0.9995 and auto_character_coverage(en) == 1.0
    tok = SubwordTokenizer.train(en, zh, tmp_path, vocab_size=500, joint=False)
    assert tok.decode_tgt(tok.encode_tgt(zh)) == zh
    unseen = ["他说：「鑫森淼焱垚」很难写。"]  # characters absent from training fall back to bytes, not <unk>
    assert tok.unk_id not in tok.encode_tgt(unseen)[0]
    assert tok.decode_tgt(tok.encode_tgt(unseen)) == unseen
    assert tok.decode_src(tok.encode_src(en)) == en


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_is_deterministic(tmp_path, corpus, model_type):
    a = SubwordTokenizer.train(*corpus, tmp_path / "a", vocab_size=100, model_type=model_type)
    b = SubwordTokenizer.train(*corpus, tmp_path / "b", vocab_size=100, model_type=model_type)
    assert (tmp_path / "a" / "spm.model").read_bytes() == (tmp_path / "b" / "spm.model").read_bytes()
    assert a.encode_src(corpus[0]) == b.encode_src(corpus[0])


@pytest.mark.parametrize("joint", [True, False])
def test_load_equals_original(tmp_path, corpus, joint):
    src, tgt = corpus
    tok = SubwordTokenizer.train(src, tgt, tmp_path / "trained", vocab_size=100, joint=joint)
    tok.save(tmp_path / "copy")
    for directory in ("trained", "copy"):
        loaded = SubwordTokenizer.load(tmp_path / directory)
        assert loaded.config == {"joint": joint, "model_type": "unigram", "vocab_size": 100, "lowercase": False}
        assert (loaded.src_vocab_size, loaded.tgt_vocab_size) == (tok.src_vocab_size, tok.tgt_vocab_size)
        assert loaded.encode_src(src) == tok.encode_src(src)
        assert loaded.encode_tgt(tgt) == tok.encode_tgt(tgt)


def test_lowercase_reads_any_case_and_equals_a_tokenizer_of_lowercased_text(tmp_path, corpus):
    src, tgt = corpus  # lowercase words
    cased_src, cased_tgt = [s.title() for s in src], [t.upper() for t in tgt]
    tok = SubwordTokenizer.train(cased_src, cased_tgt, tmp_path / "lc", vocab_size=100, lowercase=True)
    by_hand = SubwordTokenizer.train(src, tgt, tmp_path / "plain", vocab_size=100)  # the oracle: lowered beforehand
    assert tok.encode_src(cased_src) == tok.encode_src(src) == by_hand.encode_src(src)
    assert tok.encode_tgt(cased_tgt) == by_hand.encode_tgt(tgt)
    assert tok.decode_tgt(tok.encode_tgt(cased_tgt)) == tgt
    loaded = SubwordTokenizer.load(tmp_path / "lc")
    assert loaded.lowercase and not by_hand.lowercase
    assert loaded.encode_src(["A MAN"]) == by_hand.encode_src(["a man"])


def test_an_incomplete_tokenizer_directory_is_a_clear_error(tmp_path, corpus):
    SubwordTokenizer.train(*corpus, tmp_path, vocab_size=100)
    config = tmp_path / "tokenizer.json"
    config.write_text(json.dumps({"joint": True, "model_type": "unigram", "vocab_size": 100}))
    with pytest.raises(CheckpointError, match="lowercase"):
        SubwordTokenizer.load(tmp_path)
    config.unlink()
    with pytest.raises(CheckpointError, match="missing file"):
        SubwordTokenizer.load(tmp_path)


def test_rejects_unknown_model_type(tmp_path, corpus):
    with pytest.raises(ValueError, match="model_type"):
        SubwordTokenizer.train(*corpus, tmp_path, model_type="word")


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_subword_dropout_samples_lossless_segmentations_that_a_seed_repeats(tmp_path, corpus, model_type):
    src = corpus[0]
    tok = SubwordTokenizer.train(*corpus, tmp_path, vocab_size=100, model_type=model_type)
    fixed = tok.encode_src(src)
    draws = []
    for seed in (0, 0, 1):
        seed_sampling(seed)
        draws.append(tok.encode_src(src, dropout=0.1))
    assert draws[0] == draws[1] != draws[2]
    assert draws[0] != fixed and sum(map(len, draws[0])) > sum(map(len, fixed))  # smaller pieces
    assert tok.decode_src(draws[0]) == tok.decode_src(draws[2]) == src
    assert tok.encode_src(src) == fixed  # sampling is per call, not a mode


@pytest.mark.parametrize("content, key", [
    ("[1, 2]", "JSON object"),
    ('{"joint": "yes", "model_type": "unigram", "vocab_size": 100, "lowercase": false}', "joint must be bool"),
    ('{"joint": true, "model_type": "unigram", "vocab_size": "100", "lowercase": false}', "vocab_size must be int"),
    ('{"joint": true, "model_type": "unigram", "vocab_size": 100, "lowercase": false, "vocabulary": 3}',
     "vocabulary must be an object"),
])
def test_a_tokenizer_json_of_the_wrong_types_is_one_clear_error(tmp_path, corpus, content, key):
    SubwordTokenizer.train(*corpus, tmp_path, vocab_size=100)
    (tmp_path / "tokenizer.json").write_text(content)
    with pytest.raises(CheckpointError, match=key) as error:
        SubwordTokenizer.load(tmp_path)
    assert "tokenizer.json" in str(error.value) and "\n" not in str(error.value)


def test_vocabulary_ids_number_the_pieces_in_its_order_and_survive_save_and_load(tmp_path, corpus):
    """A vocabulary (Marian's vocab.json) numbers SentencePiece's pieces: ids are places in its list, a piece
    it lacks is unk, a leading >>xx<< token stays whole, and the special ids are its special pieces."""
    trained = SubwordTokenizer.train(*corpus, tmp_path / "spm", vocab_size=100)
    text = corpus[0][0]
    text_pieces = trained.src_sp.encode(text, out_type=str)
    left_out = text_pieces[0]
    pieces = [trained.src_sp.id_to_piece(i) for i in range(4, trained.src_vocab_size)]
    order = ["</s>", "<unk>", ">>deu<<", *reversed([p for p in pieces if p != left_out]), "<pad>"]
    proto = trained.sentencepiece_models[0]
    vocabulary = {"src": order, "tgt": None, "pad": "<pad>", "unk": "<unk>", "bos": "<pad>", "eos": "</s>"}
    config = {"joint": True, "model_type": "marian", "vocab_size": len(order), "lowercase": False,
              "vocabulary": vocabulary}
    tok = SubwordTokenizer(proto, proto, config)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (len(order) - 1, 1, len(order) - 1, 0)
    expected = [1 if p == left_out else order.index(p) for p in text_pieces]
    assert tok.encode_src([text]) == [expected] and expected[0] == 1
    assert tok.encode_src([">>deu<< " + text]) == [[2, *expected]]
    # decoding stops at eos (0) and drops unk, as MarianTokenizer.decode(skip_special_tokens=True)
    assert tok.decode_tgt([[*expected[1:], 0, 5]]) == [trained.src_sp.decode_pieces([p for p in text_pieces[1:] if p != left_out])]
    tok.save(tmp_path / "mapped")
    loaded = SubwordTokenizer.load(tmp_path / "mapped")
    assert loaded.same_as(tok) and loaded.encode_tgt(corpus[1]) == tok.encode_tgt(corpus[1])
    assert loaded.tgt_vocabulary() == order
    vocabulary["eos"] = "<missing>"
    with pytest.raises(ValueError, match="eos piece '<missing>'"):
        SubwordTokenizer(proto, proto, config)
