"""The real-text dev set's integrity (gold spans at their offsets, once in their paragraph, splits stratified) and
its scorer's arithmetic (word matches, ranks, summaries, paired bootstrap)."""

from __future__ import annotations

import collections
import doctest
import json

import numpy as np
import pytest

from research.realtext import evaluate
from research.realtext.evaluate import (
    DOMAINS,
    load,
    metric_table,
    paired_bootstrap,
    rank_of,
    span_match,
    summary,
)

DOCUMENTS, QUERIES = load()


def test_documents_carry_source_and_licence():
    assert len(DOCUMENTS) >= 150
    for pid, row in DOCUMENTS.items():
        assert row["id"] == pid and row["domain"] in DOMAINS
        assert row["source"] and row["licence"] in {
            "Zlib",
            "BSD-3-Clause",
            "MIT",
            "MIT-CMU",
            "Apache-2.0",
            "MPL-2.0",
        }
        assert row["text"] == row["text"].strip() and "  " not in row["text"]


def test_queries_are_unique_and_many_per_domain():
    ids = [q["id"] for q in QUERIES]
    assert len(ids) == len(set(ids)) >= 150
    per_domain = collections.Counter(q["domain"] for q in QUERIES)
    assert set(per_domain) == set(DOMAINS) and min(per_domain.values()) >= 40
    assert len({q["query"] for q in QUERIES}) == len(QUERIES)


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q["id"])
def test_gold_span_is_at_its_offsets_once(query):
    paragraph = DOCUMENTS[query["paragraph"]]
    text = paragraph["text"]
    assert paragraph["domain"] == query["domain"]
    assert text[query["start"] : query["end"]] == query["span"]
    assert text.count(query["span"]) == 1
    assert 1 <= len(query["span"].split()) <= 20  # the default max_span
    assert set(query["tags"]) <= {"negated", "conditional", "list"}


def test_tags_are_many_and_splits_are_stratified_halves():
    tags = collections.Counter(tag for q in QUERIES for tag in q["tags"])
    assert tags["negated"] >= 40 and tags["list"] >= 40 and tags["conditional"] >= 20
    for domain in DOMAINS:
        splits = collections.Counter(q["split"] for q in QUERIES if q["domain"] == domain)
        assert set(splits) == {"tune", "report"} and abs(splits["tune"] - splits["report"]) <= 1


def test_span_match_counts_words_touched():
    text = "In no event will the authors be held liable."
    assert span_match(text, (0, len(text)), (0, len(text) - 1)) == (
        1.0,
        1.0,
    )  # the final mark is no word
    assert span_match(text, (3, 11), (0, 11)) == (0.0, pytest.approx(2 * 1 * (2 / 3) / (1 + 2 / 3)))
    assert span_match(text, (13, 16), (0, 5)) == (0.0, 0.0)  # "will" vs "In no"
    assert span_match(text, None, (0, 5)) == (0.0, 0.0)
    assert span_match(text, (1, 4), (0, 2)) == (0.0, pytest.approx(2 / 3))  # touching "In" and "no"


def test_rank_counts_ties_against_the_gold():
    assert rank_of(np.array([0.5, 0.5, 0.1]), 0) == 2
    assert rank_of(np.array([0.1, 0.7, 0.3]), 1) == 1
    assert rank_of(np.array([-np.inf, 0.2]), 0) == 2


def test_summary_and_bootstrap():
    rows = [
        {"domain": "legal", "rank": 1, "exact": 1.0, "f1": 1.0},
        {"domain": "legal", "rank": 6, "exact": 0.0, "f1": 0.5},
        {"domain": "tech", "rank": 3, "exact": 0.0, "f1": 0.0},
    ]
    table = metric_table(rows)
    result = summary(table)
    assert result["legal"] == {"hit1": 50.0, "hit5": 50.0, "exact": 50.0, "f1": 75.0, "n": 2}
    assert result["all"]["hit5"] == pytest.approx(66.7) and "dialogue" not in result
    low, high = paired_bootstrap(np.array([0.0, 1.0, 0.0, 1.0]), np.array([1.0, 1.0, 1.0, 1.0]))
    assert 0.0 <= low <= 50.0 <= high <= 100.0
    assert paired_bootstrap(np.ones(10), np.ones(10)) == [0.0, 0.0]


def test_docstring_examples():
    assert doctest.testmod(evaluate).failed == 0


def test_compare_reads_two_saved_runs(tmp_path, capsys):
    rows = [
        {"domain": "legal", "rank": 1, "exact": 0.0, "f1": 0.5},
        {"domain": "tech", "rank": 2, "exact": 1.0, "f1": 1.0},
    ]
    better = [dict(row, exact=1.0, f1=1.0) for row in rows]
    (tmp_path / "old.json").write_text(json.dumps({"reranked": rows}))
    (tmp_path / "new.json").write_text(json.dumps({"reranked": better}))
    evaluate.main(
        [
            "--compare",
            str(tmp_path / "old.json"),
            "reranked",
            str(tmp_path / "new.json"),
            "reranked",
        ]
    )
    shown = capsys.readouterr().out
    assert "| reranked (old) | all | 2 | 50.0 | 100.0 | 50.0 | 75.0 |" in shown
    assert "| reranked (new) | all | 2 | 50.0 | 100.0 | 100.0 | 100.0 |" in shown


def test_confidence_fit_pairs_first_results_and_reliability():
    from research.realtext import confidence

    def found(text, score, label):
        return {
            "text": text,
            "span": "the clause",
            "score": score,
            "similarity": score,
            "label": label,
        }

    entries = [  # per query: paragraphs best first, the gold one's position
        {
            "query": "a clause",
            "gold": 0,
            "found": [found(0, 0.9, 1.0), *(found(t, 0.5 - t / 10, 0.0) for t in (1, 2, 3, 4, 5))],
        },
        {
            "query": "a clause",
            "gold": 2,
            "found": [found(1, 0.7, 1.0), found(2, 0.6, 0.0), found(3, 0.1, 0.0)],
        },
    ]
    rows = confidence.training_rows(entries)
    assert [round(row["score"], 6) for row in rows] == [
        0.9,
        0.4,
        0.3,
        0.2,
        0.1,
        0.6,
        0.7,
        0.1,
    ]  # gold first, 4 others
    first = confidence.first_results(entries)
    assert [(row["score"], row["label"]) for row in first] == [
        (0.9, 1.0),
        (0.4, 0.0),
        (0.7, 1.0),
        (0.7, 1.0),
    ]
    values, labels = confidence.features_of(rows)
    assert values.shape == (8, 5) and labels.sum() == 2
    calibrator = confidence.fit(values, labels, "m", "m-rerank")
    high, low = calibrator(["a clause"] * 2, ["the clause"] * 2, [0.9, 0.1], [0.9, 0.1])
    assert high > 0.5 > low and calibrator.rerank == "m-rerank"
    table = confidence.reliability(np.array([0.1, 0.15, 0.9, 1.0]), np.array([0.0, 1.0, 1.0, 1.0]))
    assert table[2:] == ["| 0.0–0.2 | 2 | 0.12 | 0.50 |", "| 0.8–1.0 | 2 | 0.95 | 1.00 |"]
    assert confidence.cut_for(np.array([0.1, 0.5, 0.9]), np.array([0.0, 0.0, 1.0])) == 0.55
    assert confidence.cut_for(np.array([0.6, 0.9]), np.array([1.0, 1.0])) == 0.5  # never below 0.5
    assert (
        confidence.text_f1("In no event shall the authors", "in no event will the authors") == 5 / 6
    )
