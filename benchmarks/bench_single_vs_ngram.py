#!/usr/bin/env python
"""P2: one forward pass per passage (SLICE) versus encoding every n-gram as its own input.

On the same passages (default 100 passages of 40 words, spans of 1..20 words) and one short query:

  (a) single pass  ``model.best_spans(query, passages, max_span=20)``
  (b) per-n-gram   every 1..20-word n-gram of each passage (words = whitespace split) encoded as its
                   own input with ``model.encode(ngrams, batch_size=...)`` (the N x K baseline), cosine
                   to ``model.encode(query)``, max per passage

Target: (b) / (a) >= 100x. The cases run interleaved in one process ((a) several times around (b))
and medians are reported.

The baseline is slow (100 x 610 = 61,000 n-grams). By default the script times a small random pilot
of n-grams first and runs the FULL baseline only if the pilot predicts less than ``--max-minutes``
(8); otherwise it stops and says so. ``--extrapolate`` instead times the baseline on the first
``--baseline-passages`` passages and scales it linearly to ``--n-passages`` (reported as such).

    .venv/bin/python benchmarks/bench_single_vs_ngram.py                         # full, measured
    .venv/bin/python benchmarks/bench_single_vs_ngram.py --extrapolate --baseline-passages 10
    .venv/bin/python benchmarks/bench_single_vs_ngram.py --n-passages 10 --repeats 2   # quick
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time

from _common import (
    DEFAULT_STS,
    build_passages_and_queries,
    environment_line,
    flush,
    load_line,
    load_sentences,
    median,
    run_interleaved,
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n-passages", type=int, default=100)
    parser.add_argument("--words", type=int, default=40, help="words per passage")
    parser.add_argument("--min-span", type=int, default=1)
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="batch size of best_spans")
    parser.add_argument(
        "--ngram-batch-size", type=int, default=128, help="batch size of model.encode(ngrams)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions of (a)")
    parser.add_argument("--baseline-repeats", type=int, default=1, help="timed repetitions of (b)")
    parser.add_argument(
        "--extrapolate",
        action="store_true",
        help="time (b) on --baseline-passages passages only and scale linearly to --n-passages",
    )
    parser.add_argument(
        "--baseline-passages", type=int, default=10, help="subset size for --extrapolate"
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=8.0,
        help="refuse a full baseline predicted to take longer than this (0: no check)",
    )
    parser.add_argument(
        "--pilot-ngrams", type=int, default=1024, help="n-grams timed to predict the baseline"
    )
    parser.add_argument(
        "--sts", default=str(DEFAULT_STS), help="STS-benchmark TSV to build passages from"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)"
    )
    return parser.parse_args()


def enumerate_ngrams(passages: list[str], min_span: int, max_span: int):
    """Every ``min_span..max_span``-word n-gram of each passage: texts, owner passage, (start, end) word index."""
    texts, owners, spans = [], [], []
    for index, passage in enumerate(passages):
        words = passage.split()
        for start in range(len(words)):
            for length in range(min_span, max_span + 1):
                if start + length > len(words):
                    break
                texts.append(" ".join(words[start : start + length]))
                owners.append(index)
                spans.append((start, start + length))
    return texts, owners, spans


def main() -> None:
    args = parse_args()
    import numpy as np
    import torch

    import slice_st

    if args.threads:
        torch.set_num_threads(args.threads)
    sentences, source = load_sentences(args.sts)
    passages, queries = build_passages_and_queries(
        sentences, args.n_passages, args.words, 1, args.seed
    )
    query = queries[0]
    model = slice_st.load_model()
    baseline_passages = passages[: args.baseline_passages] if args.extrapolate else passages
    ngrams, owners, ngram_spans = enumerate_ngrams(baseline_passages, args.min_span, args.max_span)
    all_ngrams = (
        ngrams
        if not args.extrapolate
        else enumerate_ngrams(passages, args.min_span, args.max_span)[0]
    )

    print("=" * 100)
    print("bench_single_vs_ngram (P2): single forward pass (best_spans) vs one input per n-gram")
    print(environment_line())
    print(f"data: {source}")
    print(
        f"passages: {len(passages)} x {args.words} words | spans {args.min_span}..{args.max_span} words | "
        f"query {query!r} | best_spans batch_size {args.batch_size} | n-gram batch_size {args.ngram_batch_size}"
    )
    print(
        f"n-grams: {len(all_ngrams):,} for all {len(passages)} passages "
        f"(mean {np.mean([len(n.split()) for n in all_ngrams]):.1f} words)"
    )
    flush()

    span_kwargs = dict(
        min_span=args.min_span,
        max_span=args.max_span,
        batch_size=args.batch_size,
        show_progress_bar=False,
    )

    # Warm-up (not timed).
    model.best_spans(query, passages[:8], **span_kwargs)
    model.encode(all_ngrams[:256], batch_size=args.ngram_batch_size, show_progress_bar=False)

    # Pilot: a random sample of n-grams predicts the cost of the full baseline.
    rng = random.Random(args.seed)
    pilot = rng.sample(all_ngrams, min(args.pilot_ngrams, len(all_ngrams)))
    start = time.perf_counter()
    model.encode(pilot, batch_size=args.ngram_batch_size, show_progress_bar=False)
    per_ngram = (time.perf_counter() - start) / len(pilot)
    predicted = per_ngram * len(ngrams) * args.baseline_repeats
    print(
        f"pilot: {len(pilot)} random n-grams in {per_ngram * len(pilot):.2f} s -> {1 / per_ngram:.0f} n-grams/s; "
        f"predicted baseline time for the {len(ngrams):,} n-grams to be timed "
        f"(x{args.baseline_repeats} repeats): {predicted / 60:.1f} min"
    )
    if not args.extrapolate and args.max_minutes and predicted > args.max_minutes * 60:
        print(
            f"STOPPED: the full baseline is predicted to take {predicted / 60:.1f} min > --max-minutes "
            f"{args.max_minutes}. Re-run with --extrapolate (time a subset, scale linearly), a smaller "
            "--n-passages, or --max-minutes 0 to run it anyway."
        )
        print("=" * 100)
        flush()
        sys.exit(2)
    flush()

    owner_index = torch.tensor(owners)
    n_baseline = len(baseline_passages)
    last: dict[str, object] = {}

    def case_a() -> dict:
        gc.collect()
        wall0 = time.perf_counter()
        result = model.best_spans(query, passages, **span_kwargs)
        wall = time.perf_counter() - wall0
        last["a"] = result
        return {"wall": wall}

    def case_b() -> dict:
        gc.collect()
        wall0 = time.perf_counter()
        query_vector = model.encode([query], convert_to_tensor=True, show_progress_bar=False)
        t_enc = time.perf_counter()
        vectors = model.encode(
            ngrams,
            batch_size=args.ngram_batch_size,
            convert_to_tensor=True,
            show_progress_bar=False,
        )
        t_enc = time.perf_counter() - t_enc
        scores = (
            torch.nn.functional.normalize(vectors, dim=-1)
            @ torch.nn.functional.normalize(query_vector, dim=-1)[0]
        )
        best = torch.full((n_baseline,), float("-inf")).scatter_reduce(
            0, owner_index, scores, "amax"
        )
        wall = time.perf_counter() - wall0
        last["b"] = (scores, best)
        return {"wall": wall, "encode": t_enc}

    results = run_interleaved(
        {"(a) best_spans": case_a, "(b) per-n-gram encode": case_b},
        {"(a) best_spans": args.repeats, "(b) per-n-gram encode": args.baseline_repeats},
        log=lambda line: (print(line), flush()),
    )
    ra, rb = results["(a) best_spans"], results["(b) per-n-gram encode"]
    a_wall = median(r["wall"] for r in ra)
    b_wall = median(r["wall"] for r in rb)
    b_encode = median(r["encode"] for r in rb)
    scale = len(passages) / n_baseline
    print("-" * 100)
    print(
        f"(a) best_spans, {len(passages)} passages:            median {a_wall:8.3f} s  (min "
        f"{min(r['wall'] for r in ra):.3f}, "
        f"{len(ra)} runs) = {1e3 * a_wall / len(passages):.1f} ms/passage"
    )
    print(
        f"(b) per-n-gram, {n_baseline} passages, {len(ngrams):,} n-grams: median {b_wall:8.3f} s  "
        f"({len(rb)} run(s); encode {b_encode:.3f} s = {len(ngrams) / b_encode:.0f} n-grams/s; "
        f"cosine+max {b_wall - b_encode:.3f} s)"
    )
    if args.extrapolate:
        b_full = b_wall * scale
        print(
            f"(b) EXTRAPOLATED linearly x{scale:.1f} to {len(passages)} passages: {b_full:.1f} s "
            f"(measured on the first {n_baseline} passages only)"
        )
    else:
        b_full = b_wall
        print(f"(b) MEASURED on all {len(passages)} passages (no extrapolation)")
    print("-" * 100)
    print(
        f"RATIO a:b = 1:{b_full / a_wall:.1f}  ->  single pass is {b_full / a_wall:.1f}x faster than per-n-gram "
        f"encoding "
        f"({'extrapolated' if args.extrapolate else 'measured'}; target >= 100x -> "
        f"{'MET' if b_full / a_wall >= 100 else 'NOT MET'})"
    )
    per_round = [b["wall"] * scale / a["wall"] for a, b in zip(ra, rb)]
    print(
        f"  same-round ratio(s) b/a: {[round(x, 1) for x in per_round]}; best-case ratio (min b / min a): "
        f"{min(r['wall'] for r in rb) * scale / min(r['wall'] for r in ra):.1f}"
    )

    # Informational: do both pick the same words? (Contextual span vectors vs isolated n-gram encodings:
    # different representations, so agreement is NOT expected to be 1.)
    result = last["a"]
    scores, best = last["b"]
    same = 0
    span_index = torch.tensor(ngram_spans)
    for t in range(n_baseline):
        mask = owner_index == t
        local = scores[mask]
        if not len(local):
            continue
        s, e = span_index[mask][int(local.argmax())].tolist()
        same += (int(result.unit_starts[0, t, 0]), int(result.unit_ends[0, t, 0])) == (s, e)
    print(
        f"info: same best word span in {same}/{n_baseline} passages (contextual SLICE spans vs isolated n-gram "
        f"encodings: not expected to agree; median best cosine a {np.median(result.scores[0, :n_baseline, 0]):.3f} "
        f"vs b {float(best.median()):.3f})"
    )
    print(f"{load_line()} at end (timings above are only as quiet as this machine was)")
    print("=" * 100)
    flush()


if __name__ == "__main__":
    main()
