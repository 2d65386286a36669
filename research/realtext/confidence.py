"""Fits the calibrated confidence (:mod:`slice_st.confidence`) of a shipped model and reports it on the real-text dev
set's reported half.

Labelled matches (a real match: the span's word-F1 with the gold span is at least 0.5; in another paragraph than the
gold one, the word-F1 of the two spans' words, case-folded, so that the same clause in another licence counts: a rule
of the words alone, no model): each query of the real-text tune half searched over its whole domain with the model's
default scorer; the best span of its gold paragraph and of the best four other paragraphs (hard negatives unless they
hold the clause). STS-B-Context is evaluation-only data (``../shared/DATA.md``): a shipped calibrator is not fitted on
it.

Report: the reported half's first results, each query searched over its domain and again without its gold paragraph
(a query without an answer, whose first result is wrong): a reliability table, and the precision and recall of the
default cut: 0.5 (a calibrated probability: more likely a real match than not), raised to the lowest multiple of 0.05
whose first results on the tune half have precision >= 0.85 (a margin over the 0.8 a user is promised) where 0.5
falls short of it.

    python research/realtext/confidence.py --model slice-minilm \
        --export slice_st/pretrained/confidence/slice-minilm.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from research.realtext.evaluate import DOMAINS, load, span_match

#: A span counts as a real match when its word-F1 with the gold span is at least this.
MATCH_F1 = 0.5


def text_f1(span: str, gold: str) -> float:
    """Word-F1 of two texts' words (case-folded, as multisets).

    >>> round(text_f1("IN NO EVENT SHALL THE AUTHORS BE LIABLE", "In no event will the authors be held liable"), 2)
    0.82
    """
    from collections import Counter

    from slice_st.confidence import words

    a, b = Counter(words(span)), Counter(words(gold))
    common = sum((a & b).values())
    return 0.0 if not common else 2 * common / (sum(a.values()) + sum(b.values()))


#: Other paragraphs per tune query whose best spans are negatives.
NEGATIVES = 4


def realtext_matches(model, split: str) -> list[dict]:
    """Per query of ``split``: its domain's paragraphs ranked by their best span (default scorer); each entry holds
    the query, the gold paragraph's position and per paragraph (best first) its span, score, similarity and label."""
    documents, queries = load()
    out = []
    for domain in DOMAINS:
        mine = [q for q in queries if q["domain"] == domain and q["split"] == split]
        ids = [pid for pid, row in documents.items() if row["domain"] == domain]
        texts = [documents[pid]["text"] for pid in ids]
        result = model.best_spans([q["query"] for q in mine], texts)
        for row, query in enumerate(mine):
            gold = ids.index(query["paragraph"])
            order = np.argsort(-result.best(row), kind="stable")
            found = []
            for text in order[: NEGATIVES + 2]:
                match = result[row][int(text)][0]
                if int(text) == gold:
                    gold_range = (query["start"], query["end"])
                    f1 = span_match(texts[gold], (match.start, match.end), gold_range)[1]
                else:
                    f1 = text_f1(match.span, query["span"])
                label = f1 >= MATCH_F1
                found.append(dict(text=int(text), span=match.span, score=match.score))
                found[-1] |= dict(similarity=match.similarity, label=float(label))
            if gold not in [f["text"] for f in found]:
                match = result[row][gold][0]
                f1 = span_match(
                    texts[gold], (match.start, match.end), (query["start"], query["end"])
                )
                found.append(dict(text=gold, span=match.span, score=match.score))
                found[-1] |= dict(similarity=match.similarity, label=float(f1[1] >= MATCH_F1))
            out.append(dict(query=query["query"], gold=gold, found=found, domain=domain))
    return out


def training_rows(tune: list[dict]) -> list[dict]:
    """The fit's labelled matches: per tune query the gold paragraph's and the best others' (up to
    :data:`NEGATIVES`)."""
    rows = []
    for entry in tune:
        others = [f for f in entry["found"] if f["text"] != entry["gold"]][:NEGATIVES]
        gold = [f for f in entry["found"] if f["text"] == entry["gold"]]
        rows += [dict(query=entry["query"]) | f for f in gold + others]
    return rows


def first_results(entries: list[dict]) -> list[dict]:
    """Each query's first result over its domain, then its first result without the gold paragraph."""
    rows = []
    for entry in entries:
        first = entry["found"][0]
        rows.append(dict(query=entry["query"]) | first)
        other = next(f for f in entry["found"] if f["text"] != entry["gold"])
        rows.append(dict(query=entry["query"]) | other)
    return rows


def features_of(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """``(features, labels)`` of labelled matches."""
    from slice_st.confidence import match_features

    columns = [[row[k] for row in rows] for k in ("query", "span", "score", "similarity")]
    return match_features(*columns), np.asarray([row["label"] for row in rows])


def fit(values: np.ndarray, labels: np.ndarray, name: str, rerank: str, only=None):
    """A :class:`slice_st.confidence.Calibrator` (scikit-learn's logistic regression, L2 ``C=1`` on standardised
    features); ``only``: feature positions to keep (the others get weight 0)."""
    from sklearn.linear_model import LogisticRegression

    from slice_st.confidence import Calibrator

    mean, scale = values.mean(axis=0), values.std(axis=0) + 1e-9
    keep = list(range(values.shape[1])) if only is None else list(only)
    model = LogisticRegression(C=1.0).fit(((values - mean) / scale)[:, keep], labels)
    weights = np.zeros(values.shape[1])
    weights[keep] = model.coef_[0]
    return Calibrator(name, rerank, mean, scale, weights, float(model.intercept_[0]), 0.5)


def reliability(predicted: np.ndarray, labels: np.ndarray) -> list[str]:
    """Markdown rows: per bin of predicted confidence, how many, the mean prediction and the observed match rate."""
    lines = ["| confidence | n | mean predicted | observed |", "|---|---|---|---|"]
    edges = (0, 0.2, 0.4, 0.6, 0.8, 1.0)
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = (predicted >= lo) & ((predicted < hi) if hi < 1 else (predicted <= hi))
        if inside.any():
            mean, seen = predicted[inside].mean(), labels[inside].mean()
            lines.append(f"| {lo:.1f}–{hi:.1f} | {int(inside.sum())} | {mean:.2f} | {seen:.2f} |")
    return lines


def cut_for(predicted: np.ndarray, labels: np.ndarray, precision: float = 0.85) -> float:
    """The lowest confidence from 0.5 (a multiple of 0.05) whose kept results have at least ``precision``."""
    for value in np.arange(0.5, 1.0, 0.05):
        kept = predicted >= value
        if kept.any() and labels[kept].mean() >= precision:
            return round(float(value), 2)
    return 1.0


def precision_recall(predicted, labels, cut) -> tuple[float, float, int]:
    """Precision and recall of the first results kept at ``cut``, and how many were kept."""
    kept = predicted >= cut
    precision = float(labels[kept].mean()) if kept.any() else float("nan")
    return precision, float((labels * kept).sum() / max(labels.sum(), 1)), int(kept.sum())


def report(calibrator, tune_first, report_first, label: str) -> tuple[float, list[str]]:
    """The default cut (from the tune half) and the reported half's lines for one calibrator."""
    values, labels = tune_first
    cut = cut_for(calibrator(*_columns(values)), labels)
    predicted, labels = calibrator(*_columns(report_first[0])), report_first[1]
    precision, recall, kept = precision_recall(predicted, labels, cut)
    lines = [f"### {label}", "", *reliability(predicted, labels), ""]
    lines.append(
        f"default cut {cut:.2f} (tune): reported half's first results kept {kept} of {len(labels)}, "
        f"precision {precision:.2f}, recall {recall:.2f}"
    )
    return cut, lines


def _columns(rows: list[dict]) -> list[list]:
    return [[row[k] for row in rows] for k in ("query", "span", "score", "similarity")]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="slice-minilm", help="a shipped model's name")
    parser.add_argument("--export", type=Path, default=None, help="write the calibrator here")
    args = parser.parse_args(argv)
    import dataclasses

    import slice_st
    from slice_st.search import search_scorer

    model = slice_st.load_model(args.model)
    rerank = search_scorer(None, model).rerank
    tune, held = realtext_matches(model, "tune"), realtext_matches(model, "report")
    train = training_rows(tune)
    values, labels = features_of(train)
    tune_first, report_first = first_results(tune), first_results(held)
    tune_pair = (tune_first, np.asarray([r["label"] for r in tune_first]))
    report_pair = (report_first, np.asarray([r["label"] for r in report_first]))
    print(f"fit on {len(train)} labelled matches ({int(labels.sum())} real)\n")
    for only, label in ((None, "all features"), ((0,), "score only")):
        calibrator = fit(values, labels, args.model, rerank, only)
        cut, lines = report(calibrator, tune_pair, report_pair, label)
        print("\n".join(lines), "\n")
        if only is None and args.export:
            calibrator = dataclasses.replace(calibrator, default_min_confidence=cut)
            args.export.parent.mkdir(parents=True, exist_ok=True)
            args.export.write_text(json.dumps(calibrator.to_dict(), indent=1) + "\n", "utf-8")
            print(f"wrote {args.export}\n")


if __name__ == "__main__":
    main()
