"""`qkv serve` under load: a full queue answers 503 with Retry-After and the server then serves
normally; a request over the time limit answers 504 and its remaining batches are skipped; SIGTERM
answers the requests in flight before the process exits. Each request forces long outputs
(min_len) so that decoding takes a while whatever the random model would write."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from server_process import PAIR, Server, running

from qkv.apps.translator import Translator
from qkv.decode.options import DecodeOptions
from sentences import EN  # tests/sentences.py

TIMEOUT = 3  # the server's --timeout, seconds


def slow(tokens: int, sentences: int, **fields: object) -> dict:
    """A native request whose outputs are forced to `tokens` tokens each."""
    return {"text": [EN[i % len(EN)] for i in range(sentences)], "beam": 4, "min_len": tokens,
            "max_len_b": tokens, **fields}


@pytest.fixture(scope="module")
def busy_server(model_dir: Path) -> Iterator[Server]:
    """One request decoded at a time at most one waiting; small batches; a short time limit."""
    with running(model_dir, "--pair", PAIR, "--max-queue", "1", "--timeout", str(TIMEOUT),
                 "--batch-tokens", "64", "--max-wait-ms", "0") as s:
        yield s


def test_a_full_queue_answers_503_and_the_server_then_serves(busy_server: Server) -> None:
    for _ in range(3):  # rounds, in case one round's requests did not overlap
        start = threading.Barrier(8)

        def send(_: int, start: threading.Barrier = start) -> httpx.Response:
            start.wait(timeout=30)
            return busy_server.client.post("/v1/translate", json=slow(60, 2))

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(send, range(8), timeout=120))
        statuses = sorted(r.status_code for r in answers)
        assert set(statuses) <= {200, 503}, statuses
        if 503 in statuses:
            break
    assert 200 in statuses and 503 in statuses, statuses
    refused = next(r for r in answers if r.status_code == 503)
    assert refused.headers["Retry-After"] == "1"
    assert "--max-queue" in refused.json()["error"]
    after = busy_server.client.post("/v1/translate", json={"text": EN[0]})
    assert after.status_code == 200
    assert busy_server.client.get("/health").json()["status"] == "ok"


def test_a_request_over_the_time_limit_answers_504_and_is_abandoned(busy_server: Server) -> None:
    """64 sentences in batches of a few, 300 tokens each: far more than TIMEOUT seconds of work.
    The next request is answered within the limit: the abandoned batches were skipped."""
    r = busy_server.client.post("/v1/translate", json=slow(300, 64))
    assert r.status_code == 504
    assert "--timeout" in r.json()["error"]
    after = busy_server.client.post("/v1/translate", json={"text": EN[1]})
    assert after.status_code == 200, after.text


def test_sigterm_answers_the_requests_in_flight(model_dir: Path) -> None:
    request = slow(100, 3, beam=2)
    with running(model_dir, "--pair", PAIR) as server, ThreadPoolExecutor(1) as pool:
        url = server.url + "/v1/translate"  # its own connection: stop() closes the client
        answer = pool.submit(httpx.post, url, json=request, timeout=120)
        for _ in range(2000):  # until the request is in flight (this poll is the other one)
            if _in_flight(server) >= 2 or answer.done():
                break
        assert not answer.done(), "the request ended before SIGTERM: make it longer"
        status = server.stop()
        r = answer.result(timeout=120)
        assert status == 0, server.output()
    assert r.status_code == 200, r.text
    expected = Translator.load(model_dir).translate(
        request["text"], DecodeOptions(beam=2, min_len=100, max_len_b=100)
    )
    assert [t["text"] for t in r.json()["translations"]] == expected


def _in_flight(server: Server) -> float:
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith("qkv_requests_in_flight "):
            return float(line.split()[1])
    return 0.0
