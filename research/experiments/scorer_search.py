"""Tune and ablate the span scorer's costs on the STS-B-Context dev half from cached single-pass cosine grids.

One single pass per model gives every span's cosine (1..20 words) for every row; each configuration is then scored
in numpy in about a second: the best span by cosine minus costs, its exact match and word-F1 against the
paraphrase on rows with gold >= 3 (words compared as bags here; the evaluator compares positions), and the
Spearman of the chosen scores. Configurations are ranked on the even rows only; odd rows are reported held out.

    python experiments/scorer_search.py --dev $DATA/stsb_context/stsb-context-dev.tsv --cache runs/grids [--model base]
"""

from __future__ import annotations

import argparse
import itertools
import os
import pickle
import re
from collections import Counter

import numpy as np
import torch
from scipy.stats import spearmanr

from slice_st import load_model
from slice_st.data import read_stsb_context
from slice_st.encode import embed_texts, encode_windows, resolve_span_config
from slice_st.scoring import SpanScorer, costs_of_spans, mark_prefix, query_profiles, unit_flags
from slice_st.spans import prefix_sums, span_sum_norms
from slice_st.tokens import text_units

MAX_SPAN = 20


def norm_words(text: str) -> list[str]:
    return [w for w in (re.sub(r"[^\w]+", "", t.lower()) for t in text.split()) if w]


def cosine_grids(model_name: str, dev: str) -> list[dict]:
    """Per row: the (U, 20) cosine grid of every span, the unit strings, the gold score, the paraphrase's units."""
    model = load_model(None if model_name == "default" else model_name)
    rows = read_stsb_context(dev)
    queries, passages = list(rows["line"]), list(rows["passage"])
    config = resolve_span_config(model, 1, MAX_SPAN, "word")
    vectors = torch.nn.functional.normalize(
        embed_texts(model, queries, batch_size=32).float(), dim=-1
    )
    out: list[dict] = [{} for _ in passages]
    with torch.no_grad():
        for batch in encode_windows(model, passages, config, 32, False, 16):
            for part in batch.rows(32):
                sums = prefix_sums(part.token_embeddings)
                unit_prefix = torch.gather(
                    sums, 1, part.boundaries[..., None].expand(-1, -1, sums.shape[-1])
                )
                norms = span_sum_norms(
                    part.token_embeddings, part.boundaries, part.num_units, 1, MAX_SPAN
                )
                for b, window in enumerate(part.windows):
                    n, text = int(part.num_units[b]), window.text_index
                    dots = (unit_prefix[b, : n + 1] @ vectors[text]).numpy()
                    grid = np.full((n, MAX_SPAN), np.nan, np.float32)
                    for length in range(1, min(MAX_SPAN, n) + 1):
                        grid[: n - length + 1, length - 1] = (
                            dots[length:] - dots[:-length]
                        ) / norms[b, : n - length + 1, length - 1].numpy()
                    chars = zip(part.char_starts[b, :n].tolist(), part.char_ends[b, :n].tolist())
                    out[text] = {"grid": grid, "units": [passages[text][s:e] for s, e in chars]}
    lengths = [len(starts) for starts, _, _ in text_units(model.tokenizer, queries)]
    for row, (query, gold, paraphrase, length) in enumerate(
        zip(queries, rows["goldsim"], rows["paraphrase"], lengths)
    ):
        d = out[row]
        d.update(query=query, gold=float(gold), profile=query_profiles([query], [length])[0])
        d["flags"] = unit_flags(d["units"])
        d["marks"] = mark_prefix(d["flags"])
        words, target = (
            [re.sub(r"[^\w]+", "", u.lower()) for u in d["units"]],
            norm_words(paraphrase),
        )
        d["words"], d["target"], d["place"] = words, target, None
        for start in range(len(words)):
            got, end = [], start
            if words[start] != target[0]:
                continue
            while end < len(words) and len(got) < len(target):
                got += [words[end]] if words[end] else []
                end += 1
            if got == target:
                d["place"] = (start, end)
                break
    return out


def choose(d: dict, scorer: SpanScorer) -> tuple[int, int, float]:
    grid = d["grid"]
    starts, lengths = np.nonzero(~np.isnan(grid))
    scores = grid[starts, lengths] - costs_of_spans(
        scorer, d["flags"], d["marks"], d["profile"], starts, lengths + 1
    )
    best = int(np.argmax(scores))
    return int(starts[best]), int(starts[best] + lengths[best] + 1), float(scores[best])


def evaluate(rows: list[dict], scorer: SpanScorer, subset) -> dict[str, float]:
    values, golds, exact, f1 = [], [], [], []
    for i in subset:
        d = rows[i]
        start, end, value = choose(d, scorer)
        values.append(value)
        golds.append(d["gold"])
        if d["place"] is None or d["gold"] < 3:
            continue
        predicted = [w for w in d["words"][start:end] if w]
        common = sum((Counter(predicted) & Counter(d["target"])).values())
        exact.append(float(predicted == d["target"]))
        f1.append(2 * common / (len(predicted) + len(d["target"])) if common else 0.0)
    return {
        "spearman": 100 * spearmanr(golds, values).statistic,
        "exact": 100 * np.mean(exact),
        "f1": 100 * np.mean(f1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dev", required=True)
    parser.add_argument("--cache", default="runs/grids")
    parser.add_argument("--model", default="default")
    parser.add_argument(
        "--grid", action="store_true", help="also run the last stage of the weight search"
    )
    args = parser.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    path = os.path.join(args.cache, f"{args.model}.pkl")
    if not os.path.exists(path):
        with open(path, "wb") as handle:
            pickle.dump(cosine_grids(args.model, args.dev), handle)
    with open(path, "rb") as handle:
        rows = pickle.load(handle)
    even, odd = range(0, len(rows), 2), range(1, len(rows), 2)
    default = SpanScorer()
    variants = [
        ("phrase (default)", {}),
        ("− length (both)", {"length_short": 0, "length_long": 0}),
        ("− start word", {"start_word": 0}),
        ("− after determiner", {"after_determiner": 0}),
        ("− end word", {"end_word": 0}),
        ("− clause", {"clause": 0}),
        ("− sentence", {"sentence": 0}),
        ("− open end", {"open_end": 0}),
        ("− open start", {"open_start": 0}),
        (
            "length only",
            dict.fromkeys(
                (
                    "start_word",
                    "after_determiner",
                    "end_word",
                    "clause",
                    "sentence",
                    "open_end",
                    "open_start",
                ),
                0,
            ),
        ),
        ("max-cosine (paper)", {k: 0 for k in default.to_dict() if k != "name"}),
    ]
    print(
        "| scorer | Spearman all | exact (gold ≥ 3) all | word-F1 (gold ≥ 3) all | even: Spearman / exact / F1 | "
        "odd: Spearman / exact / F1 |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, change in variants:
        scorer = SpanScorer(**{**default.to_dict(), **change, "name": "x"})
        a, e, o = (evaluate(rows, scorer, part) for part in (range(len(rows)), even, odd))
        f = lambda r: f"{r['spearman']:.2f} / {r['exact']:.1f} / {r['f1']:.1f}"  # noqa: E731
        print(
            f"| {name} | {a['spearman']:.2f} | {a['exact']:.1f} | {a['f1']:.1f} | {f(e)} | {f(o)} |"
        )
    if (
        args.grid
    ):  # the last stage: clause-edge costs and the length prior, the other costs at their defaults
        results = []
        for short, long, end, start in itertools.product(
            [0.1, 0.15, 0.2], [0.06, 0.1], [0.05, 0.07, 0.1, 0.15], [0, 0.01, 0.02, 0.04]
        ):
            scorer = SpanScorer(
                **{
                    **default.to_dict(),
                    "name": "x",
                    "length_short": short,
                    "length_long": long,
                    "open_end": end,
                    "open_start": start,
                }
            )
            results.append(((short, long, end, start), evaluate(rows, scorer, even)))
        for config, r in sorted(results, key=lambda x: -x[1]["exact"])[:5]:
            print(config, {k: round(v, 2) for k, v in r.items()})


if __name__ == "__main__":
    main()
