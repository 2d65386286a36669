"""`slice-st serve`'s search bound against the work a search really does, and a server with one long document.

    python benchmarks/bench_serve_cost.py                  # default model, STS-B train sentences
    python benchmarks/bench_serve_cost.py --skip-server    # the calibration only

What is measured, all in this one run:

1. Two indexes built with the default model: ``long``, one 15,000-word document (STS-B train sentences joined)
   and one short one; ``many``, ``--many`` (2,000) STS-B sentences, one document each.
2. Calibration: request shapes (1 or 8 three-character queries, a 13- and a 2,000-character query, ``top_k``
   10 / 100 / 1000, ``per_document=1``, the ``phrase`` and the default ``reranked`` scorer), each timed with
   ``SpanIndex.search`` in this process, interleaved over ``--rounds`` rounds; printed: the server's cost
   (``slice_st.serve.app.search_cost``), the median seconds, seconds per 1e7 cost (what the cost bound assumes
   is about constant) and the peak memory the search added over the process's memory before it (RSS sampled
   every 5 ms), and whether the default bound (``ServeLimits().max_search_cost``) lets it run.
3. Server: ``slice-st serve LONG --timeout 5`` as its own process; one client sends the costliest search the bound
   of ``--timeout 5`` lets through (so many three-character queries), again and again, while a second client
   fetches ``/api/info`` and ``/api/documents?id=long`` (no query); printed: the searches' statuses and seconds,
   the other client's latencies (p50 / max) and the server's peak RSS.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import DEFAULT_STS, REPO_ROOT, environment_line, flush, read_sts_sentences  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sts", default=str(DEFAULT_STS))
    parser.add_argument("--words", type=int, default=15000, help="words of the long document")
    parser.add_argument(
        "--many", type=int, default=2000, help="documents (sentences) of the second index"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--server-seconds", type=float, default=30.0, help="how long the server part runs"
    )
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--skip-calibration", action="store_true")
    return parser.parse_args()


def peak_while(work, process) -> tuple[float, float]:
    """``(seconds, peak MB over the RSS before)`` of ``work()``, the RSS sampled every 5 ms in a thread."""
    base, peak, done = process.memory_info().rss, [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            done.wait(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    try:
        work()
    finally:
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
    return seconds, max(0, peak[0] - base) / 2**20


SHAPES = [
    ("1 x 'abc', top_k 10", ["abc"], {}),
    ("1 x 'abc', phrase", ["abc"], {"scorer": "phrase"}),
    ("8 x 'abc', top_k 10", ["abc"] * 8, {}),
    ("1 x 13 chars", ["a late flight"], {}),
    ("1 x 2000 chars", None, {}),
    ("1 x 'abc', top_k 100", ["abc"], {"top_k": 100}),
    ("1 x 'abc', top_k 1000", ["abc"], {"top_k": 1000}),
    ("8 x 'abc', per_document 1", ["abc"] * 8, {"per_document": 1}),
]


def calibrate(indexes: dict, rounds: int) -> None:
    import psutil

    from slice_st.serve import ServeLimits
    from slice_st.serve.app import search_cost

    process, cap = psutil.Process(), ServeLimits().max_search_cost
    long_query = " ".join(["the man is playing a guitar on the stage tonight"] * 40)[:2000]
    for (
        index
    ) in indexes.values():  # warm: unit flags and word tables are computed on the first search
        index.search(["warm up"], top_k=10)
    times: dict[tuple, list[float]] = {}
    peaks: dict[tuple, float] = {}
    for _ in range(rounds):
        for name, index in indexes.items():
            for label, queries, options in SHAPES:
                queries = queries or [long_query]
                key = (name, label)
                if (
                    search_cost(index, queries, {"top_k": 10, **options}) > 20 * cap
                ):  # far past the bound: not run
                    continue
                search = functools.partial(index.search, queries, **{"top_k": 10, **options})
                seconds, peak = peak_while(search, process)
                times.setdefault(key, []).append(seconds)
                peaks[key] = max(peaks.get(key, 0.0), peak)
    print(
        f"{'index':6} {'request':28} {'cost':>9} {'s (median)':>10} {'s / 1e7 cost':>12} {'peak +MB':>9}  bound"
    )
    for name, index in indexes.items():
        for label, queries, options in SHAPES:
            cost = search_cost(index, queries or [long_query], {"top_k": 10, **options})
            key = (name, label)
            verdict = "runs" if cost <= cap else "413"
            if key not in times:
                print(
                    f"{name:6} {label:28} {cost:9.3g} {'-':>10} {'-':>12} {'-':>9}  {verdict} (not timed)"
                )
                continue
            median = statistics.median(times[key])
            rate = median / cost * 1e7
            print(
                f"{name:6} {label:28} {cost:9.3g} {median:10.2f} {rate:12.3f} {peaks[key]:9.0f}  {verdict}"
            )
    flush()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(port: int, path: str) -> tuple[int, float]:
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", path)
    status = connection.getresponse().status
    connection.close()
    return status, time.perf_counter() - start


def serve_long(path: str, index, seconds: float) -> None:
    """The server part (3.): the costliest search the bound lets through, and another client meanwhile."""
    import psutil

    from slice_st.serve import ServeLimits
    from slice_st.serve.app import COST_PER_SECOND, search_cost

    cap, count = (
        min(ServeLimits().max_search_cost, 5 * COST_PER_SECOND),
        1,
    )  # the bound of --timeout 5
    while count < 64 and search_cost(index, ["abc"] * (count + 1), {"top_k": 10}) <= cap:
        count += 1
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "slice_st.cli",
        "serve",
        path,
        "--port",
        str(port),
        "--quiet",
        "--timeout",
        "5",
    ]
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    server = subprocess.Popen(command, cwd=REPO_ROOT, env=environment, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if get(port, "/api/info")[0] == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"the server did not start: {server.stderr.read().decode()[-2000:]}"
                )
            time.sleep(0.2)
        process = psutil.Process(server.pid)
        searches, others, stop, peak = [], [], threading.Event(), [process.memory_info().rss]

        def searcher() -> None:
            body = json.dumps({"queries": ["abc"] * count, "top_k": 10})
            while not stop.is_set():
                start = time.perf_counter()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                connection.request(
                    "POST", "/api/search", body, {"Content-Type": "application/json"}
                )
                status = connection.getresponse().status
                connection.close()
                searches.append((status, time.perf_counter() - start))

        thread = threading.Thread(target=searcher)
        thread.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for request in ("/api/info", "/api/documents?id=long"):
                others.append((request, *get(port, request)))
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.05)
        stop.set()
        thread.join()
        print(
            f"\nserver: --timeout 5, {count} x 'abc' per search (the most the default bound lets through)"
        )
        statuses = sorted({status for status, _ in searches})
        for status in statuses:
            took = [took for code, took in searches if code == status]
            median = statistics.median(took)
            print(
                f"  searches {status}: {len(took)}, seconds median {median:.2f}, max {max(took):.2f}"
            )
        for request in ("/api/info", "/api/documents?id=long"):
            took = [took for name, code, took in others if name == request and code == 200]
            bad = [code for name, code, _ in others if name == request and code != 200]
            print(
                f"  {request:24} {len(took)} answered 200 ({len(bad)} other): "
                f"p50 {statistics.median(took) * 1000:.0f} ms, max {max(took) * 1000:.0f} ms"
            )
        print(f"  server peak RSS {peak[0] / 2**20:.0f} MB")
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    args = parse_args()
    print(environment_line())
    import slice_st
    from slice_st.index.span_index import SpanIndex

    sentences = read_sts_sentences(args.sts)
    words = " ".join(sentences).split()[: args.words]
    model = slice_st.load_model()
    long = SpanIndex.build(
        [" ".join(words), "A short other document about a late flight."], model, ["long", "short"]
    )
    if not args.skip_calibration:
        many = SpanIndex.build(
            sentences[: args.many], model, [f"s{number}" for number in range(args.many)]
        )
        print(
            f"long: {long.num_units} units in 2 documents; many: {many.num_units} units in {len(many)} documents"
        )
        calibrate({"long": long, "many": many}, args.rounds)
    if not args.skip_server:
        with tempfile.TemporaryDirectory(prefix="bench-serve-cost-") as folder:
            long.save(os.path.join(folder, "long"))
            serve_long(os.path.join(folder, "long"), long, args.server_seconds)


if __name__ == "__main__":
    main()
