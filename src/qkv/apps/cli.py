"""The `qkv` command line: thin wrappers over the Python API.

    qkv params --preset base --vocab 37000        parameter count of a preset
    qkv train CONFIG --out DIR [--key value ...]  train a model directory (--key overrides config)
    qkv average --model DIR --last 10             average the last N checkpoints of a run
    qkv average --model DIR --best 5              ... or the N with the best validation scores
    qkv demo [--out DIR]                          train on synthetic data and show the result
    qkv translate --model DIR [--input FILE]      translate lines (stdin or FILE) to stdout
    qkv attention --model DIR --out DIR TEXT      every attention map of a translation: JSON, PNGs
    qkv evaluate --model DIR --src F --ref F      sacreBLEU BLEU and chrF (or --corpus NAME --pair)
    qkv generate --model DIR [--prompt TEXT]      continue prompts with a language model (--task lm)
    qkv classify --model DIR [--input FILE]       label lines with a classifier (--task classify)
    qkv figures --out docs/figures                the ideas of the paper as PNGs (docs/concepts.md)
    qkv serve --model DIR [--port 8000]           HTTP: LibreTranslate and native APIs, a page
    qkv convert marian SRC_DIR --out DIR         import an OPUS-MT / Marian model (its HF files)
    qkv export ctranslate2 DIR --out CT2_DIR     a model directory for CTranslate2 (--quantization)

`translate` and `evaluate` build one `DecodeOptions` from their arguments; the arguments' defaults
are the defaults of `DecodeOptions` and `Translator`.

A user's mistake or a refusal of the system (a missing file, a full disk, an unknown device) ends
the command with one line, `qkv COMMAND: error: ...`, and exit status 2; Ctrl-C with one line and
130; a closed pipe (`qkv translate ... | head`) quietly with 141, as a Unix tool killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config import PRESETS, TransformerConfig
from ..decode.alignment import format_alignment
from ..decode.options import DecodeOptions
from .translator import (
    DEFAULT_BATCH_TOKENS,
    DEFAULT_MAX_SRC_TOKENS,
    Translation,
    Translator,
    check_device,
)


def cmd_params(args: argparse.Namespace) -> int:
    from ..model import count_parameters

    cfg = TransformerConfig.preset(args.preset, src_vocab_size=args.vocab)
    n = count_parameters(cfg)
    vocabulary = f"a shared vocabulary of {args.vocab:,}"
    print(f"{args.preset}: {n:,} parameters ({n / 1e6:.1f}M) with {vocabulary}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from ..runtime.process import configure_process, restart_with_tcmalloc
    from ..train import Trainer, load_train_config, parse_overrides
    from ..train.distributed import resolve_device

    cfg = load_train_config(args.config, parse_overrides(args.overrides))
    if args.own_process and resolve_device(cfg.device).type == "cpu":
        restart_with_tcmalloc()  # flat memory on the CPU where tcmalloc is installed
    configure_process(**cfg.process_settings())  # threads, seed, allocator: before anything runs
    try:
        trainer = Trainer(
            cfg,
            args.out,
            resume=args.resume,
            overwrite=args.overwrite,
            allow_data_change=args.allow_data_change,
        )
        result = trainer.train()
    except KeyboardInterrupt:
        _report_interrupt(args)
        return 130
    best = ""
    if result.best_step is not None:
        best = f"; best {cfg.valid_metric} at step {result.best_step}"
    print(f"trained {result.step} steps{best}; model directory: {result.out_dir}")
    return 0


def _report_interrupt(args: argparse.Namespace) -> None:
    """After Ctrl-C in `qkv train`: where the last checkpoint is and the command that resumes."""
    import shlex

    from ..train.checkpoints import list_checkpoints

    done = list_checkpoints(Path(args.out))
    if not done:
        message = "qkv train: interrupted before the first checkpoint; nothing to resume"
        print(message, file=sys.stderr)
        return
    command = ["qkv", "train", *([args.config] if args.config else []), "--out", args.out]
    command += ["--resume", *args.overrides]
    print(
        f"qkv train: interrupted; the last checkpoint is {done[-1]}\n"
        f"continue with: {shlex.join(command)}",
        file=sys.stderr,
    )


def cmd_average(args: argparse.Namespace) -> int:
    from ..train.average import average_into, average_run, best_window

    if args.best is not None:
        window = best_window(args.model, args.best)
        mean = -window.mean if window.metric == "loss" else window.mean  # a loss is negated
        print(f"the best {args.best} in a row: mean validation {window.metric} {mean:.4g}")
        paths = window.paths
        target = average_into(args.model, paths, args.out, args.overwrite)
    else:
        target, paths = average_run(args.model, args.last, args.out, args.overwrite)
    print(f"averaged {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) into {target}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from ..interop.marian import convert_marian

    out = convert_marian(args.src_dir, args.out)
    print(f"imported {args.src_dir} into {out}  (try: echo 'Hello.' | qkv translate --model {out})")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ..interop.ctranslate2 import export_ctranslate2

    out = export_ctranslate2(args.model_dir, args.out, args.quantization)
    print(f"exported {args.model_dir} to {out} for CTranslate2; how to call it: {out}/README.md")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if (Path(args.out) / "checkpoints").exists():
        raise ValueError(f"{args.out} already holds a demo run; choose another --out or delete it")
    print(f"training a small Transformer on synthetic numbers (digits -> {args.target} words) ...")
    result = run_demo(
        args.out, target=args.target, steps=args.steps, seed=args.seed, overwrite=args.overwrite
    )
    print(
        f"trained in {result.train_seconds:.0f} s; held-out examples "
        "(source | translation | reference):"
    )
    for src, hyp, ref in result.examples[:8]:
        print(f"  {src:<14} | {hyp} | {'ok' if hyp == ref else 'expected: ' + ref}")
    n = len(result.examples)
    print("exact-match accuracy by digit count (3+ digits: held-out numbers; 1-2: all of them):")
    for k, (right, total) in result.by_digits.items():
        print(f"  {k} digit{'s' if k > 1 else ' '}  {100 * right / total:5.1f}%  ({right}/{total})")
    print(f"accuracy: {100 * result.accuracy:.1f}% exact match on {n} test numbers")
    try_it = f"echo '4 0 5 2' | qkv translate --model {result.out_dir}"
    print(f"model saved to {result.out_dir}  (try: {try_it})")
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from .figures import make_figures

    paths = make_figures(args.out, small=args.small, demo_model=args.demo_model, only=args.only)
    print(f"wrote {len(paths)} figures to {args.out}")
    return 0


BOM = "\ufeff"  # a UTF-8 byte order mark: dropped from the start of every input, as text tools do


def _read_lines(path: str, what: str = "--input") -> list[str]:
    """Lines of a UTF-8 text file (.gz allowed), split on "\\n" only, without a leading BOM."""
    from ..data.corpus import read_lines

    if Path(path).is_dir():
        raise ValueError(f"{what} {path} is a directory, not a text file")
    lines = read_lines(path)
    if lines:
        lines[0] = lines[0].removeprefix(BOM)
    return lines


def _read_input_lines(path: str | None) -> list[str]:
    """Lines of FILE (or of stdin, read as UTF-8 whatever the locale), split on "\\n" only, without
    a leading BOM."""
    if path is not None:
        return _read_lines(path)
    if sys.stdin is None:
        raise ValueError("standard input is closed; give --input FILE")
    if hasattr(sys.stdin, "buffer"):
        data = sys.stdin.buffer.read()
    else:
        data = sys.stdin.read().encode("utf-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"stdin is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    lines = text.removeprefix(BOM).split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]


class OutputError(ValueError):
    """The output cannot be written (a full disk, a closed stdout, ...): one line, no traceback.
    on_stdout: the failed output is stdout, whose buffer must not be flushed again at exit."""

    def __init__(self, message: str, on_stdout: bool = False) -> None:
        super().__init__(message)
        self.on_stdout = on_stdout


class _Output:
    """Lines written as UTF-8 to FILE or stdout, each ending in "\\n" (a newline inside a line
    becomes a space), and flushed at once: what is written stays written if the run is stopped."""

    def __init__(self, path: str | None = None) -> None:
        self.name = "standard output" if path is None else path
        self._own = path is not None
        if path is not None:
            try:
                self._file = open(path, "wb")  # noqa: SIM115 (closed by close())
            except OSError as e:
                raise OutputError(f"cannot write {path}: {e.strerror}") from None
        elif sys.stdout is None:  # the shell closed it (`>&-`)
            raise OutputError("standard output is closed; nowhere to write the translations")
        else:
            sys.stdout.flush()
            self._file = getattr(sys.stdout, "buffer", None)  # None: a text-only stdout

    def write(self, lines: Sequence[str]) -> None:
        text = "".join(line.replace("\r", " ").replace("\n", " ") + "\n" for line in lines)
        try:
            if self._file is None:
                sys.stdout.write(text)
                sys.stdout.flush()
            else:
                self._file.write(text.encode("utf-8"))
                self._file.flush()
        except BrokenPipeError:
            if not self._own:
                raise  # the reader of stdout has gone: main() stops quietly
            raise OutputError(f"cannot write to {self.name}: its reader has gone") from None
        except (OSError, ValueError) as e:  # ValueError: written to a closed file
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            message = f"cannot write to {self.name}: {reason}"
            raise OutputError(message, on_stdout=not self._own) from None

    def close(self) -> None:
        if self._own:
            try:
                self._file.close()
            except OSError as e:
                raise OutputError(f"cannot write to {self.name}: {e.strerror or e}") from None


def _check_output_path(path: str, inputs: Sequence[str | os.PathLike[str] | None] = ()) -> None:
    """Refuse, before any work, an output file that cannot be written (a directory, a missing
    folder, no permission) or that is one of the inputs; an existing file is left as it is."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"--output {path} is a directory")
    if not target.parent.is_dir():
        raise ValueError(f"--output {path}: there is no folder {target.parent}")
    existed = target.exists()
    for name in inputs:
        if existed and name is not None and Path(name).exists() and target.samefile(name):
            raise ValueError(f"--output {path} is an input file; writing would overwrite it")
    try:
        with open(target, "ab"):  # appends nothing: truncates nothing
            pass
    except OSError as e:
        raise ValueError(f"cannot write --output {path}: {e.strerror}") from None
    if not existed:
        target.unlink(missing_ok=True)


def decode_options(args: argparse.Namespace) -> DecodeOptions:
    """The one `DecodeOptions` of the parsed arguments: each field given as an argument of the same
    name (`evaluate` has no sampling or n-best arguments; their defaults apply)."""
    names = [f.name for f in dataclasses.fields(DecodeOptions) if hasattr(args, f.name)]
    return DecodeOptions(**{name: getattr(args, name) for name in names})


def _load_translator(args: argparse.Namespace) -> Translator:
    translator = Translator.load(
        args.model,
        args.device,
        args.max_src_tokens,
        quantize=args.quantize,
        pack=args.pack,
        precision=args.precision,
    )
    _print_decoding_path(translator)
    return translator


def _print_decoding_path(translator: Translator) -> None:
    """On stderr, once: the decoding path chosen (precision, packing) and why."""
    print(translator.decoding_path, file=sys.stderr)


def _translate_lines(
    args: argparse.Namespace,
    translator: Translator,
    lines: list[str],
    options: DecodeOptions,
    output: _Output | None,
) -> list[Translation]:
    """Translate `lines` as `options` say, writing each translation to `output` (if any) as soon
    as it and all before it are done (n-best lists in Moses format with --nbest > 1); log the
    speed to stderr. Ctrl-C leaves the finished lines written and says how many."""
    import time

    start = time.perf_counter()
    results: list[Translation] = []
    stream = translator.translate_stream(
        lines,
        options,
        alignment=getattr(args, "alignment", False),
        batch_tokens=args.batch_tokens,
        workers=args.workers,
    )
    try:
        for i, r in enumerate(stream):
            results.append(r)
            if output is None:
                continue
            if options.nbest > 1:  # Moses n-best format: "line index ||| translation ||| score"
                output.write([f"{i} ||| {text} ||| {score:.4f}" for text, score in r.nbest])
            elif r.alignment is not None:  # --alignment: "translation<TAB>0-0 1-2 2-1"
                output.write([f"{r.text}\t{format_alignment(r.alignment)}"])
            else:
                output.write([r.text])
    except KeyboardInterrupt:
        done = f"{len(results)} of {len(lines)} translations"
        where = "" if output is None else f" written to {output.name}"
        raise KeyboardInterrupt(f"{done}{where}") from None
    seconds = max(time.perf_counter() - start, 1e-9)
    n_tokens = sum(len(r.tokens) for r in results)
    speed = f"{len(lines) / seconds:.1f} lines/s, {n_tokens / seconds:.0f} tokens/s"
    logging.getLogger("qkv").info(f"translated {len(lines)} lines in {seconds:.1f} s ({speed})")
    return results


def cmd_translate(args: argparse.Namespace) -> int:
    options = decode_options(args)
    if args.alignment and options.nbest > 1:
        raise ValueError("--alignment writes the best translation's alignment; use --nbest 1")
    check_device(args.device)
    lines = _read_input_lines(args.input)
    output = _Output()
    translator = _load_translator(args)
    _translate_lines(args, translator, lines, options, output)
    return 0


def cmd_attention(args: argparse.Namespace) -> int:
    import warnings

    from .attention import check_out, write_attention

    options = decode_options(args)
    if len(args.model) > 1:
        raise ValueError("attention weights come from one model; give --model once")
    if bool(args.sentences) == bool(args.input):
        raise ValueError('give the sentences as arguments ("a source sentence") or --input FILE')
    check_out(Path(args.out), args.overwrite)  # before the model loads
    check_device(args.device)
    texts = args.sentences or _read_lines(args.input)
    translator = _load_translator(args)
    with warnings.catch_warnings(record=True) as caught:  # each warning once, on one line
        warnings.simplefilter("always")
        paths = write_attention(
            translator,
            texts,
            args.out,
            options,
            batch_tokens=args.batch_tokens,
            workers=args.workers,
            overwrite=args.overwrite,
        )
    shown = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    for message in dict.fromkeys(shown):
        _error_line(f"qkv attention: warning: {message}")
    n_png = sum(p.suffix == ".png" for p in paths)
    print(f"wrote {paths[0]} and {n_png} heatmaps to {args.out}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..data.corpus import DataError
    from ..data.named import get_corpus, named_paths, tokenized_reference_path
    from .evaluate import score

    options = decode_options(args)
    check_device(args.device)
    src_lang = tgt_lang = None
    if args.pair:
        src_lang, _, tgt_lang = args.pair.partition("-")
        if not src_lang or not tgt_lang:
            raise ValueError(f"--pair must look like en-de, got {args.pair!r}")
    tok_ref = args.tok_ref
    if args.corpus:
        if args.src or args.ref or src_lang is None or tgt_lang is None:
            raise ValueError("--corpus needs --pair SRC-TGT (e.g. en-de) and no --src/--ref")
        split = args.split or get_corpus(args.corpus).splits[-1]
        src, ref = named_paths(args.corpus, split, src_lang, tgt_lang, args.data_dir, args.download)
        if tok_ref is None and split in get_corpus(args.corpus).tok_splits:
            try:
                tok_ref = tokenized_reference_path(
                    args.corpus, split, tgt_lang, args.data_dir, args.download
                )
            except DataError as e:
                logging.getLogger("qkv").warning(f"no tokenized lowercase BLEU: {e}")
    elif args.src and args.ref:
        src, ref = args.src, args.ref
    else:
        raise ValueError(
            "give --src FILE --ref FILE, or --corpus NAME --pair SRC-TGT [--split SPLIT]"
        )
    lang = args.lang or tgt_lang
    if tok_ref is not None and not lang:
        raise ValueError(
            "tokenized lowercase BLEU needs the target language: give --lang (or --pair)"
        )
    sources = _read_lines(src, "--src")
    refs = _read_lines(ref, "--ref")
    tok_refs = None if tok_ref is None else _read_lines(tok_ref, "--tok-ref")
    if len(sources) != len(refs) or (tok_refs is not None and len(tok_refs) != len(refs)):
        counts = f"{src} has {len(sources)} lines, {ref} {len(refs)}"
        if tok_refs is not None:
            counts += f", {tok_ref} {len(tok_refs)}"
        raise ValueError(counts)
    if not sources:
        raise ValueError(f"{src} and {ref} are empty: no sentences to evaluate")
    if args.output:
        _check_output_path(args.output, [src, ref, tok_ref])
    translator = _load_translator(args)
    output = _Output(args.output) if args.output else None
    try:
        results = _translate_lines(args, translator, sources, options, output)
    finally:
        if output is not None:
            output.close()
    hyps = [r.text for r in results]
    # a model that writes lowercase is scored case-insensitively
    lowercase = translator.tokenizer.lowercase
    print(score(hyps, refs, lang or "", tok_refs, lowercase=lowercase).format())
    return 0


SERVE_LIMITS = {  # the integer `Limits` of `qkv serve`, each an option of the same name
    "max_body_bytes": "request body size",
    "max_chars": "characters of text per request",
    "max_sentences": "sentences (lines) per request",
    "max_beam": "beam and n-best per request",
    "max_output_tokens": "max_len_b and min_len per request",
    "max_decode_tokens": "beam x output length limit, summed over a request's sentences",
    "long_request_tokens": "requests that may decode more (as above) have a decoding thread of "
    "their own",
    "max_queue": "requests waiting for the decoder; beyond: 503",
}


def cmd_serve(args: argparse.Namespace) -> int:
    from ..runtime.process import configure_process
    from .server import Limits, create_app, load_models, serve
    from .server.run import bind, warm_up

    options = DecodeOptions(
        beam=args.beam, alpha=args.alpha, max_len_a=args.max_len_a, max_len_b=args.max_len_b
    )
    limits = Limits(
        max_body_bytes=args.max_body_bytes,
        max_chars=args.max_chars,
        max_sentences=args.max_sentences,
        max_beam=args.max_beam,
        max_output_tokens=args.max_output_tokens,
        max_decode_tokens=args.max_decode_tokens,
        long_request_tokens=args.long_request_tokens,
        timeout=args.timeout,
        max_queue=args.max_queue,
    )
    for name in SERVE_LIMITS:
        if getattr(limits, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if not limits.timeout > 0 or args.max_wait_ms < 0 or args.batch_tokens < 1:
        raise ValueError("--timeout must be > 0, --max-wait-ms >= 0 and --batch-tokens >= 1")
    if not args.grace >= 0:
        raise ValueError("--grace must be >= 0")
    if args.max_len_b > limits.max_output_tokens:
        raise ValueError(
            f"--max-len-b {args.max_len_b} is over --max-output-tokens {limits.max_output_tokens}"
        )
    check_device(args.device)
    bind(args.host, args.port).close()  # a busy port or an unknown host: before the models load
    configure_process(threads=args.threads, cudnn_attention=False)  # qkv.runtime.process
    models = load_models(
        args.model,
        args.pair or (),
        args.device,
        args.max_src_tokens,
        args.quantize,
        args.pack,
        args.precision,
    )
    _print_decoding_path(models[0].translator)
    warm_up(models, options)
    app = create_app(
        models,
        limits=limits,
        options=options,
        api_key=args.api_key or os.environ.get("QKV_API_KEY") or None,
        max_wait=args.max_wait_ms / 1000,
        batch_tokens=args.batch_tokens,
        batching=not args.no_batching,
        cors_origins=args.cors,
    )
    print(f"qkv serve: {', '.join(m.pair for m in models)}", flush=True)
    lost = serve(app, args.host, args.port, grace=args.grace, access_log=args.access_log)
    return 1 if lost else 0


def _add_path_arguments(p: argparse.ArgumentParser) -> None:
    """--precision and --pack/--no-pack, as translate, evaluate, attention and serve take them:
    what is left at auto is measured on this CPU (qkv.runtime.choice)."""
    from ..runtime.precision import PRECISIONS

    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="weights and compute: fp32, bf16, or auto (the faster of the two on this device; "
        "bf16 only where it is native: AVX512_BF16/AMX CPU, CUDA with bf16) (default: %(default)s)",
    )
    p.add_argument(
        "--pack",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="linear weights packed for oneDNN (--pack) or kept as nn.Linear (--no-pack) "
        "(default: the faster on this CPU, measured once and cached)",
    )


def _add_serve_arguments(p: argparse.ArgumentParser) -> None:
    from ..runtime.quantize import QUANTIZATIONS
    from .server.limits import Limits

    limits, defaults = Limits(), DecodeOptions()
    p.add_argument(
        "--model",
        required=True,
        action="append",
        help="model directory; give it again for each further language pair",
    )
    p.add_argument(
        "--pair",
        action="append",
        help="SRC-TGT (e.g. en-de) of each --model, in order, for models whose config.json "
        "records no languages",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    p.add_argument("--port", type=int, default=8000, help="0: a free port (default: %(default)s)")
    p.add_argument(
        "--api-key",
        help="require this key (LibreTranslate's api_key field or 'Authorization: Bearer KEY'; "
        "default: $QKV_API_KEY, else none)",
    )
    p.add_argument(
        "--cors",
        action="append",
        metavar="ORIGIN",
        help="let web pages of this origin call the APIs from a browser ('*': any); repeatable",
    )
    p.add_argument("--beam", type=int, default=defaults.beam, help="default beam (%(default)s)")
    p.add_argument(
        "--alpha", type=float, default=defaults.alpha, help="default length penalty (%(default)s)"
    )
    p.add_argument(
        "--max-len-a",
        type=float,
        default=defaults.max_len_a,
        help="default output limit: a * source tokens + b (a: %(default)s)",
    )
    p.add_argument(
        "--max-len-b",
        type=int,
        default=defaults.max_len_b,
        help="default output limit: a * source tokens + b (b: %(default)s)",
    )
    for name, help_text in SERVE_LIMITS.items():
        default = getattr(limits, name)
        flag = f"--{name.replace('_', '-')}"
        p.add_argument(flag, type=int, default=default, help=f"{help_text} ({default})")
    p.add_argument(
        "--timeout",
        type=float,
        default=limits.timeout,
        help="seconds a request may take; beyond: 504 (%(default)s)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=20.0,
        help="on SIGTERM or Ctrl-C, seconds to finish the requests in flight; then they are "
        "answered 503 and the exit status is 1 (%(default)s)",
    )
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=5.0,
        help="how long the decoder waits for more requests to batch with (%(default)s)",
    )
    p.add_argument(
        "--batch-tokens",
        type=int,
        default=DEFAULT_BATCH_TOKENS,
        help="most padded source tokens in a batch (%(default)s)",
    )
    p.add_argument(
        "--no-batching", action="store_true", help="decode one request at a time (to compare)"
    )
    p.add_argument(
        "--max-src-tokens",
        type=int,
        default=DEFAULT_MAX_SRC_TOKENS,
        help="longer sentences are truncated (%(default)s)",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps, ... (default: cpu)")
    p.add_argument("--quantize", choices=QUANTIZATIONS, help="int8 linear layers (CPU)")
    _add_path_arguments(p)
    p.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's)")
    p.add_argument("--access-log", action="store_true", help="log every request")


def _add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments `translate` and `evaluate` share; every default comes from the library."""
    from ..runtime.quantize import QUANTIZATIONS

    defaults = DecodeOptions()
    p.add_argument(
        "--model",
        required=True,
        action="append",
        help="model directory (config.json, model.safetensors, tokenizer); give it again for each "
        "further model of an ensemble (same tokenizer): their probabilities are averaged",
    )
    p.add_argument(
        "--beam",
        type=int,
        default=defaults.beam,
        help="beam size; 1 is greedy decoding (default: %(default)s)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=defaults.alpha,
        help="length penalty ((5 + len) / 6) ** alpha (default: %(default)s)",
    )
    p.add_argument(
        "--max-len-a",
        type=float,
        default=defaults.max_len_a,
        help="output limit: a * source tokens + b (default a: %(default)s)",
    )
    p.add_argument(
        "--max-len-b",
        type=int,
        default=defaults.max_len_b,
        help="output limit: a * source tokens + b (default b: %(default)s)",
    )
    p.add_argument(
        "--min-len",
        type=int,
        default=defaults.min_len,
        help="no end of sentence before this many tokens (default: %(default)s)",
    )
    p.add_argument(
        "--batch-tokens",
        type=int,
        default=DEFAULT_BATCH_TOKENS,
        help="most padded source tokens in a batch (default: %(default)s)",
    )
    p.add_argument(
        "--max-src-tokens",
        type=int,
        default=DEFAULT_MAX_SRC_TOKENS,
        help="longer source lines are truncated, with a warning; learned positions: at most "
        "max_positions (default: %(default)s)",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps, ... (default: cpu)")
    p.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        help="int8 dynamic quantization of the linear layers (CPU)",
    )
    _add_path_arguments(p)
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="batches decoded at once: on a CPU, forked processes of one thread each (give as "
        "many as cores; threads where the system does not fork) (default: %(default)s)",
    )


def cmd_generate(args: argparse.Namespace) -> int:
    from ..decode.options import MAX_OUTPUT_TOKENS
    from .generate import GENERATE, Generator

    if not 0 <= args.max_new_tokens <= MAX_OUTPUT_TOKENS:
        raise ValueError(f"--max-new-tokens must be between 0 and {MAX_OUTPUT_TOKENS}")
    options = GENERATE.replace(
        max_len_b=args.max_new_tokens,
        sampling=args.sampling,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    )
    check_device(args.device)
    if args.prompt is not None and args.input is not None:
        raise ValueError("give --prompt or --input, not both")
    prompts = args.prompt if args.prompt is not None else _read_input_lines(args.input)
    output = _Output()
    generator = Generator.load(args.model, args.device)
    output.write(generator.generate(prompts, options))
    return 0


def cmd_classify(args: argparse.Namespace) -> int:
    from .classify import Classifier

    check_device(args.device)
    lines = _read_input_lines(args.input)
    output = _Output()
    classifier = Classifier.load(args.model, args.device)
    output.write(classifier.classify(lines))
    return 0


def _add_generate_and_classify(sub: argparse._SubParsersAction) -> None:
    from .generate import GENERATE

    p = sub.add_parser(
        "generate",
        help="continue prompts with a language model (qkv train --task lm), one line each",
        description="One continuation per prompt (--prompt, repeatable, else the lines of --input "
        "or stdin), greedy or sampled, decoded with the key/value cache.",
    )
    p.add_argument("--model", required=True, help="model directory of a decoder-only LM")
    p.add_argument("--prompt", action="append", help="a prompt (give it again for more)")
    p.add_argument("--input", help="UTF-8 file of prompts, one per line; default: stdin")
    p.add_argument("--max-new-tokens", type=int, default=GENERATE.max_len_b)
    p.add_argument("--sample", dest="sampling", action="store_true", help="sample, not greedy")
    p.add_argument("--temperature", type=float, default=GENERATE.temperature)
    p.add_argument("--top-k", type=int, default=GENERATE.top_k, help="0: all tokens")
    p.add_argument("--top-p", type=float, default=GENERATE.top_p, help="1.0: all tokens")
    p.add_argument("--seed", type=int, default=GENERATE.seed, help="sampling seed (default: 0)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, ... (default: cpu)")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "classify",
        help="label lines with a classifier (qkv train --task classify), one label per line",
    )
    p.add_argument("--model", required=True, help="model directory of a classifier")
    p.add_argument("--input", help="UTF-8 text file (.gz allowed); default: stdin")
    p.add_argument("--device", default="cpu", help="cpu, cuda, ... (default: cpu)")
    p.set_defaults(func=cmd_classify)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qkv", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("params", help="print the parameter count of a preset")
    p.add_argument("--preset", default="base", choices=sorted(PRESETS))
    p.add_argument("--vocab", type=int, default=37000, help="shared vocabulary size (paper: 37000)")
    p.set_defaults(func=cmd_params)

    p = sub.add_parser(
        "train",
        help="train a translation model (or --task lm, mlm, classify); extra --key value pairs "
        "override the config",
        description="Train a model directory. Every TrainConfig key can be given as --key value "
        "(model keys as --model.KEY value); an unknown key is an error.",
    )
    p.add_argument(
        "config", nargs="?", help="YAML recipe (see configs/); defaults apply without one"
    )
    p.add_argument("--out", required=True, help="output model directory")
    p.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its last checkpoint"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into --out even if it is a non-empty directory that holds no training run",
    )
    p.add_argument(
        "--allow-data-change",
        action="store_true",
        help="--resume even if the training or validation data differs from the run's",
    )
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "demo", help="train a small model on the built-in synthetic corpus and translate with it"
    )
    p.add_argument(
        "--out", default="qkv-demo", help="where to save the model directory (default: %(default)s)"
    )
    p.add_argument(
        "--target", default="en", choices=["en", "zh"], help="number words in English or Chinese"
    )
    p.add_argument("--steps", type=int, help="training updates (default: the demo recipe's)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into --out even if it is a non-empty directory that holds no demo run",
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "figures",
        help="draw every idea of the paper as a PNG, from qkv's own modules (docs/concepts.md)",
    )
    p.add_argument("--out", required=True, help="folder for the PNG files (e.g. docs/figures)")
    p.add_argument("--small", action="store_true", help="small sizes and a quick demo model")
    p.add_argument(
        "--demo-model", help="a model directory for the cross-attention figure (default: train one)"
    )
    p.add_argument("--only", nargs="+", metavar="NAME", help="draw only these figures")
    p.set_defaults(func=cmd_figures)

    p = sub.add_parser("average", help="average the last (or best) N checkpoints of a training run")
    p.add_argument("--model", required=True, help="the training run's output directory")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--last", type=int, default=10, help="how many of the newest checkpoints (default: 10)"
    )
    which.add_argument(
        "--best",
        type=int,
        metavar="N",
        help="the N consecutive kept checkpoints with the best mean validation score "
        "(the run's valid_metric)",
    )
    p.add_argument(
        "--out", help="write a new model directory here (default: replace the run's weights)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into --out even if it is a non-empty directory (its model is replaced)",
    )
    p.set_defaults(func=cmd_average)

    p = sub.add_parser(
        "translate",
        help="translate lines from stdin or --input to stdout, one line per line",
        description="Translate text: one output line per input line (an empty line gives an empty "
        "line), written in input order as soon as it and the lines before it are done. A byte "
        "order mark at the start of the input is dropped. Beam search by default; --sample draws "
        "tokens instead.",
    )
    _add_decoding_arguments(p)
    defaults = DecodeOptions()
    p.add_argument("--input", help="UTF-8 text file (.gz allowed); default: stdin")
    p.add_argument(
        "--nbest",
        type=int,
        default=defaults.nbest,
        help="with N > 1, write the N best as 'line ||| translation ||| score' (Moses n-best "
        "format; default: %(default)s)",
    )
    p.add_argument(
        "--sample",
        dest="sampling",
        action="store_true",
        default=defaults.sampling,
        help="sample instead of beam search (one hypothesis)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=defaults.temperature,
        help="sampling temperature (default: %(default)s)",
    )
    p.add_argument(
        "--top-k",
        type=int,
        default=defaults.top_k,
        help="sample from the k most probable tokens; 0: all (default: %(default)s)",
    )
    p.add_argument(
        "--top-p",
        type=float,
        default=defaults.top_p,
        help="sample from the smallest set with mass >= p (default: %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help="random seed for --sample (default: %(default)s)",
    )
    p.add_argument(
        "--alignment",
        action="store_true",
        help="after a tab, the hard word alignment of each translation from the last layer's "
        "cross-attention: 'src-tgt' pairs of 0-based whitespace words (fast_align / Marian)",
    )
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser(
        "attention",
        help="translate and write every attention map: attention.json and PNG heatmaps",
        description="Translate each sentence, then write the attention weights of every layer "
        "and head (encoder self-attention, decoder self-attention, cross-attention) to "
        "OUT/attention.json and draw them as PNG heatmaps with the tokens as labels. With "
        "several sentences, attention.json holds a list and each sentence's PNGs lie in OUT/N/. "
        "The format: `qkv.apps.attention`.",
    )
    _add_decoding_arguments(p)
    p.add_argument("sentences", nargs="*", help="source sentences (or --input FILE)")
    p.add_argument("--input", help="UTF-8 text file (.gz allowed), one sentence per line")
    p.add_argument(
        "--out", required=True, help="folder for attention.json and the PNGs (new or empty)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty --out, replacing the attention.json and PNGs of an earlier "
        "qkv attention there (other files stay)",
    )
    p.set_defaults(func=cmd_attention)

    p = sub.add_parser(
        "evaluate",
        help="translate a test set and print sacreBLEU BLEU, chrF (+ tokenized BLEU)",
        description="Translate --src (or a named corpus split) and score against the references: "
        "sacreBLEU BLEU and chrF with their signatures, and tokenized lowercase BLEU when "
        "tokenized references are given or known (Multi30k).",
    )
    _add_decoding_arguments(p)
    p.add_argument("--src", help="source file, one sentence per line")
    p.add_argument("--ref", help="reference file, line-aligned with --src")
    p.add_argument(
        "--tok-ref",
        help="lowercased Moses-tokenized references (e.g. test_2016_flickr.lc.norm.tok.de)",
    )
    p.add_argument("--corpus", help="a named corpus instead of files: multi30k, tatoeba-zh-en")
    p.add_argument("--split", help="split of --corpus (default: its test split)")
    p.add_argument("--pair", help="languages SRC-TGT, e.g. en-de (needed with --corpus)")
    p.add_argument(
        "--data-dir",
        help="folder holding the named corpora (default: $QKV_DATA_DIR, else the cache)",
    )
    p.add_argument(
        "--download",
        action="store_true",
        help="fetch a missing --corpus split (checked by sha256) into --data-dir",
    )
    p.add_argument(
        "--lang", help="target language for BLEU tokenization (default: the target of --pair)"
    )
    p.add_argument(
        "--output",
        help="also write the translations to this file, as they are done (checked before decoding)",
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "serve",
        help="serve model directories over HTTP: LibreTranslate-compatible and native APIs, a page",
        description="Serve translations over HTTP (see qkv.apps.server): POST /translate "
        "(LibreTranslate), POST /v1/translate (native), /languages, /health, /metrics, /docs, "
        "and a page at /. Sentences of concurrent requests are decoded in shared batches. "
        "SIGTERM or Ctrl-C answers the requests in flight, then stops.",
    )
    _add_serve_arguments(p)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("convert", help="import a model of another toolkit as a model directory")
    p.add_argument("format", choices=["marian"], help="marian: OPUS-MT / Hugging Face Marian")
    p.add_argument("src_dir", help="config.json, weights, source.spm, target.spm, vocab.json")
    p.add_argument("--out", required=True, help="the new qkv model directory")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("export", help="write a model directory in another toolkit's format")
    p.add_argument("format", choices=["ctranslate2"], help="ctranslate2: a CTranslate2 model")
    p.add_argument("model_dir", help="a qkv model directory (an encoder-decoder Transformer)")
    p.add_argument("--out", required=True, help="the new CTranslate2 model directory")
    p.add_argument(
        "--quantization",
        choices=["float32", "int8", "int8_float32", "bfloat16"],
        default="float32",
        help="weight type of the exported model (default: %(default)s)",
    )
    p.set_defaults(func=cmd_export)
    _add_generate_and_classify(sub)
    return parser


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """For `qkv train`: separate its own arguments from the `--key value` config overrides."""
    if not argv or argv[0] != "train":
        return argv, []
    own, overrides, i = argv[:1], [], 1
    while i < len(argv):
        token = argv[i]
        own_flags = ("--out", "--resume", "--overwrite", "--allow-data-change", "-h", "--help")
        if token in own_flags or token.startswith("--out="):
            takes_value = token == "--out"
            own += argv[i : i + 1 + takes_value]
            i += 1 + takes_value
        elif token.startswith("--"):
            has_value = "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            overrides += argv[i : i + 1 + has_value]
            i += 1 + has_value
        else:
            own.append(token)  # the config file
            i += 1
    return own, overrides


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, overrides = split_overrides(argv)
    args = parser.parse_args(argv)
    args.overrides = overrides
    args.own_process = from_command_line  # the process is the command's: it may be restarted
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader of the output has gone (`| head`): stop, as Unix tools do
        _detach_stdout()
        return 141  # 128 + SIGPIPE, the status of a process that SIGPIPE ended
    except KeyboardInterrupt as e:  # Ctrl-C: what was done, in one line
        detail = f" ({e})" if str(e) else ""
        _error_line(f"qkv {args.command}: interrupted{detail}")
        return 130  # 128 + SIGINT
    except (ValueError, OSError) as e:  # user errors and the system's refusals: one clear line
        if isinstance(e, OutputError) and e.on_stdout:
            _detach_stdout()
        _error_line(f"qkv {args.command}: error: {_one_line(e)}")
        return 2


def _one_line(e: BaseException) -> str:
    """The message of an error on one line; an OSError as "reason: file"."""
    if isinstance(e, OSError) and e.strerror:
        text = f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    else:
        text = str(e) or type(e).__name__
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _error_line(text: str) -> None:
    if sys.stderr is not None:
        print(text, file=sys.stderr)


def _detach_stdout() -> None:
    """Point stdout's file descriptor at /dev/null, so that Python's flush at exit cannot fail
    again on what is left in its buffer (and print "Exception ignored ...")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no stdout, or not a file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
