"""Three follow-ups to the scorer search (issue 22), from one cached single pass with spans of 1..40 words.

1. Longer spans: the default scorer with ``max_span`` 20, 24, 28, 32, 40 (20 of the 237 strong paraphrases are longer
   than 20 words).
2. The value that ranks the rows: the best span's score (the default), its cosine, a log-sum-exp over every span's
   score (temperatures 0.01-0.1), the mean of the top 2/3/5 span scores.
3. Cohesion costs: a cost for cutting a span where the two words on either side of its end (or start) are alike,
   ``weight × max(0, cos(left, right) − centre)`` with word vectors = the mean (``unit``) or the boundary tokens
   (``token``) of the single pass; 114 configurations (weights 0-0.2 at the end, 0-0.1 at the start, centres 0, 0.3,
   0.5), ranked on the even rows.
4. Sampling: the default's Spearman / exact / word-F1 over 2,000 bootstrap resamples of the rows.

    python experiments/scorer_followups.py --dev $DATA/stsb_context/stsb-context-dev.tsv --cache runs/grids
"""

from __future__ import annotations

import argparse
import itertools
import os
import pickle
from collections import Counter

import numpy as np
import scorer_search as search
import torch
from scipy.special import logsumexp
from scipy.stats import spearmanr

from slice_st import load_model
from slice_st.data import read_stsb_context
from slice_st.encode import encode_windows, resolve_span_config
from slice_st.scoring import SpanScorer, costs_of_spans
from slice_st.spans import prefix_sums

LONGEST = 40


def grids_with_word_vectors(model_name: str, dev: str) -> list[dict]:
    """``scorer_search.cosine_grids`` with spans up to 40 words, plus each word's vector and boundary tokens."""
    search.MAX_SPAN = LONGEST
    rows = search.cosine_grids(model_name, dev)
    model = load_model(None if model_name == "default" else model_name)
    passages = list(read_stsb_context(dev)["passage"])
    config = resolve_span_config(model, 1, LONGEST, "word")
    with torch.no_grad():
        for batch in encode_windows(model, passages, config, 32, False, 16):
            for part in batch.rows(32):
                sums = prefix_sums(part.token_embeddings)
                unit_sums = torch.gather(
                    sums, 1, part.boundaries[..., None].expand(-1, -1, sums.shape[-1])
                )
                tokens = torch.nn.functional.normalize(part.token_embeddings, dim=-1)
                for b, window in enumerate(part.windows):
                    n, edges = (
                        int(part.num_units[b]),
                        part.boundaries[b, : int(part.num_units[b]) + 1],
                    )
                    words = torch.nn.functional.normalize(
                        unit_sums[b, 1 : n + 1] - unit_sums[b, :n], dim=-1
                    )
                    first, last = tokens[b, edges[:n]], tokens[b, edges[1:] - 1]
                    row = rows[window.text_index]
                    # cohesion across boundary k (between word k-1 and word k); 0 at the text's edges
                    for name, left, right in (
                        ("unit", words[:-1], words[1:]),
                        ("token", last[:-1], first[1:]),
                    ):
                        across = np.zeros(n + 1, np.float32)
                        across[1:n] = (left * right).sum(-1).numpy()
                        row[f"cohesion_{name}"] = across
    return rows


def spans_of(row: dict, longest: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    grid = row["grid"][:, :longest]
    starts, lengths = np.nonzero(~np.isnan(grid))
    cosines = grid[starts, lengths]
    scores = cosines - costs_of_spans(
        SpanScorer(), row["flags"], row["marks"], row["profile"], starts, lengths + 1
    )
    return starts, lengths + 1, cosines, scores


def report(rows: list[dict], pick, parts) -> str:
    """``pick(row) -> (start, end, value)``: Spearman / exact / word-F1 (gold >= 3) on each part."""
    out = []
    for part in parts:
        values, golds, exact, f1 = [], [], [], []
        for i in part:
            row = rows[i]
            start, end, value = pick(row)
            values.append(value)
            golds.append(row["gold"])
            if row["place"] is not None and row["gold"] >= 3:
                predicted = [w for w in row["words"][start:end] if w]
                common = sum((Counter(predicted) & Counter(row["target"])).values())
                exact.append(float(predicted == row["target"]))
                f1.append(2 * common / (len(predicted) + len(row["target"])) if common else 0.0)
        spearman = 100 * spearmanr(golds, values).statistic
        out.append(f"{spearman:.2f} / {100 * np.mean(exact):.1f} / {100 * np.mean(f1):.1f}")
    return " | ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dev", required=True)
    parser.add_argument("--cache", default="runs/grids")
    parser.add_argument("--model", default="default")
    args = parser.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    path = os.path.join(args.cache, f"{args.model}-{LONGEST}-cohesion.pkl")
    if not os.path.exists(path):
        with open(path, "wb") as handle:
            pickle.dump(grids_with_word_vectors(args.model, args.dev), handle)
    with open(path, "rb") as handle:
        rows = pickle.load(handle)
    parts = (range(len(rows)), range(0, len(rows), 2), range(1, len(rows), 2))
    print("Spearman / exact / word-F1 (gold >= 3): all | even | odd")

    def best(longest, value="score", extra=None):
        def pick(row):
            starts, lengths, cosines, scores = spans_of(row, longest)
            ranked = scores if extra is None else scores - extra(row, starts, lengths)
            i = int(np.argmax(ranked))
            chosen = {"score": ranked[i], "cosine": cosines[i]}.get(value)
            if chosen is None:  # an aggregate over every span
                chosen = value(ranked)
            return int(starts[i]), int(starts[i] + lengths[i]), float(chosen)

        return pick

    print("\n1. max_span (default scorer)")
    for longest in (20, 24, 28, 32, 40):
        print(f"{longest}: {report(rows, best(longest), parts)}")
    print("\n2. the value that ranks the rows (max_span 20)")
    values = [("best span's score (default)", "score"), ("best span's cosine", "cosine")]
    values += [
        (f"log-sum-exp, t={t}", lambda s, t=t: t * logsumexp(s / t))
        for t in (0.01, 0.02, 0.05, 0.1)
    ]
    values += [(f"mean of the top {m}", lambda s, m=m: np.sort(s)[-m:].mean()) for m in (2, 3, 5)]
    for name, value in values:
        print(f"{name}: {report(rows, best(20, value), parts)}")
    print("\n3. cohesion costs (max_span 20), the top 5 by even exact, of 114")
    results = []
    for kind, centre in itertools.product(("unit", "token"), (0.0, 0.3, 0.5)):
        for at_end, at_start in itertools.product([0, 0.02, 0.05, 0.1, 0.2], [0, 0.02, 0.05, 0.1]):
            if at_end == at_start == 0:
                continue

            def cohesion(
                row, starts, lengths, kind=kind, centre=centre, at_end=at_end, at_start=at_start
            ):
                across = np.maximum(row[f"cohesion_{kind}"] - centre, 0)
                return at_end * across[starts + lengths] + at_start * across[starts]

            line = report(rows, best(20, extra=cohesion), parts)
            results.append(
                (
                    float(line.split(" | ")[1].split(" / ")[1]),
                    f"{kind} centre {centre} end {at_end} start {at_start}: {line}",
                )
            )
    for _, line in sorted(results, key=lambda r: -r[0])[:5]:
        print(line)
    print(
        "\n4. bootstrap of the default (2,000 resamples of the rows): mean, standard deviation, 95% interval"
    )
    values, golds, exact, f1 = [], [], [], []
    for row in rows:
        start, end, value = best(20)(row)
        values.append(value)
        golds.append(row["gold"])
        strong = row["place"] is not None and row["gold"] >= 3
        predicted = [w for w in row["words"][start:end] if w]
        common = sum((Counter(predicted) & Counter(row["target"])).values())
        exact.append(float(predicted == row["target"]) if strong else np.nan)
        f1.append(
            (2 * common / (len(predicted) + len(row["target"])) if common else 0.0)
            if strong
            else np.nan
        )
    values, golds, exact, f1 = map(np.array, (values, golds, exact, f1))
    rng, draws = np.random.default_rng(0), []
    for _ in range(2000):
        i = rng.integers(0, len(rows), len(rows))
        draws.append(
            (
                100 * spearmanr(golds[i], values[i]).statistic,
                100 * np.nanmean(exact[i]),
                100 * np.nanmean(f1[i]),
            )
        )
    for name, column in zip(("Spearman", "exact", "word-F1"), np.array(draws).T):
        low, high = np.percentile(column, [2.5, 97.5])
        print(f"{name}: {column.mean():.2f}, sd {column.std():.2f}, 95% {low:.1f}-{high:.1f}")


if __name__ == "__main__":
    main()
