"""The shipped models side by side: encode throughput and index size of ``slice-minilm`` and ``slice-mpnet``.

The corpus is the real-text dev set's paragraphs (``research/realtext/documents.jsonl``: licences, technical
documentation, support dialogue; permissively licensed, listed in ``research/realtext/SOURCES.md``). Each round
encodes the whole corpus with every model in turn (``encode_spans``, one forward pass per paragraph), the models'
order alternating between rounds, so both see the same machine load; the ratio of the medians is what to read.
Then each model builds a span index of the corpus (float32 and float16): bytes per word, resident and on disk.

    python benchmarks/bench_models.py --rounds 3 --threads 2

slice-mpnet's base comes through the Hugging Face cache or from ``SLICE_ST_BASE_MPNET``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

import slice_st
from slice_st.pretrained import SHIPPED_MODELS

DOCUMENTS = Path(__file__).resolve().parent.parent / "research" / "realtext" / "documents.jsonl"


def paragraphs(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle if line.strip()]


def encode_seconds(model, texts: list[str], batch_size: int) -> float:
    start = time.perf_counter()
    model.encode_spans(texts, batch_size=batch_size, show_progress_bar=False)
    return time.perf_counter() - start


def folder_bytes(folder: str) -> int:
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def index_sizes(model, texts: list[str], words: int) -> dict[str, float]:
    sizes = {}
    for dtype in ("float32", "float16"):
        index = slice_st.SpanIndex.build(texts, model, dtype=dtype, show_progress_bar=False)
        with tempfile.TemporaryDirectory() as folder:
            index.save(os.path.join(folder, "index"))
            sizes[f"{dtype} disk"] = folder_bytes(folder) / words
        sizes[f"{dtype} resident"] = index.info()["resident_bytes"] / words
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["slice-minilm", "slice-mpnet"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--documents", type=Path, default=DOCUMENTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    missing = [name for name in args.models if name not in SHIPPED_MODELS]
    if missing:
        parser.error(f"not shipped in this checkout: {', '.join(missing)} (make model-mpnet)")
    texts = paragraphs(args.documents)
    words = sum(len(text.split()) for text in texts)
    models = {name: slice_st.load_model(name) for name in args.models}
    for (
        model
    ) in models.values():  # warm-up: first-call allocations and lazy imports are not throughput
        encode_seconds(model, texts[:8], args.batch_size)
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for round_number in range(args.rounds):
        order = list(models) if round_number % 2 == 0 else list(reversed(models))
        for name in order:
            seconds[name].append(encode_seconds(models[name], texts, args.batch_size))
    first = args.models[0]
    print(
        f"{len(texts)} paragraphs, {words:,} words; {args.rounds} rounds, {args.threads} threads\n"
    )
    print(
        "| model | words/s (median) | time vs " + first + " | float32 B/word (resident / disk) "
        "| float16 B/word (resident / disk) |"
    )
    print("|---|---|---|---|---|")
    for name, model in models.items():
        median = statistics.median(seconds[name])
        ratio = median / statistics.median(seconds[first])
        sizes = index_sizes(model, texts, words)
        print(
            f"| {name} | {words / median:,.0f} | {ratio:.2f}× | "
            f"{sizes['float32 resident']:,.0f} / {sizes['float32 disk']:,.0f} | "
            f"{sizes['float16 resident']:,.0f} / {sizes['float16 disk']:,.0f} |"
        )


if __name__ == "__main__":
    main()
