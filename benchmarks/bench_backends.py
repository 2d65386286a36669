"""``best_spans`` on torch, ONNX Runtime and OpenVINO (issue 12): speed ratios, P1 per backend, quality lost.

    .venv/bin/python benchmarks/bench_backends.py --export-dir runs/export/minilm \\
        --dev ../shared/data/stsb_context/stsb-context-dev.tsv
    .venv/bin/python benchmarks/bench_backends.py --export-dir runs/export/minilm --n-passages 128 --repeats 1   # quick

Variants (``--variants``): ``torch`` (fp32, the reference), ``torch-bf16`` (bf16 weights: AMX /
AVX512-BF16 CPUs, or a GPU), ``onnx`` (ONNX Runtime fp32), ``onnx-int8`` (dynamic int8,
``onnx/model_qint8_<cpu>.onnx``), ``openvino`` (fp32) and ``openvino-bf16`` (OpenVINO's bf16
inference precision). The exports are made once, offline, into ``--export-dir`` (``slice_st.export_model``).

Timing: the benchmark input of P1 (1,024 passages of 40 words from STS-B train sentences, 8 queries,
spans 1..20 words, batch 32). Per variant two cases, ``model.best_spans(queries, passages)`` and a
plain ``model.encode(passages)``; every case of every variant runs round-robin in one process
(a warm-up each first), so all ratios are measured side by side: the speed-up of each variant's
``best_spans`` over torch fp32's (median of the per-round ratios) and P1 = ``best_spans`` / ``encode``
on the same backend (target ≤ 1.05).

Quality: single-pass Spearman (×100, spans 1..20 words) of each variant on ``--dev`` (the real
STS-B-Context dev half: phrase = ``line``, passage = ``passage``, gold = ``goldsim``), and the points
lost against torch fp32 (goal: ≤ 0.5). Not timed. The file is read in place, never copied.
"""

from __future__ import annotations

import argparse
import time

from _common import (
    build_passages_and_queries,
    environment_line,
    flush,
    load_line,
    load_sentences,
    median,
    run_interleaved,
)

VARIANTS = ("torch", "torch-bf16", "onnx", "onnx-int8", "openvino", "openvino-bf16")


def load_variant(name: str, model: str | None, export_dir: str, threads: int | None):
    import slice_st

    backend, _, variant = name.partition("-")
    if backend == "torch":
        return slice_st.load_model(model, dtype="bfloat16" if variant == "bf16" else None)
    return slice_st.load_model(
        export_dir,
        backend=backend,
        quantized=variant == "int8",
        dtype="bfloat16" if variant == "bf16" else None,
        threads=threads,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--export-dir", required=True, help="folder keeping the exports (made there if missing)"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model id or path (default: the library's, slice-minilm; 'base': all-MiniLM-L6-v2)",
    )
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument(
        "--dev",
        default=None,
        help="STS-B-Context TSV for the quality column (skipped if not given)",
    )
    parser.add_argument("--n-passages", type=int, default=1024)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--n-queries", type=int, default=8)
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="intra-op threads for every backend (default: the library's)",
    )
    parser.add_argument(
        "--sts",
        default=None,
        help="STS-benchmark TSV giving the timing passages (default ../shared/data/.../sts-train.csv)",
    )
    args = parser.parse_args()

    import torch

    import slice_st
    from slice_st.backends import default_threads

    if args.threads:
        torch.set_num_threads(args.threads)
    print(environment_line())
    print(
        f"intra-op threads: torch {torch.get_num_threads()}, ONNX Runtime / OpenVINO "
        f"{args.threads or default_threads()}"
    )
    for backend, quantize in (("onnx", None), ("onnx", True), ("openvino", None)):
        if any(
            v.startswith(backend) and (quantize is None) == (not v.endswith("int8"))
            for v in args.variants
        ):
            start = time.perf_counter()
            path = slice_st.export_model(
                args.model, args.export_dir, backend=backend, quantize=quantize
            )
            print(f"export {path}: {time.perf_counter() - start:.1f} s (cached when already there)")
    models = {
        name: load_variant(name, args.model, args.export_dir, args.threads)
        for name in args.variants
    }

    quality = {}
    if args.dev:
        from slice_st.data import read_stsb_context
        from slice_st.evaluation import SpanRetrievalEvaluator

        data = read_stsb_context(args.dev)
        evaluator = SpanRetrievalEvaluator.from_dataset(
            data,
            setups=("single",),
            max_span=args.max_span,
            batch_size=args.batch_size,
            show_progress_bar=False,
        )
        print(
            f"quality: {len(data)} pairs of {args.dev}, single pass, spans 1..{args.max_span} words"
        )
        for name, model in models.items():
            start = time.perf_counter()
            quality[name] = 100 * evaluator(model)["single_spearman"]
            print(
                f"  {name:<14} Spearman {quality[name]:6.2f}  ({time.perf_counter() - start:.1f} s)"
            )
            flush()

    sentences, source = load_sentences(args.sts)
    passages, queries = build_passages_and_queries(
        sentences, args.n_passages, args.words, args.n_queries
    )
    print(
        f"timing: {source}; {len(passages)} passages x {args.words} words, {len(queries)} queries, "
        f"spans 1..{args.max_span}, batch {args.batch_size}, {args.repeats} interleaved rounds after a warm-up"
    )
    flush()
    kwargs = dict(max_span=args.max_span, batch_size=args.batch_size, show_progress_bar=False)
    cases = {}
    for name, model in models.items():

        def spans(model=model) -> dict:
            start = time.perf_counter()
            model.best_spans(queries, passages, **kwargs)
            return {"wall": time.perf_counter() - start}

        def encode(model=model) -> dict:
            start = time.perf_counter()
            model.encode(passages, batch_size=args.batch_size, show_progress_bar=False)
            return {"wall": time.perf_counter() - start}

        (
            model.best_spans(queries, passages[:64], **kwargs),
            model.encode(passages[:64], batch_size=args.batch_size),
        )  # warm-up
        cases[f"{name} best_spans"], cases[f"{name} encode"] = spans, encode
    results = run_interleaved(cases, args.repeats, log=lambda line: (print(line), flush()))

    reference = [r["wall"] for r in results[f"{args.variants[0]} best_spans"]]
    print("-" * 112)
    print(
        f"{'variant':<15}{'best_spans s':>13}{'encode s':>10}"
        f"{'speed-up vs ' + args.variants[0]:>20}{'P1 spans/encode':>17}"
        f"{'Spearman':>10}{'lost (points)':>15}"
    )
    for name in args.variants:
        spans = [r["wall"] for r in results[f"{name} best_spans"]]
        encode = [r["wall"] for r in results[f"{name} encode"]]
        speed = median(ref / s for ref, s in zip(reference, spans))
        p1 = median(s / e for s, e in zip(spans, encode))
        score = f"{quality[name]:10.2f}" if name in quality else f"{'-':>10}"
        lost = (
            f"{quality[args.variants[0]] - quality[name]:15.2f}"
            if name in quality
            else f"{'-':>15}"
        )
        print(
            f"{name:<15}{median(spans):13.2f}{median(encode):10.2f}{speed:19.2f}x{p1:17.3f}{score}{lost}"
        )
    print("speed-up and P1: medians of the per-round ratios (each round runs every case once).")
    print(f"{load_line()} at end")


if __name__ == "__main__":
    main()
