"""The search driver: :func:`best_spans` (every query against every text) and :func:`best_spans_paired` (query ``i``
against text ``i``), from :mod:`slice_st.encode`'s windows through the fused scorer (and the re-ranker) to the result
types :class:`SpanMatch` and :class:`SpanSearchResult`. Options as in :mod:`slice_st.encode`."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from slice_st._checks import (
    as_text_list,
    check_merge_identical,
    check_min_confidence,
    check_overlap,
    check_threshold,
    check_top_k,
    query_list,
)
from slice_st.confidence import Calibrator, calibrator_for
from slice_st.encode import (
    WindowRows,
    check_truncate_dim,
    embed_texts,
    encode_span_queries,
    encode_spans,
    encode_windows,
    resolve_prompt,
    resolve_span_config,
    span_similarity,
)
from slice_st.errors import SpanInputError
from slice_st.rerank import RerankRows, keep_governors, merge_key, rerank_context, unit_words
from slice_st.scoring import (
    SpanScorer,
    governor_units,
    query_profiles,
    resolve_scorer,
    scorer_for_model,
    span_costs,
    unit_flags,
)
from slice_st.spans import (
    BestSpans,
    best_span_scores,
    greedy_disjoint,
    span_cosine_grid,
    span_cosines,
)
from slice_st.tokens import WINDOW_CONTEXT, text_units

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["SpanMatch", "SpanPlace", "SpanSearchResult", "best_spans", "best_spans_paired"]


def search_scorer(scorer: str | SpanScorer | None, model: Any = None) -> SpanScorer:
    """The scorer of a search, resolved once (with the re-ranker of ``model`` where it is a shipped model that has
    its own); a bad one is a :class:`SpanInputError`."""
    shipped_name = getattr(getattr(model, "model_card_data", None), "shipped_name", None)
    try:
        return scorer_for_model(resolve_scorer(scorer), shipped_name)
    except ValueError as error:
        raise SpanInputError(str(error)) from None


def search_calibrator(
    model: Any, scorer: SpanScorer, min_confidence: Any = None
) -> tuple[Calibrator | None, float | None]:
    """The calibrator giving a search's matches their confidence (``None`` unless ``scorer`` is the model's default
    one and the model is a shipped one that has a calibrator), and ``min_confidence`` checked: a number from 0 to 1
    (``"default"``: the calibrator's documented cut), refused where there is no confidence."""
    min_confidence = check_min_confidence(min_confidence)
    # A confidence holds for the scorer it was fitted with: the model's default one, unchanged.
    default = scorer == search_scorer(None, model)
    calibrator = calibrator_for(model, scorer.rerank) if default else None
    return calibrator, _cut(calibrator, min_confidence)


def _cut(calibrator: Calibrator | None, min_confidence: float | str | None) -> float | None:
    """A checked ``min_confidence`` as a number (``"default"``: the calibrator's), refused without a calibrator."""
    if min_confidence is not None and calibrator is None:
        raise SpanInputError(
            "min_confidence needs a calibrated confidence, which only a shipped model (slice-minilm, slice-mpnet) "
            "with its default scorer ('reranked') has; use threshold= on the score instead."
        )
    if min_confidence == "default":
        assert calibrator is not None
        return calibrator.default_min_confidence
    return None if min_confidence is None else float(min_confidence)


@dataclass(frozen=True)
class SpanMatch:
    """One matched span: ``text[start:end] == span``.

    Args:
        query_index: Position of the query.
        text_index: Position of the text.
        start: First character of the span in the text.
        end: Character after the span.
        span: ``text[start:end]``.
        score: The span scorer's score: what ranks the span and what thresholds compare; never above ``similarity``.
        unit_start: First unit (word or token) of the span.
        unit_end: Unit after the span.
        similarity: The span's plain similarity to the query (the model's ``similarity_fn_name``).
        places: With ``merge_identical=True``: every place of this span's text (:func:`identity_key`) among the
            results, this one first, best first; else empty.
        confidence: The probability that the span is a real match for the query (:mod:`slice_st.confidence`), for a
            shipped model with its default scorer; else ``None``.
    """

    query_index: int
    text_index: int
    start: int
    end: int
    span: str
    score: float
    unit_start: int
    unit_end: int
    similarity: float | None = None
    places: tuple[SpanPlace, ...] = field(default=(), kw_only=True)
    confidence: float | None = field(default=None, kw_only=True)

    @property
    def count(self) -> int:
        """How many places hold this span (``len(places)``; 1 for a result that was not merged)."""
        return len(self.places) or 1


@dataclass(frozen=True)
class SpanPlace:
    """One place of a merged result: ``text[start:end]`` of text (document) ``text_index`` holds the span's text.

    Args:
        text_index: Position of the text (of the document in an index).
        start: First character of the span there.
        end: Character after it.
        score: The span's score at this place (its context can move it a little).
        doc_id: The document's id (a search of an index), else ``None``.
    """

    text_index: int
    start: int
    end: int
    score: float
    doc_id: str | None = None


#: A span's edges: characters that are neither letters nor digits (a word unit carries its punctuation).
_EDGES = re.compile(r"^[\W_]+|[\W_]+$")


def identity_key(span: str) -> str:
    """What makes spans identical for ``merge_identical``: the text with each run of whitespace as one space,
    case-folded, without punctuation at its edges (kept when the span is nothing else).

    A span's edges are unit edges, and a word unit carries the punctuation that follows it: the same clause ends in
    ``.`` at a sentence's end and in ``,`` inside one. Punctuation inside a span counts.

    >>> identity_key("  The  Software is provided,") == identity_key("the software is PROVIDED.")
    True
    """
    folded = " ".join(span.split()).casefold()
    return _EDGES.sub("", folded) or folded


def merged_matches(matches: Iterable, top_k: int | None = None) -> list:
    """``matches`` (best first) with identical spans (:func:`identity_key`) merged into the first, its ``places``
    listing every one; the first ``top_k`` merged results (``None``: all), the copies ranked below the last one left
    out. Works on :class:`SpanMatch` and :class:`~slice_st.index.search.IndexMatch`."""
    groups: dict[str, list] = {}
    for match in matches:
        key = identity_key(match.span)
        if key not in groups and top_k is not None and len(groups) >= top_k:
            break
        groups.setdefault(key, []).append(match)
    return [
        dataclasses.replace(found[0], places=tuple(map(_place, found))) for found in groups.values()
    ]


def _place(match) -> SpanPlace:
    fields = dict(text_index=match.text_index, start=match.start, end=match.end, score=match.score)
    return SpanPlace(**fields, doc_id=getattr(match, "doc_id", None))


#: The (Q, T, k) arrays of a :class:`SpanSearchResult`.
_ARRAYS = ("scores", "similarities", "starts", "ends", "unit_starts", "unit_ends")


@dataclass(eq=False, repr=False)
class SpanSearchResult(Sequence):
    """Best spans for every (query, text) pair; ``result[q][t]`` is a list of :class:`SpanMatch`, best first.

    Args:
        queries: The queries.
        texts: The texts searched.
        scores: ``(Q, T, k)`` span scorer's scores, ``-inf`` where a text has fewer spans (``k = top_k`` or less).
        starts: ``(Q, T, k)`` first characters (-1: missing).
        ends: ``(Q, T, k)`` end characters.
        unit_starts: ``(Q, T, k)`` first units.
        unit_ends: ``(Q, T, k)`` end units.
        similarity_fn_name: What the similarities are (``"cosine"``, ``"dot"``, ``"euclidean"``, ``"manhattan"``).
        similarities: ``(Q, T, k)`` plain similarities of the same spans.
        scorer: The name of the span scorer behind ``scores``.
        skipped: ``(text index, reason)`` of texts left out by ``on_error="skip"`` (they have no spans).
        calibrator: What gives each match its ``confidence`` (:func:`slice_st.confidence.calibrator_for`), or
            ``None``.
    """

    queries: list[str]
    texts: list[str]
    scores: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    unit_starts: np.ndarray
    unit_ends: np.ndarray
    similarity_fn_name: str
    similarities: np.ndarray
    scorer: str
    skipped: list[tuple[int, str]]
    calibrator: Calibrator | None = field(default=None, kw_only=True)

    def __len__(self) -> int:
        return len(self.queries)

    def __getitem__(self, query_index):  # noqa: D105
        if isinstance(query_index, slice):
            return [self[q] for q in range(len(self))[query_index]]
        # IndexError past the end ends iteration
        query_index = range(len(self.queries))[query_index]
        return [self.matches(query_index, text_index) for text_index in range(len(self.texts))]

    def matches(self, query_index: int, text_index: int) -> list[SpanMatch]:
        """The top spans of one text for one query, best first (empty for a text without spans)."""
        query_index = range(len(self.queries))[query_index]
        scores = self.scores[query_index, text_index]
        return [
            self._match(query_index, text_index, rank)
            for rank in range(len(scores))
            if np.isfinite(scores[rank])
        ]

    def best(self, query_index: int) -> np.ndarray:
        """``(T,)`` best score of each text for one query (``-inf`` for texts without spans)."""
        return self.scores[query_index, :, 0] if self.scores.shape[1] else np.zeros(0, np.float32)

    def ranked(
        self,
        query_index: int,
        top_k: int | None = None,
        threshold: float | None = None,
        *,
        merge_identical: bool = False,
        min_confidence: float | str | None = None,
    ) -> list[SpanMatch]:
        """The texts' best spans for one query, sorted by score, cut by ``threshold`` and ``top_k`` (``None``: all).

        ``merge_identical=True``: texts whose best spans are identical (:func:`identity_key`) give one result, the
        best, whose ``places`` lists them all; ``top_k`` counts distinct spans, in the same order as without merging.
        ``min_confidence``: only matches whose ``confidence`` is at least this (a shipped model with its default
        scorer; else a :class:`SpanInputError`).
        """
        top_k, threshold = check_top_k(top_k, optional=True), check_threshold(threshold)
        min_confidence = self._check_confidence(min_confidence)
        best = self.best(query_index)
        order = np.argsort(-best, kind="stable")
        order = [
            t for t in order if np.isfinite(best[t]) and (threshold is None or best[t] >= threshold)
        ]
        query_index = range(len(self.queries))[query_index]
        matches = (self._match(query_index, int(t), 0) for t in order)
        if min_confidence is not None:
            matches = (
                m for m in matches if m.confidence is not None and m.confidence >= min_confidence
            )
        if check_merge_identical(merge_identical):
            return merged_matches(matches, top_k)
        return list(itertools.islice(matches, top_k))

    def _drop_unconfident(self, min_confidence: float) -> None:
        """Leave out (in place) the spans whose confidence is below ``min_confidence``; each text's others move up."""
        assert self.calibrator is not None
        at = np.nonzero(np.isfinite(self.scores))
        spans = [self.texts[t][a:b] for t, a, b in zip(at[1], self.starts[at], self.ends[at])]
        queries = [self.queries[q] for q in at[0]]
        confidence = self.calibrator(queries, spans, self.scores[at], self.similarities[at])
        low = confidence < min_confidence
        gone = tuple(index[low] for index in at)
        for name in _ARRAYS:
            values = getattr(self, name)
            values[gone] = -np.inf if values.dtype.kind == "f" else -1
        order = np.argsort(~np.isfinite(self.scores), axis=2, kind="stable")
        for name in _ARRAYS:
            setattr(self, name, np.take_along_axis(getattr(self, name), order, axis=2))

    def _check_confidence(self, min_confidence) -> float | None:
        """``min_confidence`` checked, and refused where this result has no confidence."""
        return _cut(self.calibrator, check_min_confidence(min_confidence))

    def _match(self, query_index: int, text_index: int, rank: int, query: str = "") -> SpanMatch:
        """One match; ``query``: its query's text where the result does not hold it (paired searches)."""
        at = (query_index, text_index, rank)
        start, end = int(self.starts[at]), int(self.ends[at])
        span = self.texts[text_index][start:end]
        score, similarity = float(self.scores[at]), float(self.similarities[at])
        confidence = None
        if self.calibrator is not None:
            query = query or self.queries[query_index]
            confidence = float(self.calibrator([query], [span], [score], [similarity])[0])
        return SpanMatch(
            query_index=query_index,
            text_index=text_index,
            start=start,
            end=end,
            span=span,
            score=score,
            unit_start=int(self.unit_starts[at]),
            unit_end=int(self.unit_ends[at]),
            similarity=similarity,
            confidence=confidence,
        )


def best_spans(
    model: SentenceTransformer,
    queries: str | Sequence[str],
    texts: str | Sequence[str],
    *,
    top_k: int = 1,
    prompt_name: str | None = None,
    prompt: str | None = None,
    query_prompt_name: str | None = None,
    query_prompt: str | None = None,
    min_span: int | None = None,
    max_span: int | None = None,
    unit: str | None = None,
    batch_size: int = 32,
    show_progress_bar: bool | None = None,
    device: str | None = None,
    similarity_fn_name: str | None = None,
    window_context: int = WINDOW_CONTEXT,
    scorer: str | SpanScorer | None = None,
    overlap: bool = False,
    on_error: str = "raise",
    min_confidence: float | str | None = None,
) -> SpanSearchResult:
    """For every (query, text) pair, the ``top_k`` spans of the text most similar to the query.

    One forward pass per text and per query, fused scoring (no span vectors stored); a query's vector is
    :func:`slice_st.encode_span_queries`'. The options not listed here are shared (module :mod:`slice_st.encode`).

    Args:
        queries: A query or a list of queries.
        texts: A text or a list of texts to search.
        top_k: Spans kept per (query, text) pair.
        similarity_fn_name: ``"cosine"``, ``"dot"``, ``"euclidean"`` or ``"manhattan"`` (``None``: the model's; a
            ``MultiVectorEncoder``'s MaxSim cannot rank spans: cosine).
        scorer: What ranks the spans (:mod:`slice_st.scoring`): ``"reranked"`` (default), ``"phrase"`` (the
            similarity minus small costs for spans that do not look like a phrase), ``"max-cosine"`` (the paper's
            protocol) or a :class:`slice_st.scoring.SpanScorer`.
        overlap: Also return spans overlapping a better one of the same text.
        on_error: ``"raise"`` (a text that cannot be cut into windows is a :class:`SpanInputError`, raised before any
            text is encoded) or ``"skip"`` (it gets no spans and is listed in ``result.skipped``).
        min_confidence: Leave out the spans whose ``confidence`` (the calibrated probability of a real match,
            :mod:`slice_st.confidence`) is below this; ``"default"``: the model's documented cut. Only a shipped
            model with its default scorer has a confidence (else a :class:`SpanInputError`). ``None``: keep all.

    Returns:
        A :class:`SpanSearchResult`: ``result[q][t]`` lists the best spans of text ``t`` for query ``q``.

    Example:
        >>> from slice_st import load_model
        >>> texts = ["Yesterday a man played the guitar badly."]
        >>> match = load_model().best_spans(["plays the guitar"], texts, max_span=4)[0][0][0]
        >>> match.span, round(match.similarity, 2) > 0.6, match.score <= match.similarity
        ('played the guitar', True, True)
    """
    # the keyword options best_spans_paired takes too, passed on as they came: one list of them (_PAIRED_OPTIONS)
    options = {name: value for name, value in locals().items() if name in _PAIRED_OPTIONS}
    top_k = check_top_k(top_k)
    if on_error not in ("raise", "skip"):
        raise SpanInputError(f"on_error must be 'raise' or 'skip', got {on_error!r}.")
    queries, texts = query_list(queries), as_text_list(texts)[0]
    errors: list[tuple[int, str]] | None = [] if on_error == "skip" else None
    result = _best_spans(
        model, queries, texts, top_k, overlap=overlap, paired=False, errors=errors, **options
    )
    if min_confidence is not None:
        result._drop_unconfident(result._check_confidence(min_confidence))
    return result


def _best_spans(
    model: SentenceTransformer,
    queries: list[str],
    texts: list[str],
    top_k: int,
    *,
    paired,
    errors,
    overlap=False,
    min_confidence=None,
    **options,
):
    """:func:`best_spans` and :func:`best_spans_paired` (query ``i`` against text ``i``): checked options in."""
    search = _Search(model, queries, texts, top_k, paired, overlap, options, min_confidence)
    prompt = resolve_prompt(model, options["prompt"], options["prompt_name"], "document")
    windows = encode_windows(
        model,
        texts,
        search.config,
        options["batch_size"],
        options["show_progress_bar"],
        options["window_context"],
        prompt=prompt,
        device=options["device"],
        errors=errors,
    )
    for rows in windows:
        search.add(search.best_of_rows(rows), rows)
    found = {key: search.arrays[key] for key in _ARRAYS}
    names = [""] * len(queries) if paired else queries
    return SpanSearchResult(
        queries=names,
        texts=texts,
        **found,
        similarity_fn_name=search.similarity,
        scorer=search.scorer.name,
        skipped=errors or [],
        calibrator=search.calibrator,
    )


class _Search:
    """One best-span search: settings and each text's running ``(Q, k)`` top spans (``paired``: one query, its own)."""

    def __init__(
        self,
        model: SentenceTransformer,
        queries: list[str],
        texts: list[str],
        top_k: int,
        paired: bool,
        overlap: bool,
        options,
        min_confidence=None,
    ):
        self.texts, self.paired, self.overlap = texts, paired, overlap
        self.config = config = resolve_span_config(
            model, options["min_span"], options["max_span"], options["unit"]
        )
        self.similarity = span_similarity(model, options["similarity_fn_name"])
        check_overlap(overlap)
        self.scorer = search_scorer(options["scorer"], model)
        # a scorer's costs are in cosine units: rank by the plain similarity
        if self.similarity != "cosine":
            self.scorer = dataclasses.replace(
                resolve_scorer("max-cosine"), name=f"max-{self.similarity}"
            )
        self.calibrator, _ = search_calibrator(model, self.scorer, min_confidence)
        prompt = resolve_prompt(
            model, options["query_prompt"], options["query_prompt_name"], "query"
        )
        shared = {name: options[name] for name in ("batch_size", "window_context", "device")}
        # spans and queries compared in the truncated space, as encode does
        self.dim = check_truncate_dim(model)
        self.queries = embed_texts(
            model, queries, show_progress_bar=False, prompt=prompt, **shared
        )[:, : self.dim]
        # A unit holds >= 1 token, a token >= 1 UTF-8 byte: a bound on any text's spans (lone surrogates fail later).
        units = max((len(text.encode("utf-8", "surrogatepass")) for text in texts), default=0)
        span_lengths = config.max_span - config.min_span + 1
        self.top_k = top_k if paired else min(top_k, max(1, units * span_lengths))
        # (Q, 5) query profiles for the scorer's costs; a plain scorer pays none
        self.profiles = None
        if not self.scorer.is_plain:
            query_units = text_units(model.tokenizer, queries, config.unit)
            lengths = [len(starts) for starts, _, _ in query_units]
            self.profiles = torch.from_numpy(query_profiles(queries, lengths))
        self.rerank = rerank_context(self.scorer, queries)
        # (Q, 1): the queries whose windows' spans merge in pick order (see merge_key)
        self.pick_order = False
        if self.rerank is not None and self.profiles is not None and not paired:
            self.pick_order = self.rerank.reranker.reranks(self.profiles[:, 0].numpy())[:, None]
        shape = (1 if paired else len(queries), len(texts), self.top_k)
        self.arrays = {
            name: np.full(shape, -np.inf, np.float32) for name in ("scores", "similarities")
        }
        # ranks: place among its window's picks
        names = ("starts", "ends", "unit_starts", "unit_ends", "ranks")
        self.arrays |= {name: np.full(shape, -1, np.int64) for name in names}

    def best_of_rows(self, rows: WindowRows) -> BestSpans:
        """The best spans of one sub-batch of windows: the scorer's, re-ranked when ``rerank`` says so."""
        queries, profiles, config = self.queries, self.profiles, self.config
        if self.paired:  # (rows, 1, d): each window against its own text's query
            index = torch.tensor([w.text_index for w in rows.windows])
            queries = queries[index.to(queries.device)][:, None, :].to(rows.token_embeddings.device)
            profiles = None if profiles is None else profiles[index][:, None, :]
        embeddings = rows.token_embeddings[..., : self.dim]
        costs = None
        if profiles is not None:
            units, flags = _row_flags(rows, self.texts)
            costs = span_costs(self.scorer, flags, profiles, config.min_span, config.max_span)
        bounds = (rows.boundaries, rows.num_units, config.min_span, config.max_span)
        fused = functools.partial(
            best_span_scores,
            queries,
            embeddings,
            *bounds,
            owned=rows.owned,
            similarity=self.similarity,
            costs=costs,
        )
        if self.rerank is None or costs is None:
            found = fused(self.top_k, overlap=self.overlap)
        else:
            pairs = index.numpy()[:, None] if self.paired else np.arange(len(self.queries))[None, :]
            grid = span_cosine_grid(queries, embeddings, *bounds)
            words = unit_words(units, flags.shape[1])
            window = RerankRows(rows.boundaries, rows.num_units, words, flags, grid)
            found = self.rerank.best(
                fused, self.top_k, self.overlap, window, queries, costs, profiles, pairs, config
            )
        # the paper's protocol and token units keep their spans
        if costs is None or config.unit != "word":
            return found
        governors = np.zeros(tuple(flags.shape), dtype=np.uint8)
        for row, strings in enumerate(units):
            governors[row, : len(strings)] = governor_units(strings)
        vectors = queries if queries.dim() == 3 else queries[None].expand(len(units), -1, -1)

        def cosines(starts: Tensor, ends: Tensor) -> Tensor:  # (B, Q, k) spans → their cosines
            spread = vectors.repeat_interleave(starts.shape[2], dim=1).to(embeddings.device)
            return span_cosines(
                spread, embeddings, rows.boundaries, starts.flatten(1), ends.flatten(1)
            ).view_as(starts)

        return keep_governors(found, governors, flags, cosines, config, self.overlap)

    def add(self, found: BestSpans, rows: WindowRows) -> None:
        """Turn one sub-batch's window-level best spans into text-level offsets and merge them in."""
        missing, device = found.starts < 0, found.starts.device
        starts, last = found.starts.clamp(min=0), (found.ends - 1).clamp(min=0)
        chars = torch.tensor([w.char_start for w in rows.windows], device=device)[:, None, None]
        first_units = [w.first_unit(self.config.unit) for w in rows.windows]
        units = torch.tensor(first_units, device=device)[:, None, None]
        candidate = {
            "starts": _gather_units(rows.char_starts, starts) + chars,
            "ends": _gather_units(rows.char_ends, last) + chars,
            "unit_starts": found.starts + units,
            "unit_ends": found.ends + units,
            "ranks": torch.arange(found.starts.shape[-1], device=device).expand_as(found.starts),
        }
        candidate = {
            name: value.masked_fill(missing, -1).cpu().numpy() for name, value in candidate.items()
        }
        similarities = found.similarities.masked_fill(missing, float("-inf"))
        candidate["similarities"] = similarities.float().cpu().numpy()
        candidate["scores"] = found.scores.float().cpu().numpy()
        for row, window in enumerate(rows.windows):
            self._merge(
                window.text_index, {name: values[row] for name, values in candidate.items()}
            )

    def _merge(self, text: int, new: dict[str, np.ndarray]) -> None:
        """Merge a window's ``(Q, k)`` candidates into its text's top-k (no ``overlap``: disjoint, best first)."""
        both = {
            name: np.concatenate([self.arrays[name][:, text], values], axis=1)
            for name, values in new.items()
        }
        merged = merge_key(both["scores"], both["ranks"], self.pick_order)
        if self.overlap or self.top_k == 1:
            order = np.argsort(-merged, axis=1, kind="stable")[:, : self.top_k]
            missing = ~np.isfinite(np.take_along_axis(merged, order, axis=1))
        else:
            bounds = (torch.from_numpy(both[name]) for name in ("unit_starts", "unit_ends"))
            order = greedy_disjoint(torch.from_numpy(merged), *bounds, self.top_k).numpy()
            missing, order = order < 0, order.clip(min=0)
        for name, values in both.items():
            kept = np.take_along_axis(values, order, axis=1)
            self.arrays[name][:, text] = np.where(
                missing, -1 if values.dtype.kind == "i" else -np.inf, kept
            )


def _row_flags(rows: WindowRows, texts: Sequence[str]) -> tuple[list[list[str]], Tensor]:
    """Each window's unit strings; their ``(B, U)`` unit flags (which read whether it starts and ends its text)."""
    units, starts, ends = [], rows.char_starts.cpu().numpy(), rows.char_ends.cpu().numpy()
    flags = torch.zeros(rows.char_starts.shape, dtype=torch.long)
    for row, window in enumerate(rows.windows):
        whole, count = texts[window.text_index], int(rows.num_units[row])
        text = whole[window.char_start : window.char_end]
        units.append([text[a:b] for a, b in zip(starts[row, :count], ends[row, :count])])
        edges = not whole[: window.char_start].strip(), not whole[window.char_end :].strip()
        flags[row, :count] = torch.from_numpy(unit_flags(units[-1], *edges).astype(np.int64))
    return units, flags.to(rows.token_embeddings.device)


def _gather_units(values: Tensor, index: Tensor) -> Tensor:
    """``values (B, U)`` at ``index (B, Q, k)`` → ``(B, Q, k)``."""
    if values.shape[1] == 0:
        return torch.zeros_like(index)
    return values.gather(1, index.flatten(1)).view_as(index)


def best_spans_paired(
    model: SentenceTransformer, queries: Sequence[str], texts: Sequence[str], **options: Any
) -> list[SpanMatch | None]:
    """The best span of ``texts[i]`` for ``queries[i]``, for each pair ``i``: :func:`best_spans` scoring only the N
    pairs instead of all N × N (the evaluation setting: an origin phrase and its passage).

    Args:
        queries: One query per text.
        texts: The texts, paired with ``queries`` by position.
        options: Keyword options of :func:`best_spans`, but ``top_k``, ``overlap`` and ``on_error``.

    Returns:
        A :class:`SpanMatch` per pair (``None`` for a text without spans, or with ``min_confidence`` a best span
        below it), ``query_index == text_index == i``; its ``confidence`` as :func:`best_spans` gives it.

    Example:
        >>> from slice_st import load_model
        >>> matches = best_spans_paired(load_model(), ["a dog"], ["The cat and the puppy slept."], max_span=3)
        >>> matches[0].span
        'the puppy'
    """
    unknown = sorted(set(options) - set(_PAIRED_OPTIONS))
    if unknown:
        raise SpanInputError(
            f"best_spans_paired has no option {unknown[0]!r}; it takes {', '.join(_PAIRED_OPTIONS)}."
        )
    query_list, text_list = as_text_list(queries, "queries")[0], as_text_list(texts)[0]
    if len(query_list) != len(text_list):
        raise SpanInputError(
            f"queries and texts must pair up: {len(query_list)} queries, {len(text_list)} texts."
        )
    if not query_list:
        return []
    options = _PAIRED_OPTIONS | options
    result = _best_spans(model, query_list, text_list, 1, paired=True, errors=None, **options)
    cut = result._check_confidence(options["min_confidence"])
    matches: list[SpanMatch | None] = []
    for i, query in enumerate(query_list):
        match = result._match(0, i, 0, query) if np.isfinite(result.scores[0, i, 0]) else None
        if match is not None and cut is not None and (match.confidence or 0.0) < cut:
            match = None
        matches.append(None if match is None else dataclasses.replace(match, query_index=i))
    return matches


#: best_spans_paired's options: best_spans' keyword options and defaults, but those that pick several spans.
_PAIRED_OPTIONS = {
    name: parameter.default
    for name, parameter in inspect.signature(best_spans).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    and name not in ("top_k", "overlap", "on_error")
}


def attach_methods() -> None:
    """Make the span methods of :class:`slice_st.SpanEncoder` methods of every ``SentenceTransformer`` and
    ``MultiVectorEncoder`` too (never clobbering ST's own); ``import slice_st`` arranges for this to run when
    ``sentence_transformers`` is imported."""
    # Why attach at all: a model card's usage is `import slice_st; SentenceTransformer(...).encode_spans(texts)`, on a
    # plain SentenceTransformer. Why on import of sentence_transformers (slice_st._attach), not of slice_st: importing
    # it costs seconds (torch), and `import slice_st` / `slice-st --help` stay standard-library light.
    from sentence_transformers import MultiVectorEncoder, SentenceTransformer

    for cls in (SentenceTransformer, MultiVectorEncoder):
        for function in (encode_spans, encode_span_queries, best_spans):
            existing = getattr(cls, function.__name__, None)
            if existing is None or getattr(existing, "__module__", "").startswith("slice_st"):
                setattr(cls, function.__name__, function)
