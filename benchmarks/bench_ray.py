"""The index on Ray vs one process: build throughput and search latency, single process vs Ray with 1 and 2 workers.

    python benchmarks/bench_ray.py                                  # base all-MiniLM-L6-v2, ~40k tokens, a local Ray
    of 2 CPUs
    python benchmarks/bench_ray.py --passages 600 --repeats 3

What is measured (one run, cases interleaved so that the machine's load hits them alike):

A. Build, tokens/s: ``SpanIndex.from_files`` in this process (``--threads`` torch threads, then ``save``)
   vs ``SpanIndex.from_files(..., engine="ray", concurrency=1|2)`` on a local Ray (each actor one
   thread; ``force=True`` rebuilds every shard). Ray's own start-up (``ray.init``) is reported apart;
   each Ray build includes starting its actors and shipping the model to them (a fresh actor pool per
   build, as a real run has).
B. Search, seconds per query batch (1 query, and 32): ``ShardedSpanIndex`` over the Ray-built shards
   in this process vs ``RayShardedSpanIndex`` with 1 and 2 actors (started once; their start-up is
   reported apart). Query encoding is in every case (the driver does it).
C. Per-shard figures for the README's scale plan: bytes per token and per word, units per token, the
   exact scan rate per core (token·queries/s) in this process.

On 2 cores shared with other jobs, Ray cannot win; the honest figure is the overhead it adds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import (
    add_model_arguments,
    build_passages_and_queries,
    environment_line,
    flush,
    load_bench_model,
    load_sentences,
    median,
)  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser)
    parser.set_defaults(model="base")
    parser.add_argument(
        "--sts",
        default=None,
        help="STS-benchmark TSV for real sentences (default ../shared/data/stsbenchmark/sts-train.csv)",
    )
    parser.add_argument(
        "--passages", type=int, default=800, help="documents of 40 words (default 800: ~40k tokens)"
    )
    parser.add_argument(
        "--files", type=int, default=4, help="corpus files (the Ray build's work items)"
    )
    parser.add_argument("--shard-kb", type=int, default=48, help="text per shard (KB)")
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument("--dtype", default="float16", choices=("float32", "float16"))
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the one-process cases (Ray actors: 1 each)",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--search-repeats", type=int, default=5)
    args = parser.parse_args()

    import ray
    import torch

    from slice_st import SpanIndex
    from slice_st.index import RayShardedSpanIndex, ShardedSpanIndex

    torch.set_num_threads(args.threads)
    print(environment_line())
    sentences, origin = load_sentences(args.sts)
    print(origin)
    passages, queries = build_passages_and_queries(sentences, args.passages, words=40, n_queries=32)
    model, where = load_bench_model(args)
    tokens = sum(
        len(ids) for ids in model.tokenizer(passages, add_special_tokens=False)["input_ids"]
    )
    words = sum(len(p.split()) for p in passages)
    print(
        f"model {args.model} on {where}; {len(passages)} documents, {words} words, {tokens} tokens in {args.files} "
        f"files; "
        f"K = {args.max_span}, {args.dtype}, shards of {args.shard_kb} KB of text"
    )
    folder = tempfile.mkdtemp(prefix="bench-ray-")
    files = []
    per_file = -(-len(passages) // args.files)
    for number in range(args.files):
        path = os.path.join(folder, f"corpus-{number}.txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(passages[number * per_file : (number + 1) * per_file]) + "\n")
        files.append(path)
    options = {"max_span": args.max_span, "dtype": args.dtype}

    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    print(f"ray.init (local, 2 CPUs): {time.perf_counter() - start:.1f} s")
    ray.data.DataContext.get_current().enable_progress_bars = False
    flush()

    def one_process() -> dict:
        begin = time.perf_counter()
        SpanIndex.from_files(files, model, **options).save(os.path.join(folder, "single"))
        return {"wall": time.perf_counter() - begin}

    def on_ray(workers: int):
        def case() -> dict:
            begin = time.perf_counter()
            result = SpanIndex.from_files(
                files,
                model,
                engine="ray",
                output=os.path.join(folder, f"ray{workers}"),
                concurrency=workers,
                shard_bytes=args.shard_kb << 10,
                force=True,
                **options,
            )
            return {
                "wall": time.perf_counter() - begin,
                "shards": len(result.shards),
                "inside": result.worker_seconds / workers,
            }

        return case

    cases = {"one process": one_process, "Ray, 1 worker": on_ray(1), "Ray, 2 workers": on_ray(2)}
    builds = {name: [] for name in cases}
    for repeat in range(args.repeats):
        for name, case in cases.items():
            out = case()
            builds[name].append(out)
            shards = f" ({out['shards']} shards)" if "shards" in out else ""
            print(f"  build rep {repeat + 1}: {name:<16} {out['wall']:7.1f} s{shards}")
            flush()
    base = median(o["wall"] for o in builds["one process"])
    print("\nA. build (median wall time; tokens/s; ratio to one process, >1 = faster)")
    for name, outs in builds.items():
        wall = median(o["wall"] for o in outs)
        line = f"  {name:<16} {wall:7.1f} s  {tokens / wall:8.0f} tokens/s  {base / wall:5.2f}x"
        if (
            "inside" in outs[0]
        ):  # the actors' own time per worker: what is left once Ray's start-up is paid
            inside = median(o["inside"] for o in outs)
            line += (
                f"   inside the actors {inside:6.1f} s per worker = {tokens / inside:6.0f} tokens/s; "
                f"start-up and hand-over {wall - inside:5.1f} s"
            )
        print(line)
    flush()

    index_dir = os.path.join(folder, "ray2")
    sharded = ShardedSpanIndex.load(index_dir, model)
    print(
        f"\nB. search over {len(sharded.shards)} shards, {sharded.num_units} units (median of {args.search_repeats}; "
        f"seconds per batch)"
    )
    searchers = {"one process": sharded}
    for workers in (1, 2):
        begin = time.perf_counter()
        searcher = RayShardedSpanIndex.load(
            index_dir, model, workers=workers, num_cpus=0.5
        )  # both sets of actors fit 2 CPUs
        searcher.search(queries[:1], top_k=10)  # the actors are up and have their shards
        print(
            f"  RayShardedSpanIndex with {workers} worker(s): started in {time.perf_counter() - begin:.1f} s"
        )
        searchers[f"Ray, {workers} worker{'s' if workers > 1 else ''}"] = searcher
    expected = sharded.search(queries, top_k=10)
    for name, searcher in searchers.items():
        assert [
            [(m.doc_id, m.start, m.end, m.score) for m in ms]
            for ms in searcher.search(queries, top_k=10)
        ] == [[(m.doc_id, m.start, m.end, m.score) for m in ms] for ms in expected], name
    timings = {name: {1: [], 32: []} for name in searchers}
    for _ in range(args.search_repeats):
        for name, searcher in searchers.items():
            for batch in (1, 32):
                begin = time.perf_counter()
                searcher.search(queries[:batch], top_k=10)
                timings[name][batch].append(time.perf_counter() - begin)
    one = {batch: median(timings["one process"][batch]) for batch in (1, 32)}
    for name, by_batch in timings.items():
        t1, t32 = median(by_batch[1]), median(by_batch[32])
        print(
            f"  {name:<16} 1 query {t1:6.3f} s ({one[1] / t1:4.2f}x)   32 queries {t32:6.3f} s = {32 / t32:6.1f} "
            f"queries/s "
            f"({one[32] / t32:4.2f}x)   (results identical)"
        )
    for searcher in searchers.values():
        if isinstance(searcher, RayShardedSpanIndex):
            searcher.close()
    flush()

    info = sharded.info()
    vectors = sharded.embed_queries(queries)
    begin = time.perf_counter()
    for _ in range(args.search_repeats):
        sharded.scan(vectors, 10)
    scan = (time.perf_counter() - begin) / args.search_repeats
    print("\nC. per-shard figures (this run's shards)")
    print(
        f"  {info['array_bytes']} array bytes for {tokens} tokens, {words} words, {info['units']} units: "
        f"{info['array_bytes'] / tokens:.0f} bytes/token, {info['array_bytes'] / info['units']:.0f} bytes/unit, "
        f"{info['units'] / tokens:.3f} units/token; median shard "
        f"{median(i['array_bytes'] for i in info['per_shard']) / 1e6:.2f} MB"
    )
    print(
        f"  exact scan, 32 queries, 1 thread: {scan:.3f} s = {tokens * 32 / scan / 1e6:.2f} M token-queries/s "
        f"(small shards: per-call overhead dominates; see bench_index_search.py for ~1M tokens)"
    )
    ray.shutdown()
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
