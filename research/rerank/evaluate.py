"""The shipped scorers through the package's own path (``best_spans_paired``, as the evaluator runs it) on the
STS-B-Context dev half: Spearman, exact and word-F1 on strong rows (gold >= 3) as the evaluator counts them, on all,
even (the re-ranker's training rows) and odd rows (held out), with paired bootstrap intervals of the gain over
``"phrase"``.

    python research/rerank/evaluate.py --dev $DATA/stsb_context/stsb-context-dev.tsv [--model base]
    python research/rerank/evaluate.py --dev $DATA/stsb_context/stsb-context-dev.tsv --gates 3 4 5 6
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from unittest import mock

import numpy as np
import torch
from scipy.stats import spearmanr

from slice_st import load_model, rerank
from slice_st.data import read_stsb_context
from slice_st.evaluation.localisation import span_localisation
from slice_st.scoring import DEFAULT_SCORER, SPAN_SCORERS
from slice_st.search import best_spans_paired


def per_row(model, rows, scorer: str) -> dict[str, np.ndarray]:
    matches = best_spans_paired(
        model, list(rows["line"]), list(rows["passage"]), scorer=scorer, batch_size=32
    )
    exact, f1, strong = [], [], []
    for match, passage, paraphrase, gold in zip(
        matches, rows["passage"], rows["paraphrase"], rows["goldsim"]
    ):
        span = None if match is None else (match.start, match.end)
        one = span_localisation([passage], [span], [paraphrase], [gold])
        strong.append(bool(one["strong_located"]))
        exact.append(one["strong_exact"] if one["strong_located"] else np.nan)
        f1.append(one["strong_word_f1"] if one["strong_located"] else np.nan)
    scores = np.array([-np.inf if m is None else m.score for m in matches])
    return {
        "score": scores,
        "exact": np.array(exact),
        "f1": np.array(f1),
        "strong": np.array(strong),
    }


def summary(result: dict, gold: np.ndarray, part: np.ndarray) -> dict[str, float]:
    strong = part[result["strong"][part]]
    return {
        "spearman": 100 * spearmanr(gold[part], result["score"][part]).statistic,
        "exact": float(np.mean(result["exact"][strong])),
        "f1": float(np.mean(result["f1"][strong])),
        "strong": int(len(strong)),
    }


def bootstrap(
    new: dict, old: dict, gold: np.ndarray, part: np.ndarray, samples: int = 2000
) -> dict[str, list]:
    """95% paired bootstrap intervals (rows resampled) of the gains in exact, word-F1 and Spearman."""
    rng = np.random.default_rng(0)
    out: dict[str, list] = {"exact": [], "f1": [], "spearman": []}
    for _ in range(samples):
        pick = part[rng.integers(0, len(part), len(part))]
        strong = pick[new["strong"][pick]]
        out["exact"].append(np.mean(new["exact"][strong]) - np.mean(old["exact"][strong]))
        out["f1"].append(np.mean(new["f1"][strong]) - np.mean(old["f1"][strong]))
        out["spearman"].append(
            100
            * (
                spearmanr(gold[pick], new["score"][pick]).statistic
                - spearmanr(gold[pick], old["score"][pick]).statistic
            )
        )
    return {
        key: [round(float(v), 2) for v in np.percentile(values, [2.5, 97.5])]
        for key, values in out.items()
    }


def gates(model, rows, gold, parts, sizes: list[int]) -> None:
    """The default scorer with other query gates (``min_query_units``): odd / all rows, and the rows that change."""
    shipped = rerank.load_reranker(SPAN_SCORERS[DEFAULT_SCORER].rerank)
    base = per_row(model, rows, DEFAULT_SCORER)
    for size in sizes:
        gated = replace(shipped, min_query_units=size)
        with mock.patch.object(rerank, "load_reranker", lambda name, gated=gated: gated):
            result = per_row(model, rows, DEFAULT_SCORER)
        s = {name: summary(result, gold, parts[name]) for name in ("odd", "all")}
        moved = int(np.sum(result["score"] != base["score"]))
        print(
            f"gate {size} words: exact odd {s['odd']['exact']:.2f} / all {s['all']['exact']:.2f}, word-F1 odd "
            f"{s['odd']['f1']:.2f}, Spearman odd {s['odd']['spearman']:.2f}; rows scored apart from the shipped gate "
            f"({shipped.min_query_units}): {moved}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dev", required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--scorers", nargs="+", default=["reranked", "phrase", "max-cosine"])
    parser.add_argument(
        "--gates",
        type=int,
        nargs="+",
        help="only: the default scorer with these shortest re-ranked queries (words)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_model(args.model)
    rows = read_stsb_context(args.dev)
    gold = np.asarray(rows["goldsim"], np.float64)
    parts = {
        "all": np.arange(len(rows)),
        "even": np.arange(0, len(rows), 2),
        "odd": np.arange(1, len(rows), 2),
    }
    if args.gates:
        gates(model, rows, gold, parts, args.gates)
        return
    results = {scorer: per_row(model, rows, scorer) for scorer in args.scorers}
    print(
        "| scorer | Spearman all / even / odd | exact (gold ≥ 3) all / even / odd | "
        "word-F1 (gold ≥ 3) all / even / odd |"
    )
    print("| --- | --- | --- | --- |")
    for scorer, result in results.items():
        s = {name: summary(result, gold, part) for name, part in parts.items()}
        cells = [
            " / ".join(f"{s[p][key]:.2f}" for p in parts) for key in ("spearman", "exact", "f1")
        ]
        print(f"| `{scorer}` | " + " | ".join(cells) + " |")
    if "phrase" in results:
        for scorer in results:
            if scorer != "phrase":
                for name in ("odd", "all"):
                    ci = bootstrap(results[scorer], results["phrase"], gold, parts[name])
                    print(f"{scorer} − phrase, {name} rows, 95% bootstrap:", json.dumps(ci))


if __name__ == "__main__":
    main()
