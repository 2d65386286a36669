"""Compressed span index vs exact: bytes per word, recall, search and build time, peak RSS (issue 48).

    python benchmarks/compression_corpus.py -o ../pqindex-cache/corpus.jsonl
    python benchmarks/bench_index_compression.py --cache ../pqindex-cache

The real corpus (scikit-learn and SciPy docstrings, BSD-3-Clause, built from the installed packages by
compression_corpus.py) is encoded once with the default model into ``CACHE/exact-real`` (float32, the exact index and
ground truth). Queries: phrases of 3-8 words from NumPy's docstrings (BSD-3-Clause), another package than the corpus.
Each configuration is searched in its own process (peak RSS = ``ru_maxrss`` of that process, the search's timed part
after a warm-up), with the default scorer and ``top_k=10``; recall@k counts the exact index's top-k (document, span)
found in the compressed index's top-k; top-1 document: the same best document. On the real corpus the exact index
and every compressed setting are searched at the same time (one process each, so under the same load), and each time
ratio compares the first ``--timed-queries`` queries of the two.

Scale-up (``--scales``): the real corpus's unit vectors copied with Gaussian noise (``--noise`` of the vectors' RMS per
dimension; one draw, rolled by another number of rows per copy; span norms adjusted by their expected growth) up to
N units, saved as a compressed index whose float16 exact tier is also the exact index (``candidates >= documents``
searches it exhaustively). Only ``--scale-queries`` queries there (the exact scan of 10M units takes minutes per query
here).
"""

from __future__ import annotations

import argparse
import ast
import functools
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
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and (
                    doc := ast.get_docstring(node)
                ):
                    paragraphs += [
                        text for part in re.split(r"\n\s*\n", doc) if (text := prose(part))
                    ]
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
    half.arrays = {
        name: values.astype(np.float16)
        if name in ("unit_vectors", "span_norms")
        else np.asarray(values)
        for name, values in half.arrays.items()
    }
    start = time.perf_counter()
    half.compress(spec)
    seconds = time.perf_counter() - start
    half.save(out)
    return seconds


def synthetic(
    exact_path: str, out: str, units: int, spec: str, noise: float, seed: int = 0
) -> dict:
    """A compressed index of ``units`` units: noisy copies of the real corpus's arrays (module docstring)."""
    import numpy as np

    from slice_st import SpanIndex

    real = SpanIndex.load(exact_path)
    arrays = real.arrays
    vectors = np.asarray(arrays["unit_vectors"], dtype=np.float32)
    sigma = noise * float(np.sqrt(np.mean(vectors**2)))
    copies = -(-units // len(vectors))
    staging = out + ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    start = time.perf_counter()
    big = np.lib.format.open_memmap(
        os.path.join(staging, "v.npy"), "w+", np.float16, (copies * len(vectors), vectors.shape[1])
    )
    # one draw of noise, rolled by a different number of rows for each copy (drawing 10^10 normals takes too long)
    noise = np.random.default_rng(seed).normal(0, sigma, vectors.shape).astype(np.float16)
    for copy in range(copies):
        shifted = np.roll(noise, copy * 104_729, axis=0)
        for lo in range(0, len(vectors), 65536):
            part = vectors[lo : lo + 65536] + shifted[lo : lo + 65536]
            big[copy * len(vectors) + lo : copy * len(vectors) + lo + len(part)] = part.astype(
                np.float16
            )
    big.flush()
    lengths = np.arange(real.span_config.min_span, real.span_config.max_span + 1)
    norms = np.sqrt(
        np.asarray(arrays["span_norms"], dtype=np.float32) ** 2
        + lengths * sigma**2 * vectors.shape[1]
    )
    index = real._documents(np.arange(len(real)))  # a shell with the model; arrays replaced below
    bounds = np.asarray(arrays["segment_units"])
    index.dtype = "float16"
    index.arrays = {
        "unit_vectors": big,
        "unit_chars": np.tile(np.asarray(arrays["unit_chars"]), (copies, 1)),
        "span_norms": np.tile(norms.astype(np.float16), (copies, 1)),
        "segment_units": np.concatenate(
            [[0]] + [bounds[1:] + c * bounds[-1] for c in range(copies)]
        ),
        "segment_docs": np.concatenate(
            [np.asarray(arrays["segment_docs"]) + c * len(real) for c in range(copies)]
        ),
        "segment_first_unit": np.tile(np.asarray(arrays["segment_first_unit"]), copies),
    }
    index.doc_ids = [f"{doc_id}@{c}" for c in range(copies) for doc_id in real.doc_ids]
    index.texts = real.texts * copies
    index.sources = real.sources * copies
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


def child(
    path: str, queries_file: str, sweep: list[int], timing: int, timed: int, out: str, threads: int
) -> None:
    """One process: load ``path``; time the public search (default scorer, ``candidates=timing``) on the first
    ``timed`` queries, batch by batch, after a warm-up; then (``sweep``) every query's results per candidates count,
    from one compressed scan whose top documents are cut to each count; write it all with the peak RSS."""
    import numpy as np
    import torch

    from slice_st import SpanIndex
    from slice_st.index.search import profiles_of
    from slice_st.search import search_scorer

    torch.set_num_threads(threads)
    queries = json.load(open(queries_file))
    index = SpanIndex.load(path)
    index.search(queries[:4], top_k=10, candidates=timing)  # warm-up: model, caches, first pages
    keys = lambda found: [[[m.doc_id, m.start, m.end] for m in matches] for matches in found]  # noqa: E731
    batch_seconds, timed_results = [], []
    for lo in range(0, timed, CHILD_BATCH):
        start = time.perf_counter()
        timed_results += keys(
            index.search(queries[lo : min(lo + CHILD_BATCH, timed)], top_k=10, candidates=timing)
        )
        batch_seconds.append(time.perf_counter() - start)
    results = {count: [] for count in sweep}
    options = dict(
        top_k=10,
        threshold=None,
        per_document=None,
        scorer=search_scorer(None, index.model),
        overlap=False,
    )
    for lo in range(0, len(queries) if sweep else 0, CHILD_BATCH):
        batch = queries[lo : lo + CHILD_BATCH]
        vectors = index.embed_queries(batch)
        profiles = profiles_of(index.model, index.span_config.unit, batch)
        docs = index._compressed.best_documents(
            vectors, index.arrays, len(index), max(sweep), 1, 20, 1
        )
        for count in sweep:
            part = np.ascontiguousarray(docs[:, :count])
            found = index._two_tier_search(
                batch, vectors, profiles, index.span_config, count, options, part
            )
            results[count] += keys(found)
    summary = {"batch_seconds": batch_seconds, "timed_results": timed_results, "sweep": results}
    summary |= {
        "peak_rss": peak_rss()
    }  # before info(), which reads every span norm (pages of the exact tier)
    info = index.info()
    keep = ("units", "documents", "resident_bytes", "array_bytes", "compression")
    json.dump(summary | {"info": {key: info[key] for key in keep}}, open(out, "w"))


def peak_rss() -> int:
    """This process's peak resident bytes: ``VmHWM`` (reset by ``exec``, unlike ``ru_maxrss``, which a child
    started by a large parent inherits), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as status:
            return int(next(line for line in status if line.startswith("VmHWM:")).split()[1]) * 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_child(
    args, path: str, queries_file: str, sweep: list[int], timing: int, timed: int, name="child"
) -> dict:
    out = os.path.join(args.cache, f"{name}.json")
    command = [
        sys.executable,
        __file__,
        "--child",
        path,
        queries_file,
        ",".join(map(str, sweep)) or "-",
    ]
    subprocess.run([*command, str(timing), str(timed), out, str(args.threads)], check=True)
    return json.load(open(out))


def in_parallel(*jobs):
    """Run the ``jobs`` (callables) at once, each in a thread (each starts its own processes); their results."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(jobs)) as pool:
        return [future.result() for future in [pool.submit(job) for job in jobs]]


def per_query(found: dict, queries: int) -> float:
    """Seconds per query over the first ``queries`` (whole batches)."""
    batches = -(-queries // CHILD_BATCH)
    return sum(found["batch_seconds"][:batches]) / min(queries, batches * CHILD_BATCH)


def scores(exact: list, found: list) -> dict:
    """recall@1, recall@10 of (document, span) and top-1 document agreement of ``found`` against ``exact``."""
    import numpy as np

    at10 = [
        len({tuple(m) for m in e} & {tuple(m) for m in f}) / len(e)
        for e, f in zip(exact, found)
        if e
    ]
    at1 = [bool(f) and tuple(f[0]) == tuple(e[0]) for e, f in zip(exact, found) if e]
    doc1 = [bool(f) and f[0][0] == e[0][0] for e, f in zip(exact, found) if e]
    return {
        "recall@1": float(np.mean(at1)),
        "recall@10": float(np.mean(at10)),
        "top1_doc": float(np.mean(doc1)),
    }


def disk_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def real_corpus(args, exact_path: str, encode_s: float, words: int) -> None:
    """The exact index (ground truth) and each compressed setting searched at the same time, each in its own
    process: the same load on all, so their times compare (over the first ``--timed-queries`` queries)."""
    queries_file = os.path.join(args.cache, f"queries-{args.queries}.json")
    json.dump(make_queries(args.queries), open(queries_file, "w"))
    print(
        f"real corpus: {words} words; {args.queries} queries; encoding {encode_s:.0f} s", flush=True
    )
    timed = args.timed_queries

    def compressed(spec: str):
        path = os.path.join(args.cache, f"real-{spec.replace(',', '-')}")
        if not os.path.exists(path + ".json"):
            command = [sys.executable, __file__, "--compress", exact_path, path, spec]
            subprocess.run(command, check=True)
        found = run_child(
            args,
            path,
            queries_file,
            args.candidates,
            args.default_candidates,
            timed,
            f"child-{spec}",
        )
        return spec, found, path, json.load(open(path + ".json"))["compress_s"]

    exact_job = lambda: run_child(  # noqa: E731
        args, exact_path, queries_file, [], 1, args.queries, "child-exact"
    )
    first, *rows = in_parallel(
        exact_job, *[lambda spec=spec: compressed(spec) for spec in args.specs]
    )
    exact, exact_time = first["timed_results"], per_query(first, timed)
    print(f"exact search {exact_time:.2f} s/query (first {timed} queries, while the others ran)")
    print(
        "| setting | candidates | resident B/word | disk B/word | recall@1 | recall@10 | top-1 doc | "
        "search time vs exact | build time vs exact | peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| exact float32 | - | {first['info']['resident_bytes'] / words:.0f} | "
        f"{disk_bytes(exact_path) / words:.0f} | 1 | 1 | 1 | 1.00 ({exact_time:.2f} s/query) | 1.00 | "
        f"{first['peak_rss'] / 2**20:.0f} |"
    )
    for spec, found, path, compress_s in rows:
        for count in args.candidates:
            quality = scores(exact, found["sweep"][str(count)])
            timing = (
                f"{per_query(found, timed) / exact_time:.2f}"
                if count == args.default_candidates
                else ""
            )
            print(
                f"| {spec} | {count} | {found['info']['resident_bytes'] / words:.1f} | "
                f"{disk_bytes(path) / words:.0f} | {quality['recall@1']:.3f} | {quality['recall@10']:.3f} | "
                f"{quality['top1_doc']:.3f} | {timing} | {(encode_s + compress_s) / encode_s:.2f} | "
                f"{found['peak_rss'] / 2**20:.0f} |",
                flush=True,
            )
    print(f"({first['info']['units']} units; B/word divides by the {words} whitespace words)")


def scaled(args, exact_path: str) -> None:
    queries_file = os.path.join(args.cache, f"queries-{args.scale_queries}.json")
    json.dump(make_queries(args.scale_queries, seed=1), open(queries_file, "w"))
    print(
        f"\nscale-up ({args.scale_spec}, noise {args.noise}, {args.scale_queries} queries):",
        flush=True,
    )
    print(
        "| units | documents | resident B/unit | disk B/unit | write s | compressed s/query | exact s/query | "
        "ratio | recall@10 | top-1 doc | peak RSS MiB compressed / exact |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    count = args.scale_queries
    for units in args.scales:
        path = os.path.join(args.cache, f"synth-{units}")
        if not os.path.exists(path + ".json"):
            json.dump(
                synthetic(exact_path, path, units, args.scale_spec, args.noise),
                open(path + ".json", "w"),
            )
        built = json.load(open(path + ".json"))
        # the compressed and (up to --exact-up-to) the exact search at the same time: the same load on both
        jobs = [
            functools.partial(
                run_child, args, path, queries_file, [], args.default_candidates, count
            )
        ]
        if units <= args.exact_up_to:
            jobs.append(
                functools.partial(
                    run_child, args, path, queries_file, [], 10**9, count, "child-exact-scale"
                )
            )
        found, *others = in_parallel(*jobs)
        cells = ["-"] * 5
        if others:
            exact = others[0]
            quality = scores(exact["timed_results"], found["timed_results"])
            ratio = per_query(found, count) / per_query(exact, count)
            cells = [
                f"{per_query(exact, count):.2f}",
                f"{ratio:.2f}",
                f"{quality['recall@10']:.3f}",
                f"{quality['top1_doc']:.3f}",
                f"{exact['peak_rss'] / 2**20:.0f}",
            ]
        n = found["info"]["units"]
        print(
            f"| {n} | {found['info']['documents']} | {found['info']['resident_bytes'] / n:.1f} | "
            f"{disk_bytes(path) / n:.0f} | {built['compress_s'] + built['save_s']:.0f} | "
            f"{per_query(found, count):.2f} | {' | '.join(cells[:4])} | "
            f"{found['peak_rss'] / 2**20:.0f} / {cells[4]} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache", required=True, help="a folder outside git for the corpus, indexes and vectors"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--timed-queries", type=int, default=64, help="queries timed (from the first)"
    )
    parser.add_argument("--specs", nargs="+", default=["pq32", "pq48"])
    parser.add_argument("--candidates", type=int, nargs="+", default=[50, 100, 200, 500])
    parser.add_argument("--default-candidates", type=int, default=500)
    parser.add_argument("--scales", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--scale-spec", default="pq32,ivf256")
    parser.add_argument("--scale-queries", type=int, default=20)
    parser.add_argument(
        "--exact-up-to", type=int, default=1_000_000, help="largest scale also searched exactly"
    )
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-real", action="store_true")
    args = parser.parse_args()
    print(_common.environment_line(), flush=True)
    exact_path, encode_s = encoded_corpus(args.cache, args.threads)
    words = sum(
        len(json.loads(line)["text"].split())
        for line in open(os.path.join(args.cache, "corpus.jsonl"))
    )
    if not args.skip_real:
        real_corpus(args, exact_path, encode_s, words)
    if args.scales:
        scaled(args, exact_path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compress"]:
        exact_path, out, spec = sys.argv[2:5]
        json.dump({"compress_s": compressed_copy(exact_path, out, spec)}, open(out + ".json", "w"))
    elif sys.argv[1:2] == ["--child"]:
        path, queries_file, sweep, timing, timed, out, threads = sys.argv[2:9]
        sweep = [] if sweep == "-" else [int(count) for count in sweep.split(",")]
        child(path, queries_file, sweep, int(timing), int(timed), out, int(threads))
    else:
        main()
