"""Single-pass span evaluation vs a bare ``encode`` of the same passages (issue 3 benchmark).

    .venv/bin/python benchmarks/bench_eval_single_pass.py                 # 1,024 passages of 40 words
    .venv/bin/python benchmarks/bench_eval_single_pass.py --threads 1 --repeats 5
    .venv/bin/python benchmarks/bench_eval_single_pass.py --model-dtype bfloat16        # AMX / AVX512-BF16 CPUs
    .venv/bin/python benchmarks/bench_eval_single_pass.py --backend onnx --quantized --export-dir runs/export/minilm

Case "single-pass evaluation": ``SpanRetrievalEvaluator(setups=("single",), max_span=20)`` called on
the model: one forward pass per passage and per origin phrase, fused best-span scoring over every
1..20-word span, Pearson/Spearman. Case "bare encode": ``model.encode(passages)`` with the same batch
size. Both run interleaved (a, b, a, b, ...) after one warm-up each; the script prints the medians,
their ratio and whether the evaluation met the target (≤ 12 s wall on 2 cores with
all-MiniLM-L6-v2). On a loaded machine absolute times mean little; the ratio is measured side by side.
"""

from __future__ import annotations

import argparse
import random
import time

from _common import (
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

TARGET_SECONDS = 12.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-passages", type=int, default=1024)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--sts", default=None, help="STS-benchmark TSV giving real sentences (default ../shared/data/.../sts-train.csv)")
    add_model_arguments(parser)
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from slice_st.evaluation import SpanRetrievalEvaluator

    print(environment_line())
    sentences, source = load_sentences(args.sts)
    print(source)
    passages, queries = build_passages_and_queries(sentences, args.n_passages, words=args.words, n_queries=64)
    rng = random.Random(0)
    phrases = [queries[i % len(queries)] for i in range(len(passages))]
    gold = [rng.uniform(0, 5) for _ in passages]
    model, where = load_bench_model(args, args.threads)
    print(f"model on {where}")
    evaluator = SpanRetrievalEvaluator(phrases, passages, gold, setups=("single",), max_span=args.max_span,
                                       batch_size=args.batch_size, show_progress_bar=False)
    print(f"{len(passages)} passages of {args.words} words, spans 1..{args.max_span} words, batch {args.batch_size}, "
          f"{args.repeats} interleaved repeats after one warm-up each")
    flush()

    def evaluate() -> dict:
        start = time.perf_counter()
        evaluator(model)
        return {"wall": time.perf_counter() - start}

    def encode() -> dict:
        start = time.perf_counter()
        model.encode(passages, batch_size=args.batch_size, show_progress_bar=False)
        return {"wall": time.perf_counter() - start}

    evaluate(), encode()  # warm-up
    results = run_interleaved({"single-pass evaluation": evaluate, "bare encode (passages)": encode}, args.repeats)
    evaluation = median(r["wall"] for r in results["single-pass evaluation"])
    bare = median(r["wall"] for r in results["bare encode (passages)"])
    print(f"\nmedian single-pass evaluation: {evaluation:.2f} s  (target ≤ {TARGET_SECONDS:.0f} s: "
          f"{'met' if evaluation <= TARGET_SECONDS else 'NOT met'})")
    print(f"median bare encode:            {bare:.2f} s")
    print(f"ratio evaluation / encode:     {evaluation / bare:.2f}x")
    print(f"{load_line()} at end")


if __name__ == "__main__":
    main()
