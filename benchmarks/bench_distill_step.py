"""P7: a SpanDistillationLoss training step with the teacher run on the fly vs with cached teacher vectors.

Passages of ~50 words (glued STS-B train sentences), all-MiniLM-L6-v2, AdamW, 12 spans of 1..20
words per passage. Each repetition times forward + backward + optimizer step for both modes,
interleaved, on the same tokenized batch (same spans: the cache is built with the loss's seed); it
also times building the cache (teacher vectors per passage) and a plain MNRL-free forward+backward
of the student alone, so the teacher's share is visible. Prints medians and ratios.

    .venv/bin/python benchmarks/bench_distill_step.py [--repeats 5] [--batch-size 16] [--spans 12]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _common import load_sentences
from datasets import Dataset

import slice_st
from slice_st.losses import SpanDistillationLoss


def passages(sentences: list[str], count: int, words: int = 50) -> list[str]:
    out, current = [], []
    for sentence in sentences:
        current.append(sentence)
        if sum(len(s.split()) for s in current) >= words:
            out.append(" ".join(current))
            current = []
        if len(out) == count:
            break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--spans", type=int, default=12)
    parser.add_argument("--max-span", type=int, default=20)
    parser.add_argument(
        "--sts",
        default=None,
        help="STS-B train TSV (default: ../shared/data/stsbenchmark/sts-train.csv)",
    )
    args = parser.parse_args()

    sentences, source = load_sentences(args.sts)
    texts = passages(sentences, args.batch_size)
    model = slice_st.config.enable_span_features(slice_st.load_model())
    model.max_seq_length = 128
    loss = SpanDistillationLoss(model, spans_per_text=args.spans, max_span=args.max_span, seed=0)
    start = time.perf_counter()
    cached = loss.cache_teacher_vectors(
        Dataset.from_dict({"text": texts}), batch_size=args.batch_size, seed=0
    )
    cache_seconds = time.perf_counter() - start
    labels = torch.tensor(cached["label"])
    features = model.preprocess(texts)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1e-8
    )  # tiny steps: the model stays as it was
    model.train()

    def step(use_cache: bool) -> float:
        loss.generator.manual_seed(0)
        begin = time.perf_counter()
        optimizer.zero_grad()
        total = sum(loss([dict(features)], labels if use_cache else None).values())
        total.backward()
        optimizer.step()
        return time.perf_counter() - begin

    step(True), step(False)  # warm-up
    fly, cache = [], []
    for _ in range(args.repeats):
        fly.append(step(False))
        cache.append(step(True))
    fly_median, cache_median = statistics.median(fly), statistics.median(cache)
    print(
        f"source: {source}; {len(texts)} passages × ~50 words, {args.spans} spans of 1..{args.max_span} words, torch "
        f"threads {torch.get_num_threads()}"
    )
    print(
        f"on-the-fly teacher step: median {fly_median:.2f} s  ({', '.join(f'{t:.2f}' for t in fly)})"
    )
    print(
        f"cached teacher step:     median {cache_median:.2f} s  ({', '.join(f'{t:.2f}' for t in cache)})"
    )
    print(
        f"building the cache for this batch: {cache_seconds:.2f} s ({len(texts) / cache_seconds:.1f} passages/s)"
    )
    print(
        f"ratio on-the-fly / cached = {fly_median / cache_median:.2f}  (the teacher's share of a step: "
        f"{1 - cache_median / fly_median:.0%})"
    )


if __name__ == "__main__":
    main()
