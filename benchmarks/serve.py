"""Serving throughput and latency of `qkv serve`: 1, 8 and 32 concurrent clients, with batching on
and off, on the demo model and on the paper's base shape.

    python -m benchmarks.serve                       # trains the demo model first (about 75 s)
    python -m benchmarks.serve --model qkv-demo      # a demo model you already have
    python -m benchmarks.serve --quick               # a smoke run of every row (small workloads)
    python -m benchmarks.serve --json benchmarks/results/serve.json
    python -m benchmarks.serve --scenario fairness --model qkv-demo   # one client's large requests

Each row starts a fresh `python -m qkv serve` on a free loopback port (`--threads` torch threads;
`--no-batching` for the rows with batching off) and runs closed-loop clients: each client thread
sends one sentence per request to POST /v1/translate and sends the next as soon as the answer
comes, until the row's sentences are done. A row reports sentences/s over the whole run (first
send to last answer) and the p50 and p95 of the request latencies (send to answer, as the client
sees it). "× 1 client" is the row's sentences/s over the 1-client row of the same model (one
request at a time; batching has nothing to join there).

* demo: the model of `qkv demo` (tiny preset, digits -> English number words), greedy by default,
  each sentence a random number of up to 6 digits; outputs end where the model ends them.
* base: the paper's base shape (6 + 6 layers, d_model 512, 8 heads, d_ff 2048) with random weights
  and a small SentencePiece vocabulary trained on number words; each source is `--src-len` random
  digits, and every output is forced to exactly `--new-tokens` tokens (min_len = max_len_b,
  max_len_a = 0), as in speed.py, so the work does not depend on when a random model would stop.

`--scenario fairness` asks whether one client's allowed requests slow everyone else: `--clients`
(32) clients loop the largest request the short lane takes (LARGE: beam 16, 253 tokens forced),
while a probe sends an ordinary request ("4 0 5 2") every 0.3 s; the probe's p95 is compared with
the time one LARGE request takes alone on the idle server, for `--threads 1` and `--threads`.

The clients run in this process and share the machine with the server; on a 2-core machine give the
server `--threads 1` or 2 (the default: 2) and compare rows, not absolute numbers across machines.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import common

CLIENTS = (1, 8, 32)


def demo_model(work: Path, steps: int | None) -> Path:
    out = work / "demo"
    command = [*common.QKV, "demo", "--out", str(out)] + (["--steps", str(steps)] if steps else [])
    print("training the demo model:", " ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out


def base_model_dir(work: Path) -> Path:
    """The base shape with random weights and a number-words tokenizer, as a model directory."""
    import torch

    from qkv import Transformer
    from qkv.data.synthetic import number_to_english
    from qkv.data.tokenizer import SubwordTokenizer
    from qkv.modeldir import save_model_dir

    out = work / "base"
    rng = random.Random(0)
    numbers = [rng.randrange(10**6) for _ in range(2000)]
    tokenizer = SubwordTokenizer.train(
        [" ".join(str(n)) for n in numbers], [number_to_english(n) for n in numbers], out,
        vocab_size=400,
    )
    torch.manual_seed(0)
    model = Transformer(common.base_config(tokenizer.src_vocab_size)).eval()
    save_model_dir(out, model, tokenizer, src_lang="digits", tgt_lang="en")
    return out


def sentences(kind: str, n: int, src_len: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    if kind == "demo":
        return [" ".join(str(rng.randrange(10 ** rng.randint(1, 6)))) for _ in range(n)]
    return [" ".join(str(rng.randrange(10)) for _ in range(src_len)) for _ in range(n)]


class Server:
    """`qkv serve` on a free loopback port; `tree`: run the qkv of that source tree (its src/)."""

    def __init__(
        self, model: Path, threads: int, batching: bool, max_wait_ms: float, tree: Path | None = None
    ) -> None:
        command = [*common.QKV, "serve", "--model", str(model), "--port", "0",
                   "--threads", str(threads), "--max-wait-ms", str(max_wait_ms), "--max-queue", "1024",
                   "--pair", "digits-en"]  # both models: digits in, English number words out
        if not batching:
            command.append("--no-batching")
        env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree / "src")}
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True, env=env)
        assert self.process.stdout is not None
        for line in self.process.stdout:
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                self.url = found.group(1)
                break
        else:
            raise RuntimeError(f"qkv serve exited with {self.process.wait()}")
        import httpx

        for _ in range(600):
            try:
                httpx.get(self.url + "/health", timeout=5)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("qkv serve did not answer /health")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def run_clients(url: str, texts: list[str], clients: int, options: dict[str, Any]) -> dict[str, Any]:
    """Closed-loop clients sending one sentence per request -> sentences/s and latencies. Each
    client holds one keep-alive connection (http.client: no per-client setup cost), opened before
    the clock starts."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    lock = threading.Lock()
    todo = iter(range(len(texts)))
    latencies: list[float] = []
    failures: list[str] = []
    ready = threading.Barrier(clients + 1)

    def client() -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=600)
        connection.connect()
        ready.wait()
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                break
            body = json.dumps({"text": texts[i], **options})
            begin = time.perf_counter()
            connection.request("POST", "/v1/translate", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = response.read()
            seconds = time.perf_counter() - begin
            with lock:
                latencies.append(seconds)
                if response.status != 200:
                    failures.append(f"{response.status} {answer[:200]!r}")
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    ready.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, e.g. {failures[0]}")
    cuts = statistics.quantiles(latencies, n=20, method="inclusive")  # 5 % steps
    return {"sentences": len(texts), "seconds": wall, "sentences_per_s": len(texts) / wall,
            "p50_ms": 1000 * statistics.median(latencies), "p95_ms": 1000 * cuts[18]}


LARGE = {"text": "1 2", "beam": 16, "max_len_b": 250, "min_len": 250}  # 16 x 253: 4,048 tokens
ORDINARY = {"text": "4 0 5 2"}


def post(connection: http.client.HTTPConnection, body: dict[str, Any]) -> float:
    """Seconds to answer one POST /v1/translate (an error is raised)."""
    begin = time.perf_counter()
    connection.request("POST", "/v1/translate", json.dumps(body),
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = response.read()
    if response.status != 200:
        raise RuntimeError(f"{response.status} {answer[:200]!r}")
    return time.perf_counter() - begin


def fairness(model: Path, threads: int, args: argparse.Namespace) -> dict[str, Any]:
    """32 clients loop the largest request the short lane takes (LARGE) for `--seconds`; one
    probe sends ORDINARY every 0.3 s. Against: LARGE and ORDINARY alone on the idle server."""
    server = Server(model, threads, True, args.max_wait_ms)
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    try:
        one = http.client.HTTPConnection(host, int(port), timeout=600)
        post(one, LARGE)  # warm-up
        large_alone = statistics.median(post(one, LARGE) for _ in range(5))
        ordinary_alone = statistics.median(post(one, ORDINARY) for _ in range(20))
        stop = time.perf_counter() + args.seconds
        large: list[float] = []

        def client() -> None:
            connection = http.client.HTTPConnection(host, int(port), timeout=600)
            while time.perf_counter() < stop:
                large.append(post(connection, LARGE))

        threads_ = [threading.Thread(target=client) for _ in range(args.clients)]
        start = time.perf_counter()
        for t in threads_:
            t.start()
        time.sleep(1)  # the clients' requests are decoding
        probes = []
        while time.perf_counter() < stop:
            probes.append(post(one, ORDINARY))
            time.sleep(0.3)
        for t in threads_:
            t.join()
        wall = time.perf_counter() - start
    finally:
        server.stop()
    cuts = statistics.quantiles(probes, n=20, method="inclusive")
    return {"threads": threads, "large_alone_ms": 1000 * large_alone,
            "ordinary_alone_ms": 1000 * ordinary_alone, "probes": len(probes),
            "probe_p50_ms": 1000 * statistics.median(probes), "probe_p95_ms": 1000 * cuts[18],
            "large_per_s": len(large) / wall, "large_p50_ms": 1000 * statistics.median(large),
            "p95_over_large_alone": cuts[18] / large_alone}


def fairness_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| threads | large alone ms | ordinary alone ms | under load: ordinary p50 ms | "
             "p95 ms | p95 / large alone | large requests/s |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['threads']} | {r['large_alone_ms']:.0f} | {r['ordinary_alone_ms']:.1f} | "
                     f"{r['probe_p50_ms']:.1f} | {r['probe_p95_ms']:.1f} | "
                     f"{r['p95_over_large_alone']:.2f} | {r['large_per_s']:.2f} |")
    return "\n".join(lines)


def bench_model(kind: str, model: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    n = args.sentences or (24 if args.quick else {"demo": 256, "base": 96}[kind])
    texts = sentences(kind, n, args.src_len)
    options: dict[str, Any] = {"beam": args.beam}
    if kind == "base":
        options.update(min_len=args.new_tokens, max_len_b=args.new_tokens, max_len_a=0.0)
    rows = []
    for batching in (True, False):
        server = Server(model, args.threads, batching, args.max_wait_ms)
        try:
            run_clients(server.url, texts[: min(8, n)], 1, options)  # warm-up
            for clients in CLIENTS:
                row = {"model": kind, "batching": batching, "clients": clients,
                       **run_clients(server.url, texts, clients, options)}
                rows.append(row)
                print(f"  {kind:4} batching {'on ' if batching else 'off'} {clients:2} clients: "
                      f"{row['sentences_per_s']:7.2f} sentences/s, p50 {row['p50_ms']:7.1f} ms, "
                      f"p95 {row['p95_ms']:7.1f} ms", flush=True)
        finally:
            server.stop()
    one = next(r for r in rows if r["clients"] == 1 and r["batching"])["sentences_per_s"]
    for r in rows:
        r["vs_one_client"] = r["sentences_per_s"] / one
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | batching | clients | sentences/s | p50 ms | p95 ms | × 1 client |",
             "|------:|---------:|--------:|------------:|-------:|-------:|-----------:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {'on' if r['batching'] else 'off'} | {r['clients']} | "
                     f"{r['sentences_per_s']:.2f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
                     f"{r['vs_one_client']:.2f} |")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="the demo model directory (default: train one)")
    parser.add_argument("--models", nargs="+", default=["demo", "base"], choices=["demo", "base"])
    parser.add_argument("--quick", action="store_true", help="small workloads: a smoke run")
    parser.add_argument("--sentences", type=int, help="sentences per row (default: demo 256, base 96)")
    parser.add_argument("--beam", type=int, default=1, help="beam size of every request (default: 1)")
    parser.add_argument("--src-len", type=int, default=common.SRC_LEN, help="base: source digits")
    parser.add_argument("--new-tokens", type=int, default=common.NEW_TOKENS,
                        help="base: every output is forced to this many tokens")
    parser.add_argument("--threads", type=int, default=2, help="the server's torch threads")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="the server's --max-wait-ms")
    parser.add_argument("--scenario", choices=["throughput", "fairness"], default="throughput",
                        help="fairness: 32 clients loop a large request, one probe an ordinary one")
    parser.add_argument("--clients", type=int, default=32, help="fairness: clients looping LARGE")
    parser.add_argument("--seconds", type=float, default=30.0, help="fairness: how long they loop")
    parser.add_argument("--json", help="default: benchmarks/results/serve[-fairness].json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.quick:
        args.new_tokens = min(args.new_tokens, 8)
        args.src_len = min(args.src_len, 10)
    software = common.versions("torch", "fastapi", "uvicorn")
    print(common.describe(common.machine(), software), flush=True)
    fair = args.scenario == "fairness"
    args.json = args.json or f"benchmarks/results/serve{'-fairness' * fair}.json"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for kind in ["demo"] if fair else args.models:
            if kind == "demo":
                model = Path(args.model) if args.model else demo_model(work, 150 if args.quick else None)
            else:
                model = base_model_dir(work)
            if fair:
                for threads in (1, args.threads):
                    rows.append(fairness(model, threads, args))
                    print(fairness_table(rows[-1:]), flush=True)
            else:
                rows += bench_model(kind, model, args)
    print(fairness_table(rows) if fair else table(rows))
    result = {"machine": common.machine(), "versions": software, "args": vars(args), "rows": rows}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
