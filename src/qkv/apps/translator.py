"""Text in, text out: a model directory as a translator.

    translator = Translator.load("runs/multi30k-de-en")     # config.json, weights, tokenizer
    translator.translate(["Ein Mann fährt Fahrrad."])       # -> ["A man rides a bike."]
    translator.translate(texts, DecodeOptions(beam=5, alpha=1.0))
    for t in translator.translate_stream(texts):            # in input order, chunk by chunk
        print(t.text, flush=True)

Translating is two steps, whoever calls them: `prepare` checks and encodes the texts once (a
`Job`), and `decode` batches its sentences by length and returns the translations in input order,
whatever the batching. How the model runs (device, precision, batching, workers) is one
`RuntimeOptions`, kept as `translator.runtime`.

Details: docs/architecture.md, "The translator" (every call, the batches, long and empty lines).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.batching import chunks, pad_sequences, sorted_batches
from ..data.tokenizer import SubwordTokenizer, checked_texts
from ..decode.constrained import Constraints
from ..decode.ensemble import Ensemble
from ..decode.options import DecodeOptions
from ..decode.search import Abandoned, Hypothesis, attention_weights, run
from ..interop.hub import resolve_model
from ..model import Transformer
from ..model.rnn import RNNSearch
from ..modeldir import load_languages, load_model_dir
from ..runtime.choice import choose_decoding_path
from ..runtime.prepare import prepare_for_decoding
from ..runtime.quantize import int8_engine_note
from ..runtime.runtime_options import DEFAULT_BATCH_TOKENS, DEFAULT_MAX_SRC_TOKENS, RuntimeOptions
from ..runtime.workers import ForkedWorkers, can_fork, map_in_workers
from .glossary import Glossary, check_search, joining_pieces
from .translation import Extras, Job, Translation, translation_of

CHUNK_BATCHES = 16  # translate_stream decodes about this many batches' worth of lines at a time
NO_EXTRAS = Extras()  # a translation's text and score only
BLOCK_LINES = 1000  # and reads and encodes its input this many lines at a time


@dataclass(frozen=True)
class _Search:
    """One batch to search: src (B, S), the options, max_len (B,), the seed, abandoned (row ->
    drop it?) and each row's constraints (None: none)."""

    src: Tensor
    options: DecodeOptions
    max_len: Tensor
    seed: int
    abandoned: Abandoned | None
    constraints: list[Constraints] | None


class Translator:
    """A Transformer (or an `Ensemble` of them, or the `RNNSearch` baseline) and its tokenizer:
    lists of sentences in, lists of translations out."""

    def __init__(
        self,
        model: Transformer | Ensemble | RNNSearch,
        tokenizer: SubwordTokenizer,
        runtime: RuntimeOptions | None = None,
    ) -> None:
        """runtime: batch_tokens, workers and max_src_tokens of this translator (None: the
        defaults); the model runs as it is given (`load` prepares it as the others say). An
        encoder with learned positions (any member's, in an ensemble) lowers max_src_tokens to
        its table size: `max_src_tokens` is the limit in force."""
        if not isinstance(model, Transformer | Ensemble | RNNSearch):
            name = type(model).__name__
            raise ValueError(f"translation needs an encoder-decoder Transformer, got {name}")
        self.runtime = _checked_runtime(runtime)
        self.model = model.eval()
        self.tokenizer = tokenizer
        max_src_tokens = self.runtime.max_src_tokens
        members = model.members if isinstance(model, Ensemble) else [model]
        for member in members:
            if isinstance(member, RNNSearch):  # a recurrent encoder reads any length
                continue
            table = member.encoder.max_positions()
            if table is not None:
                max_src_tokens = min(max_src_tokens, table)
        self.max_src_tokens = max_src_tokens
        if self.max_src_tokens < 2:
            raise ValueError(f"max_src_tokens must be >= 2 (a token and eos), got {max_src_tokens}")
        self._workers: ForkedWorkers | None = None  # forked at the first call with workers > 1
        self._joins: Tensor | None = None  # the target's `joining_pieces`, once a glossary asks
        self.decoding_path = "decoding path: as given"  # `load` says what it chose and why
        self.languages: tuple[str, str] | None = None  # (source, target), where recorded

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike[str] | list[str | os.PathLike[str]],
        runtime: RuntimeOptions | None = None,
    ) -> Translator:
        """Load a model directory written by `save_model_dir` (weights, config and tokenizer), or a
        list of them as an `Ensemble` (their tokenizers must be the same). "hf:ORG/NAME[@REV]"
        names a Marian model on the Hugging Face Hub, converted once (`interop.hub`).

        runtime (None: `RuntimeOptions()`): the device, and how the model is prepared for it
        (`runtime.prepare.prepare_for_decoding`): int8 quantization, packed weights, precision.
        What is left open (pack None, precision "auto") is the fastest path measured on this CPU
        (`runtime.choice`; bf16 only where the CPU computes it natively); `decoding_path` says
        what was chosen and why. The translator keeps `runtime` for its batching and workers.
        """
        runtime = _checked_runtime(runtime)
        directories = list(directory) if isinstance(directory, list | tuple) else [directory]
        if not directories:
            raise ValueError("no model directory given: Translator.load needs at least one")
        directories = [resolve_model(d) for d in directories]
        device = torch.device(runtime.device)  # checked by RuntimeOptions
        pack, precision, quantize = runtime.pack, runtime.precision, runtime.quantize
        capture = runtime.capture
        models = []
        for d in directories:
            model = load_model_dir(d, device)
            if not isinstance(model, Transformer | RNNSearch):
                name = type(model).__name__
                raise ValueError(f"{d} holds a {name}; translation needs a Transformer")
            if isinstance(model, RNNSearch) and len(directories) > 1:
                raise ValueError(f"{d} holds an RNNSearch; an ensemble takes Transformers only")
            plain_rows = 0
            if quantize is None:
                path = choose_decoding_path(model, device, precision, False if capture else pack)
                pack, precision, why = path.pack, path.precision, path.why  # the next ones alike
                plain_rows = path.plain_rows
            else:
                why = f"decoding path: {quantize} linear layers (as set)"
            if capture:
                why += "; the decoding step captured (compiled once, as set)"
            chosen = runtime.replace(pack=pack, precision=precision)  # what was left open, chosen
            models.append(prepare_for_decoding(model, chosen, plain_rows))
            why += int8_engine_note(models[-1])
        tokenizer = SubwordTokenizer.load(directories[0])
        for d in directories[1:]:
            if not SubwordTokenizer.load(d).same_as(tokenizer):
                raise ValueError(
                    f"{d} and {directories[0]} have different tokenizers; an ensemble needs one"
                )
        model = models[0] if len(models) == 1 else Ensemble(models).eval()
        translator = cls(model, tokenizer, runtime)
        translator.decoding_path = why
        translator.languages = load_languages(directories[0])
        return translator

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def target_vocab_size(self) -> int:
        """How many tokens the model can write (the largest useful beam)."""
        model = self.model.members[0] if isinstance(self.model, Ensemble) else self.model
        return model.config.target_vocab_size

    def translate(
        self,
        texts: Sequence[str],
        options: DecodeOptions | None = None,
        *,
        batch_tokens: int | None = None,
        workers: int | None = None,
        glossary: Glossary | None = None,
    ) -> list[str]:
        """Translate sentences; one output string per input string (see `translate_detailed`)."""
        results = self.translate_detailed(
            texts, options, batch_tokens=batch_tokens, workers=workers, glossary=glossary
        )
        return [t.text for t in results]

    def translate_detailed(
        self,
        texts: Sequence[str],
        options: DecodeOptions | None = None,
        *,
        attention: bool = False,
        alignment: bool = False,
        attention_maps: bool = False,
        batch_tokens: int | None = None,
        workers: int | None = None,
        glossary: Glossary | None = None,
    ) -> list[Translation]:
        """Translate sentences; one `Translation` per input string, in input order: `prepare`,
        then `decode`, with one warning counting the lines truncated.

        texts: a list (or other sequence) of sentences; one string alone is refused.
        options: beam search, sampling and output length limits; None: `DecodeOptions()`. A beam
            larger than the target vocabulary is refused.
        attention: also return the best hypothesis's cross-attention and its tokens.
        alignment: also return its hard word alignment (and its tokens).
        attention_maps: also return every layer's and head's attention weights.
            The three need one model, not an ensemble; they are computed after the search, by
            one teacher-forced pass over each batch's best hypotheses (`search.attention_weights`).
        batch_tokens, workers: this call's, in place of `runtime`'s (`RuntimeOptions`; None: the
            translator's). Worker processes are forked at the first call that needs them and kept
            for the next ones until `close`.
        glossary: the terms each translation must use where the source has them (`apps.glossary`;
            lexically constrained beam search, `decode.constrained`).
        """
        extras = Extras(attention, alignment, attention_maps)
        job = self.prepare(texts, options, glossary, extras=extras)
        runtime = self._runtime(batch_tokens, workers)  # checked before any decoding
        self._warn_truncated(len(job.cut), len(job.texts))
        return self._decode(job, runtime)  # type: ignore[return-value]

    def translate_stream(
        self,
        texts: Iterable[str],
        options: DecodeOptions | None = None,
        *,
        attention: bool = False,
        alignment: bool = False,
        attention_maps: bool = False,
        batch_tokens: int | None = None,
        workers: int | None = None,
        chunk_tokens: int | None = None,
        glossary: Glossary | None = None,
    ) -> Iterator[Translation]:
        """Translate sentences as `translate_detailed` does, but yield each `Translation`, in input
        order, as soon as it and all the ones before it are done (an interrupted run keeps what
        it finished). `texts`: a list, or any iterable (a file's lines), read BLOCK_LINES lines
        at a time; decoded a chunk at a time: consecutive lines of at most `chunk_tokens` source
        tokens (default: CHUNK_BATCHES * batch_tokens, at least `workers` batches' worth; a longer
        line is a chunk alone). A list's texts and the options are checked at the call (another
        iterable's as they are read); leaving the iteration early decodes nothing more.
        Sampling's draws depend on the batch, hence on the chunking."""
        extras = Extras(attention, alignment, attention_maps)
        if isinstance(texts, Sequence):
            texts = checked_texts(texts)
        options = self._check_options(options, extras)
        runtime = self._runtime(batch_tokens, workers)
        if chunk_tokens is None:
            chunk_tokens = max(CHUNK_BATCHES, runtime.workers) * runtime.batch_tokens
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
        return self._stream(texts, options, extras, runtime, chunk_tokens, glossary)

    def prepare(
        self,
        texts: Sequence[str],
        options: DecodeOptions | None = None,
        glossary: Glossary | None = None,
        *,
        extras: Extras = NO_EXTRAS,
    ) -> Job:
        """The `Job` of translating these sentences (what `decode` decodes): texts and options
        checked, each text encoded once (cut to leave room for eos within `max_src_tokens`; the
        job's `cut` says which), the glossary's terms of each (beam search needed where any
        occurs), and with them the work the job may take (`Job.work`). Nothing is decoded."""
        texts = checked_texts(texts)
        options = self._check_options(options, extras)
        ids, cut = self._encoded(texts)
        return Job(texts, options, ids, self._terms(texts, options, glossary), extras, cut)

    def _encoded(self, texts: list[str]) -> tuple[list[list[int]], dict[int, int]]:
        """Each text's source ids, cut to leave room for eos within max_src_tokens, and for each
        text cut its whole length in subword tokens."""
        whole = self.tokenizer.encode_src(texts)
        room = self.max_src_tokens - 1
        cut = {i: len(seq) for i, seq in enumerate(whole) if len(seq) > room}
        return [seq[:room] for seq in whole], cut

    def _terms(
        self, texts: list[str], options: DecodeOptions, glossary: Glossary | None
    ) -> list[Constraints] | None:
        """For each text, the target-token sequences `glossary` asks its translation to contain;
        None without a glossary or where no term occurs (the plain search, whose translations a
        sentence without terms gets anyway). Terms need beam search (a beam of 2 or more)."""
        if glossary is None:
            return None
        found = glossary.constraints(texts, self.tokenizer)
        if not any(found):
            return None
        check_search(options)
        return found

    def decode(
        self,
        job: Job,
        *,
        abandoned: Abandoned | None = None,
        batch_tokens: int | None = None,
        workers: int | None = None,
    ) -> list[Translation | None]:
        """The translations of a `prepare`d job, in its order, in batches of at most batch_tokens
        padded source tokens (None: `runtime`'s) on `workers` (None: `runtime`'s). abandoned: asked
        with a sentence's index in the job at every decoding step; once True, that sentence
        leaves its batch and gets None (on threads only: forked workers are not asked)."""
        if not isinstance(job, Job):
            raise TypeError(f"decode takes a Job (Translator.prepare's), got {type(job).__name__}")
        self._check_options(job.options, job.extras)
        return self._decode(job, self._runtime(batch_tokens, workers), abandoned=abandoned)

    def _runtime(self, batch_tokens: int | None, workers: int | None) -> RuntimeOptions:
        """The runtime options with this call's batch_tokens and workers (None: the
        translator's)."""
        given = {"batch_tokens": batch_tokens, "workers": workers}
        changes = {
            name: value
            for name, value in given.items()
            if value is not None and value != getattr(self.runtime, name)
        }
        return self.runtime.replace(**changes) if changes else self.runtime

    def _check_options(self, options: DecodeOptions | None, extras: Extras) -> DecodeOptions:
        """The options (None: the defaults), checked against this translator."""
        if options is None:
            options = DecodeOptions()
        if not isinstance(options, DecodeOptions):
            name = type(options).__name__
            raise TypeError(f"options must be a DecodeOptions, got {name}")
        vocab = self.target_vocab_size
        if options.beam_search and options.beam > vocab:
            raise ValueError(
                f"beam {options.beam} is larger than the model's target vocabulary of {vocab} "
                f"tokens; use a beam of at most {vocab}"
            )
        if extras.weights and isinstance(self.model, Ensemble):
            raise ValueError(
                "attention weights come from one model; translate with one model for them"
            )
        return options

    def _stream(
        self,
        texts: Iterable[str],
        options: DecodeOptions,
        extras: Extras,
        runtime: RuntimeOptions,
        chunk_tokens: float,
        glossary: Glossary | None,
    ) -> Iterator[Translation]:
        """The translations of `texts`, in order: read, checked and encoded BLOCK_LINES at a time,
        decoded a chunk of at most chunk_tokens source tokens at a time, batched as `runtime`
        says. Batch b of the whole input samples with seed + b. At the end, one warning counts
        the lines truncated."""
        seen, truncated, first_batch = 0, 0, 0

        def encode(block: list[str]) -> list[list[int]]:
            nonlocal seen, truncated
            ids, cut = self._encoded(checked_texts(block, seen))
            seen, truncated = seen + len(block), truncated + len(cut)
            return ids

        for chunk, ids in chunks(texts, encode, chunk_tokens, BLOCK_LINES):
            # the chunk's job (its lines' cuts are counted above, not kept)
            terms = self._terms(chunk, options, glossary)
            job = Job(chunk, options, ids, terms, extras)
            batches = sorted_batches(ids, runtime.batch_tokens, runtime.workers)
            yield from self._decode_batches(job, batches, runtime.workers, first_batch)  # type: ignore[misc]
            first_batch += len(batches)
        self._warn_truncated(truncated, seen)

    def _decode(
        self, job: Job, runtime: RuntimeOptions, abandoned: Abandoned | None = None
    ) -> list[Translation | None]:
        """The translations of a job, batched as `runtime` says (`data.batching.sorted_batches`)."""
        batches = sorted_batches(job.ids, runtime.batch_tokens, runtime.workers)
        return self._decode_batches(job, batches, runtime.workers, 0, abandoned)

    def _decode_batches(
        self,
        job: Job,
        batches: list[list[int]],
        workers: int,
        first_batch: int,
        abandoned: Abandoned | None = None,
    ) -> list[Translation | None]:
        """The translations of the job's sentences, decoding the given batches of indices (empty
        ids are not decoded; batch b samples with seed + first_batch + b)."""
        ids, options, extras = job.ids, job.options, job.extras
        results = [extras.empty() if not seq else None for seq in ids]
        # on a CPU that forks, worker processes: no GIL between the searches
        forked = workers > 1 and len(batches) > 1 and self.device.type == "cpu" and can_fork()
        searches: list[_Search] = []
        for b, batch in enumerate(batches):
            rows = [[*ids[i], self.tokenizer.eos_id] for i in batch]
            src = pad_sequences(rows, self.tokenizer.pad_id).to(self.device)  # (B, S)
            lengths = [options.max_output_length(len(ids[i])) for i in batch]
            max_len = torch.tensor(lengths, device=self.device)  # (B,)
            dropped = None if abandoned is None or forked else _picked(abandoned, batch)
            found = None if job.constraints is None else [job.constraints[i] for i in batch]
            seed = options.seed + first_batch + b
            searches.append(_Search(src, options, max_len, seed, dropped, found))
        if forked:
            decoded = self._forked_workers(workers).map(searches)
        else:  # threads
            decoded = map_in_workers(self._run_search, searches, workers)
        for batch, search, hyps in zip(batches, searches, decoded, strict=True):
            done = [row for row, h in enumerate(hyps) if h]  # the rows not abandoned
            maps = None
            if extras.weights and done:  # one teacher-forced pass over the best hypotheses
                best = [hyps[r][0].tokens for r in done]
                kept = attention_weights(self.model, search.src[done], best)
                maps = dict(zip(done, kept, strict=True))
            for row, (i, sentence_hyps) in enumerate(zip(batch, hyps, strict=True)):
                if sentence_hyps:
                    row_maps = None if maps is None else maps[row]
                    results[i] = translation_of(
                        self.tokenizer, sentence_hyps, ids[i], row_maps, extras
                    )
        return results

    def _forked_workers(self, workers: int) -> ForkedWorkers:
        """This translator's worker processes, forked at the first call that needs them and kept
        for the next ones (the model does not change after loading)."""
        if self._workers is None or self._workers.workers != workers:
            self.close()
            self._workers = ForkedWorkers(self._run_search, workers)
        return self._workers

    def close(self) -> None:
        """Stop the worker processes, if any (the next call with workers > 1 forks new ones)."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def _run_search(self, search: _Search) -> list[list[Hypothesis]]:
        """The hypotheses of each row of the search's src (B, S), best first: sampled, greedy or
        beam search, constrained where its constraints say ([] for a row `abandoned` dropped)."""
        if search.constraints is not None and self._joins is None:
            self._joins = joining_pieces(self.tokenizer).to(self.device)
        return run(
            self.model,
            search.src,
            search.options,
            search.max_len,
            seed=search.seed,
            abandoned=search.abandoned,
            constraints=search.constraints,
            joins=None if search.constraints is None else self._joins,
        )

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Source ids of each text, truncated to leave room for eos within max_src_tokens (with
        one warning counting the lines truncated)."""
        ids, cut = self._encoded(checked_texts(texts))
        self._warn_truncated(len(cut), len(texts))
        return ids

    def _warn_truncated(self, n_long: int, n_lines: int) -> None:
        if n_long:
            warnings.warn(
                f"{n_long} of {n_lines} input lines are longer than {self.max_src_tokens - 1} "
                "subword tokens and were truncated to that length",
                stacklevel=3,
            )

    def translation_of(
        self, ids: list[int], hyps: list[Hypothesis], maps: bool = False
    ) -> Translation:
        """The `Translation` of hypotheses (best first) of source `ids` searched elsewhere (a traced
        search), with the best one's attention maps on request (as `translate_detailed` does)."""
        extras = Extras(maps=maps)
        self._check_options(None, extras)  # maps: one model, not an ensemble
        weights = None
        if maps:  # one teacher-forced pass over the best hypothesis
            src = pad_sequences([[*ids, self.tokenizer.eos_id]], self.tokenizer.pad_id)
            [weights] = attention_weights(self.model, src.to(self.device), [hyps[0].tokens])
        return translation_of(self.tokenizer, hyps, ids, weights, extras)


def _picked(abandoned: Abandoned, batch: list[int]) -> Abandoned:
    """`abandoned` asked about text batch[r] for row r of a batch."""
    return lambda r: abandoned(batch[r])


def _checked_runtime(runtime: RuntimeOptions | None) -> RuntimeOptions:
    """The runtime options given (None: the defaults), checked to be a `RuntimeOptions`."""
    if runtime is None:
        return RuntimeOptions()
    if not isinstance(runtime, RuntimeOptions):
        raise TypeError(f"runtime must be a RuntimeOptions, got {type(runtime).__name__}")
    return runtime


# the defaults, for the modules that take them from here
__all__ = ["DEFAULT_BATCH_TOKENS", "DEFAULT_MAX_SRC_TOKENS", "Job", "Translation", "Translator"]
