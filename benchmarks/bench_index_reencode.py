"""A compressed index with its exact tier on disk vs without it (``exact_tier=False``: candidates re-encoded):
search time per query, one torch thread, and disk bytes per word (issue 48).

    python benchmarks/bench_index_reencode.py --out ../reencode-cache

The real-text corpus of research/realtext (documents.jsonl, 259 paragraphs, 12,784 words, licences in its
SOURCES.md) is encoded once with the default model into a ``pq32`` index saved twice: with its float16 exact tier, and
without it (the same codes). Queries: research/realtext/queries.jsonl. Each query is searched on one index, then on
the other (interleaved, after a warm-up of each), ``top_k=10`` and the default scorer; the results are compared
(the same spans, scores within 1e-3). The default 500 candidates are every document of this corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import _common  # noqa: E402,F401  (offline environment)

REALTEXT = os.path.join(os.path.dirname(__file__), "..", "research", "realtext")


def folder_bytes(path: str) -> int:
    """Bytes of the index's files (its manifest and data folder)."""
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(path)
        for name in names
        if name != ".lock"
    )


def build(out: str, spec: str) -> tuple[str, str, int]:
    """The two saved indexes (with, without the exact tier) and the corpus's words."""
    from slice_st import SpanIndex, load_model

    rows = [json.loads(line) for line in open(os.path.join(REALTEXT, "documents.jsonl"))]
    texts, ids = [row["text"] for row in rows], [row["id"] for row in rows]
    words = sum(len(text.split()) for text in texts)
    full, lean = os.path.join(out, "with-exact-tier"), os.path.join(out, "without-exact-tier")
    if not os.path.exists(os.path.join(lean, "manifest.json")):
        index = SpanIndex.build(texts, load_model(), ids, compression=spec)
        index.save(full)
        index.compress(codebooks=index, exact_tier=False)  # the same codebooks: the same codes
        index.save(lean)
    return full, lean, words


def keys(matches) -> list[tuple[str, int, int]]:
    return [(m.doc_id, m.start, m.end) for m in matches]


def timed(index, queries, candidates) -> tuple[list[float], list]:
    seconds, found = [], []
    for query in queries:
        start = time.perf_counter()
        found.append(index.search(query, top_k=10, candidates=candidates)[0])
        seconds.append(time.perf_counter() - start)
    return seconds, found


def compare(indexes, queries: list[str], candidates: int) -> dict:
    """Per query, each index in turn (interleaved); then one call of all the queries on each."""
    times: dict[str, list[float]] = {name: [] for name in indexes}
    same, worst = 0, 0.0
    for index in indexes.values():  # warm-up
        index.search(queries[0], top_k=10, candidates=candidates)
    for query in queries:
        found = {}
        for name, index in indexes.items():
            seconds, results = timed(index, [query], candidates)
            times[name] += seconds
            found[name] = results[0]
        a, b = found.values()
        same += keys(a) == keys(b)
        if keys(a) == keys(b):
            worst = max([worst] + [abs(x.score - y.score) for x, y in zip(a, b)])
    batch = {}
    for name, index in indexes.items():
        start = time.perf_counter()
        index.search(queries, top_k=10, candidates=candidates)
        batch[name] = (time.perf_counter() - start) / len(queries)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "candidates": candidates,
        "queries": len(queries),
        "median_s_per_query": medians,
        "ratio": medians["without"] / medians["with"],
        "batched_s_per_query": batch,
        "same_results": same,
        "max_score_difference": worst,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", required=True, help="a folder for the two indexes (kept: reruns reuse them)"
    )
    parser.add_argument("--spec", default="pq32")
    parser.add_argument("--candidates", type=int, nargs="+", default=[20, 50, 500])
    parser.add_argument(
        "--queries", type=int, default=30, help="per setting (fewer: see --all-queries)"
    )
    parser.add_argument(
        "--all-queries", type=int, default=8, help="queries where the candidates are every document"
    )
    args = parser.parse_args()
    import torch

    from slice_st import SpanIndex

    torch.set_num_threads(1)
    full, lean, words = build(args.out, args.spec)
    indexes = {"with": SpanIndex.load(full), "without": SpanIndex.load(lean)}
    queries = [json.loads(line)["query"] for line in open(os.path.join(REALTEXT, "queries.jsonl"))]
    report = {
        "words": words,
        "documents": len(indexes["with"]),
        "units": indexes["with"].num_units,
        "disk_bytes_per_word": {
            "with": round(folder_bytes(full) / words, 1),
            "without": round(folder_bytes(lean) / words, 1),
        },
        "settings": [],
    }
    for candidates in args.candidates:
        count = args.all_queries if candidates >= len(indexes["with"]) else args.queries
        report["settings"].append(compare(indexes, queries[:count], candidates))
        print(json.dumps(report["settings"][-1]), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
