#!/usr/bin/env python
"""The re-ranker's cost: ``best_spans`` with the default ``"reranked"`` scorer against the ``"phrase"`` scorer.

On the same passages (default 1,024 passages of 40 words, spans of 1..20 words, 8 queries), round-robin in one
process, medians of per-round ratios:

  (a) phrase    ``model.best_spans(queries, passages, top_k=K, scorer="phrase")``
  (b) reranked  ``model.best_spans(queries, passages, top_k=K)``   (the phrase scorer's top 20, re-ranked)

for ``K = 10`` and ``K = 1`` (both non-overlapping). Target: b/a <= 1.30 at K = 10. An index does not re-rank
(``SpanIndex.search`` ranks by ``"phrase"``): its cost is unchanged.

    .venv/bin/python benchmarks/bench_rerank_overhead.py                              # full run
    .venv/bin/python benchmarks/bench_rerank_overhead.py --n-passages 256 --repeats 3  # quick
"""

from __future__ import annotations

import argparse
import gc
import time

from _common import (
    DEFAULT_STS,
    add_model_arguments,
    build_passages_and_queries,
    environment_line,
    flush,
    load_bench_model,
    load_sentences,
    median,
    run_interleaved,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-passages", type=int, default=1024)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--n-queries", type=int, default=8)
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sts", default=str(DEFAULT_STS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    add_model_arguments(parser)
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    sentences, source = load_sentences(args.sts)
    passages, queries = build_passages_and_queries(sentences, args.n_passages, args.words, args.n_queries, args.seed)
    model, where = load_bench_model(args, args.threads)
    print("=" * 100)
    print("bench_rerank_overhead: best_spans default (reranked) / phrase scorer")
    print(environment_line())
    print(
        f"model on {where} | data: {source} | {len(passages)} passages x {args.words} words | {len(queries)} queries | "
        f"spans 1..{args.max_span} | repeats {args.repeats}"
    )
    flush()
    common = dict(max_span=args.max_span, show_progress_bar=False)
    model.best_spans(queries, passages[:64], **common)  # warm-up

    def case(top_k: int, **kwargs):
        def run() -> dict:
            gc.collect()
            start = time.perf_counter()
            model.best_spans(queries, passages, top_k=top_k, **common, **kwargs)
            return {"wall": time.perf_counter() - start}

        return run

    for top_k in (10, 1):
        cases = {
            f"(a) phrase   k={top_k}": case(top_k, scorer="phrase"),
            f"(b) reranked k={top_k}": case(top_k),
        }
        results = run_interleaved(cases, args.repeats, log=lambda line: (print(line), flush()))
        a, b = results.values()
        ratios = [y["wall"] / x["wall"] for x, y in zip(a, b)]
        print(
            f"k={top_k}: median wall a {median(r['wall'] for r in a):.3f} s, b {median(r['wall'] for r in b):.3f} s | "
            f"RATIO b/a median of per-round ratios {median(ratios):.3f} per round {[round(r, 3) for r in ratios]} "
            f"target <= 1.30 -> {'MET' if median(ratios) <= 1.30 else 'NOT MET'}"
        )
        flush()


if __name__ == "__main__":
    main()
