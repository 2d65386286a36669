"""The span scorers' cost, side by side: ``best_spans`` with one scorer against the scorer below it.

``--scorer phrase`` (default): the phrase scorer with disjoint top-k against the paper's fused max-cosine path,
  (a) ``model.best_spans(queries, passages, top_k=K, scorer="max-cosine", overlap=True)`` and
  (b) ``model.best_spans(queries, passages, top_k=K, scorer="phrase")``, for ``K = 1`` and ``K = 5``;
  target b/a <= 1.10.
``--scorer reranked``: the learned re-ranker (the default scorer) against the phrase scorer,
  (a) ``scorer="phrase"`` and (b) ``scorer="reranked"`` (the phrase scorer's top 20, re-ranked), for ``K = 10`` and
  ``K = 1``; target b/a <= 1.30 at K = 10.
``--index``: the same two scorers through ``SpanIndex.search(queries, top_k=K, scorer=...)`` over an index of the
  passages (built once, in memory) instead of ``best_spans``.

Both cases run interleaved in ``--repeats`` rounds on the same passages and queries; printed: the median of the
per-round ratios.

    .venv/bin/python benchmarks/bench_scorer_overhead.py                                   # phrase / max-cosine
    .venv/bin/python benchmarks/bench_scorer_overhead.py --scorer reranked --n-passages 128 --repeats 5 --threads 1
    .venv/bin/python benchmarks/bench_scorer_overhead.py --scorer reranked --index --repeats 9 --threads 1
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

#: --scorer → (case a, case b, top-k values, target for b/a)
PAIRS = {
    "phrase": (
        ("max-cosine", {"scorer": "max-cosine", "overlap": True}),
        ("phrase", {"scorer": "phrase"}),
        (1, 5),
        1.10,
    ),
    "reranked": (
        ("phrase", {"scorer": "phrase"}),
        ("reranked", {"scorer": "reranked"}),
        (10, 1),
        1.30,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n-passages", type=int, default=1024)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--n-queries", type=int, default=8)
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sts", default=str(DEFAULT_STS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--scorer", choices=tuple(PAIRS), default="phrase", help="the scorer measured (see above)"
    )
    parser.add_argument(
        "--index", action="store_true", help="search an index of the passages instead of best_spans"
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="instead of timing: cProfile N calls of case (b), first K",
    )
    add_model_arguments(parser)
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    sentences, source = load_sentences(args.sts)
    passages, queries = build_passages_and_queries(
        sentences, args.n_passages, args.words, args.n_queries, args.seed
    )
    model, where = load_bench_model(args, args.threads)
    print("=" * 100)
    (name_a, options_a), (name_b, options_b), top_ks, target = PAIRS[args.scorer]
    print(
        f"bench_scorer_overhead: {'SpanIndex.search' if args.index else 'best_spans'} {name_b} / {name_a}"
    )
    print(environment_line())
    print(
        f"model on {where} | data: {source} | {len(passages)} passages x {args.words} words | {len(queries)} queries | "
        f"spans 1..{args.max_span} | repeats {args.repeats}"
    )
    flush()
    common = dict(max_span=args.max_span, show_progress_bar=False)
    model.best_spans(queries, passages[:64], **common)  # warm-up

    search = lambda top_k, **kwargs: model.best_spans(  # noqa: E731
        queries, passages, top_k=top_k, **common, **kwargs
    )
    if args.index:
        from slice_st.index import SpanIndex

        index = SpanIndex.build(passages, model, max_span=args.max_span, show_progress_bar=False)
        index.search(queries, top_k=10)  # warm-up (the unit flags are computed once)
        search = lambda top_k, **kwargs: index.search(queries, top_k=top_k, **kwargs)  # noqa: E731

    if args.profile:
        profile(lambda: search(top_ks[0], **options_b), args.profile)
        return

    def case(top_k: int, **kwargs):
        def run() -> dict:
            gc.collect()
            start = time.perf_counter()
            search(top_k, **kwargs)
            return {"wall": time.perf_counter() - start}

        return run

    for top_k in top_ks:
        cases = {
            f"(a) {name_a} k={top_k}": case(top_k, **options_a),
            f"(b) {name_b} k={top_k}": case(top_k, **options_b),
        }
        results = run_interleaved(cases, args.repeats, log=lambda line: (print(line), flush()))
        a, b = results.values()
        ratios = [y["wall"] / x["wall"] for x, y in zip(a, b)]
        print(
            f"k={top_k}: median wall a {median(r['wall'] for r in a):.3f} s, b {median(r['wall'] for r in b):.3f} s | "
            f"RATIO b/a median of per-round ratios {median(ratios):.3f} per round {[round(r, 3) for r in ratios]} "
            f"target <= {target:.2f} -> {'MET' if median(ratios) <= target else 'NOT MET'}"
        )
        flush()


def profile(call, count: int) -> None:
    """cProfile ``count`` calls; print the time per call and the package's functions by cumulative time per call."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    gc.collect()
    profiler.enable()
    for _ in range(count):
        call()
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = (
        sum(timing[3] for timing in stats.stats.values() if timing[4] == {}) / count
    )  # top-level calls
    print(
        f"profile: {count} calls, {total:.3f} s per call; cumulative s per call of the package's functions:"
    )
    rows = [(key, timing[3] / count) for key, timing in stats.stats.items() if "slice_st" in key[0]]
    for (path, line, name), seconds in sorted(rows, key=lambda row: -row[1])[:30]:
        print(f"  {seconds:7.4f}  {path.split('slice_st/')[-1]}:{line} {name}")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    print(out.getvalue())
    flush()


if __name__ == "__main__":
    main()
