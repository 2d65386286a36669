"""Forward-pass threads: 1 vs 2 intra-op threads for torch, ONNX Runtime and OpenVINO (issue 12).

    .venv/bin/python benchmarks/bench_threads.py --export-dir runs/export/minilm          # 256 passages
    .venv/bin/python benchmarks/bench_threads.py --export-dir runs/export/minilm --threads 1 2 4

Each case is ``model.encode(passages)`` (tokenization + forward + mean pooling) of the same passages
of 40 words, on one backend with a given number of intra-op threads: torch (``torch.set_num_threads``
around the call), ONNX Runtime fp32 and int8 and OpenVINO (one session per thread count, made by
``slice_st.load_model(..., threads=N)``). All cases run interleaved in one process after a warm-up;
the script prints the medians and, per backend, the ratio of each thread count to 1 thread. The
exports are made once into ``--export-dir`` (offline) and reused.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--export-dir",
        required=True,
        help="folder keeping the ONNX/OpenVINO exports (made if missing)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model id or path (default: the library's, slice-minilm; 'base': all-MiniLM-L6-v2)",
    )
    parser.add_argument("--n-passages", type=int, default=256)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backends", nargs="+", default=["torch", "onnx", "onnx-int8", "openvino"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sts", default=None)
    args = parser.parse_args()

    import torch

    import slice_st

    print(environment_line())
    sentences, source = load_sentences(args.sts)
    print(source)
    passages, _ = build_passages_and_queries(sentences, args.n_passages, words=args.words)
    for backend, quantize in (("onnx", None), ("onnx", True), ("openvino", None)):
        if backend in {name.split("-")[0] for name in args.backends}:
            slice_st.export_model(args.model, args.export_dir, backend=backend, quantize=quantize)

    def loader(name: str, threads: int):
        if name == "torch":
            return slice_st.load_model(args.model)
        backend, _, variant = name.partition("-")
        return slice_st.load_model(
            args.export_dir, backend=backend, quantized=variant == "int8", threads=threads
        )

    torch_model = slice_st.load_model(args.model) if "torch" in args.backends else None
    cases = {}
    for name in args.backends:
        for threads in args.threads:
            model = torch_model if name == "torch" else loader(name, threads)

            def case(model=model, threads=threads, name=name) -> dict:
                previous = torch.get_num_threads()
                if name == "torch":
                    torch.set_num_threads(threads)
                start = time.perf_counter()
                model.encode(passages, batch_size=args.batch_size, show_progress_bar=False)
                wall = time.perf_counter() - start
                torch.set_num_threads(previous)
                return {"wall": wall}

            case()  # warm-up
            cases[f"{name} x{threads}"] = case
    print(
        f"{len(passages)} passages of {args.words} words, batch {args.batch_size}, {args.repeats} interleaved repeats"
    )
    flush()
    results = run_interleaved(cases, args.repeats, log=lambda line: (print(line), flush()))
    print("-" * 80)
    for name in args.backends:
        base = median(r["wall"] for r in results[f"{name} x{args.threads[0]}"])
        for threads in args.threads:
            wall = median(r["wall"] for r in results[f"{name} x{threads}"])
            print(
                f"{name:<12} {threads} thread(s): median {wall:7.2f} s   vs {args.threads[0]}: {wall / base:5.2f}x"
            )
    print(f"{load_line()} at end")


if __name__ == "__main__":
    main()
