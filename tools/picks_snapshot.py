"""Picks and scores of the tree this runs in, on fixed cases, to compare two trees after a change meant to keep them.

    python tools/picks_snapshot.py --out old.json [--sts ../shared/data/stsb_context/stsb-context-dev.tsv]
    python tools/picks_snapshot.py --out new.json [--sts ...]     # in the other tree
    python tools/picks_snapshot.py --compare old.json new.json    # spans equal, scores within --tolerance

The cases: ``best_spans`` of the shipped model over the real-text dev set's paragraphs (every query against its
paragraph, top 3, the default and ``"phrase"`` scorers, with confidence) and, with ``--sts``, over STS-B-Context's
passages; ``SpanIndex.search`` over all the real-text paragraphs, exact and compressed, both scorers.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REALTEXT = ROOT / "research" / "realtext"


def _rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _spans(result) -> list[list[list]]:
    return [
        [[m.span, m.start, m.end, m.score, m.similarity, m.confidence] for m in row]
        for query in result
        for row in query
    ]


def _paired(model, queries: list[str], texts: list[str], scorer: str | None) -> list:
    from slice_st import best_spans

    return [
        _spans(best_spans(model, [query], [text], top_k=3, scorer=scorer, max_span=20))
        for query, text in zip(queries, texts)
    ]


def _index_picks(model, documents: list[dict], queries: list[str]) -> dict:
    from slice_st import SpanIndex

    index = SpanIndex.build(
        [d["text"] for d in documents], model, [d["id"] for d in documents], max_span=20
    )
    picks = {}
    for name in ("exact", "pq48"):
        if name != "exact":
            index.compress(name)
        for scorer in (None, "phrase"):
            found = index.search(queries, top_k=5, scorer=scorer)
            picks[f"{name}/{scorer}"] = [
                [[m.doc_id, m.span, m.start, m.end, m.score, m.similarity] for m in row]
                for row in found
            ]
    return picks


def snapshot(sts: str | None) -> dict:
    from slice_st import load_model

    model = load_model()
    documents = {d["id"]: d for d in _rows(REALTEXT / "documents.jsonl")}
    queries = _rows(REALTEXT / "queries.jsonl")
    texts = [documents[q["paragraph"]]["text"] for q in queries]
    words = [q["query"] for q in queries]
    out = {f"realtext/{s}": _paired(model, words, texts, s) for s in (None, "phrase")}
    out["index"] = _index_picks(model, list(documents.values()), words)
    if sts:
        with open(sts, encoding="cp1252", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        lines, passages = [r["line"] for r in rows], [r["passage"] for r in rows]
        out.update({f"sts/{s}": _paired(model, lines, passages, s) for s in (None, "phrase")})
    return out


def compare(old: object, new: object, tolerance: float, where: str = "") -> list[str]:
    """Where ``new`` differs from ``old``: other strings, ints or lengths, or floats apart by more than
    ``tolerance``."""
    if isinstance(old, float) and isinstance(new, float):
        return [] if abs(old - new) <= tolerance else [f"{where}: {old!r} -> {new!r}"]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d
            for i, (a, b) in enumerate(zip(old, new))
            for d in compare(a, b, tolerance, f"{where}[{i}]")
        ]
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        return [d for k in old for d in compare(old[k], new[k], tolerance, f"{where}/{k}")]
    return [] if old == new else [f"{where}: {old!r} -> {new!r}"]


def _count(value: object) -> int:
    if isinstance(value, list) and value and isinstance(value[0], (str, int)):
        return 1
    if isinstance(value, dict):
        return sum(_count(v) for v in value.values())
    return sum(_count(v) for v in value) if isinstance(value, list) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write this tree's snapshot here")
    parser.add_argument("--sts", help="STS-B-Context TSV (also its passages)")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    parser.add_argument("--tolerance", type=float, default=1e-6)
    args = parser.parse_args()
    if args.compare:
        try:
            old, new = (json.loads(Path(p).read_text()) for p in args.compare)
        except (OSError, ValueError) as error:
            parser.error(f"cannot read a snapshot: {error}")
        differences = compare(old, new, args.tolerance)
        print(
            f"{_count(old)} matches compared, {len(differences)} differ (tolerance {args.tolerance:g})"
        )
        print("\n".join(differences[:20]))
        return 1 if differences else 0
    if not args.out:
        parser.error("--out or --compare")
    Path(args.out).write_text(json.dumps(snapshot(args.sts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
