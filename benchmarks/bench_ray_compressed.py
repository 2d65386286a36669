"""A compressed Ray build: what the compression stage costs and what its shards search like.

    python benchmarks/bench_ray_compressed.py          # base all-MiniLM-L6-v2, ~40k tokens, a local Ray of 2 CPUs
    python benchmarks/bench_ray_compressed.py --compress pq32 --repeats 3

What is measured (one run, the two builds interleaved so that the machine's load hits them alike):

A. Build wall time: ``SpanIndex.from_files(..., engine="ray", concurrency=2, force=True)`` exact vs with
   ``compression=`` (the same build, then the codebooks trained on a sample of all shards' units and every shard
   coded on Ray tasks); the difference is the compression stage.
B. The shards share one set of codebooks, the same as :meth:`CompressedTier.train` gives on the one merged index
   (the same sample); the training sample's memory (at most 65,536 rows of float32 vectors and norms).
C. Search: ``RayShardedSpanIndex`` (2 actors, compressed scans on them) vs ``ShardedSpanIndex`` over the compressed
   shards (identical results asserted), recall@10 of both against the exact shards' search (``candidates`` 50 and
   the default 500), and resident bytes per unit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import (  # noqa: E402
    add_model_arguments,
    build_passages_and_queries,
    environment_line,
    flush,
    load_bench_model,
    load_sentences,
    median,
)


def _keys(results):
    return [[(m.doc_id, m.start, m.end) for m in matches] for matches in results]


def _recall(found, expected) -> float:
    hits = [len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(_keys(found), _keys(expected))]
    return sum(hits) / len(hits)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser)
    parser.set_defaults(model="base")
    parser.add_argument("--sts", default=None, help="STS-benchmark TSV (default: the shared copy)")
    parser.add_argument("--passages", type=int, default=800, help="documents of 40 words")
    parser.add_argument("--files", type=int, default=4, help="corpus files")
    parser.add_argument("--shard-kb", type=int, default=48, help="text per shard (KB)")
    parser.add_argument("--compress", default="pq48")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import numpy as np
    import ray
    import torch

    from slice_st import SpanIndex
    from slice_st.index import RayShardedSpanIndex, ShardedSpanIndex
    from slice_st.index.compressed import TRAIN_SAMPLE, CompressedTier, CompressionSpec

    torch.set_num_threads(1)
    print(environment_line())
    sentences, origin = load_sentences(args.sts)
    passages, queries = build_passages_and_queries(sentences, args.passages, words=40, n_queries=32)
    model, where = load_bench_model(args)
    print(
        f"{origin}; model {args.model} on {where}; {len(passages)} documents in {args.files} files"
    )
    folder = tempfile.mkdtemp(prefix="bench-ray-pq-")
    files, per_file = [], -(-len(passages) // args.files)
    for number in range(args.files):
        path = os.path.join(folder, f"corpus-{number}.txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(passages[number * per_file : (number + 1) * per_file]) + "\n")
        files.append(path)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False

    def build(compression):
        begin = time.perf_counter()
        result = SpanIndex.from_files(
            files,
            model,
            engine="ray",
            output=os.path.join(folder, "pq" if compression else "exact"),
            concurrency=2,
            shard_bytes=args.shard_kb << 10,
            force=True,
            dtype="float16",
            compression=compression,
        )
        return time.perf_counter() - begin, result

    walls = {None: [], args.compress: []}
    for repeat in range(args.repeats):
        for compression in walls:
            wall, result = build(compression)
            walls[compression].append(wall)
            print(
                f"  build rep {repeat + 1}: {compression or 'exact':<6} {wall:6.1f} s, "
                f"{len(result.shards)} shards, {result.shards_coded} coded"
            )
            flush()
    exact_wall, pq_wall = median(walls[None]), median(walls[args.compress])
    print(
        f"\nA. build (median of {args.repeats}): exact {exact_wall:.1f} s, {result.compression} "
        f"{pq_wall:.1f} s: the compression stage {pq_wall - exact_wall:+.1f} s "
        f"({pq_wall / exact_wall:.2f}x the exact build)"
    )

    pq_dir, exact_dir = os.path.join(folder, "pq"), os.path.join(folder, "exact")
    sharded, exact = ShardedSpanIndex.load(pq_dir, model), ShardedSpanIndex.load(exact_dir, model)
    digests = {shard.info()["compression"]["codebooks"] for shard in sharded.shards}
    merged = SpanIndex.merge(sharded.shards)
    dim = merged.arrays["unit_vectors"].shape[1]
    begin = time.perf_counter()
    one = CompressedTier.train(merged.arrays, CompressionSpec.parse(args.compress, dim))
    one_seconds = time.perf_counter() - begin
    rows = min(sharded.num_units, TRAIN_SAMPLE)
    sample_mb = rows * (dim + merged.arrays["span_norms"].shape[1]) * 4 / 2**20
    print(
        f"B. {len(sharded.shards)} shards, {sharded.num_units} units: {len(digests)} set(s) of codebooks, "
        f"{'the same as' if digests == {one.codebook_digest()} else 'NOT'} the one merged index's; "
        f"training sample {rows} rows = {sample_mb:.1f} MiB; one process trains and codes the merged index in "
        f"{one_seconds:.1f} s (the rest of A's difference: the stage's Ray tasks and shard saves)"
    )

    expected = exact.search(queries, top_k=10)
    resident = sum(shard.info()["compression"]["resident_bytes"] for shard in sharded.shards)
    with RayShardedSpanIndex.load(pq_dir, model, workers=2, num_cpus=1) as on_ray:
        on_ray.search(
            queries[:1], top_k=10, candidates=50
        )  # the actors are up and hold their shards
        for candidates in (50, 500):
            begin = time.perf_counter()
            local = sharded.search(queries, top_k=10, candidates=candidates)
            local_seconds = time.perf_counter() - begin
            begin = time.perf_counter()
            remote = on_ray.search(queries, top_k=10, candidates=candidates)
            seconds = time.perf_counter() - begin
            assert _keys(remote) == _keys(local), candidates
            scores = [m.score for ms in local for m in ms]
            np.testing.assert_allclose([m.score for ms in remote for m in ms], scores, atol=1e-6)
            print(
                f"C. candidates {candidates}: Ray search = ShardedSpanIndex search (asserted); recall@10 "
                f"vs exact {_recall(local, expected):.3f}; 32 queries: {seconds:.2f} s on Ray, "
                f"{local_seconds:.2f} s in this process"
            )
    print(
        f"   resident {resident / sharded.num_units:.1f} bytes/unit (compressed tier) vs "
        f"{exact.info()['array_bytes'] / exact.num_units:.0f} array bytes/unit"
    )
    ray.shutdown()
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
