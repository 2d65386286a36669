#!/usr/bin/env python
"""The span scorer's cost: ``best_spans`` with the default scorer and disjoint top-k against the paper's fused
max-cosine path.

On the same passages (default 1,024 passages of 40 words, spans of 1..20 words, 8 queries), round-robin in one
process, medians of per-round ratios:

  (a) max-cosine  ``model.best_spans(queries, passages, top_k=K, scorer="max-cosine", overlap=True)``
  (b) default     ``model.best_spans(queries, passages, top_k=K)``   ("phrase" scorer, non-overlapping top-k)

for ``K = 1`` and ``K = 5``. Target: b/a <= 1.10.

    .venv/bin/python benchmarks/bench_scorer_overhead.py                              # full run
    .venv/bin/python benchmarks/bench_scorer_overhead.py --n-passages 256 --repeats 3  # quick
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
    print("bench_scorer_overhead: best_spans default scorer + disjoint top-k / max-cosine fused path")
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

    for top_k in (1, 5):
        cases = {
            f"(a) max-cosine k={top_k}": case(top_k, scorer="max-cosine", overlap=True),
            f"(b) default    k={top_k}": case(top_k),
        }
        results = run_interleaved(cases, args.repeats, log=lambda line: (print(line), flush()))
        a, b = results.values()
        ratios = [y["wall"] / x["wall"] for x, y in zip(a, b)]
        print(
            f"k={top_k}: median wall a {median(r['wall'] for r in a):.3f} s, b {median(r['wall'] for r in b):.3f} s | "
            f"RATIO b/a median of per-round ratios {median(ratios):.3f} per round {[round(r, 3) for r in ratios]} "
            f"target <= 1.10 -> {'MET' if median(ratios) <= 1.10 else 'NOT MET'}"
        )
        flush()


if __name__ == "__main__":
    main()
