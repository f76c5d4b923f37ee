"""What the endpoints share: the served models, the limits, the decoding defaults, the API key,
the two decoding lanes and the metrics, in one `Service` on `app.state.service`.

    @router.post("/v1/example")
    async def example(request: Request, svc: ServiceDep, fields: JsonFields) -> ...:
        # ServiceDep: this Service; JsonFields (bodies.py): the body, 403 unless the key matches
        model = svc.resolve(source, target)                # 400 unless the pair is served
        svc.check_size(texts)                              # 400 / 413: unicode, sentences, chars
        pending = svc.check_options(model, o, texts)       # 400 / 413: beam, lengths, total work
        results = await svc.translate(request, pending)    # 503 busy or stopped, 504 too slow

A request's decoding is bounded before it starts (`check_options`: output tokens, beam, and their
product over its sentences) and while it runs (`translate`): past its time limit, or once its
client has gone, it leaves its batch at the next decoding step. Requests that may decode more
than `Limits.long_request_tokens` tokens have a lane (a `Batcher`) of their own.
"""

from __future__ import annotations

import asyncio
import hmac
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request

from ...data.tokenizer import check_unicode
from ...decode.options import TOKEN_COUNTS, DecodeOptions
from ..documents import SPLITS
from ..glossary import Glossary, check_search
from ..translation import Extras, Job
from ..translator import Translator
from .batcher import Batcher, Pending, QueueFull
from .files import FileStore
from .limits import Limits
from .metrics import Metrics

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "digits": "Digits", "en": "English",
    "es": "Spanish", "fr": "French", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ru": "Russian", "tr": "Turkish",
    "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


@dataclass(frozen=True)
class ServedModel:
    """A translator and the language pair it serves."""

    source: str
    target: str
    translator: Translator

    @property
    def pair(self) -> str:
        return f"{self.source}-{self.target}"


class HTTPError(Exception):
    """An error answered as {"error": message} with this status."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class Stopped(Exception):
    """The server stopped before this request was answered."""


@dataclass(eq=False)
class Service:
    """The state the endpoints share (see the module docstring). served: pair -> model, in the
    order given; lanes: the decoding threads for short requests and for long ones."""

    served: dict[str, ServedModel]
    limits: Limits
    options: DecodeOptions
    api_key: str | None
    lanes: list[Batcher]
    metrics: Metrics
    split: str = "sentences"  # how /translate cuts a text: "sentences" (of each line) or "lines"
    glossary: Glossary | None = None  # the server's terms, for every request
    files: FileStore = field(default_factory=FileStore)  # translated files to download
    draining: bool = False  # stopping: what is in flight is answered, nothing outlives it

    @classmethod
    def create(
        cls,
        models: list[ServedModel],
        limits: Limits,
        options: DecodeOptions,
        api_key: str | None,
        max_wait: float = 0.005,
        batching: bool = True,
        split: str = "sentences",
        glossary: Glossary | None = None,
    ) -> Service:
        """The service for these models, its lanes not started (see `Batcher` for max_wait and
        batching; its batches: each translator's `runtime.batch_tokens`); `split` for /translate:
        "sentences" or "lines"; `glossary`: terms every request's translations use, which needs
        beam search by default."""
        if glossary is not None:
            check_search(options)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        served = {m.pair: m for m in models}
        if len(served) != len(models):
            raise ValueError(f"two models serve the same pair: {[m.pair for m in models]}")
        metrics = Metrics()
        lanes = [  # decoding threads: short requests, long ones (limits.long_request_tokens)
            Batcher(
                {pair: m.translator for pair, m in served.items()},
                max_queue=limits.max_queue,
                max_wait=max_wait,
                batching=batching,
                on_batch=metrics.observe_batch,
            )
            for _ in range(2)
        ]
        svc = cls(served, limits, options, api_key, lanes, metrics, split, glossary=glossary)
        metrics.queue_depth.set_function(lambda: svc.queue)
        return svc

    # --- the lanes ---------------------------------------------------------------------------
    @property
    def queue(self) -> int:
        """Requests waiting for a decoder, in both lanes."""
        return sum(lane.depth for lane in self.lanes)

    def start(self) -> None:
        for lane in self.lanes:
            lane.start()

    async def stop(self) -> None:
        """Stops the lanes once the requests in flight are answered."""
        for lane in self.lanes:
            await asyncio.to_thread(lane.stop)

    def drain(self) -> None:
        """The server stops (SIGTERM): the requests in flight are answered, but no download link
        is handed out, as its file would go with the process (uvicorn accepts no connection)."""
        self.draining = True

    def abandon(self, error: BaseException) -> int:
        """Fails the queued and running requests with `error`; how many there were."""
        return sum(lane.abandon(error) for lane in self.lanes)

    # --- the checks of a request -------------------------------------------------------------
    def check_key(self, request: Request, given: Any) -> None:
        """403 unless the key given (a field, or `Authorization: Bearer`) is the server's."""
        key = self.api_key
        if key is None:
            return
        header = request.headers.get("authorization", "")
        if not given and header[:7].lower() == "bearer ":
            given = header[7:].strip()
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), key.encode()):
            raise HTTPError(403, "Invalid API key")

    def resolve(self, source: str | None, target: str | None) -> ServedModel:
        """The model serving source-target ("auto": the one pair into target; neither given: the
        one pair served); 400 naming the pairs served otherwise."""
        served = self.served
        pairs = ", ".join(served)
        if source is None and target is None and len(served) == 1:
            return next(iter(served.values()))
        if source is None or target is None:
            raise HTTPError(400, f"give source and target; this server translates {pairs}")
        if source == "auto":
            candidates = [m for m in served.values() if m.target == target]
            if len(candidates) == 1:
                return candidates[0]
            raise HTTPError(400, f"source auto: no single pair into {target!r}; served: {pairs}")
        model = served.get(f"{source}-{target}")
        if model is None:
            raise HTTPError(400, f"{source}-{target} is not served; this server translates {pairs}")
        return model

    def check_size(self, texts: list[str]) -> None:
        """400 for text that is not valid unicode; 413 over the sentence or character limit."""
        limits = self.limits
        try:
            check_unicode(texts)
        except ValueError as e:
            raise HTTPError(400, str(e)) from None
        if len(texts) > limits.max_sentences:
            raise HTTPError(
                413,
                f"the request has {len(texts)} sentences; the limit is {limits.max_sentences} "
                "(--max-sentences)",
            )
        chars = sum(len(t) for t in texts)
        if chars > limits.max_chars:
            raise HTTPError(
                413,
                f"the request has {chars} characters; the limit is {limits.max_chars} "
                "(--max-chars)",
            )

    def check_options(
        self,
        model: ServedModel,
        o: DecodeOptions,
        texts: list[str],
        attention: bool = False,
        alignment: bool = False,
        glossary: Glossary | None = None,
        terms: bool = True,
    ) -> Pending:
        """The request, prepared (`Translator.prepare`: encoded once, its terms, its work) and
        checked against the limits before it decodes: 400 / 413 over them. The server's
        glossary, with the request's `glossary` terms added, gives its terms (terms=False: none,
        the plain search)."""
        limits = self.limits
        if o.beam > limits.max_beam:
            raise HTTPError(
                400, f"beam {o.beam} is over this server's limit of {limits.max_beam} (--max-beam)"
            )
        vocab = model.translator.target_vocab_size
        if o.beam > vocab:
            raise HTTPError(400, f"beam {o.beam} is larger than the target vocabulary ({vocab})")
        for name in TOKEN_COUNTS:  # max_len_b, min_len
            if getattr(o, name) > limits.max_output_tokens:
                raise HTTPError(
                    400,
                    f"{name} {getattr(o, name)} is over this server's limit of "
                    f"{limits.max_output_tokens} output tokens (--max-output-tokens)",
                )
        if terms and self.glossary is not None:  # merged (compiled again) only when asked
            glossary = self.glossary if glossary is None else self.glossary.merged(glossary)
        try:
            extras = Extras(attention, alignment)
            job = model.translator.prepare(texts, o, glossary if terms else None, extras=extras)
        except ValueError as e:
            raise HTTPError(400, str(e)) from None
        self._check_work(job)
        return Pending(model.pair, job)

    def _check_work(self, job: Job) -> None:
        """413 when the job may decode more than --max-decode-tokens (beam x the output length
        limits, wider for sentences with glossary terms); 400 when max_len_a lets a sentence
        write more than its length + --max-output-tokens."""
        limits, o = self.limits, job.options
        if job.work > limits.max_decode_tokens:
            raise HTTPError(
                413,
                f"the request may decode {job.work} tokens (beam {o.beam} x the output length "
                f"limit of each sentence, more for sentences with glossary terms); the limit is "
                f"{limits.max_decode_tokens} (--max-decode-tokens): send fewer sentences, a "
                "smaller beam or max_len_b",
            )
        for i, x in enumerate(job.ids):  # max_len_a too: the output beyond the source's length
            if o.max_output_length(len(x)) > len(x) + limits.max_output_tokens:
                raise HTTPError(
                    400,
                    f"max_len_a {o.max_len_a} with max_len_b {o.max_len_b} lets sentence {i} "
                    f"({len(x)} source tokens) write {o.max_output_length(len(x))} tokens, over "
                    f"this server's limit of its length + {limits.max_output_tokens} "
                    "(--max-output-tokens)",
                )

    # --- decoding ------------------------------------------------------------------------------
    async def translate(self, request: Request, job: Pending) -> Any:
        """The request's translations (a traced one: what its function returns), from the lane its
        work calls for: 503 with Retry-After when
        that lane's queue is full or the server stopped first, 504 past the time limit (or once
        the client has gone), 500 when decoding failed."""
        limits = self.limits
        try:
            future = self.lanes[job.job.work > limits.long_request_tokens].submit(job)
        except QueueFull as e:
            message = f"the server is busy: {e}; retry in a moment"
            raise HTTPError(503, message, {"Retry-After": "1"}) from None
        try:
            return await _answer(request, future, limits.timeout)
        except asyncio.TimeoutError:
            message = f"the translation took longer than {limits.timeout:g} s (--timeout)"
            raise HTTPError(504, message) from None
        except Stopped as e:
            raise HTTPError(503, str(e), {"Retry-After": "1"}) from None
        except Exception as e:
            raise HTTPError(500, f"translation failed: {e}") from None


async def service(request: Request) -> Service:
    """The application's `Service`, for endpoints: `svc: ServiceDep`."""
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(service)]  # an endpoint's parameter: the app's Service


async def _answer(request: Request, future: Future[Any], timeout: float) -> Any:
    """The future's result, waited for at most `timeout` seconds while the client is connected;
    otherwise the future is cancelled (the batcher drops its sentences at the next step) and
    TimeoutError raised. The batcher's `Stopped` comes through as it is."""
    waiting = asyncio.wrap_future(future)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        done, _ = await asyncio.wait(
            {waiting, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if waiting in done:
            return waiting.result()
        raise asyncio.TimeoutError  # past the time limit, or nobody is left to answer
    finally:
        gone.cancel()
        future.cancel()  # no effect once it has its result


async def _disconnect(request: Request) -> None:
    """Returns when the client goes away (the body is read: what comes next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


__all__ = ["HTTPError", "ServedModel", "Service", "Stopped", "service"]
