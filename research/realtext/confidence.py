"""A study of a calibrated confidence (the probability that a first result is a real match) on the real-text dev
set, from ``evaluate.py --save`` runs (which keep each paragraph's best score): a logistic model of the best span's
score, fitted on the tune half (each query's gold paragraph, a positive when its best span overlaps the gold span
with word-F1 >= 0.5, and its three best other paragraphs as hard negatives), then a reliability table on the report
half's first results, each query searched twice: over its whole domain, and with its gold paragraph removed (a query
without an answer, whose first result is wrong).

    python research/realtext/evaluate.py --split tune --scorers reranked --save tune.json
    python research/realtext/evaluate.py --split report --scorers reranked --save report.json
    python research/realtext/confidence.py tune.json report.json --scorer reranked
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

#: A span counts as a real match when its word-F1 with the gold span is at least this.
MATCH_F1 = 0.5


def training_pairs(rows: list[dict], negatives: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, labels)``: per query its gold paragraph's best score (label: a real match) and its ``negatives``
    best other paragraphs' (label 0)."""
    scores, labels = [], []
    for row in rows:
        values = np.asarray(row["paragraph_scores"], np.float64)
        gold = row["gold_index"]
        scores.append(values[gold])
        labels.append(float(row["f1"] >= MATCH_F1))
        others = np.delete(values, gold)
        for value in np.sort(others[np.isfinite(others)])[::-1][:negatives]:
            scores.append(value)
            labels.append(0.0)
    return np.asarray(scores), np.asarray(labels)


def first_results(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, labels)`` of each query's first result over its domain, then over its domain less the gold."""
    scores, labels = [], []
    for row in rows:
        values = np.asarray(row["paragraph_scores"], np.float64)
        gold = row["gold_index"]
        top = int(np.argmax(values))
        scores.append(values[top])
        labels.append(float(top == gold and row["f1"] >= MATCH_F1))
        scores.append(np.max(np.delete(values, gold)))
        labels.append(0.0)
    return np.asarray(scores), np.asarray(labels)


def fit(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """``(a, b)`` of ``P(match) = sigmoid(a + b * score)`` (scikit-learn's logistic regression, no penalty)."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=np.inf).fit(scores[:, None], labels)
    return float(model.intercept_[0]), float(model.coef_[0, 0])


def confidence(scores: np.ndarray, a: float, b: float) -> np.ndarray:
    """The fitted probability of a real match."""
    return 1.0 / (1.0 + np.exp(-(a + b * scores)))


def reliability(
    predicted: np.ndarray, labels: np.ndarray, edges=(0, 0.2, 0.4, 0.6, 0.8, 1.0)
) -> list[str]:
    """Markdown rows: per bin of predicted confidence, how many, the mean prediction and the observed match rate."""
    lines = ["| confidence | n | mean predicted | observed |", "|---|---|---|---|"]
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = (predicted >= lo) & ((predicted < hi) if hi < 1 else (predicted <= hi))
        if inside.any():
            mean, seen = predicted[inside].mean(), labels[inside].mean()
            lines.append(f"| {lo:.1f}–{hi:.1f} | {int(inside.sum())} | {mean:.2f} | {seen:.2f} |")
    return lines


def threshold_for(predicted: np.ndarray, labels: np.ndarray, precision: float = 0.8) -> float:
    """The lowest confidence (a multiple of 0.05) whose kept results have at least ``precision``."""
    for value in np.arange(0.05, 1.0, 0.05):
        kept = predicted >= value
        if kept.any() and labels[kept].mean() >= precision:
            return round(float(value), 2)
    return 1.0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tune", type=Path)
    parser.add_argument("report", type=Path)
    parser.add_argument("--scorer", default="reranked")
    args = parser.parse_args(argv)
    tune, report = (
        json.loads(path.read_text(encoding="utf-8"))[args.scorer]
        for path in (args.tune, args.report)
    )
    a, b = fit(*training_pairs(tune))
    print(f"P(match) = sigmoid({a:.3f} + {b:.3f} * score)  (fitted on {len(tune)} tune queries)")
    tune_first, tune_labels = first_results(tune)
    cut = threshold_for(confidence(tune_first, a, b), tune_labels)
    scores, labels = first_results(report)
    predicted = confidence(scores, a, b)
    print("\nreport half, first results (with and without the gold paragraph):\n")
    print("\n".join(reliability(predicted, labels)))
    kept = predicted >= cut
    precision = labels[kept].mean() if kept.any() else float("nan")
    recall = (labels * kept).sum() / max(labels.sum(), 1)
    print(
        f"\nthreshold {cut} (the lowest with precision >= 0.8 on the tune half's first results): report precision "
        f"{precision:.2f}, recall {recall:.2f} ({int(kept.sum())} of {len(kept)} first results kept)"
    )
    plain = max(scores[labels == 0].max(initial=-1), 0)
    print(f"for comparison: the best wrong first result's score on the report half: {plain:.3f}")


if __name__ == "__main__":
    main()
