"""Single-pass span evaluation vs a bare ``encode`` of the same texts, on the real STS-B-Context dev file.

    .venv/bin/python benchmarks/bench_eval_single_pass.py --dev DATA/stsb_context/stsb-context-dev.tsv
    .venv/bin/python benchmarks/bench_eval_single_pass.py --dev DEV.tsv --threads 1 --repeats 7
    .venv/bin/python benchmarks/bench_eval_single_pass.py --dev DEV.tsv --backend onnx --quantized --export-dir
    runs/export/minilm

Case "single-pass evaluation": ``SpanRetrievalEvaluator.from_dataset(dev, setups=("single",), max_span=20)``
called on the model: one forward pass per origin phrase and per passage (512 rows × 2 = 1,024 texts), fused
best-span scoring over every 1..20-word span, Pearson/Spearman. Case "bare encode": ``model.encode(phrases +
passages, output_value="token_embeddings")``, the same 1,024 texts and batch size, which is the least any
single-pass evaluation must cost. Both run interleaved (a, b, a, b, ...) after one warm-up each; the script
prints each repeat's ratio and the median ratio (target: ≤ 1.15×), of wall time and of this process's CPU time
(``time.process_time``: on a machine loaded by other jobs, with ``--threads 1``, CPU time is what the run itself
costs, while wall time also counts the waits for a core). Absolute times depend on the machine and its load;
the ratio is measured side by side. Without ``--dev`` it falls back to generated passages of
STS-benchmark sentences (``--sts``), and says so.
"""

from __future__ import annotations

import argparse
import random
import statistics
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

TARGET_RATIO = 1.15


def _pairs(args) -> tuple[list[str], list[str], list[float], str]:
    if args.dev:
        from slice_st.data.stsb import read_stsb_context

        dev = read_stsb_context(args.dev)
        if args.limit:
            dev = dev.select(range(min(args.limit, len(dev))))
        return (
            list(dev["line"]),
            list(dev["passage"]),
            list(dev["goldsim"]),
            f"STS-B-Context rows from {args.dev} ({len(dev)})",
        )
    sentences, source = load_sentences(args.sts)
    passages, queries = build_passages_and_queries(
        sentences, args.limit or 512, words=40, n_queries=64
    )
    rng = random.Random(0)
    return (
        [queries[i % len(queries)] for i in range(len(passages))],
        passages,
        [rng.uniform(0, 5) for _ in passages],
        source,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dev", default=None, help="STS-B-Context TSV (the real dev file: 512 rows)"
    )
    parser.add_argument("--limit", type=int, default=None, help="first N rows only")
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)"
    )
    parser.add_argument(
        "--sts", default=None, help="without --dev: STS-benchmark TSV giving real sentences"
    )
    add_model_arguments(parser)
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from slice_st.evaluation import SpanRetrievalEvaluator

    print(environment_line())
    phrases, passages, gold, source = _pairs(args)
    print(source)
    model, where = load_bench_model(args, args.threads)
    print(f"model on {where}")
    evaluator = SpanRetrievalEvaluator(
        phrases,
        passages,
        gold,
        setups=("single",),
        max_span=args.max_span,
        batch_size=args.batch_size,
        show_progress_bar=False,
    )
    texts = phrases + passages
    print(
        f"{len(phrases)} pairs = {len(texts)} texts, spans 1..{args.max_span} words, batch {args.batch_size}, "
        f"{args.repeats} interleaved repeats after one warm-up each"
    )
    flush()

    def evaluate() -> dict:
        start, cpu = time.perf_counter(), time.process_time()
        metrics = evaluator(model)
        return {
            "wall": time.perf_counter() - start,
            "cpu": time.process_time() - cpu,
            "spearman": metrics["single_spearman"],
        }

    def encode() -> dict:
        start, cpu = time.perf_counter(), time.process_time()
        model.encode(
            texts,
            batch_size=args.batch_size,
            output_value="token_embeddings",
            show_progress_bar=False,
        )
        return {"wall": time.perf_counter() - start, "cpu": time.process_time() - cpu}

    evaluate(), encode()  # warm-up
    results = run_interleaved(
        {"single-pass evaluation": evaluate, "bare encode (token_embeddings)": encode}, args.repeats
    )
    print(f"\nsingle-pass Spearman: {results['single-pass evaluation'][0]['spearman']:.4f}")
    for clock in ("wall", "cpu"):
        evaluation = [r[clock] for r in results["single-pass evaluation"]]
        bare = [r[clock] for r in results["bare encode (token_embeddings)"]]
        ratios = [e / b for e, b in zip(evaluation, bare)]
        print(
            f"{clock:>4}: median evaluation {median(evaluation):.2f} s, median bare encode {median(bare):.2f} s; "
            f"ratio per repeat {', '.join(f'{r:.3f}' for r in ratios)}"
        )
        ratio = median(ratios)
        print(
            f"{clock:>4}: median ratio evaluation / encode: {ratio:.3f}x (min {min(ratios):.3f}, max "
            f"{max(ratios):.3f}, "
            f"stdev {statistics.pstdev(ratios):.3f}; target ≤ {TARGET_RATIO:.2f}x: "
            f"{'met' if ratio <= TARGET_RATIO else 'NOT met'})"
        )
    print(f"{load_line()} at end")


if __name__ == "__main__":
    main()
