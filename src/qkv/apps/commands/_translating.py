"""What the translating commands share: loading the translator their flags describe, and
translating lines to an output as they are done."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from ...decode.alignment import format_alignment
from ...decode.options import DecodeOptions
from ...runtime.process import configure_process
from ...runtime.runtime_options import RuntimeOptions
from ..documents import Pieces, split_sentences
from ..glossary import Glossary
from ..html import HtmlDocument
from ..translator import Translation, Translator
from ._io import Output


def load_translator(models: list[str], runtime: RuntimeOptions) -> Translator:
    """The translator of --model (`models`), loaded and run as the flags' `runtime` says. The
    process first turns off cuDNN's attention (`runtime.process`: on CUDA it builds a graph for
    every new shape, and a decoding step's keys are one longer than the step before's)."""
    configure_process(cudnn_attention=False)
    translator = Translator.load(models, runtime)
    print_decoding_path(translator)
    return translator


def print_decoding_path(translator: Translator) -> None:
    """On stderr, once: the decoding path chosen (precision, packing) and why."""
    print(translator.decoding_path, file=sys.stderr)


def translate_lines(
    args: argparse.Namespace,
    translator: Translator,
    lines: Iterable[str],
    options: DecodeOptions,
    output: Output | None,
    glossary: Glossary | None = None,
    *,
    total: int | None = None,
    each: Callable[[Translation], None] | None = None,
) -> None:
    """Translate `lines` as `options` say (with the glossary's terms, if any), read as they are
    needed (`Translator.translate_stream`: a chunk at a time, so that memory does not grow with the
    input), writing each translation to `output` (if any) as soon as it and all before it are
    done (n-best lists in Moses format with --nbest > 1), and handing it to `each` (if any); log
    the speed to stderr. Ctrl-C leaves the finished lines written and says how many (of `total`,
    where the number of lines is known)."""
    start = time.perf_counter()
    n_lines = n_tokens = 0
    alignment = getattr(args, "alignment", False)
    stream = translator.translate_stream(lines, options, alignment=alignment, glossary=glossary)
    try:
        for i, r in enumerate(stream):
            n_lines, n_tokens = n_lines + 1, n_tokens + len(r.tokens)
            if each is not None:
                each(r)
            if output is None:
                continue
            if options.nbest > 1:  # Moses n-best format: "line index ||| translation ||| score"
                output.write([f"{i} ||| {text} ||| {score:.4f}" for text, score in r.nbest])
            elif r.alignment is not None:  # --alignment: "translation<TAB>0-0 1-2 2-1"
                output.write([f"{r.text}\t{format_alignment(r.alignment)}"])
            else:
                output.write([r.text])
    except KeyboardInterrupt:
        done = f"{n_lines} translations" if total is None else f"{n_lines} of {total} translations"
        where = "" if output is None else f" written to {output.name}"
        raise KeyboardInterrupt(f"{done}{where}") from None
    seconds = max(time.perf_counter() - start, 1e-9)
    speed = f"{n_lines / seconds:.1f} lines/s, {n_tokens / seconds:.0f} tokens/s"
    logging.getLogger("qkv").info(f"translated {n_lines} lines in {seconds:.1f} s ({speed})")


def translate_paragraphs(
    translator: Translator,
    lines: Iterable[str],
    options: DecodeOptions,
    output: Output,
    glossary: Glossary | None = None,
) -> None:
    """Each line cut into its sentences (`documents.split_sentences`, in the model's source
    language), translated, and written back as one line with its own spacing, in order. The
    lines are read as the translator asks for sentences: memory holds the lines of one chunk."""
    language = source_language(translator)
    waiting: deque[Pieces] = deque()  # the lines read whose sentences are not all translated

    def sentences() -> Iterator[str]:
        for line in lines:
            waiting.append(split_sentences(line, language))
            yield from waiting[-1].sentences

    done: list[str] = []  # the translations of the first waiting line's sentences so far
    for translation in translator.translate_stream(sentences(), options, glossary=glossary):
        done.append(translation.text)
        done = _write_finished(waiting, done, output)
    _write_finished(waiting, done, output)  # lines without a sentence, at the end


def _write_finished(waiting: deque[Pieces], done: list[str], output: Output) -> list[str]:
    """Write the waiting lines whose sentences are all in `done`, in order -> what is left."""
    while waiting and len(done) >= len(waiting[0].sentences):
        pieces = waiting.popleft()
        n = len(pieces.sentences)
        output.write([pieces.join(done[:n])])
        done = done[n:]
    return done


def translate_html(
    translator: Translator,
    lines: Iterable[str],
    options: DecodeOptions,
    output: Output,
    glossary: Glossary | None = None,
) -> None:
    """The input as one HTML document (read whole: its markup may span any lines), written back
    with its text translated (`apps.html`)."""
    page = HtmlDocument("\n".join(lines), source_language(translator))
    done = translator.translate(page.sentences, options, glossary=glossary)
    output.write(page.join(done).split("\n"))


def source_language(translator: Translator) -> str:
    """The source language the model records, for the sentence splitter ("en" rules if none)."""
    return translator.languages[0] if translator.languages else "en"
