"""Translator: text in, text out, in input order, whatever the batching; empty and over-long lines."""

from __future__ import annotations

import io
import random
import types
import warnings
from pathlib import Path

import pytest
import torch

from qkv import DecoderOnly, Transformer
from qkv.apps.translator import Job, Translator
from qkv.data.batching import pad_sequences
from qkv.data.tokenizer import SubwordTokenizer
from qkv.decode import beam_search, greedy, sample
from qkv.decode.ensemble import Ensemble
from qkv.decode.options import DecodeOptions
from qkv.modeldir import save_model_dir
from qkv.runtime.packed import packing_available
from qkv.runtime.runtime_options import RuntimeOptions
from qkv.runtime.workers import can_fork
from sentences import EN, ZH  # tests/sentences.py
from tiny_models import EndingTransformer, tiny_config

TEXTS = [EN[0], "", ZH[1], EN[3] + " " + EN[4], "   ", ZH[5], EN[6], ZH[7] + ZH[8], EN[9], "dog"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> SubwordTokenizer:
    return SubwordTokenizer.train(EN, ZH, tmp_path_factory.mktemp("tok"), vocab_size=500)


def translator(tokenizer: SubwordTokenizer, ending: bool = True, **kwargs: object) -> Translator:
    torch.manual_seed(0)
    cfg = tiny_config(src_vocab_size=tokenizer.src_vocab_size)
    model = EndingTransformer(cfg) if ending else Transformer(cfg)
    return Translator(model.eval(), tokenizer, **kwargs)


def summary(translations: list) -> list:
    """What must not change at all: texts and ids (scores may differ by float rounding across batches)."""
    return [(t.text, t.tokens, [text for text, _ in t.nbest]) for t in translations]


def scores(translations: list) -> list[float]:
    return [score for t in translations for _, score in t.nbest]


def test_input_order_and_batching_do_not_change_the_output(tokenizer: SubwordTokenizer) -> None:
    t = translator(tokenizer)
    two_best = DecodeOptions(nbest=2)
    together = t.translate_detailed(TEXTS, two_best)
    assert len({len(x.tokens) for x in together}) > 3
    one_by_one = t.translate_detailed(TEXTS, two_best, batch_tokens=1)
    order = list(range(len(TEXTS)))
    random.Random(0).shuffle(order)
    shuffled = t.translate_detailed([TEXTS[i] for i in order], two_best, batch_tokens=40)
    unshuffled = [shuffled[order.index(i)] for i in range(len(TEXTS))]
    assert summary(one_by_one) == summary(unshuffled) == summary(together)
    assert scores(one_by_one) == pytest.approx(scores(together), abs=1e-4)
    assert scores(unshuffled) == pytest.approx(scores(together), abs=1e-4)
    assert t.translate(TEXTS, two_best) == [x.text for x in together]
    assert t.translate(tuple(TEXTS), two_best) == [x.text for x in together]  # any sequence
    for i in (1, 4):  # empty and blank lines: no model call, empty output
        assert (together[i].text, together[i].score, together[i].tokens) == ("", 0.0, [])


def test_workers_give_the_same_translations(tokenizer: SubwordTokenizer) -> None:
    """Worker threads decode batches side by side: the outputs are those of one thread, in input order,
    also when the single batch has to be split so that each worker gets one."""
    t = translator(tokenizer)
    for beam in (1, 3):
        options = DecodeOptions(beam=beam)
        alone = t.translate_detailed(TEXTS, options, attention=True)
        for workers, batch_tokens in ((3, 4096), (2, 30)):
            side_by_side = t.translate_detailed(TEXTS, options, attention=True, workers=workers,
                                                batch_tokens=batch_tokens)
            assert summary(side_by_side) == summary(alone)
            assert scores(side_by_side) == pytest.approx(scores(alone), abs=1e-4)
            for a, b in zip(alone, side_by_side, strict=True):
                assert (a.attention is None) == (b.attention is None)
                if a.attention is not None:
                    assert torch.allclose(a.attention, b.attention, atol=1e-5)
    with pytest.raises(ValueError, match="workers"):
        t.translate(TEXTS, workers=0)
    if can_fork():  # worker processes, forked once and kept for the next calls
        workers = t._workers
        assert workers is not None and workers.workers == 2
        assert t.translate(TEXTS, options, workers=2, batch_tokens=30) == [x.text for x in alone]
        assert t._workers is workers
        t.close()
        assert t._workers is None


def test_runtime_options_are_checked_when_made_and_give_the_translators_defaults(
        tokenizer: SubwordTokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    """`RuntimeOptions` refuses a bad value in one line naming the field; a translator batches as its
    `runtime` says, and a call's batch_tokens and workers override it for that call."""
    for changes, field in (({"precision": "fp16"}, "precision"), ({"quantize": "int4"}, "quantize"),
                           ({"pack": 1}, "pack"), ({"workers": 0}, "workers"), ({"workers": True}, "workers"),
                           ({"threads": 0}, "threads"), ({"batch_tokens": 1.5}, "batch_tokens"),
                           ({"batch_tokens": 0}, "batch_tokens"), ({"max_src_tokens": 1}, "max_src_tokens"),
                           ({"quantize": "int8", "precision": "bf16"}, "bf16 weights, not both")):
        with pytest.raises(ValueError, match=field) as caught:
            RuntimeOptions(**changes)
        assert "\n" not in str(caught.value)
    assert RuntimeOptions().replace(workers=2) == RuntimeOptions(workers=2)
    with pytest.raises(ValueError, match="workers"):
        RuntimeOptions(workers=2).replace(workers=0)
    with pytest.raises(TypeError, match="runtime must be a RuntimeOptions, got int"):
        translator(tokenizer, runtime=4096)
    searched = []
    search = Translator._run_search
    monkeypatch.setattr(Translator, "_run_search", lambda self, s: searched.append(s.src.size(0))
                        or search(self, s))
    one_each = translator(tokenizer, runtime=RuntimeOptions(batch_tokens=1))
    assert translator(tokenizer).runtime == RuntimeOptions() and one_each.runtime.batch_tokens == 1
    alone = one_each.translate(TEXTS, DecodeOptions(beam=2))
    assert searched == [1] * 8  # every non-empty line a batch of its own
    searched.clear()
    assert one_each.translate(TEXTS, DecodeOptions(beam=2), batch_tokens=4096) == alone
    assert searched == [8]  # this call's batch_tokens
    assert one_each.runtime.batch_tokens == 1


def test_each_worker_runs_torch_on_its_share_of_the_threads() -> None:
    import threading
    import time

    from qkv.runtime.workers import map_in_workers

    def where(_: int) -> tuple[int, int]:
        time.sleep(0.05)  # both workers take a job before either finishes
        return threading.get_ident(), torch.get_num_threads()

    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        seen = map_in_workers(where, [0, 1], workers=2)
        assert torch.get_num_threads() == 4  # the caller's count is back
    finally:
        torch.set_num_threads(before)
    assert len({ident for ident, _ in seen}) == 2 and threading.get_ident() not in {i for i, _ in seen}
    assert [n for _, n in seen] == [2, 2]
    assert map_in_workers(lambda x: x * x, [3, 1, 2], workers=2) == [9, 1, 4]


def test_translations_are_beam_search_outputs(tokenizer: SubwordTokenizer) -> None:
    t = translator(tokenizer)
    texts = [EN[1], ZH[2]]
    ids = tokenizer.encode_src(texts)
    src = pad_sequences([[*s, 3] for s in ids], 0)
    max_len = torch.tensor([int(0.5 * len(s) + 7) for s in ids])
    expected = beam_search(t.model, src, beam=3, alpha=1.0, nbest=3, max_len=max_len)
    options = DecodeOptions(beam=3, alpha=1.0, nbest=3, max_len_a=0.5, max_len_b=7)
    got = t.translate_detailed(texts, options)
    for g, hyps in zip(got, expected, strict=True):
        assert g.tokens == hyps[0].tokens and g.score == hyps[0].score
        assert g.nbest == [(tokenizer.decode_tgt([h.tokens])[0], h.score) for h in hyps]
        assert g.text == g.nbest[0][0] and g.attention is None


def test_every_option_reaches_the_search(tokenizer: SubwordTokenizer) -> None:
    """min_len, alpha and the length limit reach beam search, greedy decoding and sampling (with the
    sampling parameters and the seed of the first batch): the translations are the searches' outputs.
    The texts are longest first, the translator's batch order, so that sampling draws alike."""
    t = translator(tokenizer)
    texts = sorted([EN[1], ZH[2], EN[5]], key=lambda text: -len(tokenizer.encode_src([text])[0]))
    ids = tokenizer.encode_src(texts)
    assert len(ids[0]) > len(ids[1]) > len(ids[2])
    src = pad_sequences([[*s, 3] for s in ids], 0)
    max_len = torch.tensor([int(0.5 * len(s) + 9) for s in ids])
    base = DecodeOptions(alpha=0.3, max_len_a=0.5, max_len_b=9, min_len=12)
    cases = [
        (base.replace(beam=3, nbest=2),
         beam_search(t.model, src, beam=3, alpha=0.3, nbest=2, max_len=max_len, min_len=12)),
        (base.replace(beam=1), [[h] for h in greedy(t.model, src, max_len, min_len=12, alpha=0.3)]),
        (base.replace(sampling=True, temperature=0.7, top_k=8, top_p=0.9, seed=5),
         [[h] for h in sample(t.model, src, 0.7, 8, 0.9, seed=5, max_len=max_len, min_len=12, alpha=0.3)]),
    ]
    shorter_without_min_len = 0
    for options, expected in cases:
        got = t.translate_detailed(texts, options)
        assert [g.tokens for g in got] == [hyps[0].tokens for hyps in expected], options
        assert [[score for _, score in g.nbest] for g in got] == [[h.score for h in hyps] for hyps in expected]
        assert all(len(g.tokens) >= 12 for g in got)  # min_len holds
        free = t.translate_detailed(texts, options.replace(min_len=0))
        shorter_without_min_len += sum(len(g.tokens) < 12 for g in free)
    assert shorter_without_min_len > 0  # min_len changes outputs here: the checks above have teeth


def test_texts_must_be_a_list_of_strings_and_options_a_decode_options(tokenizer: SubwordTokenizer) -> None:
    t = translator(tokenizer)
    with pytest.raises(TypeError, match="one str"):
        t.translate("a dog runs")  # would otherwise translate each character
    with pytest.raises(TypeError, match="one str"):
        t.translate_detailed("a dog runs")
    with pytest.raises(TypeError, match="strings, got int"):
        t.translate(["a dog", 3])
    with pytest.raises(TypeError, match="DecodeOptions, got int"):
        t.translate(["a dog"], 4)  # a beam size where the options go
    with pytest.raises(TypeError, match="beam"):
        t.translate(["a dog"], beam=4)  # the options are one value
    with pytest.raises(ValueError, match="batch_tokens"):
        t.translate(["a dog"], batch_tokens=0)
    assert t.translate([]) == []


def test_attention_of_the_best_hypothesis(tokenizer: SubwordTokenizer) -> None:
    t = translator(tokenizer)
    beam2 = DecodeOptions(beam=2)
    with_attention = t.translate_detailed(TEXTS, beam2, attention=True)
    assert summary(with_attention) == summary(t.translate_detailed(TEXTS, beam2))
    for text, x in zip(TEXTS, with_attention, strict=True):
        if x.tokens:
            assert x.attention is not None
            assert x.attention.shape == (len(x.tokens) + 1, len(tokenizer.encode_src([text])[0]) + 1)
            torch.testing.assert_close(x.attention.sum(-1), torch.ones(len(x.tokens) + 1))


def test_long_lines_are_truncated_with_one_warning(tokenizer: SubwordTokenizer) -> None:
    t = translator(tokenizer, runtime=RuntimeOptions(max_src_tokens=8))
    with pytest.warns(UserWarning, match="2 of 3 input lines are longer than 7 subword tokens") as record:
        out = t.translate_detailed([EN[0] * 20, "dog", ZH[3] * 50], DecodeOptions(beam=1))
    assert len(record) == 1 and len(out) == 3
    assert translator(tokenizer, runtime=RuntimeOptions(max_src_tokens=5000)).max_src_tokens == 5000
    learned = Translator(Transformer(tiny_config(src_vocab_size=tokenizer.src_vocab_size, positional="learned",
                                                 max_positions=12)), tokenizer)
    assert learned.max_src_tokens == 12  # the position table is the limit
    with pytest.warns(UserWarning, match="1 of 1"):
        (long,) = learned.translate_detailed([EN[0] * 50], DecodeOptions(beam=2))
    assert len(long.tokens) <= 11
    sinusoidal = Transformer(tiny_config(src_vocab_size=tokenizer.src_vocab_size))
    ensemble = Translator(Ensemble([sinusoidal, learned.model]), tokenizer)
    assert ensemble.max_src_tokens == 12  # any member's table is a limit
    with pytest.warns(UserWarning, match="1 of 1"):
        (long,) = ensemble.translate_detailed([EN[0] * 50], DecodeOptions(beam=2))
    assert len(long.tokens) <= 11


def test_sampling_is_seeded(tokenizer: SubwordTokenizer) -> None:
    t = translator(tokenizer)
    options = DecodeOptions(sampling=True, top_k=10, seed=4)
    first = t.translate_detailed(TEXTS, options)
    assert summary(first) == summary(t.translate_detailed(TEXTS, options))
    assert summary(first) != summary(t.translate_detailed(TEXTS, options.replace(seed=5)))


def test_load_a_model_directory(tokenizer: SubwordTokenizer, tmp_path: Path) -> None:
    t = translator(tokenizer, ending=False)
    save_model_dir(tmp_path / "model", t.model, tokenizer)
    loaded = Translator.load(tmp_path / "model")
    beam2 = DecodeOptions(beam=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loaded.translate(TEXTS[:4], beam2) == t.translate(TEXTS[:4], beam2)
    linear_types = {type(m).__name__ for m in loaded.model.modules()} & {"Linear", "PackedLinear"}
    assert linear_types == ({"PackedLinear"} if packing_available() else {"Linear"})  # packed by default on a CPU
    unpacked = Translator.load(tmp_path / "model", RuntimeOptions(pack=False))
    assert not any(type(m).__name__ == "PackedLinear" for m in unpacked.model.modules())
    assert unpacked.translate(TEXTS[:4], beam2) == loaded.translate(TEXTS[:4], beam2)
    with pytest.raises(ValueError, match="not both"):
        RuntimeOptions(quantize="int8", pack=True)
    save_model_dir(tmp_path / "lm", DecoderOnly(tiny_config(src_vocab_size=tokenizer.src_vocab_size)), tokenizer)
    with pytest.raises(ValueError, match="needs a Transformer"):
        Translator.load(tmp_path / "lm")


def test_translate_stream_yields_each_chunk_as_soon_as_it_is_done(tokenizer: SubwordTokenizer,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`translate_stream` gives the translations of `translate_detailed`, in input order, chunk by
    chunk: the first one comes after its chunk is decoded, not after the whole input; leaving early decodes
    nothing more. Its arguments are checked when it is called, before anything is decoded."""
    t = translator(tokenizer)
    options = DecodeOptions(beam=2, nbest=2)
    together = t.translate_detailed(TEXTS, options, attention=True)
    for chunk_tokens, workers in ((1, 1), (30, 2), (None, 1), (None, 3)):
        streamed = list(t.translate_stream(TEXTS, options, attention=True, chunk_tokens=chunk_tokens,
                                           workers=workers, batch_tokens=40))
        assert summary(streamed) == summary(together)
        assert scores(streamed) == pytest.approx(scores(together), abs=1e-4)
        for a, b in zip(together, streamed, strict=True):
            assert (a.attention is None) == (b.attention is None)
    searched = []
    search = Translator._run_search
    monkeypatch.setattr(Translator, "_run_search", lambda self, s: searched.append(s.src.size(0))
                        or search(self, s))
    stream = t.translate_stream(TEXTS, options, chunk_tokens=1)  # every non-empty line a chunk of its own
    assert searched == []
    assert summary([next(stream)]) == summary(together[:1]) and searched == [1]
    assert summary([next(stream), next(stream)]) == summary(together[1:3]) and searched == [1, 1]  # "" is free
    stream.close()
    assert len(searched) == 2
    with pytest.raises(TypeError, match="one str"):
        t.translate_stream("a dog runs")  # no iteration needed to find out
    with pytest.raises(ValueError, match="chunk_tokens"):
        t.translate_stream(TEXTS, chunk_tokens=0)
    with pytest.raises(ValueError, match="workers"):
        t.translate_stream(TEXTS, workers=0)
    assert list(t.translate_stream([])) == []


def test_a_beam_beyond_the_target_vocabulary_is_refused(tokenizer: SubwordTokenizer) -> None:
    """A beam wider than the vocabulary cannot be filled and would allocate beam x vocabulary rows
    (`--beam 100000`: 480 GB); it is refused, naming the vocabulary size. The widest beam works."""
    t = translator(tokenizer)
    vocab = t.target_vocab_size
    assert vocab == tokenizer.tgt_vocab_size
    for call in (t.translate, t.translate_detailed, t.translate_stream):
        with pytest.raises(ValueError, match=f"beam {vocab + 1} is larger than the model's target vocabulary "
                                             f"of {vocab} tokens"):
            call(["dog"], DecodeOptions(beam=vocab + 1))
    (widest,) = t.translate_detailed(["dog"], DecodeOptions(beam=vocab, nbest=3, max_len_a=0, max_len_b=2))
    assert len(widest.nbest) == 3
    assert t.translate(["dog"], DecodeOptions(beam=vocab + 1, sampling=True, max_len_b=2))  # sampling has no beam


def test_load_refuses_no_directory_and_an_unusable_device(tmp_path: Path) -> None:
    """`Translator.load([])` and a bad device (refused by `RuntimeOptions`, before any load) are clear
    ValueErrors, not an IndexError, a RuntimeError or an AssertionError from deep inside torch."""
    with pytest.raises(ValueError, match="no model directory given"):
        Translator.load([])
    with pytest.raises(ValueError, match="unknown device 'bogus'"):
        RuntimeOptions(device="bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda': CUDA is not available"):
            RuntimeOptions(device="cuda")
    with pytest.raises(ValueError, match=r"there are \d+ CUDA devices|CUDA is not available"):
        RuntimeOptions(device=f"cuda:{torch.cuda.device_count()}")
    with pytest.raises(TypeError, match="runtime must be a RuntimeOptions, got str"):
        Translator.load(tmp_path, "cpu")  # the runtime options are one value


def test_a_text_with_a_lone_surrogate_is_refused_naming_it(tokenizer: SubwordTokenizer) -> None:
    """A lone surrogate ("\\ud800", or "\\udcff": a byte that surrogateescape kept) is not Unicode text: a ValueError
    naming the element, when the call is made, not SentencePiece's "List elements must be str or bytes"."""
    t = translator(tokenizer)
    with pytest.raises(ValueError, match=r"texts\[1\] holds a lone surrogate \(U\+D800 at character 4\), so it is not valid Unicode"):
        t.translate(["4 0 5", "4 0 \ud800"])
    with pytest.raises(ValueError, match=r"texts\[0\] holds a lone surrogate \(U\+DCFF"):
        t.translate_stream(["4 0 \udcff"])


def test_the_commands_say_in_one_line_that_a_line_is_not_unicode(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`qkv translate` reads files and stdin as strict UTF-8, so a surrogate's bytes (ED A0 80) are invalid
    UTF-8; a sentence argument with bytes that are not UTF-8 reaches Python as lone surrogates."""
    from qkv.apps.cli import main

    data = b"4 0 5\n4 0 \xed\xa0\x80\n"
    (tmp_path / "in.txt").write_bytes(data)
    assert main(["translate", "--model", str(model_dir), "--input", str(tmp_path / "in.txt")]) == 2
    assert capsys.readouterr().err.endswith("in.txt:2: invalid UTF-8 (invalid continuation byte at byte 4)\n")
    monkeypatch.setattr("sys.stdin", types.SimpleNamespace(buffer=io.BytesIO(data)))
    assert main(["translate", "--model", str(model_dir)]) == 2
    # stdin is read as it is translated (after the model is loaded): the line is named as a file's
    assert capsys.readouterr().err.endswith("\nqkv translate: error: stdin:2: invalid UTF-8 (invalid continuation byte at byte 4)\n")
    sentence = b"4 0 \xff".decode("utf-8", "surrogateescape")  # as sys.argv holds it
    assert main(["attention", "--model", str(model_dir), "--out", str(tmp_path / "att"), sentence]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == ("qkv attention: error: texts[0] holds a lone surrogate (U+DCFF at character 4), "
                       "so it is not valid Unicode text")
    assert not any("Traceback" in line for line in err)


def test_prepare_then_decode_is_translate_detailed_and_a_job_splits_and_joins(tokenizer: SubwordTokenizer) -> None:
    """A job is encoded once (cut where a text is over the source limit, and `cut` says so), its work
    is `DecodeOptions.work` of its ids, and decoding it, or its rows split and joined again, gives
    `translate_detailed`'s translations; `abandoned` is asked by index in the job."""
    t = translator(tokenizer, runtime=RuntimeOptions(max_src_tokens=8))
    options = DecodeOptions(beam=2, nbest=2, alpha=1.0, max_len_a=0.5, max_len_b=7)
    texts = [EN[0] * 20, "", *TEXTS[:4]]
    job = t.prepare(texts, options)
    whole = tokenizer.encode_src(texts)
    assert job.cut == {i: len(x) for i, x in enumerate(whole) if len(x) > 7} and 0 in job.cut
    assert job.ids == [x[:7] for x in whole]
    assert job.work == options.work(map(len, job.ids)) == sum(2 * options.max_output_length(len(x)) for x in job.ids)
    with pytest.warns(UserWarning, match="input lines are longer"):
        detailed = t.translate_detailed(texts, options)
    decoded = t.decode(job)
    assert summary(decoded) == summary(detailed)
    for ids, got in zip(job.ids, decoded, strict=True):  # each sentence alone, by beam search itself
        if not ids:
            assert (got.text, got.tokens) == ("", [])
            continue
        src = pad_sequences([[*ids, tokenizer.eos_id]], tokenizer.pad_id)
        [hyps] = beam_search(t.model, src, beam=2, alpha=1.0, nbest=2, max_len=int(0.5 * len(ids) + 7))
        assert got.tokens == hyps[0].tokens
        assert [score for _, score in got.nbest] == pytest.approx([h.score for h in hyps], abs=1e-4)
    first, rest = job.rows([0, 1, 2]), job.rows([3, 4, 5])
    joined = Job.joined([first, rest])
    assert (joined.texts, joined.ids, joined.cut) == (job.texts, job.ids, job.cut)
    assert summary(t.decode(joined)) == summary(detailed)
    assert summary(t.decode(job.rows([5, 2]))) == summary([detailed[5], detailed[2]])
    asked = set()
    got = t.decode(job, abandoned=lambda i: asked.add(i) or i == 2)
    assert asked == {i for i, x in enumerate(job.ids) if x} and got[2] is None  # empty lines: not decoded
    assert summary([r for i, r in enumerate(got) if i != 2]) == summary(detailed[:2] + detailed[3:])
    with pytest.raises(ValueError, match="share their decoding options"):
        Job.joined([first, t.prepare(["dog"], DecodeOptions())])
    with pytest.raises(TypeError, match="decode takes a Job"):
        t.decode(texts)
