"""SpanIndex search speed (exact, ~1M tokens), FAISS candidate recall@10 and speed-up, build vs plain encode.

    python benchmarks/build_corpus_index.py --docs ../shared/data/nugget_pi/paraphrase_identification/train/docs.txt \
        --limit 500 -o runs/bench_index                       # once: the real index (minutes on 2 CPUs)
    python benchmarks/bench_index_search.py --index runs/bench_index \
        --queries-from ../shared/data/nugget_pi/paraphrase_identification/dev/docs.txt

What is measured, all in this one run:

A. On the real index (Nugget ParaBank documents, ~136k tokens): exact search of 1 query and of a
   batch of 32; the FAISS candidate stage (build time, recall@10 against exact search, speed-up).
B. ~1M tokens: the real index's arrays **replicated** (``SpanIndex.merge`` of R copies with new
   ids: the same numbers R times; building 1M tokens with MiniLM on 2 shared CPUs takes about an
   hour). Exact search of 1 query (target <= 1 s) and a batch of 32 (queries/s); the same R copies
   as R memory-mapped shards searched together (``ShardedSpanIndex``); the FAISS stage on it
   (recall by score, since every span exists R times).
D. The span scorer's cost (issue 22): ``search()`` with ``scorer="phrase", overlap=False`` (the default) against
   ``scorer="max-cosine", overlap=True`` (the plain cosine top-k), side by side round-robin in this one run on the same
   index (the real one, and with ``--scorer-tokens N`` its arrays replicated to ~N tokens), 1 query and 32, top_k=10,
   without and with per_document=1; the ratio of medians, and how many scans and spans each asked for.
C. Build throughput: ``SpanIndex.build`` vs plain ``model.encode`` of the same documents (which
   truncates them at max_seq_length) and vs ``model.encode`` of the same windows (same tokens).
   ``--build-processes N`` adds a build encoding in an N-process pool (sentence-transformers'
   ``start_multi_process_pool``, started once; its start-up time is reported apart).

Queries are 32 phrases of 3-6 words cut from documents that are not in the index (--queries-from).
Recall@10 is |approximate top-10 ∩ exact top-10| / 10 (spans as (document, start, end)); "by score"
counts approximate results scoring >= the exact 10th score (robust to ties).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np  # noqa: E402
from _common import environment_line, flush, median  # noqa: E402


def phrases(path: str, count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    documents = [
        line.split("\t", 1)[1].split() for line in open(path, encoding="utf-8") if "\t" in line
    ]
    out: list[str] = []
    while len(out) < count:
        words = rng.choice(documents)
        length = rng.randint(3, 6)
        if len(words) <= length:
            continue
        start = rng.randrange(len(words) - length)
        phrase = " ".join(words[start : start + length])
        if sum(ch.isalpha() for ch in phrase) >= 8:
            out.append(phrase)
    return out


def timed(function, repeats: int = 1):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return result, median(times)


def recall(exact, approximate) -> tuple[float, float]:
    """Mean set recall@k and mean by-score recall@k over queries (``(scores, units, lengths)`` tuples)."""
    sets, by_score = [], []
    for q in range(exact[0].shape[0]):
        k = exact[0].shape[1]
        truth = set(zip(exact[1][q].tolist(), exact[2][q].tolist()))
        found = set(zip(approximate[1][q].tolist(), approximate[2][q].tolist()))
        sets.append(len(truth & found) / k)
        by_score.append(float(np.sum(approximate[0][q] >= exact[0][q][-1] - 1e-6)) / k)
    return float(np.mean(sets)), float(np.mean(by_score))


def faiss_grid(index, query_vectors, exact, exact_seconds, grid, label):
    print(
        f"  {'stage':<34}{'build s':>8}{'recall@10':>10}{'by score':>9}{'s/32 q':>8}{'speed-up':>9}"
    )
    rows = []
    for kind, chunk, stride, nprobes, candidates in grid:
        _, build_seconds = timed(
            lambda kind=kind, chunk=chunk, stride=stride: index.build_candidates(
                kind, chunk, stride
            )
        )
        stage = index._candidates
        for nprobe in nprobes:
            for count in candidates:
                stage.top_spans(
                    index, query_vectors[:2], 10, 1, index.span_config.max_span, count, nprobe
                )  # warm
                found, seconds = timed(
                    lambda stage=stage, count=count, nprobe=nprobe: stage.top_spans(
                        index, query_vectors, 10, 1, index.span_config.max_span, count, nprobe
                    )
                )
                set_recall, score_recall = recall(exact, found)
                name = f"{kind} chunk={chunk}/{stride} nprobe={nprobe if kind == 'ivf' else '-'} cand={count}"
                print(
                    f"  {name:<34}{build_seconds:>8.1f}{set_recall:>10.3f}{score_recall:>9.3f}{seconds:>8.2f}"
                    f"{exact_seconds / seconds:>8.1f}x"
                )
                rows.append(
                    {
                        "where": label,
                        "stage": name,
                        "nlist": stage.settings["nlist"],
                        "recall": set_recall,
                        "recall_by_score": score_recall,
                        "seconds": seconds,
                        "speedup": exact_seconds / seconds,
                    }
                )
                flush()
    return rows


def replicated(index, copies: int):
    """``copies`` copies of an index's documents merged in memory (the same arrays, new ids)."""
    from slice_st import SpanIndex

    shards = []
    for copy in range(copies):
        shard = SpanIndex.__new__(SpanIndex)
        shard.__dict__.update(index.__dict__)
        shard.doc_ids = [f"{doc_id}#{copy}" for doc_id in index.doc_ids]
        shards.append(shard)
    return SpanIndex.merge(shards)


def scorer_cost(index, queries, label: str, repeats: int) -> dict:
    """D: search() time, phrase + no overlap vs max-cosine + overlap, interleaved; returns the figures."""
    from _common import run_interleaved

    _, flag_seconds = timed(index.unit_flags)
    print(
        f"  unit flags of {index.num_units} units computed once (cached on the index): {flag_seconds:.2f} s"
    )
    setups = {
        "max-cosine, overlap": {"scorer": "max-cosine", "overlap": True},
        "phrase, no overlap": {"scorer": "phrase", "overlap": False},
    }
    cases, scans = {}, {}
    real_top_spans = index.top_spans
    for per_document in (None, 1):
        for batch in (1, 32):
            for name, options in setups.items():
                case = f"{name}, {batch}q, per_doc={per_document}"
                picked = queries[1:2] if batch == 1 else queries

                def run(picked=picked, options=options, per_document=per_document):
                    start = time.perf_counter()
                    index.search(picked, top_k=10, per_document=per_document, **options)
                    return {"wall": time.perf_counter() - start}

                asked = []
                index.top_spans = lambda vectors, k, *rest, asked=asked: (
                    asked.append((len(vectors), k)) or real_top_spans(vectors, k, *rest)
                )
                run()  # warm, and count the scans
                index.top_spans = real_top_spans
                scans[case] = asked
                cases[case] = run
    results = run_interleaved(cases, repeats, log=lambda line: None)
    figures = {}
    print(
        f"  {'search(), top_k=10':<34}{'max-cosine+overlap':>19}{'phrase, no overlap':>19}{'ratio':>7}   scans "
        f"(queries, k) phrase"
    )
    for per_document in (None, 1):
        for batch in (1, 32):
            plain = median(
                r["wall"] for r in results[f"max-cosine, overlap, {batch}q, per_doc={per_document}"]
            )
            phrase_case = f"phrase, no overlap, {batch}q, per_doc={per_document}"
            phrase = median(r["wall"] for r in results[phrase_case])
            row = f"{batch} quer{'y' if batch == 1 else 'ies'}, per_document={per_document}"
            print(
                f"  {row:<34}{plain:>17.3f} s{phrase:>17.3f} s{phrase / plain:>6.2f}x   {scans[phrase_case]}"
            )
            figures[f"{label}_{batch}q_per_doc_{per_document}"] = {
                "max_cosine_overlap_s": plain,
                "phrase_no_overlap_s": phrase,
                "ratio": phrase / plain,
                "phrase_scans": scans[phrase_case],
            }
    flush()
    return figures | {f"{label}_flags_s": flag_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default="runs/bench_index")
    parser.add_argument(
        "--queries-from",
        default=os.path.join(
            "..", "shared", "data", "nugget_pi", "paraphrase_identification", "dev", "docs.txt"
        ),
    )
    parser.add_argument("--target-tokens", type=int, default=1_000_000)
    parser.add_argument(
        "--build-docs",
        type=int,
        default=24,
        help="documents for the build-vs-encode comparison (C)",
    )
    parser.add_argument("--skip", default="", help="comma list of parts to skip: A,B,C,D")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (encoding and the exact scan; default: torch's own)",
    )
    parser.add_argument(
        "--build-processes",
        type=int,
        default=0,
        help="C: also build with N encoding processes (ST pool)",
    )
    parser.add_argument(
        "--scorer-tokens",
        type=int,
        default=0,
        help="D: also on the real index replicated to ~N tokens",
    )
    parser.add_argument(
        "--scorer-repeats",
        type=int,
        default=3,
        help="D: timed repetitions of each case (round-robin)",
    )
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    import torch

    from slice_st import SpanIndex
    from slice_st.index import ShardedSpanIndex

    if args.threads:
        torch.set_num_threads(args.threads)
    skip = set(args.skip.upper().split(",")) - {""}
    print(environment_line())
    print(f"exact scan: slice_st.spans.top_spans_flat (torch), {torch.get_num_threads()} thread(s)")
    index = SpanIndex.load(args.index)
    report = (
        json.load(open(os.path.join(args.index, "build_report.json")))
        if os.path.exists(os.path.join(args.index, "build_report.json"))
        else {}
    )
    tokens = report.get("tokens") or sum(
        len(t) for t in index.model.tokenizer(index.texts, add_special_tokens=False)["input_ids"]
    )
    queries = phrases(args.queries_from, 32)
    query_vectors = index.embed_queries(queries)
    max_span = index.span_config.max_span
    print(
        f"index: {args.index}: {len(index)} documents, {tokens} tokens, {index.num_units} units, K={max_span}, dtype "
        f"{index.dtype}"
    )
    print(f"queries: 32 phrases of 3-6 words from {args.queries_from}, e.g. {queries[:3]}")
    figures: dict = {"tokens_real": tokens}
    flush()

    if "A" not in skip:
        print(f"\nA. real index ({tokens} tokens)")
        index.top_spans(query_vectors[:1], 10, 1, max_span)  # warm the page cache
        _, one = timed(lambda: index.top_spans(query_vectors[:1], 10, 1, max_span), 3)
        exact, batch = timed(lambda: index.top_spans(query_vectors, 10, 1, max_span))
        print(
            f"  exact: 1 query {one:.3f} s (median of 3); 32 queries {batch:.2f} s = {32 / batch:.1f} queries/s"
        )
        figures |= {"A_exact_one_s": one, "A_exact_batch32_s": batch}
        grid = [
            ("flat", 4, 2, [0], [256, 512]),
            ("ivf", 4, 2, [16, 32, 64], [256, 512]),
            ("ivf", 8, 4, [32], [512]),
        ]
        figures["A_faiss"] = faiss_grid(index, query_vectors, exact, batch, grid, "A")

    if "B" not in skip:
        copies = max(1, math.ceil(args.target_tokens / tokens))
        print(
            f"\nB. ~1M tokens: the real index replicated {copies}x ({copies * tokens} tokens) — same arrays, new ids"
        )
        shards = []
        for copy in range(copies):
            shard = SpanIndex.__new__(SpanIndex)
            shard.__dict__.update(index.__dict__)
            shard.doc_ids = [f"{doc_id}#{copy}" for doc_id in index.doc_ids]
            shards.append(shard)
        big, seconds = timed(lambda: SpanIndex.merge(shards))
        print(
            f"  merged in {seconds:.1f} s: {len(big)} documents, {big.num_units} units, "
            f"{big.info()['array_bytes'] / 1e9:.2f} GB of arrays (in memory)"
        )
        big.top_spans(query_vectors[:1], 10, 1, max_span)
        _, one = timed(lambda: big.top_spans(query_vectors[1:2], 10, 1, max_span), 3)
        exact, batch = timed(lambda: big.top_spans(query_vectors, 10, 1, max_span))
        verdict = "met" if one <= 1.0 else "NOT met"
        print(
            f"  exact: 1 query {one:.3f} s (median of 3; target <= 1 s: {verdict}); 32 queries {batch:.1f} s = "
            f"{32 / batch:.2f} queries/s"
        )
        figures |= {"B_tokens": copies * tokens, "B_exact_one_s": one, "B_exact_batch32_s": batch}
        # the same corpus as {copies} shards searched together (each shard the real index's memory-mapped arrays)
        sharded = ShardedSpanIndex(shards)
        merged_results, merged_search = timed(
            lambda: big.search(queries, top_k=10, per_document=None)
        )
        sharded_results, sharded_search = timed(
            lambda: sharded.search(queries, top_k=10, per_document=None)
        )
        _, sharded_one = timed(lambda: sharded.search(queries[1:2], top_k=10), 3)
        _, merged_one = timed(lambda: big.search(queries[1:2], top_k=10), 3)
        # every span exists {copies} times with the same score: compare spans up to which copy was picked
        same = all(
            [(m.doc_id.split("#")[0], m.start, m.end, round(m.score, 9)) for m in a]
            == [(m.doc_id.split("#")[0], m.start, m.end, round(m.score, 9)) for m in b]
            for a, b in zip(merged_results, sharded_results)
        )
        print(
            f"  {copies} memory-mapped shards searched together (ShardedSpanIndex, nothing merged), search() with "
            f"query "
            f"encoding: 1 query {sharded_one:.3f} s vs {merged_one:.3f} s merged in memory; 32 queries "
            f"{sharded_search:.1f} s "
            f"vs {merged_search:.1f} s; same results: {same}"
        )
        figures |= {
            "B_sharded_one_s": sharded_one,
            "B_merged_search_one_s": merged_one,
            "B_sharded_batch32_s": sharded_search,
            "B_merged_search32_s": merged_search,
            "B_sharded_same": same,
        }
        figures["B_faiss"] = faiss_grid(
            big, query_vectors, exact, batch, [("ivf", 4, 2, [32, 64, 128], [512, 1024])], "B"
        )
        del big, shards

    if "D" not in skip:
        print(
            f"\nD. the span scorer's cost: search() with scorer='phrase', overlap=False vs 'max-cosine', overlap=True "
            f"(medians of {args.scorer_repeats}, round-robin; query encoding included)"
        )
        print(f"  real index ({tokens} tokens, {index.num_units} units)")
        figures["D"] = scorer_cost(index, queries, "real", args.scorer_repeats)
        if args.scorer_tokens:
            copies = max(1, math.ceil(args.scorer_tokens / tokens))
            big = replicated(index, copies)
            print(
                f"  the real index replicated {copies}x ({copies * tokens} tokens, {big.num_units} units)"
            )
            figures["D"] |= scorer_cost(big, queries, f"x{copies}", args.scorer_repeats)
            del big

    if "C" not in skip:
        from build_corpus_index import read_docs

        from slice_st.encode import model_window
        from slice_st.tokens import plan_windows

        model = index.model
        _, texts = read_docs(args.queries_from, args.build_docs)
        windows = plan_windows(model.tokenizer, texts, model_window(model), max_span, 16)
        window_texts = [texts[w.text_index][w.char_start : w.char_end] for w in windows]
        words = sum(len(t.split()) for t in texts)
        print(
            f"\nC. build throughput: {len(texts)} documents ({words} words, {len(windows)} windows) not in the index"
        )
        pool = None
        if (
            args.build_processes > 1
        ):  # started once: its start-up (spawn, import, model copy) is reported apart
            pool, pool_seconds = timed(
                lambda: model.start_multi_process_pool(["cpu"] * args.build_processes)
            )
            print(
                f"  starting a {args.build_processes}-process pool (model.start_multi_process_pool): "
                f"{pool_seconds:.1f} s"
            )
            figures["C_pool_start_s"] = pool_seconds
        cases = {
            "SpanIndex.build": lambda: SpanIndex.build(texts, model, show_progress_bar=False),
            **(
                {
                    f"build, {args.build_processes}-process pool": lambda: SpanIndex.build(
                        texts, model, show_progress_bar=False, pool=pool
                    )
                }
                if pool is not None
                else {}
            ),
            "model.encode(documents)": lambda: model.encode(texts, batch_size=32),
            "model.encode(windows)": lambda: model.encode(window_texts, batch_size=32),
        }
        times = {name: [] for name in cases}
        for _ in range(2):
            for name, case in cases.items():
                times[name].append(timed(case)[1])
        base = median(times["model.encode(windows)"])
        for name in cases:
            seconds = median(times[name])
            print(
                f"  {name:<26}{seconds:>7.1f} s  {len(texts) / seconds:>6.2f} documents/s  {words / seconds:>6.0f} "
                f"words/s  "
                f"{seconds / base:>5.2f}x the time of encoding the same windows"
            )
        if pool is not None:
            model.stop_multi_process_pool(pool)
        print(
            "  (model.encode(documents) truncates every document at max_seq_length=256 tokens: it encodes less text)"
        )
        figures["C"] = {name: median(values) for name, values in times.items()} | {
            "documents": len(texts),
            "words": words,
        }
        if report:
            print(
                f"  the real index build ({report['documents']} documents): {report['build_seconds']} s, "
                f"{report['documents_per_s']} documents/s, {report['tokens_per_s']} tokens/s"
            )

    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=1)


if __name__ == "__main__":
    main()
