"""What searching an index shares, over the protocol of :mod:`slice_st.index.base`: option checks, the ranking loop
(scorer, per-document cap, overlap filter), the unit flags the scorer reads, the re-ranking of each document's spans,
the match type."""

from __future__ import annotations

import dataclasses
import functools
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slice_st._checks import check_top_k
from slice_st.config import SpanConfig
from slice_st.errors import SpanInputError
from slice_st.rerank import (
    Rerank,
    RerankRows,
    UnitWords,
    keep_governors,
    merge_key,
    rerank_context,
    unit_words,
)
from slice_st.scoring import (
    AFTER_DETERMINER,
    CLAUSE_AFTER,
    CLAUSE_BEFORE,
    SpanScorer,
    costs_of_spans,
    governed_starts,
    governor_units,
    mark_prefix,
    query_profiles,
    span_costs,
    unit_flags,
)
from slice_st.search import SpanPlace, merged_matches
from slice_st.spans import BestSpans, greedy_disjoint, grid_top_k
from slice_st.tokens import text_units

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from slice_st.index.base import SpanStore
    from slice_st.index.span_index import SpanIndex


@dataclass(frozen=True)
class IndexMatch:
    """One span found in the corpus: ``text[start:end] == span`` for the document ``doc_id``.

    Args:
        query_index: Position of the query.
        doc_id: Id of the document.
        text_index: Position of the document in the index (``doc_index`` before, deprecated).
        start: First character of the span in the document.
        end: Character after the span.
        span: ``text[start:end]``.
        score: The scorer's score (cosine minus costs): what ``threshold`` compares and what orders a list.
        unit_start: First unit of the span.
        unit_end: Unit after the span.
        calibrated: The cosine on the STS 0–5 scale (with :meth:`SpanIndex.set_calibration`).
        similarity: The span's cosine to the query (``cosine`` before, deprecated).
        places: With ``merge_identical=True``: every place of this span's text
            (:func:`~slice_st.search.identity_key`) among the results, this one first, best first; else empty.
        confidence: As :attr:`slice_st.search.SpanMatch.confidence`: the calibrated probability of a real match.
    """

    query_index: int
    doc_id: str
    text_index: int
    start: int
    end: int
    span: str
    score: float
    confidence: float | None = field(default=None, kw_only=True)  # beside the score in JSON
    unit_start: int
    unit_end: int
    calibrated: float | None = None
    similarity: float | None = None
    places: tuple[SpanPlace, ...] = field(default=(), kw_only=True)

    @property
    def count(self) -> int:
        """How many places hold this span (``len(places)``; 1 for a result that was not merged)."""
        return len(self.places) or 1

    @property
    def doc_index(self) -> int:
        """Deprecated alias of :attr:`text_index` (the name :class:`slice_st.search.SpanMatch` uses)."""
        warnings.warn(
            "IndexMatch.doc_index is deprecated: use text_index.", DeprecationWarning, stacklevel=2
        )
        return self.text_index

    @property
    def cosine(self) -> float | None:
        """Deprecated alias of :attr:`similarity` (the name :class:`slice_st.search.SpanMatch` uses)."""
        warnings.warn(
            "IndexMatch.cosine is deprecated: use similarity.", DeprecationWarning, stacklevel=2
        )
        return self.similarity


#: With costs or the overlap filter, the first scan asks for this many spans per result kept (nested spans crowd it).
SCORED_SCAN_FACTOR = 64


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


def check_search(
    built: SpanConfig, top_k: int, per_document, min_span, max_span, candidates
) -> SpanConfig:
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


def profiles_of(model: SentenceTransformer, unit: str, queries: Sequence[str]) -> np.ndarray:
    """``(Q, 5)`` :func:`slice_st.scoring.query_profiles` of the queries, their lengths in the index's ``unit``."""
    return query_profiles(
        queries, [len(starts) for starts, _, _ in text_units(model.tokenizer, list(queries), unit)]
    )


def span_costs_for(scorer: SpanScorer, profiles: np.ndarray | None, flag_table):
    """``costs(query_index, units, lengths)`` of spans of the unit run ``flag_table()`` describes; ``None``: none."""
    if scorer.is_plain:
        return None
    flags, marks = flag_table()
    return lambda query, units, lengths: costs_of_spans(
        scorer, flags, marks, profiles[query], units, lengths
    )


def index_unit_flags(texts: Sequence[str], arrays, chunk: int = 1 << 16) -> np.ndarray:
    """``(N,)`` :func:`slice_st.scoring.unit_flags` of an index's unit rows, over each document's units in order."""
    bounds = np.asarray(arrays["segment_units"], dtype=np.int64)
    if not len(bounds) or not bounds[-1]:
        return np.zeros(0, dtype=np.uint8)
    counts = np.diff(bounds)
    row_docs = np.repeat(np.asarray(arrays["segment_docs"], dtype=np.int64), counts)
    first_units = np.asarray(arrays["segment_first_unit"], dtype=np.int64) - bounds[:-1]
    row_units = np.repeat(first_units, counts) + np.arange(bounds[-1])
    # (document, unit) as one sortable key; a unit held twice is flagged once
    stride = int(row_units.max()) + 1
    keys, unique_rows, inverse = np.unique(
        row_docs * stride + row_units, return_index=True, return_inverse=True
    )
    unique_docs, unique_units = np.divmod(keys, stride)
    chars = np.asarray(arrays["unit_chars"])[unique_rows]
    flags = np.zeros(len(unique_rows), dtype=np.uint8)
    for lo in range(0, len(unique_rows), chunk):
        hi = min(lo + chunk, len(unique_rows))
        # the previous unit too: its word decides AFTER_DETERMINER of unit lo
        start = max(lo - 1, 0)
        spans = zip(unique_docs[start:hi].tolist(), *chars[start:hi].T.tolist())
        strings = [texts[doc][a:b] for doc, a, b in spans]
        flags[lo:hi] = unit_flags(strings, text_start=False, text_end=False)[lo - start :]
    # a document's first unit (or one after a gap) follows no unit of its own document
    same_doc = np.diff(unique_docs) == 0
    follows = np.append(False, same_doc & (np.diff(unique_units) == 1))
    flags[~follows] &= np.uint8(~AFTER_DETERMINER & 0xFF)
    # clauses start at a document's first unit and end at its last (not at a chunk's edges)
    flags[unique_units == 0] |= np.uint8(CLAUSE_BEFORE)
    flags[np.append(~same_doc, True)] |= np.uint8(CLAUSE_AFTER)
    return flags[inverse]


def cached_unit_flags(
    owner, key: np.ndarray, compute: Callable[[], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """``(flags, mark_prefix(flags))`` of ``owner``, kept while ``key`` (e.g. ``unit_chars``) is the same object."""
    cache = getattr(owner, "_unit_flag_cache", None)
    if cache is None or cache[0]() is not key:
        flags = compute()
        cache = owner._unit_flag_cache = (weakref.ref(key), (flags, mark_prefix(flags)))
    return cache[1]


def held_unit_flags(owner, key: np.ndarray) -> np.ndarray | None:
    """The flags :func:`cached_unit_flags` holds for ``owner`` while ``key`` is the same object, else ``None``."""
    cache = getattr(owner, "_unit_flag_cache", None)
    return cache[1][0] if cache is not None and cache[0]() is key else None


def ranked(
    scan,
    to_matches,
    vectors,
    top_k: int,
    threshold,
    per_document,
    limit=None,
    *,
    costs=None,
    locate=None,
    overlap=True,
) -> list[list[IndexMatch]]:
    """Matches per query from ``scan(vectors, k)`` (the ``k`` best spans by cosine), ranked by the score (cosine minus
    ``costs(query_index, units, lengths)``), capped per document and filtered for overlap, best first.

    ``locate(units, lengths)``: spans as ``(document, first unit, end unit)``; ``limit``: at least the spans held.
    Exact because no cost is negative (see :meth:`SpanIndex.search`); unsettled queries rescan 4x more.
    """
    if limit is not None:
        limit = max(1, limit)
        top_k = min(top_k, limit)
    # the cosine order: one scan (none per document), or today's 16x for the cap
    if costs is None and overlap:
        asked = top_k if per_document is None else 16 * top_k * per_document
    else:
        asked = SCORED_SCAN_FACTOR * top_k * (per_document or 1)

    def select(query: int, cosines, units, lengths, asked: int):
        """One query's matches, or ``None`` when the scan was too short."""
        cosines = np.asarray(cosines, dtype=np.float64)
        units, lengths = np.asarray(units), np.asarray(lengths)
        valid = np.isfinite(cosines) & (units >= 0)
        scanned = int(valid.sum())
        cosines, units, lengths = cosines[valid], units[valid], lengths[valid]
        # every span was ranked
        exhausted = scanned < asked or (limit is not None and asked >= limit)
        lowest = float(cosines.min()) if scanned else -np.inf
        scores = cosines if costs is None else cosines - costs(query, units, lengths)
        candidates = (
            np.arange(scanned) if threshold is None else np.flatnonzero(scores >= threshold)
        )
        order = candidates[np.argsort(-scores[candidates], kind="stable")]  # ties: the scan's order
        if per_document is None and overlap:
            chosen = order[:top_k]
        else:
            chosen = _greedy(
                order, *locate(units[order], lengths[order]), top_k, per_document, overlap
            )
        below = threshold is not None and lowest < threshold
        if exhausted or below or (len(chosen) >= top_k and scores[chosen[top_k - 1]] >= lowest):
            return to_matches(
                query, scores[chosen], units[chosen], lengths[chosen], None, cosines=cosines[chosen]
            )
        return None

    results: list[list[IndexMatch] | None] = [None] * len(vectors)
    pending = list(range(len(vectors)))
    while pending:
        if limit is not None:
            asked = min(asked, limit)
        batch = vectors if len(pending) == len(vectors) else vectors[pending]
        scores, units, lengths = scan(batch, asked)
        for row, query_index in enumerate(pending):
            results[query_index] = select(query_index, scores[row], units[row], lengths[row], asked)
        pending = [query_index for query_index in pending if results[query_index] is None]
        asked *= 4
    return results


def _greedy(
    order, docs, starts, ends, top_k: int, per_document: int | None, overlap: bool
) -> np.ndarray:
    """The first ``top_k`` of ``order`` kept by the per-document cap and the overlap filter (one step per keep)."""
    alive = np.ones(len(order), dtype=bool)
    by_doc = np.argsort(docs, kind="stable")  # positions grouped by document, ascending within each
    grouped = docs[by_doc]
    kept: list[int] = []
    used: dict[int, int] = {}
    position = 0
    while len(kept) < top_k and position < len(order):
        position += int(np.argmax(alive[position:]))
        if not alive[position]:
            break
        kept.append(position)
        doc = int(docs[position])
        later = by_doc[np.searchsorted(grouped, doc) : np.searchsorted(grouped, doc, side="right")]
        later = later[later > position]  # the document's spans ranked below this one
        used[doc] = used.get(doc, 0) + 1
        if per_document is not None and used[doc] >= per_document:
            alive[later] = False
        elif not overlap:
            overlapping = (starts[later] < ends[position]) & (ends[later] > starts[position])
            alive[later[overlapping]] = False
        position += 1
    return order[np.asarray(kept, dtype=np.int64)]


def with_confidence(
    results: list[list[IndexMatch]], queries: Sequence[str], calibrator, min_confidence
) -> list[list[IndexMatch]]:
    """Each match with its ``confidence`` (``calibrator``; ``None``: results unchanged), those below
    ``min_confidence`` left out."""
    if calibrator is None:
        return results
    out = []
    for query, matches in zip(queries, results):
        scores = [match.score for match in matches]
        similarities = [m.score if m.similarity is None else m.similarity for m in matches]
        values = calibrator([query] * len(matches), [m.span for m in matches], scores, similarities)
        kept = [
            dataclasses.replace(match, confidence=float(value))
            for match, value in zip(matches, values)
            if min_confidence is None or value >= min_confidence
        ]
        out.append(kept)
    return out


def search_merged(
    search, query_texts, vectors, profiles, top_k: int, limit: int
) -> list[list[IndexMatch]]:
    """:meth:`SpanIndex.search` with ``merge_identical=True``: ``search(query_texts, vectors, profiles, k)`` (the
    unmerged top ``k``) with identical spans merged, ``k`` from ``top_k`` 4x more while a query has fewer than
    ``top_k`` distinct spans and more could come (``limit``: at least the spans held)."""
    results: dict[int, list[IndexMatch]] = {}
    pending, asked = list(range(len(query_texts))), top_k
    while pending:
        rows = pending if len(pending) < len(query_texts) else slice(None)
        part = None if profiles is None else profiles[rows]
        found = search([query_texts[row] for row in pending], vectors[rows], part, asked)
        for query, matches in zip(pending, found):
            merged = merged_matches(matches, top_k)
            if len(merged) >= top_k or len(matches) < asked or asked >= limit:
                results[query] = [dataclasses.replace(match, query_index=query) for match in merged]
        pending = [query for query in pending if query not in results]
        asked = min(asked * 4, max(limit, top_k))
    return [results[query] for query in range(len(query_texts))]


def search_documents(
    index,
    queries,
    documents: int | None = 10,
    per_document: int | None = 1,
    top_k: int | None = None,
    **options,
) -> list[list[IndexMatch]]:
    """For each query, the spans of its ``documents`` best documents (``per_document`` each), at most ``top_k`` in
    all: what ``slice-st mine --index`` shows (``options``: those of :meth:`SpanIndex.search`; ``documents=None``:
    ``index.search(top_k=...)``). Asks for ``documents × per_document`` spans, 4x more while a best document could
    have more to show."""
    queries = list(queries)
    cap = max(len(index), 1) * (per_document or 1)
    if documents is None:
        return index.search(queries, top_k=top_k or cap, per_document=per_document, **options)
    first = min(documents * (per_document or 1), cap)
    results = []
    for query, matches in zip(
        queries, index.search(queries, top_k=first, per_document=per_document, **options)
    ):
        asked = first
        while True:
            best = set(list(dict.fromkeys(match.doc_id for match in matches))[:documents])
            kept = [match for match in matches if match.doc_id in best]
            complete = (
                per_document is not None
                and len(kept) >= len(best) * per_document
                and len(best) == documents
            )
            if complete or len(matches) < asked or asked >= cap:
                break
            asked = min(asked * 4, cap)
            matches = index.search([query], top_k=asked, per_document=per_document, **options)[0]
        results.append(kept[:top_k])
    return results


def rerank_matches(
    index: SpanStore,
    results,
    queries,
    vectors,
    profiles,
    scorer,
    wanted: SpanConfig,
    overlap: bool,
    threshold,
):
    """``results`` with each document's ``n`` places filled by its ``best_spans(top_k=n)`` (a ``scorer`` without
    ``rerank``: unchanged), those below ``threshold`` dropped, sorted by score (ties: the documents' order)."""
    rerank = rerank_context(scorer, queries)
    if rerank is None:
        if scorer.is_plain or wanted.unit != "word":
            return results
        return _governed(index, results, vectors, wanted, overlap, threshold)
    counts = Counter(
        (query, match.text_index) for query, matches in enumerate(results) for match in matches
    )
    picks = _document_picks(index, counts, rerank, scorer, vectors, profiles, wanted, overlap)
    out = []
    for query, matches in enumerate(results):
        # in the order of their best spans
        documents = {match.text_index: match for match in matches}
        kept = [
            _as_match(index, match, pick)
            for doc, match in documents.items()
            for pick in picks[query, doc]
        ]
        kept = [match for match in kept if threshold is None or match.score >= threshold]
        # stable: ties keep the documents' order
        out.append(sorted(kept, key=lambda match: -match.score))
    return out


#: The columns of a document's picks (:func:`_document_picks`), as the ``IndexMatch`` fields they fill.
_PICK_FIELDS = ("score", "similarity", "unit_start", "unit_end", "start", "end")


def _governed(index: SpanStore, results, vectors, config: SpanConfig, overlap: bool, threshold):
    """``results`` of a scorer with costs that does not re-rank, each span moved left to keep the negation or
    condition that governs it in its clause as :func:`slice_st.best_spans` moves it (:func:`keep_governors`: the
    moved span's cosine, the score capped at it; without ``overlap``, a span that would then overlap a better one of
    its query and document stays), those below ``threshold`` dropped, sorted by score."""
    segments = _documents_segments(
        index, {match.text_index for matches in results for match in matches}, config
    )
    queries = torch.nn.functional.normalize(vectors.float(), dim=-1).double().numpy()
    out = []
    for query, matches in enumerate(results):
        placed: dict[int, list[tuple[int, int]]] = {}
        moved = []
        for match in matches:
            better = placed.setdefault(match.text_index, [])
            pick = _governed_pick(segments[match.text_index], match, queries[query], config)
            if pick is not None and (overlap or not _overlaps(pick[2], match.unit_end, better)):
                match = _as_match(index, match, pick)
            better.append((match.unit_start, match.unit_end))
            moved.append(match)
        kept = [match for match in moved if threshold is None or match.score >= threshold]
        out.append(sorted(kept, key=lambda match: -match.score))  # stable: ties keep their order
    return out


def _governed_pick(segments: list[_Segment], match: IndexMatch, query: np.ndarray, config):
    """The pick (:data:`_PICK_FIELDS`) of ``match`` moved left to keep its governor, ``None``: it stays."""
    inside = [
        segment
        for segment in segments
        if segment.first_unit <= match.unit_start
        and match.unit_end <= segment.first_unit + len(segment.vectors)
    ]
    if not inside:
        return None
    segment = inside[0]  # the first: the most context on the left
    start, end = match.unit_start - segment.first_unit, match.unit_end - segment.first_unit
    codes, flags = segment.governors[None], segment.flags[None]
    first = int(governed_starts(codes, flags, [[start]], [[end]], config.max_span)[0, 0])
    if first == start:
        return None
    total = segment.vectors[first:end].astype(np.float64).sum(axis=0)
    cosine = float(query @ total / max(float(np.linalg.norm(total)), 1e-12))
    unit_start, char_start = first + segment.first_unit, int(segment.chars[first, 0])
    return min(match.score, cosine), cosine, unit_start, match.unit_end, char_start, match.end


def _overlaps(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    return any(start < other_end and end > other_start for other_start, other_end in spans)


def _as_match(index: SpanStore, match: IndexMatch, pick) -> IndexMatch:
    fields = dict(zip(_PICK_FIELDS, pick, strict=True))
    store, doc = document_store(index, match.text_index)
    calibration = index.calibration
    calibrated = None if calibration is None else round(calibration.degree(fields["similarity"]), 4)
    span = store.texts[doc][fields["start"] : fields["end"]]
    return dataclasses.replace(match, span=span, calibrated=calibrated, **fields)


def document_store(index: SpanStore, doc_index: int) -> tuple[Any, int]:
    """``(SpanIndex holding the document, its position there)``: the index itself, or one shard of a sharded index."""
    shard_of = getattr(index, "shard_of", None)
    return (index, doc_index) if shard_of is None else shard_of(doc_index)


@dataclass
class _Segment:
    """One stored window of a document (``words`` ``(1, n)``; ``flags`` as ``best_spans`` reads a window's)."""

    vectors: np.ndarray
    norms: np.ndarray
    chars: np.ndarray
    first_unit: int
    words: UnitWords
    flags: np.ndarray
    governors: np.ndarray  # (n,) uint8: governor_units of the window's units


def _segments(store: SpanIndex, docs: list[int], config: SpanConfig) -> dict[int, list[_Segment]]:
    """The stored segments of documents ``docs`` of a :class:`SpanIndex`, in order, with ``config``'s span norms."""
    arrays = store.arrays
    lengths = np.arange(config.min_span, config.max_span + 1) - store.span_config.min_span
    bounds, segment_docs = np.asarray(arrays["segment_units"]), np.asarray(arrays["segment_docs"])
    flags = store.unit_flags()[0]
    out: dict[int, list[_Segment]] = {doc: [] for doc in docs}
    for segment in np.flatnonzero(np.isin(segment_docs, docs)).tolist():
        doc, lo, hi = int(segment_docs[segment]), int(bounds[segment]), int(bounds[segment + 1])
        if hi <= lo:
            continue
        text, chars = store.texts[doc], np.asarray(arrays["unit_chars"][lo:hi], dtype=np.int64)
        # the flags as best_spans reads this window's: no unit precedes the first, the edges' clause bits are a window's
        window = flags[lo:hi].astype(np.int64)
        text_start, text_end = not text[: chars[0, 0]].strip(), not text[chars[-1, 1] :].strip()
        edges = unit_flags(
            [text[slice(*chars[0])], text[slice(*chars[-1])]], text_start, text_end
        ).tolist()
        window[0] = (window[0] & ~(AFTER_DETERMINER | CLAUSE_BEFORE)) | (edges[0] & CLAUSE_BEFORE)
        window[-1] = (window[-1] & ~CLAUSE_AFTER) | (edges[1] & CLAUSE_AFTER)
        vectors = np.asarray(arrays["unit_vectors"][lo:hi], dtype=np.float32)
        norms = np.asarray(arrays["span_norms"][lo:hi], dtype=np.float32)[:, lengths]
        first = int(arrays["segment_first_unit"][segment])
        # only the segments re-ranked: their words, never a table of the whole index's
        strings = [text[a:b] for a, b in chars.tolist()]
        row_words, governors = unit_words([strings]), governor_units(strings)
        out[doc].append(_Segment(vectors, norms, chars, first, row_words, window, governors))
    return out


def _documents_segments(
    index: SpanStore, doc_indexes, config: SpanConfig
) -> dict[int, list[_Segment]]:
    """The :func:`_segments` of documents ``doc_indexes`` (numbered as in ``index``), read store by store (an index,
    or each shard of a sharded one)."""
    by_store: dict[int, tuple] = {}
    for doc_index in doc_indexes:
        store, doc = document_store(index, doc_index)
        by_store.setdefault(id(store), (store, {}))[1][doc] = doc_index
    segments: dict[int, list[_Segment]] = {}
    for store, docs in by_store.values():
        segments |= {
            docs[doc]: found for doc, found in _segments(store, list(docs), config).items()
        }
    return segments


#: Segments re-ranked in one batch.
RERANK_ROWS = 256

#: Spans whose norm is summed from their unit vectors at a time (another segment holds their stored norm).
MISSING_NORMS = 1024


def _document_picks(
    index: SpanStore,
    counts: Counter,
    rerank: Rerank,
    scorer,
    vectors,
    profiles,
    config,
    overlap: bool,
):
    """``(query, document) → (n, 6)`` its ``n`` (``counts``) picked spans, best first: score, cosine, first and end
    unit in the document, first and end character (:data:`_PICK_FIELDS`)."""
    segments = _documents_segments(index, {doc_index for _, doc_index in counts}, config)
    rows = [(cell, segment) for cell in counts for segment in segments[cell[1]]]
    parts: dict[tuple[int, int], list[np.ndarray]] = {cell: [] for cell in counts}
    # a row's first n picks are its picks for top_k=n (Rerank.best)
    top_k = max(counts.values(), default=1)
    for lo in range(0, len(rows), RERANK_ROWS):
        batch = rows[lo : lo + RERANK_ROWS]
        pieces, query_of = [segment for _, segment in batch], [cell[0] for cell, _ in batch]
        found = _rerank_rows(
            pieces, query_of, top_k, rerank, scorer, vectors, profiles, config, overlap
        )
        for (cell, _), picked in zip(batch, found):
            parts[cell].append(picked[: counts[cell]])
    in_order = rerank.reranker.reranks(profiles[:, 0])  # else the scorer's order: a short query
    return {
        cell: _merge_segments(found, counts[cell], overlap, in_order[cell[0]])
        for cell, found in parts.items()
    }


def _rerank_rows(
    segments, query_of, top_k, rerank: Rerank, scorer, vectors, profiles, config, overlap: bool
):
    """Each segment's ``top_k`` spans for its query, picked as :func:`slice_st.best_spans` picks a window's, from the
    stored unit sums and span norms (units as the rows' tokens)."""
    embeddings, norms, flags, words = _padded(segments)
    batch, width = len(segments), embeddings.shape[1]
    lengths = range(config.min_span, config.max_span + 1)
    queries = torch.nn.functional.normalize(vectors[torch.tensor(query_of)].float(), dim=-1)
    queries = queries[:, None, :]
    row_profiles = torch.from_numpy(profiles[query_of])[:, None, :]
    costs = span_costs(scorer, flags, row_profiles, config.min_span, config.max_span)
    dots = torch.nn.functional.pad(
        torch.einsum("bud,bqd->bu", embeddings, queries).double().cumsum(1), (1, 0)
    )
    cosines, scores = _score_grids(dots, norms, costs, config.min_span)
    fused = functools.partial(_grid_top_k, scores, cosines, config.min_span)
    boundaries = torch.arange(width + 1).expand(batch, -1)
    num_units = torch.tensor([len(segment.vectors) for segment in segments])
    grid = cosines.flatten(1)  # (B, U * L): by start, then length

    def span_cosines(starts, ends):
        """Of ``(B, 1, k)`` spans of the searched lengths: their cosines in the grid, or summed."""
        starts, ends = starts[:, 0], ends[:, 0]
        column = (ends - starts - config.min_span).clamp(0, len(lengths) - 1)
        found = grid.gather(1, starts.clamp(0, width - 1) * len(lengths) + column)
        # another segment holds the span's norm: summed, in chunks (memory bounded by the chunk)
        rows, at = torch.nonzero(~torch.isfinite(found), as_tuple=True)
        for lo in range(0, len(rows), MISSING_NORMS):
            row, place = rows[lo : lo + MISSING_NORMS], at[lo : lo + MISSING_NORMS]
            first, end = starts[row, place], ends[row, place]
            units = first[:, None] + torch.arange(max(int((end - first).max()), 1))  # (m, longest)
            inside = units < end[:, None]
            sums = (
                embeddings[row[:, None], units.clamp(max=width - 1)].double() * inside[..., None]
            ).sum(1)
            found[row, place] = (
                (dots[row, end] - dots[row, first]) / sums.norm(dim=-1).clamp(min=1e-12)
            ).float()
        return found[:, None]

    rows = RerankRows(boundaries, num_units, words, flags, span_cosines)
    pairs = np.asarray(query_of)[:, None]  # each row's query
    found = rerank.best(fused, top_k, overlap, rows, queries, costs, row_profiles, pairs, config)
    if config.unit == "word":  # as best_spans: the negation or condition of a span's clause kept
        governors = np.zeros((batch, width), dtype=np.uint8)
        for row, segment in enumerate(segments):
            governors[row, : len(segment.governors)] = segment.governors
        found = keep_governors(found, governors, flags, span_cosines, config, overlap)
    scores, cosines = found.scores[:, 0].double().numpy(), found.similarities[:, 0].double().numpy()
    starts, ends = found.starts[:, 0].numpy(), found.ends[:, 0].numpy()
    out = []
    for row, segment in enumerate(segments):
        ok = np.isfinite(scores[row])
        first, end = starts[row, ok], ends[row, ok]
        chars = segment.chars[first, 0], segment.chars[end - 1, 1]
        units = first + segment.first_unit, end + segment.first_unit
        out.append(np.stack([scores[row, ok], cosines[row, ok], *units, *chars], axis=1))
    return out


def _score_grids(dots, norms, costs, min_span: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The cosines and scores ``(B, U, L)`` of every span (start, length) of rows of one query each, from the prefix
    sums of ``dots`` ``(B, U + 1)`` and the stored span ``norms`` ``(B, U, L)``; ``-inf`` past a row or norm."""
    width = norms.shape[1]
    starts = torch.arange(width)[:, None].expand(-1, norms.shape[2])
    ends = starts + torch.arange(min_span, min_span + norms.shape[2])  # (U, L)
    inside, ends = ends <= width, ends.clamp(max=width)
    cosines = ((dots[:, ends] - dots[:, starts]).float() / norms).nan_to_num(nan=-np.inf)
    cosines = cosines.masked_fill(~inside, -np.inf)
    scores = cosines - costs.of_spans(starts[None], ends[None], min_span)
    return cosines, scores.masked_fill(~inside, -np.inf)


def _padded(segments: list[_Segment]):
    """The segments' unit vectors, span norms (``nan`` past a row), flags and :class:`UnitWords`, padded."""

    def padded(rows: list[np.ndarray], fill) -> torch.Tensor:
        return torch.nn.utils.rnn.pad_sequence(
            [torch.from_numpy(row) for row in rows], True, padding_value=fill
        )

    embeddings = padded([segment.vectors for segment in segments], 0.0)
    norms = padded([segment.norms for segment in segments], float("nan"))
    flags = padded([segment.flags for segment in segments], 0)
    fills = {"ids": -1, "determiner": False, "capital": False}  # past a row: no word
    words = {
        name: padded([vars(segment.words)[name][0] for segment in segments], fill).numpy()
        for name, fill in fills.items()
    }
    return embeddings, norms, flags, UnitWords(**words)


def _grid_top_k(scores, cosines, min_span: int, top_k: int, overlap: bool = True) -> BestSpans:
    """:func:`slice_st.spans.grid_top_k` of ``(B, U, L)`` grids of one query each, as ``(B, 1, k)`` spans."""
    # (B, k, 1) each
    found = grid_top_k(scores[..., None], cosines[..., None], top_k, min_span, overlap)
    best, plain, starts, ends = (values.mT for values in found)
    return BestSpans(best, starts, ends, plain)


def _merge_segments(
    parts: list[np.ndarray], top_k: int, overlap: bool, in_pick_order: bool
) -> list[tuple]:
    """A document's picks from its segments' picks, merged in order as :func:`slice_st.best_spans` merges a text's
    windows (:func:`~slice_st.rerank.merge_key`), ``top_k`` kept, without ``overlap`` none over a better one."""
    # column 6: place among its picks
    ranked = [np.column_stack([part, np.arange(len(part))]) for part in parts]
    current = ranked[0] if ranked else np.zeros((0, 7))
    for new in ranked[1:]:
        merged = np.concatenate([current, new])
        key = merge_key(merged[:, 0], merged[:, 6], in_pick_order)
        if not len(current):
            keep = np.arange(len(new))
        elif overlap or top_k == 1:
            keep = np.argsort(-key, kind="stable")[:top_k]
        else:
            columns = (torch.from_numpy(column) for column in (key, merged[:, 2], merged[:, 3]))
            keep = greedy_disjoint(*columns, top_k).numpy()
        current = merged[keep[keep >= 0]]
    return [
        (*current[row, :2].tolist(), *current[row, 2:6].astype(int).tolist())
        for row in range(len(current))
    ]
