"""`slice-st serve` search latency over loopback against `SpanIndex.search` in this process, same index, same run.

    python benchmarks/bench_serve.py                                    # examples/sample_corpus.txt x 20, default model
    python benchmarks/bench_serve.py --corpus my.txt --replicate 1 --queries 200

What is measured, all in this one run:

1. An index of ``--corpus`` (each line a document) repeated ``--replicate`` times (new ids; the text is
   the same, the search cost grows with the number of words), built once with the default model and saved.
2. ``--queries`` queries: 3-6 word phrases cut from the corpus lines, seeded.
3. In process: ``SpanIndex.search([query], top_k=10, per_document=1)`` one query at a time (query encoding
   included), and from ``--clients`` threads at once through one lock (the server runs one search at a time:
   the model's tokenizer is not shared across threads), each request's latency.
4. Through the server: ``slice-st serve INDEX`` started as its own process (uvicorn on 127.0.0.1, a free
   port), ``POST /api/search`` with the same options from 1 client and from ``--clients`` clients (threads,
   one keep-alive HTTP connection each, stdlib ``http.client``), each request's latency. The server runs with
   every guard on (Host allow-list, body limit as read, cost bound, chunked cancellable search, connection
   limits): a search that finds another running is answered 503 at once, and the client asks again at once
   (its latency includes those tries; their count is printed).

The four cases run interleaved in ``--rounds`` rounds (a share of the queries each), so that a change of the
machine's load hits them alike. Printed: p50 / p95 / mean per case (ms), requests/s and server / in-process ratios at
p50 and p95 (target: <= 1.20 at p50).
Both sides use the same torch thread count (slice_st.backends.default_threads, as the CLI does). Cases run
after 10 warm-up requests each; the server answers checked equal to the in-process results.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np  # noqa: E402
from _common import REPO_ROOT, environment_line, flush  # noqa: E402

SAMPLE = REPO_ROOT / "examples" / "sample_corpus.txt"


def percentiles(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 95))


def make_queries(lines: list[str], count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    queries = []
    while len(queries) < count:
        words = rng.choice(lines).split()
        size = rng.randint(3, 6)
        if len(words) >= size:
            start = rng.randint(0, len(words) - size)
            queries.append(" ".join(words[start : start + size]))
    return queries


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_clients(queries: list[str], clients: int, request) -> tuple[list[float], float]:
    """Latencies (s) of ``request(query, state)`` over ``queries`` split among ``clients`` threads started together,
    and the wall time."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    barrier = threading.Barrier(clients)

    def work(number: int) -> None:
        state: dict = {}
        barrier.wait()
        for query in queries[number::clients]:
            start = time.perf_counter()
            request(query, state)
            latencies[number].append(time.perf_counter() - start)
        state.get("close", lambda: None)()

    threads = [threading.Thread(target=work, args=(number,)) for number in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [value for part in latencies for value in part], time.perf_counter() - start


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus",
        default=str(SAMPLE),
        help="a text file, one document per line (default: examples/sample_corpus.txt)",
    )
    parser.add_argument(
        "--replicate", type=int, default=20, help="copies of the corpus in the index (default 20)"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--clients", type=int, default=8, help="concurrent clients of the second case (default 8)"
    )
    parser.add_argument("--model", default=None, help="model (default: the shipped slice-minilm)")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="the cases run interleaved in this many rounds (default 4)",
    )
    return parser.parse_args()


def build_index(args, lines: list[str]):
    """The index of the corpus ``--replicate`` times, saved and loaded memory-mapped (as the server opens it)."""
    from slice_st.index.span_index import SpanIndex
    from slice_st.loading import load_model

    model = load_model(args.model)
    texts = lines * args.replicate
    ids = [f"copy{copy}:{number}" for copy in range(args.replicate) for number in range(len(lines))]
    path = os.path.join(tempfile.mkdtemp(prefix="bench-serve-"), "ix")
    start = time.perf_counter()
    SpanIndex.build(texts, model, ids).save(path)
    index = SpanIndex.load(path, model)
    print(
        f"index: {len(index)} documents, {index.num_units} words, spans 1..{index.span_config.max_span}; built in "
        f"{time.perf_counter() - start:.1f} s"
    )
    return path, index


def start_server(args, path: str, port: int) -> subprocess.Popen:
    """``slice-st serve INDEX`` in its own process, once it answers ``/api/info``."""
    command = [
        sys.executable,
        "-m",
        "slice_st.cli",
        "serve",
        path,
        "--port",
        str(port),
        "--quiet",
        "--max-queries",
        "1",
    ]
    if args.model:
        command += ["--model", args.model]
    server = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/api/info")
            if connection.getresponse().status == 200:
                connection.close()
                return server
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.terminate()
            raise SystemExit(f"the server did not start: {server.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)


def http_client(port: int, options: dict, busy: list[int]):
    """``request(query, state)`` over one keep-alive connection per client; a 503 (busy) is asked again at once."""

    def over_http(query: str, state: dict) -> dict:
        if "connection" not in state:
            state["connection"] = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            state["close"] = state["connection"].close
        body = json.dumps({"queries": [query], **options})
        while True:
            state["connection"].request(
                "POST", "/api/search", body, {"Content-Type": "application/json"}
            )
            response = state["connection"].getresponse()
            data = response.read()
            if response.status != 503:
                break
            busy[0] += 1  # another client's search is running: ask again
            time.sleep(0.001)
        if response.status != 200:
            raise SystemExit(f"server answered {response.status}: {data[:500]!r}")
        return json.loads(data)

    return over_http


def measure(args, queries, cases) -> dict[str, tuple[list[float], float]]:
    """The cases interleaved in rounds (a share of the queries each), so that a change of the machine's load hits all
    alike."""
    results: dict[str, tuple[list[float], float]] = {}
    for round_number in range(args.rounds):
        part = queries[round_number :: args.rounds]
        for name, clients, request in cases:
            values, wall = run_clients(part, clients, request)
            before, before_wall = results.get(name, ([], 0.0))
            results[name] = (before + values, before_wall + wall)
        flush()
    return results


def print_results(args, queries, results, busy: int) -> None:
    print(
        f"\n{len(queries)} queries per case, top_k={args.top_k}, per_document=1; latency per request (ms)"
    )
    print(f"server answers 503 (busy, asked again): {busy}")
    print(f"{'case':<28} {'p50':>8} {'p95':>8} {'mean':>8} {'req/s':>7}")
    for name, (values, wall) in results.items():
        p50, p95 = percentiles(values)
        print(
            f"{name:<28} {1000 * p50:8.2f} {1000 * p95:8.2f} {1000 * float(np.mean(values)):8.2f} "
            f"{len(values) / wall:7.1f}"
        )
    print("\nserver / in-process (latency ratios; throughput as in-process / server)")
    for clients in (1, args.clients):
        label = f"{clients} client{'s' if clients > 1 else ''}"
        (server_values, server_wall), (local_values, local_wall) = (
            results[f"server, {label}"],
            results[f"in-process, {label}"],
        )
        server_p, local_p = percentiles(server_values), percentiles(local_values)
        print(
            f"{label:<12} p50 {server_p[0] / local_p[0]:.3f}   p95 {server_p[1] / local_p[1]:.3f}   "
            f"mean {np.mean(server_values) / np.mean(local_values):.3f}   throughput {server_wall / local_wall:.3f}  "
            f" (target p50 <= 1.20)"
        )


def main() -> int:
    args = parse_args()
    from slice_st.backends import set_torch_threads

    set_torch_threads(None)  # as the CLI (and so the server) does
    print(environment_line())
    with open(args.corpus, encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    path, index = build_index(args, lines)
    queries = make_queries(lines, args.queries)
    options = {"top_k": args.top_k, "per_document": 1}
    lock = threading.Lock()

    def in_process(query: str, state: dict) -> None:
        with lock:
            index.search([query], **options)

    for query in queries[:10]:
        in_process(query, {})
    port, busy = free_port(), [0]
    server = start_server(args, path, port)
    try:
        over_http = http_client(port, options, busy)
        check: dict = {}
        for query in queries[:10]:  # warm-up, and the answers checked against the in-process search
            got = over_http(query, check)["results"][0]["matches"]
            want = index.search([query], **options)[0]
            assert [(m["doc_id"], m["start"], m["end"]) for m in got] == [
                (m.doc_id, m.start, m.end) for m in want
            ]
        check["close"]()
        cases = [
            (f"{where}, {clients} client{'s' if clients > 1 else ''}", clients, request)
            for clients in (1, args.clients)
            for where, request in (("in-process", in_process), ("server", over_http))
        ]
        results = measure(args, queries, cases)
    finally:
        server.terminate()
        server.wait(30)
    print_results(args, queries, results, busy[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
