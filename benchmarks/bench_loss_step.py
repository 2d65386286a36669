"""P3: one training step with SpanMaxCrossEntropyLoss vs MultipleNegativesRankingLoss on the same batch.

32 (anchor, positive, negative) triplets, passages of ~80 tokens, all-MiniLM-L6-v2, AdamW. Each
repetition times forward + backward + optimizer step for both losses, interleaved, on the same
tokenized batch; the script prints the medians and their ratio (target: SLICE / MNRL <= 1.25).

    .venv/bin/python benchmarks/bench_loss_step.py [--repeats 7] [--max-span 10]
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import time

import torch
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

import slice_st

WORDS = (
    "the customer called about a delayed flight and asked for a refund because the agent said the bag was lost "
    "at the airport while the engineers fixed the app that kept crashing during online check in for the morning plane"
).split()


def make_batch(size: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    anchors = [" ".join(rng.choices(WORDS, k=5)) for _ in range(size)]
    positives = [" ".join(rng.choices(WORDS, k=60)) + "." for _ in range(size)]  # ~80 word pieces
    negatives = [" ".join(rng.choices(WORDS, k=60)) + "." for _ in range(size)]
    return [anchors, positives, negatives]


def step_time(model, loss, features, optimizer) -> float:
    start = time.perf_counter()
    optimizer.zero_grad()
    value = loss([dict(f) for f in features], torch.zeros(len(features[0]["input_ids"])))
    value.backward()
    optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--max-span", type=int, default=10)
    args = parser.parse_args()

    base = slice_st.load_model()
    mnrl_model = copy.deepcopy(base)
    slice_model = slice_st.config.enable_span_features(base)
    slice_loss = slice_st.SpanMaxCrossEntropyLoss(slice_model, max_span=args.max_span)
    mnrl_loss = MultipleNegativesRankingLoss(mnrl_model)
    columns = make_batch(args.batch_size)
    slice_features = [slice_model.preprocess(column) for column in columns]
    mnrl_features = [mnrl_model.preprocess(column) for column in columns]
    tokens = int(slice_features[1]["attention_mask"].sum(1).float().mean())
    optimizers = {
        "slice": torch.optim.AdamW(slice_model.parameters(), lr=1e-9),
        "mnrl": torch.optim.AdamW(mnrl_model.parameters(), lr=1e-9),
    }
    slice_model.train()
    mnrl_model.train()
    step_time(slice_model, slice_loss, slice_features, optimizers["slice"])  # warm-up
    step_time(mnrl_model, mnrl_loss, mnrl_features, optimizers["mnrl"])
    times = {"slice": [], "mnrl": []}
    for _ in range(args.repeats):
        times["slice"].append(
            step_time(slice_model, slice_loss, slice_features, optimizers["slice"])
        )
        times["mnrl"].append(step_time(mnrl_model, mnrl_loss, mnrl_features, optimizers["mnrl"]))
    slice_median, mnrl_median = statistics.median(times["slice"]), statistics.median(times["mnrl"])
    print(
        f"batch: {args.batch_size} triplets, positive passages ~{tokens} tokens, spans 1..{args.max_span} words, "
        f"{args.repeats} repeats"
    )
    print(
        f"MultipleNegativesRankingLoss step: median {mnrl_median:.3f} s  (all: "
        f"{', '.join(f'{t:.2f}' for t in times['mnrl'])})"
    )
    print(
        f"SpanMaxCrossEntropyLoss step:      median {slice_median:.3f} s  (all: "
        f"{', '.join(f'{t:.2f}' for t in times['slice'])})"
    )
    print(f"P3 ratio SLICE / MNRL: {slice_median / mnrl_median:.3f}  (target <= 1.25)")


if __name__ == "__main__":
    main()
