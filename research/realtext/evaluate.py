"""Scores span scorers on the real-text dev set (``research/realtext``): per domain, paragraph hit@1 / hit@5 (each
paragraph of the domain ranked by its best span's score), and the exact match and word-F1 of the best span in the
gold paragraph; with two scorers, 95% paired bootstrap intervals of the second minus the first.

    python research/realtext/evaluate.py --split report --scorers phrase reranked
    python research/realtext/evaluate.py --split tune --scorers reranked --save /tmp/tune-reranked.json

A predicted span covers the paragraph words its characters touch (as ``slice_st.evaluation.localisation``); exact:
the same words as the gold span; word-F1: overlap of word positions.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DOMAINS = ("legal", "tech", "dialogue")
METRICS = ("hit1", "hit5", "exact", "f1")


def load(folder: Path = HERE) -> tuple[dict[str, dict], list[dict]]:
    """The paragraphs (id → row) and the queries of the dev set in ``folder``."""
    read = lambda name: [  # noqa: E731
        json.loads(line) for line in (folder / name).read_text(encoding="utf-8").splitlines()
    ]
    return {row["id"]: row for row in read("documents.jsonl")}, read("queries.jsonl")


def word_positions(text: str, start: int, end: int) -> set[int]:
    """The positions of the words of ``text`` (as ``span_words`` cuts them) that characters ``[start, end)`` touch."""
    from slice_st.evaluation.localisation import span_words

    return {
        i for i, (first, last, _) in enumerate(span_words(text)) if first < end and last > start
    }


def span_match(
    text: str, predicted: tuple[int, int] | None, gold: tuple[int, int]
) -> tuple[float, float]:
    """``(exact, word_f1)`` of a predicted character range against the gold one (``None``: no span, 0 and 0).

    >>> [round(v, 3) for v in span_match("In no event will the authors be liable.", (6, 38), (0, 38))]
    [0.0, 0.857]
    """
    if predicted is None:
        return 0.0, 0.0
    mine, theirs = word_positions(text, *predicted), word_positions(text, *gold)
    common = len(mine & theirs)
    if not common:
        return float(mine == theirs), 0.0
    precision, recall = common / len(mine), common / len(theirs)
    return float(mine == theirs), 2 * precision * recall / (precision + recall)


def rank_of(scores: np.ndarray, gold: int) -> int:
    """The 1-based rank of ``gold`` among ``scores`` (ties count against it: a paragraph must beat the others).

    >>> rank_of(np.array([0.2, 0.5, 0.5]), 1), rank_of(np.array([0.9, 0.1]), 0)
    (2, 1)
    """
    return int(np.sum(scores >= scores[gold]))


def score_queries(
    model, documents: dict[str, dict], queries: Sequence[dict], scorer, batch_size=32
) -> list[dict]:
    """Per query: the gold paragraph's rank, the best span in the gold paragraph (exact, word-F1, its text, score,
    similarity) and the first result's paragraph, score and span."""
    out = []
    for domain in DOMAINS:
        mine = [q for q in queries if q["domain"] == domain]
        if not mine:
            continue
        ids = [pid for pid, row in documents.items() if row["domain"] == domain]
        texts = [documents[pid]["text"] for pid in ids]
        result = model.best_spans(
            [q["query"] for q in mine], texts, scorer=scorer, batch_size=batch_size
        )
        scores = np.where(np.isfinite(result.scores[:, :, 0]), result.scores[:, :, 0], -np.inf)
        for row, query in enumerate(mine):
            gold = ids.index(query["paragraph"])
            match = result[row][gold][0] if result[row][gold] else None
            exact, f1 = span_match(
                texts[gold],
                None if match is None else (match.start, match.end),
                (query["start"], query["end"]),
            )
            top = int(np.argmax(scores[row]))
            first = result[row][top][0] if result[row][top] else None
            out.append(
                {
                    "id": query["id"],
                    "domain": domain,
                    "rank": rank_of(scores[row], gold),
                    "exact": exact,
                    "f1": f1,
                    "span": None if match is None else match.span,
                    "score": None if match is None else match.score,
                    "similarity": None if match is None else match.similarity,
                    "top_paragraph": ids[top],
                    "top_score": float(scores[row, top]),
                    "top_span": None if first is None else first.span,
                    "top_similarity": None if first is None else first.similarity,
                    "paragraph_scores": [
                        round(float(v), 5) for v in scores[row]
                    ],  # each paragraph's best score
                    "gold_index": gold,
                    "top_start": None if first is None else first.start,
                    "top_end": None if first is None else first.end,
                }
            )
    return out


def metric_table(rows: Sequence[dict]) -> dict[str, np.ndarray]:
    """Per-query arrays of :data:`METRICS` (1/0 hits, exact and word-F1) and domains."""
    return {
        "hit1": np.array([row["rank"] == 1 for row in rows], float),
        "hit5": np.array([row["rank"] <= 5 for row in rows], float),
        "exact": np.array([row["exact"] for row in rows], float),
        "f1": np.array([row["f1"] for row in rows], float),
        "domain": np.array([row["domain"] for row in rows]),
    }


def summary(table: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Domain (and ``"all"``) → metric → mean ×100, with ``"n"``.

    >>> t = {"hit1": np.array([1., 0.]), "hit5": np.array([1., 1.]), "exact": np.array([0., 1.]),
    ...      "f1": np.array([.5, 1.]), "domain": np.array(["legal", "tech"])}
    >>> summary(t)["all"]
    {'hit1': 50.0, 'hit5': 100.0, 'exact': 50.0, 'f1': 75.0, 'n': 2}
    """
    out = {}
    for domain in (*DOMAINS, "all"):
        keep = np.ones(len(table["domain"]), bool) if domain == "all" else table["domain"] == domain
        if keep.any():
            out[domain] = {m: round(100 * float(table[m][keep].mean()), 1) for m in METRICS} | {
                "n": int(keep.sum())
            }
    return out


def paired_bootstrap(
    first: np.ndarray, second: np.ndarray, samples: int = 2000, seed: int = 0
) -> list[float]:
    """95% interval (×100) of ``mean(second) - mean(first)``, queries resampled with replacement, the same rows for
    both (paired).

    >>> paired_bootstrap(np.zeros(50), np.ones(50))
    [100.0, 100.0]
    """
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(first), (samples, len(first)))
    gains = (second[picks] - first[picks]).mean(axis=1)
    return [round(100 * float(v), 1) for v in np.percentile(gains, [2.5, 97.5])]


def compare(
    a: dict[str, np.ndarray], b: dict[str, np.ndarray]
) -> dict[str, dict[str, list[float]]]:
    """Domain (and ``"all"``) → metric → the paired bootstrap interval of ``b - a``."""
    out = {}
    for domain in (*DOMAINS, "all"):
        keep = np.ones(len(a["domain"]), bool) if domain == "all" else a["domain"] == domain
        if keep.any():
            out[domain] = {m: paired_bootstrap(a[m][keep], b[m][keep]) for m in METRICS}
    return out


def markdown(report: dict) -> str:
    """The report as markdown tables: each scorer's figures by domain, then the paired intervals of the gain."""
    lines = [
        f"split: {report['split']}",
        "",
        "| scorer | domain | n | hit@1 | hit@5 | exact | word-F1 |",
        "|---" * 7 + "|",
    ]
    for name, table in report["summary"].items():
        for domain, row in table.items():
            values = " | ".join(f"{row[m]:.1f}" for m in METRICS)
            lines.append(f"| {name} | {domain} | {row['n']} | {values} |")
    if "gain_95ci" in report:
        lines += ["", "95% paired bootstrap interval of the second scorer minus the first:", ""]
        lines += ["| domain | hit@1 | hit@5 | exact | word-F1 |", "|---" * 5 + "|"]
        for domain, row in report["gain_95ci"].items():
            lines.append(
                f"| {domain} | "
                + " | ".join(f"[{a:+.1f}, {b:+.1f}]" for a, b in (row[m] for m in METRICS))
                + " |"
            )
    return "\n".join(lines)


def as_scorer(name: str):
    """A scorer name, or ``reranked:FILE`` for the re-ranker ``slice_st/pretrained/rerank/FILE.json`` (a candidate)."""
    from slice_st.scoring import SpanScorer

    if name.startswith("reranked:"):
        return SpanScorer(name, rerank=name.split(":", 1)[1])
    return name


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=("tune", "report", "all"), default="tune")
    parser.add_argument(
        "--scorers",
        nargs="+",
        default=["phrase", "reranked"],
        help="one or two scorer names (or reranked:FILE)",
    )
    parser.add_argument(
        "--model", default=None, help="a model path (default: slice_st.load_model())"
    )
    parser.add_argument(
        "--save", type=Path, default=None, help="write the per-query results here (JSON)"
    )
    parser.add_argument(
        "--compare",
        nargs=4,
        metavar=("OLD.json", "SCORER", "NEW.json", "SCORER"),
        help="no model: compare two --save files' scorers (e.g. the same scorer before and after a change)",
    )
    args = parser.parse_args(argv)
    if args.compare:
        old_file, old_name, new_file, new_name = args.compare
        rows = [
            json.loads(Path(f).read_text(encoding="utf-8"))[n]
            for f, n in ((old_file, old_name), (new_file, new_name))
        ]
        tables = {
            f"{name} ({Path(f).stem})": metric_table(r)
            for (f, name), r in zip(((old_file, old_name), (new_file, new_name)), rows)
        }
        first, second = tables.values()
        report = {
            "split": "saved",
            "summary": {k: summary(t) for k, t in tables.items()},
            "gain_95ci": compare(first, second),
        }
        print(markdown(report))
        return
    if not 1 <= len(args.scorers) <= 2:
        parser.error("--scorers takes one or two names")
    import slice_st

    documents, queries = load()
    queries = [q for q in queries if args.split == "all" or q["split"] == args.split]
    model = slice_st.load_model() if args.model is None else slice_st.load_model(args.model)
    results = {
        name: score_queries(model, documents, queries, as_scorer(name)) for name in args.scorers
    }
    tables = {name: metric_table(rows) for name, rows in results.items()}
    report = {"split": args.split, "summary": {name: summary(t) for name, t in tables.items()}}
    if len(args.scorers) == 2:
        report["gain_95ci"] = compare(tables[args.scorers[0]], tables[args.scorers[1]])
    print(markdown(report))
    if args.save:
        args.save.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
