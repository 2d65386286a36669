#!/usr/bin/env python
"""P1: overhead of span search over a plain forward pass.

Compares, on the same passages (default 1,024 passages of 40 words, spans of 1..20 words):

  (a) encode       ``model.encode(passages, batch_size=32)``                    plain sentence embeddings
  (b) best_spans   ``model.best_spans(queries, passages, max_span=20)``          forward + fused scoring
  (c) naive        ``model.encode_spans(passages, max_span=20)`` then cosine of every materialised span
                   vector with the queries and max per passage

All three run round-robin in one process (a, b, c, a, b, c, ...) and medians are reported, because
the machine is noisy. Targets: b/a <= 1.05. The script also checks that (b) and (c) pick the same
best span. Breakdowns inside the library calls come from timing wrappers installed only around
(b)/(c) (one ``perf_counter`` pair per call, negligible).

    .venv/bin/python benchmarks/bench_best_span_overhead.py                       # full run
    .venv/bin/python benchmarks/bench_best_span_overhead.py --n-passages 128 --repeats 2   # quick
    .venv/bin/python benchmarks/bench_best_span_overhead.py --backend openvino --export-dir runs/export/minilm   # P1
    on OpenVINO
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import time

from _common import (
    DEFAULT_STS,
    Stopwatch,
    add_model_arguments,
    build_passages_and_queries,
    environment_line,
    flush,
    load_bench_model,
    load_line,
    load_sentences,
    median,
    run_interleaved,
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n-passages", type=int, default=1024)
    parser.add_argument("--words", type=int, default=40, help="words per passage")
    parser.add_argument("--n-queries", type=int, default=8)
    parser.add_argument("--min-span", type=int, default=1)
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed repetitions of each case (interleaved)"
    )
    parser.add_argument(
        "--sts", default=str(DEFAULT_STS), help="STS-benchmark TSV to build passages from"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)"
    )
    parser.add_argument(
        "--chunk", type=int, default=128, help="passages per cosine chunk in the naive path"
    )
    add_model_arguments(parser)
    return parser.parse_args()


@contextlib.contextmanager
def instrument(model, watches: dict[str, Stopwatch]):
    """Temporarily wrap library internals with stopwatches (restored on exit)."""
    import slice_st.encode as enc

    targets = {
        "plan_windows": (enc, "plan_windows"),
        "pad_units": (enc, "_pad_window_outputs"),
        "fused_scoring": (enc, "best_span_scores"),
        "pool_spans": (enc, "pool_spans"),
        "embed_queries": (enc, "embed_texts"),
    }
    targets = {
        name: target for name, target in targets.items() if hasattr(*target)
    }  # the library may evolve
    saved = {}
    for name, (owner, attr) in targets.items():
        saved[name] = getattr(owner, attr)
        setattr(owner, attr, watches[name].wrap(saved[name]))
    model.encode = watches["forward"].wrap(
        type(model).encode.__get__(model)
    )  # instance attribute shadows the method
    try:
        yield
    finally:
        del model.encode
        for name, (owner, attr) in targets.items():
            setattr(owner, attr, saved[name])


def new_watches() -> dict[str, Stopwatch]:
    return {
        name: Stopwatch()
        for name in (
            "forward",
            "plan_windows",
            "pad_units",
            "fused_scoring",
            "pool_spans",
            "embed_queries",
        )
    }


def main() -> None:
    args = parse_args()
    import numpy as np
    import torch

    import slice_st
    import slice_st.encode

    if args.threads:
        torch.set_num_threads(args.threads)
    sentences, source = load_sentences(args.sts)
    passages, queries = build_passages_and_queries(
        sentences, args.n_passages, args.words, args.n_queries, args.seed
    )
    model, where = load_bench_model(args, args.threads)
    n_spans_per = sum(
        max(args.words - length + 1, 0) for length in range(args.min_span, args.max_span + 1)
    )

    print("=" * 100)
    print("bench_best_span_overhead (P1): best_spans / plain encode")
    print(environment_line())
    print(f"model on {where}")
    print(f"data: {source}")
    print(
        f"passages: {len(passages)} x {args.words} words | spans {args.min_span}..{args.max_span} words "
        f"({n_spans_per} per passage, {n_spans_per * len(passages):,} total) | {len(queries)} queries | "
        f"batch_size {args.batch_size} | repeats {args.repeats} (interleaved a,b,c)"
    )
    print(f"queries: {queries}")
    tokens = model.tokenizer(passages[:256], add_special_tokens=True)["input_ids"]
    print(
        f"mean tokens per passage (incl. [CLS]/[SEP], first 256): {np.mean([len(t) for t in tokens]):.1f}"
    )
    flush()

    span_kwargs = dict(
        min_span=args.min_span,
        max_span=args.max_span,
        batch_size=args.batch_size,
        show_progress_bar=False,
    )
    last: dict[str, object] = {}

    def timed(function, watches=None):
        gc.collect()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        with instrument(model, watches) if watches is not None else contextlib.nullcontext():
            out = function()
        return out, time.perf_counter() - wall0, time.process_time() - cpu0

    def case_a() -> dict:
        _, wall, cpu = timed(
            lambda: model.encode(passages, batch_size=args.batch_size, show_progress_bar=False)
        )
        return {"wall": wall, "cpu": cpu}

    def case_b() -> dict:
        watches = new_watches()
        result, wall, cpu = timed(
            lambda: model.best_spans(queries, passages, **span_kwargs), watches
        )
        last["b"] = result
        return {"wall": wall, "cpu": cpu, **{k: w.total for k, w in watches.items()}}

    def naive(watches: dict[str, Stopwatch]):
        query_vectors = slice_st.encode.embed_texts(model, queries, batch_size=args.batch_size)
        encodings = model.encode_spans(passages, **span_kwargs)
        start = time.perf_counter()
        unit_queries = torch.nn.functional.normalize(query_vectors.float().cpu(), dim=-1)
        best_scores = np.full((len(queries), len(passages)), -np.inf, dtype=np.float32)
        best_index = np.full((len(queries), len(passages)), -1, dtype=np.int64)
        for lo in range(
            0, len(encodings), args.chunk
        ):  # materialise all span vectors, chunk by chunk
            part = encodings[lo : lo + args.chunk]
            sizes = [len(e) for e in part]
            if not sum(sizes):
                continue
            vectors = torch.from_numpy(np.concatenate([e.embeddings for e in part]))
            scores = torch.nn.functional.normalize(vectors, dim=-1) @ unit_queries.T  # (S_total, Q)
            for offset, (row, size) in enumerate(zip(np.cumsum([0, *sizes[:-1]]), sizes)):
                if size:
                    value, index = scores[row : row + size].max(dim=0)
                    best_scores[:, lo + offset] = value.numpy()
                    best_index[:, lo + offset] = index.numpy()
        watches["cosine_max"] = Stopwatch()
        watches["cosine_max"].total = time.perf_counter() - start
        return encodings, best_scores, best_index

    def case_c() -> dict:
        watches = new_watches()
        (encodings, scores, index), wall, cpu = timed(lambda: naive(watches), watches)
        last["c"] = (encodings, scores, index)
        return {"wall": wall, "cpu": cpu, **{k: w.total for k, w in watches.items()}}

    # Warm-up (not timed): first calls allocate, load kernels, build tokenizer caches.
    print("warm-up ...")
    flush()
    model.encode(passages[:64], batch_size=args.batch_size, show_progress_bar=False)
    model.best_spans(queries, passages[:64], **span_kwargs)
    model.encode_spans(passages[:64], **span_kwargs)

    results = run_interleaved(
        {"(a) encode": case_a, "(b) best_spans": case_b, "(c) encode_spans+cosine": case_c},
        args.repeats,
        log=lambda line: (print(line), flush()),
    )
    ra, rb, rc = (results[k] for k in ("(a) encode", "(b) best_spans", "(c) encode_spans+cosine"))

    def med(rows, key):
        return median(r[key] for r in rows)

    print("-" * 100)
    print(f"{'case':<30}{'median wall s':>15}{'min wall s':>12}{'median cpu s':>14}")
    for name, rows in results.items():
        print(
            f"{name:<30}{med(rows, 'wall'):>15.3f}{min(r['wall'] for r in rows):>12.3f}{med(rows, 'cpu'):>14.3f}"
        )
    # Ratios per repetition (same round), then their median: robust to slow drifts of machine load.
    ratio_b = [b["wall"] / a["wall"] for a, b in zip(ra, rb)]
    ratio_c = [c["wall"] / a["wall"] for a, c in zip(ra, rc)]
    print("-" * 100)
    print(
        f"RATIO b/a (best_spans / encode), median of medians: {med(rb, 'wall') / med(ra, 'wall'):.3f}   "
        f"median of per-round ratios: {median(ratio_b):.3f}   per round: {[round(x, 3) for x in ratio_b]}   "
        f"target <= 1.05 -> {'MET' if med(rb, 'wall') / med(ra, 'wall') <= 1.05 else 'NOT MET'}"
    )
    print(
        f"RATIO c/a (naive  / encode), median of medians: {med(rc, 'wall') / med(ra, 'wall'):.3f}   "
        f"median of per-round ratios: {median(ratio_c):.3f}   per round: {[round(x, 3) for x in ratio_c]}"
    )
    print(f"RATIO c/b (naive / best_spans): {med(rc, 'wall') / med(rb, 'wall'):.3f}")
    print(
        f"cpu-time ratios: b/a {med(rb, 'cpu') / med(ra, 'cpu'):.3f}   c/a {med(rc, 'cpu') / med(ra, 'cpu'):.3f}"
    )

    print("-" * 100)
    print(
        "breakdown (median s over repetitions; 'forward' = model.encode calls incl. their tokenization;"
    )
    print(
        "           'other' = wall - listed parts: rows()/top-k merge/numpy conversion, or encode_spans' per-row loop)"
    )
    for name, rows, parts in (
        (
            "(b) best_spans",
            rb,
            ["forward", "plan_windows", "pad_units", "fused_scoring", "embed_queries"],
        ),
        (
            "(c) naive",
            rc,
            ["forward", "plan_windows", "pad_units", "pool_spans", "cosine_max", "embed_queries"],
        ),
    ):
        wall = med(rows, "wall")
        # embed_queries contains its own (small) forward/plan/pad calls; count it only once.
        exclusive = [p for p in parts if p != "embed_queries"]
        other = median(r["wall"] - sum(r[p] for p in exclusive) for r in rows)
        pieces = "  ".join(
            f"{p} {med(rows, p):.3f} ({100 * med(rows, p) / wall:.1f}%)" for p in parts
        )
        print(
            f"  {name:<16} wall {wall:.3f}: {pieces}  other {other:.3f} ({100 * other / wall:.1f}%)"
        )
    a_wall = med(ra, "wall")
    print(
        f"  scoring alone: fused best_span_scores = {med(rb, 'fused_scoring'):.3f} s "
        f"({100 * med(rb, 'fused_scoring') / a_wall:.1f}% of (a));  naive pool_spans + cosine/max = "
        f"{med(rc, 'pool_spans') + med(rc, 'cosine_max'):.3f} s "
        f"({100 * (med(rc, 'pool_spans') + med(rc, 'cosine_max')) / a_wall:.1f}% of (a))"
    )
    print(f"  forward only: (b) model.encode calls / (a) = {med(rb, 'forward') / a_wall:.3f}")

    # Agreement of (b) and (c) on the best span.
    result = last["b"]
    encodings, naive_scores, naive_index = last["c"]
    print("-" * 100)
    for q in range(len(queries)):
        same = close = total = 0
        max_diff = 0.0
        for t, encoding in enumerate(encodings):
            if naive_index[q, t] < 0:
                continue
            total += 1
            span_b = (int(result.unit_starts[q, t, 0]), int(result.unit_ends[q, t, 0]))
            span_c = tuple(int(x) for x in encoding.units[naive_index[q, t]])
            diff = abs(float(result.scores[q, t, 0]) - float(naive_scores[q, t]))
            max_diff = max(max_diff, diff)
            same += span_b == span_c
            close += span_b != span_c and diff <= 1e-5
        label = "AGREEMENT" if q == 0 else "agreement"
        print(
            f"{label} query {q} {queries[q]!r:<38} same best span {same}/{total} = {same / max(total, 1):.4f}"
            f"  (+{close} ties within 1e-5)  max |score_b - score_c| = {max_diff:.2e}"
        )
    print(f"{load_line()} at end (timings above are only as quiet as this machine was)")
    print("=" * 100)
    flush()


if __name__ == "__main__":
    main()
