"""What searching an index shares: option checks, the per-document ranking loop, scan threads, the match type."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from slice_st.config import SpanConfig
from slice_st.encode import SpanInputError, as_text_list, check_threshold, check_top_k

__all__ = ["IndexMatch", "blas_threads", "as_tensor", "check_search", "query_list", "ranked"]


@dataclass(frozen=True)
class IndexMatch:
    """One span found in the corpus: ``text[start:end] == span`` for the document ``doc_id``.

    Args:
        query_index: Position of the query.
        doc_id: Id of the document.
        doc_index: Position of the document in the index.
        start: First character of the span in the document.
        end: Character after the span.
        span: ``text[start:end]``.
        score: Cosine of the span with the query.
        unit_start: First unit of the span.
        unit_end: Unit after the span.
        calibrated: The score on the STS 0–5 scale, with a calibration.
    """

    query_index: int
    doc_id: str
    doc_index: int
    start: int
    end: int
    span: str
    score: float
    unit_start: int
    unit_end: int
    #: The cosine on the STS 0–5 scale when the index has a calibration (:meth:`SpanIndex.set_calibration`).
    calibrated: float | None = None


def as_tensor(values: np.ndarray) -> torch.Tensor:
    """A tensor view of a (possibly read-only, memory-mapped) array: no copy; the scan never writes to it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        return torch.from_numpy(np.asarray(values))


@contextmanager
def blas_threads(count: int):
    """Limit BLAS threads inside the block (threadpoolctl, a scikit-learn dependency); no-op without it."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(limits=count, user_api="blas"):
        yield


def check_search(built: SpanConfig, top_k: int, per_document: int | None, min_span: int | None, max_span: int | None,
                  candidates: int | None) -> SpanConfig:
    """Validate search options against the span range an index was built with; returns the range searched."""
    check_top_k(top_k)
    check_top_k(per_document, "per_document", optional=True)
    check_top_k(candidates, "candidates", optional=True)
    try:
        wanted = built.replace(min_span=min_span, max_span=max_span)
    except ValueError as error:
        raise SpanInputError(str(error)) from None
    if wanted.min_span < built.min_span or wanted.max_span > built.max_span:
        raise SpanInputError(
            f"This index holds spans of {built.min_span}..{built.max_span} {built.unit}s; "
            f"cannot search {wanted.min_span}..{wanted.max_span}."
        )
    return wanted


def query_list(queries: str | Sequence[str]) -> list[str]:
    query_list, _ = as_text_list(queries, "queries")
    if not query_list:
        raise SpanInputError("queries is empty: give at least one query.")
    return query_list


def ranked(scan, to_matches, vectors: torch.Tensor, top_k: int, threshold: float | None, per_document: int | None,
           limit: int | None = None) -> list[list[IndexMatch]]:
    """Matches per query from ``scan(vectors, k)``; with ``per_document``, asks for more spans until ``top_k`` survive the cut.

    ``limit``: at least as many spans as the index holds; ``k`` never exceeds it (a huge ``top_k`` costs nothing).
    """
    threshold = check_threshold(threshold)
    limit = max(1, limit) if limit is not None else None
    if limit is not None:
        top_k = min(top_k, limit)
    if per_document is None:
        scores, units, lengths = scan(vectors, top_k)
        return [to_matches(q, scores[q], units[q], lengths[q], threshold) for q in range(len(vectors))]
    results = []
    for q in range(len(vectors)):
        asked = 16 * top_k * per_document  # overlapping spans of one document crowd the top
        if limit is not None:
            asked = min(asked, limit)
        while True:
            scores, units, lengths = (values[0] for values in scan(vectors[q : q + 1], asked))
            matches = to_matches(q, scores, units, lengths, threshold)
            kept, per_doc = [], {}
            for match in matches:
                if per_doc.get(match.doc_index, 0) < per_document:
                    per_doc[match.doc_index] = per_doc.get(match.doc_index, 0) + 1
                    kept.append(match)
            exhausted = len(matches) < asked or (limit is not None and asked >= limit)  # every span was ranked
            if len(kept) >= top_k or exhausted:
                break
            asked = asked * 4 if limit is None else min(asked * 4, limit)
        results.append(kept[:top_k])
    return results
