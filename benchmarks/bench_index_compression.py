"""Compressed span index vs exact: bytes per word, recall, search and build time, peak RSS (issue 48).

    python benchmarks/compression_corpus.py -o ../pqindex-cache/corpus.jsonl
    python benchmarks/bench_index_compression.py --cache ../pqindex-cache

The real corpus (scikit-learn and SciPy docstrings, BSD-3-Clause, built from the installed packages by
compression_corpus.py) is encoded once with the default model into ``CACHE/exact-real`` (float32, the exact index and
ground truth). Queries: phrases of 3-8 words from NumPy's docstrings (BSD-3-Clause), another package than the corpus.
Each configuration is searched in its own process (peak RSS = ``ru_maxrss`` of that process, the search's timed part
after a warm-up), with the default scorer and ``top_k=10``; recall@k counts the exact index's top-k (document, span)
found in the compressed index's top-k; top-1 document: the same best document. The exact index is searched first and
last, and each time ratio is to the mean of those two runs.

Scale-up (``--scales``): the real corpus's unit vectors copied with Gaussian noise (``--noise`` of the vectors' RMS per
dimension; span norms adjusted by their expected growth) up to N units, saved as a compressed index whose float16 exact
tier is also the exact index (``candidates >= documents`` searches it exhaustively). Only ``--scale-queries`` queries
there (the exact scan of 10M units takes minutes per query here).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import _common  # noqa: E402,F401  (offline environment)

CHILD_BATCH = 32


def encoded_corpus(cache: str, threads: int):
    """The real corpus as an exact float32 index, encoded once into ``cache/exact-real``; the encoding seconds."""
    import torch

    import slice_st
    from slice_st import SpanIndex

    path, timing = os.path.join(cache, "exact-real"), os.path.join(cache, "exact-real.json")
    if os.path.exists(os.path.join(path, "manifest.json")) and os.path.exists(timing):
        return path, json.load(open(timing))["seconds"]
    corpus = os.path.join(cache, "corpus.jsonl")
    if not os.path.exists(corpus):
        raise SystemExit(f"no corpus at {corpus}: run benchmarks/compression_corpus.py -o {corpus}")
    rows = [json.loads(line) for line in open(corpus, encoding="utf-8")]
    torch.set_num_threads(threads)
    start = time.perf_counter()
    index = SpanIndex.build(
        [row["text"] for row in rows],
        slice_st.load_model(device="cpu"),
        ids=[row["id"] for row in rows],
        on_error="skip",
        show_progress_bar=True,
    )
    seconds = time.perf_counter() - start
    index.save(path)
    json.dump({"seconds": seconds}, open(timing, "w"))
    return path, seconds


def make_queries(count: int, seed: int = 0) -> list[str]:
    """``count`` phrases of 3-8 words cut from prose paragraphs of NumPy's docstrings."""
    import random

    from compression_corpus import prose

    root = os.path.dirname(importlib.util.find_spec("numpy").origin)
    paragraphs = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("tests", "__pycache__"))
        for name in sorted(f for f in files if f.endswith(".py")):
            try:
                tree = ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and (doc := ast.get_docstring(node)):
                    paragraphs += [text for part in re.split(r"\n\s*\n", doc) if (text := prose(part))]
    rng, queries = random.Random(seed), []
    while len(queries) < count:
        words = [w.strip(".,;:`*()") for w in rng.choice(paragraphs).split()]
        length = rng.randint(3, 8)
        start = rng.randrange(max(1, len(words) - length))
        phrase = " ".join(w for w in words[start : start + length] if w)
        if len(phrase.split()) >= 3 and phrase not in queries:
            queries.append(phrase)
    return queries


def compressed_copy(exact_path: str, out: str, spec: str) -> float:
    """Save a compressed float16 copy of the exact index at ``out`` (no re-encoding); the seconds compress() took."""
    import numpy as np

    from slice_st import SpanIndex

    exact = SpanIndex.load(exact_path)
    half = exact._documents(np.arange(len(exact)))
    half.dtype = "float16"
    half._arrays = {
        name: values.astype(np.float16) if name in ("unit_vectors", "span_norms") else np.asarray(values)
        for name, values in half._arrays.items()
    }
    start = time.perf_counter()
    half.compress(spec)
    seconds = time.perf_counter() - start
    half.save(out)
    return seconds


def synthetic(exact_path: str, out: str, units: int, spec: str, noise: float, seed: int = 0) -> dict:
    """A compressed index of ``units`` units: noisy copies of the real corpus's arrays (module docstring)."""
    import numpy as np

    from slice_st import SpanIndex

    real = SpanIndex.load(exact_path)
    arrays = real._arrays
    vectors = np.asarray(arrays["unit_vectors"], dtype=np.float32)
    sigma = noise * float(np.sqrt(np.mean(vectors**2)))
    copies = -(-units // len(vectors))
    staging = out + ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    start = time.perf_counter()
    big = np.lib.format.open_memmap(os.path.join(staging, "v.npy"), "w+", np.float16, (copies * len(vectors), 384))
    rng = np.random.default_rng(seed)
    for copy in range(copies):
        for lo in range(0, len(vectors), 65536):
            part = vectors[lo : lo + 65536]
            big[copy * len(vectors) + lo : copy * len(vectors) + lo + len(part)] = (
                part + rng.normal(0, sigma, part.shape).astype(np.float32)
            ).astype(np.float16)
    big.flush()
    lengths = np.arange(real.span_config.min_span, real.span_config.max_span + 1)
    norms = np.sqrt(np.asarray(arrays["span_norms"], dtype=np.float32) ** 2 + lengths * sigma**2 * vectors.shape[1])
    index = real._documents(np.arange(len(real)))  # a shell with the model; arrays replaced below
    bounds = np.asarray(arrays["segment_units"])
    index.dtype = "float16"
    index._arrays = {
        "unit_vectors": big,
        "unit_chars": np.tile(np.asarray(arrays["unit_chars"]), (copies, 1)),
        "span_norms": np.tile(norms.astype(np.float16), (copies, 1)),
        "segment_units": np.concatenate([[0]] + [bounds[1:] + c * bounds[-1] for c in range(copies)]),
        "segment_docs": np.concatenate([np.asarray(arrays["segment_docs"]) + c * len(real) for c in range(copies)]),
        "segment_first_unit": np.tile(np.asarray(arrays["segment_first_unit"]), copies),
    }
    index.doc_ids = [f"{doc_id}@{c}" for c in range(copies) for doc_id in real.doc_ids]
    index.texts = real.texts * copies
    made = time.perf_counter() - start
    start = time.perf_counter()
    index.compress(spec)
    compressed = time.perf_counter() - start
    start = time.perf_counter()
    index.save(out)
    saved = time.perf_counter() - start
    shutil.rmtree(staging)
    return {
        "units": index.num_units,
        "documents": len(index),
        "copies": copies,
        "synthesis_s": made,
        "compress_s": compressed,
        "save_s": saved,
    }


def child(path: str, queries_file: str, candidates: list[int], out: str, threads: int) -> None:
    """One process: load ``path``, search the queries (a warm-up first) per candidates setting, write the results."""
    import torch

    from slice_st import SpanIndex

    torch.set_num_threads(threads)
    queries = json.load(open(queries_file))
    index = SpanIndex.load(path)
    index.search(queries[:4], top_k=10, candidates=candidates[0])  # warm-up: model, caches, first pages
    runs = []
    for count in candidates:
        start, results = time.perf_counter(), []
        for lo in range(0, len(queries), CHILD_BATCH):
            results += index.search(queries[lo : lo + CHILD_BATCH], top_k=10, candidates=count)
        seconds = time.perf_counter() - start
        keys = [[[m.doc_id, m.start, m.end] for m in matches] for matches in results]
        runs.append({"candidates": count, "seconds_per_query": seconds / len(queries), "results": keys})
    info = index.info()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    json.dump(
        {
            "runs": runs,
            "peak_rss": rss,
            "info": {k: info[k] for k in ("units", "documents", "resident_bytes", "array_bytes", "compression")},
        },
        open(out, "w"),
    )


def run_child(args, path: str, queries_file: str, candidates: list[int]) -> dict:
    out = os.path.join(args.cache, "child.json")
    command = [
        sys.executable,
        __file__,
        "--child",
        path,
        queries_file,
        ",".join(map(str, candidates)),
        out,
        str(args.threads),
    ]
    subprocess.run(command, check=True)
    return json.load(open(out))


def scores(exact: list, found: list) -> dict:
    """recall@1, recall@10 of (document, span) and top-1 document agreement of ``found`` against ``exact``."""
    import numpy as np

    at10 = [len({tuple(m) for m in e} & {tuple(m) for m in f}) / len(e) for e, f in zip(exact, found) if e]
    at1 = [bool(f) and tuple(f[0]) == tuple(e[0]) for e, f in zip(exact, found) if e]
    doc1 = [bool(f) and f[0][0] == e[0][0] for e, f in zip(exact, found) if e]
    return {"recall@1": float(np.mean(at1)), "recall@10": float(np.mean(at10)), "top1_doc": float(np.mean(doc1))}


def disk_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def real_corpus(args, exact_path: str, encode_s: float, words: int) -> None:
    queries_file = os.path.join(args.cache, f"queries-{args.queries}.json")
    json.dump(make_queries(args.queries), open(queries_file, "w"))
    print(f"real corpus: {words} words; {args.queries} queries; encoding {encode_s:.0f} s", flush=True)
    first = run_child(args, exact_path, queries_file, [1])
    exact = first["runs"][0]
    units = first["info"]["units"]
    print(
        "| setting | candidates | resident B/word | disk B/word | recall@1 | recall@10 | top-1 doc | "
        "time vs exact | build time vs exact | peak RSS MiB |",
        flush=True,
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for spec in args.specs:
        path = os.path.join(args.cache, f"real-{spec.replace(',', '-')}")
        timing = path + ".json"
        if not os.path.exists(timing):
            json.dump({"compress_s": compressed_copy(exact_path, path, spec)}, open(timing, "w"))
        compress_s = json.load(open(timing))["compress_s"]
        found = run_child(args, path, queries_file, args.candidates)
        for run in found["runs"]:
            rows.append((spec, run, found, path, compress_s))
    last = run_child(args, exact_path, queries_file, [1])["runs"][0]
    exact_time = (exact["seconds_per_query"] + last["seconds_per_query"]) / 2
    print(
        f"| exact float32 | - | {first['info']['resident_bytes'] / words:.0f} | "
        f"{disk_bytes(exact_path) / words:.0f} | 1 | 1 | 1 | 1.00 ({exact_time:.2f} s/query) | 1.00 | "
        f"{first['peak_rss'] / 2**20:.0f} |"
    )
    for spec, run, found, path, compress_s in rows:
        quality = scores(exact["results"], run["results"])
        print(
            f"| {spec} | {run['candidates']} | {found['info']['resident_bytes'] / words:.1f} | "
            f"{disk_bytes(path) / words:.0f} | {quality['recall@1']:.3f} | {quality['recall@10']:.3f} | "
            f"{quality['top1_doc']:.3f} | {run['seconds_per_query'] / exact_time:.2f} | "
            f"{(encode_s + compress_s) / encode_s:.2f} | {found['peak_rss'] / 2**20:.0f} |",
            flush=True,
        )
    print(f"({units} units = words as the index counts them; B/word divides by {words} whitespace words)")


def scaled(args, exact_path: str) -> None:
    queries_file = os.path.join(args.cache, f"queries-{args.scale_queries}.json")
    json.dump(make_queries(args.scale_queries, seed=1), open(queries_file, "w"))
    print(f"\nscale-up ({args.scale_spec}, noise {args.noise}, {args.scale_queries} queries):", flush=True)
    print(
        "| units | documents | resident B/unit | disk B/unit | write s | compressed s/query | exact s/query | "
        "ratio | recall@10 | top-1 doc | peak RSS MiB compressed / exact |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for units in args.scales:
        path = os.path.join(args.cache, f"synth-{units}")
        if not os.path.exists(path + ".json"):
            json.dump(synthetic(exact_path, path, units, args.scale_spec, args.noise), open(path + ".json", "w"))
        built = json.load(open(path + ".json"))
        found = run_child(args, path, queries_file, [args.default_candidates])
        run = found["runs"][0]
        exact, quality, exact_cell, rss_exact = None, None, "-", "-"
        if units <= args.exact_up_to:
            exact = run_child(args, path, queries_file, [10**9])
            quality = scores(exact["runs"][0]["results"], run["results"])
            exact_cell, rss_exact = f"{exact['runs'][0]['seconds_per_query']:.2f}", f"{exact['peak_rss'] / 2**20:.0f}"
        n = found["info"]["units"]
        ratio = "-" if exact is None else f"{run['seconds_per_query'] / exact['runs'][0]['seconds_per_query']:.2f}"
        print(
            f"| {n} | {found['info']['documents']} | {found['info']['resident_bytes'] / n:.1f} | "
            f"{disk_bytes(path) / n:.0f} | {built['compress_s'] + built['save_s']:.0f} | "
            f"{run['seconds_per_query']:.2f} | {exact_cell} | {ratio} | "
            f"{'-' if quality is None else format(quality['recall@10'], '.3f')} | "
            f"{'-' if quality is None else format(quality['top1_doc'], '.3f')} | "
            f"{found['peak_rss'] / 2**20:.0f} / {rss_exact} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="a folder outside git for the corpus, indexes and vectors")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--specs", nargs="+", default=["pq32", "pq48"])
    parser.add_argument("--candidates", type=int, nargs="+", default=[50, 100, 200, 500])
    parser.add_argument("--default-candidates", type=int, default=500)
    parser.add_argument("--scales", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--scale-spec", default="pq32")
    parser.add_argument("--scale-queries", type=int, default=20)
    parser.add_argument("--exact-up-to", type=int, default=1_000_000, help="largest scale also searched exactly")
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-real", action="store_true")
    args = parser.parse_args()
    print(_common.environment_line(), flush=True)
    exact_path, encode_s = encoded_corpus(args.cache, args.threads)
    words = sum(len(json.loads(line)["text"].split()) for line in open(os.path.join(args.cache, "corpus.jsonl")))
    if not args.skip_real:
        real_corpus(args, exact_path, encode_s, words)
    if args.scales:
        scaled(args, exact_path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        path, queries_file, candidates, out, threads = sys.argv[2:7]
        child(path, queries_file, [int(c) for c in candidates.split(",")], out, int(threads))
    else:
        main()
