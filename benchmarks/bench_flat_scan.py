"""The flat span scan (``slice_st.spans.top_spans_flat``, the SpanIndex's exact search) of this tree against the same
function at a git revision, side by side, interleaved, in one process:

    python benchmarks/bench_flat_scan.py --baseline main --units 300000 --threads 1

The corpus is synthetic but shaped like an index: documents of 20-200 words, each word a Zipf-drawn vocabulary
vector plus its document's topic, span-sum norms of lengths 1..K (NaN across a document end); queries are the means
of 3-5 consecutive words plus noise. Prints the median time of each side, the ratio (this tree / baseline) for 1
query and for a batch, and how far the two answers differ.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import REPO_ROOT, environment_line, flush, median  # noqa: E402


def load_revision(revision: str):
    """``slice_st/spans.py`` as it is at ``revision``, imported as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{revision}:slice_st/spans.py"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = os.path.join(tempfile.mkdtemp(), "baseline_spans.py")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location("baseline_spans", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def corpus(units: int, dim: int, max_span: int, seed: int):
    """Unit vectors ``(N, d)`` float32, span-sum norms ``(N, K)`` float32 and the document of each unit."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    vocabulary = torch.nn.functional.normalize(torch.randn(5000, dim, generator=generator), dim=-1)
    ranks = torch.arange(1, 5001, dtype=torch.float64)
    words = torch.multinomial(1 / ranks, units, replacement=True, generator=generator)
    lengths = torch.randint(20, 201, (units // 20 + 1,), generator=generator)
    documents = torch.repeat_interleave(torch.arange(len(lengths)), lengths)[:units]
    topics = torch.randn(len(lengths), dim, generator=generator) * 0.3
    vectors = vocabulary[words] + topics[documents]
    norms = torch.full((units, max_span), float("nan"))
    for first in range(0, units, 1 << 15):
        last = min(first + (1 << 15) + max_span, units)
        prefix = torch.nn.functional.pad(vectors[first:last].double().cumsum(0), (0, 0, 1, 0))
        for length in range(1, max_span + 1):
            count = min(1 << 15, last - first - length + 1)
            if count <= 0:
                continue
            sums = prefix[length : length + count] - prefix[:count]
            same = (
                documents[first : first + count]
                == documents[first + length - 1 : first + length - 1 + count]
            )
            norms[first : first + count, length - 1] = (
                sums.norm(dim=-1).float().masked_fill(~same, float("nan"))
            )
    return vectors, norms


def queries_from(vectors, count: int, seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    starts = torch.randint(0, vectors.shape[0] - 5, (count,), generator=generator)
    widths = torch.randint(3, 6, (count,), generator=generator)
    means = torch.stack(
        [vectors[s : s + w].mean(0) for s, w in zip(starts.tolist(), widths.tolist())]
    )
    return (
        means
        + 0.5
        * torch.randn(means.shape, generator=generator)
        * means.norm(dim=-1, keepdim=True)
        / 20
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--baseline", default="main", help="git revision to compare with (default: main)"
    )
    parser.add_argument("--units", type=int, default=300_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32, help="queries of the batch case")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    import torch

    from slice_st import spans

    if args.threads:
        torch.set_num_threads(args.threads)
    baseline = load_revision(args.baseline)
    vectors, norms = corpus(args.units, args.dim, args.max_span, seed=0)
    print("=" * 100)
    print(f"bench_flat_scan: top_spans_flat of this tree vs {args.baseline}")
    print(environment_line())
    print(
        f"{args.units:,} units x d={args.dim}, spans 1..{args.max_span}, top_k={args.top_k}, "
        f"{args.repeats} interleaved repeats"
    )
    flush()
    for num_queries in (1, args.batch):
        queries = queries_from(vectors, num_queries, seed=0)
        sides = {"this tree": spans.top_spans_flat, args.baseline: baseline.top_spans_flat}
        times: dict[str, list[float]] = {name: [] for name in sides}
        found = {}
        for repeat in range(args.repeats + 1):  # the first round warms up, untimed
            for name, function in sides.items():
                start = time.perf_counter()
                found[name] = function(queries, vectors, norms, args.top_k, 1, args.max_span)
                if repeat:
                    times[name].append(time.perf_counter() - start)
        mine, theirs = (median(times[name]) for name in sides)
        ours, base = found["this tree"], found[args.baseline]
        same = int(
            (ours.starts == base.starts)
            .all(1)
            .logical_and((ours.lengths == base.lengths).all(1))
            .sum()
        )
        gap = float((ours.scores - base.scores).abs().nan_to_num(0.0).max())
        print(
            f"{num_queries:>3} queries: this tree {mine * 1000:8.1f} ms | {args.baseline} {theirs * 1000:8.1f} ms | "
            f"ratio {mine / theirs:.3f} | same spans for {same}/{num_queries} queries, scores differ by <= {gap:.1e}"
        )
        flush()
    print(environment_line())


if __name__ == "__main__":
    main()
