"""Memory of a SpanIndex vs materialised span vectors, computed from the real arrays of a real index.

    python benchmarks/bench_index_memory.py --index runs/bench_index
    python benchmarks/bench_index_memory.py --docs ../shared/data/nugget_pi/paraphrase_identification/train/docs.txt
    --limit 40

The index stores per unit (word) its token-vector sum (d numbers) and the norms of the K span sums
starting there (K float32), plus character offsets; materialising every span stores one d-vector per
span (float32) plus its offsets. Both sides are counted from the arrays actually built (real span
counts: short documents and document ends have fewer than K spans per word); the document texts,
stored by both, are left out. With no --index, a small index is built from --docs first.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np  # noqa: E402
from _common import environment_line  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--index", default=None, help="a saved index (default: runs/bench_index if present)"
    )
    parser.add_argument(
        "--docs", default=None, help="id TAB text file to build a small index from when no --index"
    )
    parser.add_argument("--limit", type=int, default=40)
    args = parser.parse_args()
    import torch

    import slice_st
    from slice_st import SpanIndex

    torch.set_num_threads(2)
    print(environment_line())
    default = os.path.join(os.path.dirname(__file__), "..", "runs", "bench_index")
    path = args.index or (
        default if os.path.exists(os.path.join(default, "manifest.json")) else None
    )
    if path:
        index = SpanIndex.load(path)
        print(f"index: {os.path.abspath(path)} (loaded, memory-mapped)")
    else:
        if not args.docs:
            parser.error("no index found: give --index DIR or --docs FILE")
        from build_corpus_index import read_docs

        ids, texts = read_docs(args.docs, args.limit)
        index = SpanIndex.build(texts, slice_st.load_model(device="cpu"), ids=ids)
        print(f"index: built now from the first {len(texts)} documents of {args.docs}")

    arrays = index.arrays
    dim = arrays["unit_vectors"].shape[1]
    width = arrays["span_norms"].shape[1]
    words = sum(len(text.split()) for text in index.texts)
    tokens = sum(
        len(ids)
        for ids in index.model.tokenizer(index.texts, add_special_tokens=False)["input_ids"]
    )
    info = index.info()
    spans, units = info["spans"], info["units"]
    index_bytes = sum(np.asarray(arrays[name]).nbytes for name in arrays)
    half_bytes = index_bytes - np.asarray(arrays["unit_vectors"]).nbytes // (
        2 if index.dtype == "float32" else 1
    )
    if index.dtype == "float16":
        index_bytes, half_bytes = (
            index_bytes + np.asarray(arrays["unit_vectors"]).nbytes,
            index_bytes,
        )
    materialised = spans * (dim * 4 + 8)  # float32 vector + (start, end) int32 per span
    print(
        f"corpus: {len(index)} documents, {words} words, {tokens} tokens; {units} stored units "
        f"({units / words:.3f} per word: window overlap of long documents), {info['segments']} segments"
    )
    print(f"spans: {spans} ({spans / words:.2f} per word; K = {width}, d = {dim})")
    print()
    print(f"{'':<34}{'total MB':>10}{'bytes/token':>13}{'bytes/word':>12}{'vs materialised':>17}")
    for name, size in (
        ("materialised span vectors (fp32)", materialised),
        ("SpanIndex float32", index_bytes),
        ("SpanIndex float16", half_bytes),
    ):
        print(
            f"{name:<34}{size / 1e6:>10.1f}{size / tokens:>13.0f}{size / words:>12.0f}{materialised / size:>16.1f}x"
        )
    print()
    per_unit = (dim + width) * 4 + 8
    print(
        f"per stored unit: (d + K)·4 + 8 = {per_unit} bytes (float32) vs K·d·4 = {width * dim * 4} bytes for the K "
        f"spans "
        f"starting there: {width * dim * 4 / per_unit:.1f}x at most; measured {materialised / index_bytes:.1f}x "
        f"(float32), "
        f"{materialised / half_bytes:.1f}x (float16). Target >= 15x: "
        f"{'met' if materialised / index_bytes >= 15 else 'NOT met'}."
    )


if __name__ == "__main__":
    main()
