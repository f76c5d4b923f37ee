"""One request never holds `qkv serve`: its work is bounded before it starts (output tokens, and
beam x output length limits over its sentences), a request that asks for much is decoded by a
thread of its own, and one past its time limit or whose client went away is dropped from its batch
at the next decoding step. SIGTERM drains for at most --grace seconds, then answers 503.

Each long request is the hostile one at the limits of a default server: beam 16, 8 sentences whose
outputs are forced to 512 tokens (--max-output-tokens), about 10 s of decoding alone on 2 cores.
Every loop is bounded and every client call has a timeout."""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from server_process import KEY, PAIR, Server, running

from sentences import EN  # tests/sentences.py

HOSTILE = {"text": "1 2", "beam": 16, "max_len_b": 8192, "min_len": 8000}
LONG = {"text": EN[:8], "beam": 16, "max_len_b": 512, "min_len": 512}
ORDINARY = {"text": EN[2]}


def test_a_request_asking_too_much_is_refused_before_it_starts(server: Server) -> None:
    def post(fields: dict) -> httpx.Response:
        return server.client.post("/v1/translate", json={**fields, "api_key": KEY})

    r = post({**HOSTILE, "beam": 4})
    assert r.status_code == 400
    assert "--max-output-tokens" in r.json()["error"]
    assert "max_len_b 8192" in r.json()["error"]
    r = post({**HOSTILE, "beam": 4, "max_len_b": 100})
    assert r.status_code == 400 and "min_len 8000" in r.json()["error"]
    r = post({"text": "1 2", "max_len_a": 100000})  # bounded too: not the position table's 8192
    assert r.status_code == 400 and "max_len_a 100000" in r.json()["error"]
    assert "--max-output-tokens" in r.json()["error"]
    assert post({"text": "1 2", "max_len_a": 1.0, "max_len_b": 512}).status_code == 200
    # 40 sentences x beam 6 x (100 * ~4 source tokens + 512) output tokens
    many = {"text": ["1 2"] * 40, "beam": 6, "max_len_a": 100.0, "max_len_b": 512}
    r = post(many)
    assert r.status_code == 413
    assert "--max-decode-tokens" in r.json()["error"]
    limits = server.client.get("/v1/info").json()["limits"]
    assert limits["max_output_tokens"] == 512 and limits["max_decode_tokens"] == 131_072


def test_a_text_cut_to_max_src_tokens_is_said_in_the_answer(model_dir: Path) -> None:
    """The command line warns; every answer says which text (and sentence) was cut, its length
    and the limit: /v1/translate as text, sentences or HTML, /translate, /translate_file."""
    page = f"<p>1 2</p><p>{EN[0]}</p>"
    with running(model_dir, "--pair", PAIR, "--max-src-tokens", "6") as server:
        c = server.client
        r = c.post("/v1/translate", json={"text": ["1 2", EN[0]], "max_len_b": 4})
        short = c.post("/v1/translate", json={"text": "1 2", "max_len_b": 4})
        split = c.post("/v1/translate", json={"text": f"1 2. {EN[0]}", "split": "sentences"})
        html = c.post("/v1/translate", json={"text": ["1 2", page], "format": "html"})
        lt = c.post("/translate", json={"q": ["1 2", f"1 2\n{EN[0]}"], "source": "en",
                                        "target": "zh", "api_key": KEY})
        lt_short = c.post("/translate", json={"q": "1 2", "source": "en", "target": "zh",
                                              "api_key": KEY})
        fields = {"source": "en", "target": "zh", "api_key": KEY}
        upload = c.post("/translate_file", data=fields,
                        files={"file": ("page.html", page.encode())})
    for answer in (r, split, html, lt, upload):
        assert answer.status_code == 200, answer.text
    [warning] = r.json()["warnings"]
    assert warning.startswith("text 1 has ") and "only its first 5 were" in warning
    assert "--max-src-tokens" in warning
    assert short.status_code == 200 and "warnings" not in short.json()
    [warning] = split.json()["warnings"]
    assert warning.startswith("sentence 1 has ")  # the answer's translations[1]
    assert [w.split(" has ")[0] for w in html.json()["warnings"]] == ["text 1, sentence 1"]
    assert [w.split(" has ")[0] for w in lt.json()["warnings"]] == ["text 1, sentence 1"]
    assert "only its first 5 were" in lt.json()["warnings"][0]
    assert lt_short.status_code == 200 and "warnings" not in lt_short.json()
    assert [w.split(" has ")[0] for w in upload.json()["warnings"]] == ["text 0, sentence 1"]


@pytest.mark.slow
def test_a_loop_of_hostile_requests_leaves_ordinary_ones_quick(model_dir: Path) -> None:
    """Two clients loop the hostile request and the longest one allowed (each answered 400, or
    504 after --timeout); meanwhile ordinary requests do not wait for them: their p95 latency is
    under half the time a long one is given (measured in the same run, not a fixed bound)."""
    with running(model_dir, "--pair", PAIR, "--timeout", "4") as server:
        stop = threading.Event()

        long_took: list[float] = []

        def attack(_: int) -> list[int]:
            statuses = []
            with httpx.Client(base_url=server.url, timeout=60) as client:
                for _ in range(6):  # bounded
                    if stop.is_set():
                        break
                    statuses.append(client.post("/v1/translate", json=HOSTILE).status_code)
                    start = time.perf_counter()
                    statuses.append(client.post("/v1/translate", json=LONG).status_code)
                    long_took.append(time.perf_counter() - start)
            return statuses

        with ThreadPoolExecutor(2) as pool:
            attacks = [pool.submit(attack, i) for i in range(2)]
            time.sleep(1)  # the long requests are decoding
            latencies = []
            for _ in range(20):
                start = time.perf_counter()
                r = server.client.post("/v1/translate", json=ORDINARY)
                latencies.append(time.perf_counter() - start)
                assert r.status_code == 200, r.text
            stop.set()
            statuses = [s for a in attacks for s in a.result(timeout=300)]
    assert set(statuses) == {400, 504}, statuses
    p95 = statistics.quantiles(latencies, n=20)[-1]
    assert p95 < min(long_took) / 2, (latencies, long_took)


@pytest.mark.slow
def test_a_request_whose_client_left_stops_decoding(model_dir: Path) -> None:
    """The client of a long request (8 times one sentence, forced to 512 tokens) gives up after
    1 s; its sentences leave the batch: they take fewer decoding steps than 8 times those of the
    sentence decoded whole (counted by the server, qkv_sentence_steps_total)."""

    def steps() -> float:
        for line in server.client.get("/metrics").text.splitlines():
            if line.startswith(f'qkv_sentence_steps_total{{pair="{PAIR}"}}'):
                return float(line.split()[-1])
        return 0.0

    one = {**LONG, "text": EN[:1]}
    with running(model_dir, "--pair", PAIR) as server:
        with pytest.raises(httpx.ReadTimeout):
            server.client.post("/v1/translate", json={**one, "text": EN[:1] * 8}, timeout=1)
        for _ in range(2):  # the second's steps: one sentence decoded whole
            before = steps()
            r = server.client.post("/v1/translate", json=one, timeout=60)
            assert r.status_code == 200, r.text
        whole = steps() - before
        abandoned = before - whole  # the first request's, the one-sentence one's taken off
    assert whole >= 512, whole
    assert abandoned < 8 * whole, f"{abandoned:.0f} steps: the abandoned request was decoded on"


def test_sigterm_drains_for_the_grace_period_then_answers_503(model_dir: Path) -> None:
    with running(model_dir, "--pair", PAIR, "--grace", "1") as server, ThreadPoolExecutor(1) as pool:
        url = server.url + "/v1/translate"  # its own connection: stop() closes the client
        answer = pool.submit(httpx.post, url, json=LONG, timeout=120)
        time.sleep(1)  # the request is decoding
        assert not answer.done()
        status = server.stop(timeout=60)
        r = answer.result(timeout=60)
        output = server.output()
    assert status == 1, output
    assert r.status_code == 503 and "stopped before answering" in r.json()["error"]
    assert "1 requests abandoned" in output
