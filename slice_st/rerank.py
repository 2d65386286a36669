"""The default scorer's learned re-ranker: a linear model (``slice_st/pretrained/rerank/``) over features of the
``"phrase"`` scorer's top candidates; ``Rerank.best`` is how ``best_spans`` and an index pick spans."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch

from slice_st.errors import SpanInputError
from slice_st.scoring import (
    AFTER_DETERMINER,
    CLAUSE_AFTER,
    CLAUSE_BEFORE,
    CLAUSE_MARK,
    DETERMINERS,
    END_WORD,
    SENTENCE_END,
    START_WORD,
    SpanScorer,
    governed_starts,
    mark_prefix,
    query_words,
    word,
)
from slice_st.spans import BestSpans, greedy_picks

#: The four one-unit moves whose cosine and score changes are features: (start shift, end shift).
MOVES = (("grow_left", -1, 0), ("grow_right", 0, 1), ("shrink_left", 1, 0), ("shrink_right", 0, -1))

#: Auxiliaries and modals: a phrase rarely ends on one ("my checked bag will |"), though the scorer's costs allow it.
AUXILIARIES = frozenset(
    "will would shall should can could may might must do does did has have had am".split()
)


@dataclass(frozen=True)
class Reranker:
    """A shipped re-ranker: feature names, standardisation and weights, the number of candidates it re-ranks."""

    name: str
    candidates: int
    min_query_units: int
    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray

    def logits(self, values: np.ndarray, query_units: np.ndarray | None = None) -> np.ndarray:
        """``(N, k, F)`` features → ``(N, k)`` scores; a query shorter (``query_units``) than any trained on keeps the
        scorer's order."""
        coefficients, bias = self._folded
        scores = values @ coefficients + bias
        if query_units is None:
            return scores
        keep = -np.arange(scores.shape[-1], dtype=np.float64)
        return np.where(self.reranks(query_units)[:, None], scores, keep)

    def reranks(self, query_units) -> np.ndarray:
        """Whether queries of ``query_units`` units are re-ranked: a shorter query than any trained on is not."""
        return np.asarray(query_units) >= self.min_query_units

    @functools.cached_property
    def _folded(self) -> tuple[np.ndarray, float]:
        """The standardisation folded into the weights, once: ``((v - mean) / scale) @ w == v @ (w / scale) + bias``."""
        coefficients = self.weights / self.scale
        return coefficients, -float(self.mean @ coefficients)


@functools.lru_cache(maxsize=4)
def load_reranker(name: str) -> Reranker:
    """The re-ranker shipped as ``slice_st/pretrained/rerank/<name>.json`` (a name :class:`SpanScorer` checked)."""
    path = resources.files("slice_st.pretrained").joinpath("rerank", f"{name}.json")
    if not path.is_file():
        raise ValueError(f"no shipped re-ranker named {name!r}.")
    data = json.loads(path.read_text(encoding="utf-8"))
    arrays = {key: np.asarray(data[key], np.float64) for key in ("mean", "scale", "weights")}
    minimum = int(data.get("min_query_units", 1))
    return Reranker(name, int(data["candidates"]), minimum, tuple(data["features"]), **arrays)


@dataclass
class UnitWords:
    """Per row (a text or window, padded to ``U`` units): what the features read of each unit."""

    ids: np.ndarray  # (B, U) int64 word ids (hashes; -1: no word or padding)
    determiner: np.ndarray  # (B, U) bool
    capital: np.ndarray  # (B, U) bool


def _id(text: str) -> int:
    # within one process: only compared to each other
    return hash(text) & 0x7FFFFFFFFFFFFFFF if text else -1


def unit_words(units: Sequence[Sequence[str]], width: int | None = None) -> UnitWords:
    """:class:`UnitWords` of rows of unit strings (padded to ``width`` units, default the longest row)."""
    width = max((len(row) for row in units), default=0) if width is None else width
    ids = np.full((len(units), width), -1, np.int64)
    determiner = np.zeros((len(units), width), bool)
    capital = np.zeros((len(units), width), bool)
    for row, strings in enumerate(units):
        words = [word(unit) for unit in strings[:width]]
        ids[row, : len(words)] = [_id(w) for w in words]
        determiner[row, : len(words)] = [w in DETERMINERS for w in words]
        capital[row, : len(words)] = [unit[:1].isupper() for unit in strings[:width]]
    return UnitWords(ids, determiner, capital)


def query_word_ids(queries: Sequence[str]) -> np.ndarray:
    """``(Q, J)`` word ids of each query's distinct words, in order (``-2``: padding)."""
    lists = [list(dict.fromkeys(_id(w) for w in query_words(query))) for query in queries]
    out = np.full((len(lists), max((len(ids) for ids in lists), default=1) or 1), -2, np.int64)
    for row, ids in enumerate(lists):
        out[row, : len(ids)] = ids
    return out


def query_edges(queries: Sequence[str]) -> np.ndarray:
    """``(Q, 2)`` ids of each query's first and last word (``-2``: no word)."""
    words = [query_words(query) for query in queries]
    edges = [(_id(found[0]), _id(found[-1])) if found else (-2, -2) for found in words]
    return np.asarray(edges, np.int64).reshape(-1, 2)


@functools.lru_cache(maxsize=4)
def _ids_of(words: frozenset[str]) -> np.ndarray:
    """The word ids (as :func:`unit_words` gives them) of a set of words."""
    return np.array(sorted(_id(w) for w in words), np.int64)


def _take(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values (N, U)`` at ``index (N, k)`` (clipped to the row)."""
    return np.take_along_axis(values, np.clip(index, 0, values.shape[1] - 1), axis=1)


def candidate_features(
    cosines: np.ndarray,
    scores: np.ndarray,
    moved_cosines: np.ndarray,
    moved_scores: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    num_units: np.ndarray,
    flags: np.ndarray,
    profiles: np.ndarray,
    units: UnitWords,
    rows: np.ndarray,
    queries: np.ndarray,
    edges: np.ndarray,
) -> dict[str, np.ndarray]:
    """The features (name → ``(N, k)``) of ``N`` (row, query) pairs' ``k`` candidates, best by the scorer first:
    ``(N, k)`` values (``-inf`` score: none), ``moved_*`` ``(4, N, k)`` by :data:`MOVES` (``nan``: no such span),
    each pair's row's ``flags`` and ``num_units``, ``rows`` its row in ``units``, :func:`query_word_ids` and
    :func:`query_edges` ``edges``."""
    valid = np.isfinite(scores)
    cosines = np.where(valid, cosines, 0.0).astype(np.float64)
    scores = np.where(valid, scores, 0.0).astype(np.float64)
    starts, ends = np.where(valid, starts, 0), np.where(valid, ends, 1)
    n_units = num_units[:, None].astype(np.float64)
    flags = flags.astype(np.int64)
    out: dict[str, np.ndarray] = {}
    best = lambda values: np.where(valid, values, -np.inf).max(1, keepdims=True)  # noqa: E731
    out["cos"], out["phrase"] = cosines, scores
    out["gap_top"], out["gap_maxcos"] = scores - best(scores), cosines - best(cosines)
    rank = np.broadcast_to(np.arange(scores.shape[1], dtype=np.float64), scores.shape)
    out["log_rank"] = np.log1p(rank)
    first_flags, last_flags = _take(flags, starts), _take(flags, ends - 1)
    bit = lambda values, mask: ((values & mask) > 0).astype(np.float64)  # noqa: E731
    lengths, query_length = (ends - starts).astype(np.float64), np.maximum(profiles[:, 0:1], 1.0)
    ratio, sentence_query = np.log(np.maximum(lengths, 1) / query_length), profiles[:, 4:5]
    out["len_short"], out["len_long"] = np.maximum(-ratio, 0), np.maximum(ratio, 0)
    out["start_word"] = bit(first_flags, START_WORD) * (1 - profiles[:, 1:2])
    out["after_det"] = bit(first_flags, AFTER_DETERMINER)
    out["end_word"] = bit(last_flags, END_WORD) * (1 - profiles[:, 2:3])
    marks = mark_prefix(flags)
    inner = [_take(marks[..., m], ends - 1) - _take(marks[..., m], starts) > 0 for m in (0, 1)]
    out["clause"], out["sentence"] = inner[0] * (1 - profiles[:, 3:4]), inner[1].astype(np.float64)
    out["open_end"] = (1 - bit(last_flags, CLAUSE_AFTER)) * sentence_query
    out["open_start"] = (1 - bit(first_flags, CLAUSE_BEFORE)) * sentence_query
    for (name, _, _), moved_cos, moved_score in zip(MOVES, moved_cosines, moved_scores):
        out[f"dcos_{name}"] = np.nan_to_num(moved_cos - cosines)
        out[f"dcost_{name}"] = np.nan_to_num(moved_cos - moved_score - (cosines - scores))  # costs
    # (N, U): the rows' width, as flags
    determiner, capital = units.determiner[rows], units.capital[rows]
    before_flags, after_flags = _take(flags, starts - 1), _take(flags, ends)
    has_before = (starts > 0).astype(np.float64)
    has_after = (ends < num_units[:, None]).astype(np.float64)
    out["first_det"] = _take(determiner, starts)
    out["first_start_word"] = bit(first_flags, START_WORD)
    out["first_clause_before"] = bit(first_flags, CLAUSE_BEFORE)
    out["first_capital"] = _take(capital, starts)
    out["last_end_word"] = bit(last_flags, END_WORD)
    out["last_clause_after"] = bit(last_flags, CLAUSE_AFTER)
    out["last_sentence_end"] = bit(last_flags, SENTENCE_END)
    out["last_mark"] = bit(last_flags, CLAUSE_MARK)
    out["before_start_word"] = has_before * bit(before_flags, START_WORD)
    out["after_start_word"] = has_after * bit(after_flags, START_WORD)
    out["after_end_word"] = has_after * bit(after_flags, END_WORD)
    out["after_capital"] = has_after * _take(capital, ends)
    query_det = np.isin(edges[:, :1], _ids_of(DETERMINERS))  # the query starts with a determiner
    out["first_det_query_det"] = out["first_det"] * query_det
    out["after_det_query_det"] = out["after_det"] * query_det
    out |= _auxiliaries(units.ids[rows], starts, ends, has_before)
    out |= _clause_reach(flags, starts, ends, num_units)
    out |= _shared_words(units.ids[rows], queries, edges, starts, ends, has_before, has_after)
    out["text_start"] = (starts == 0).astype(np.float64)
    out["text_end"] = (ends >= num_units[:, None]) * 1.0
    out["rel_start"], out["rel_end"] = starts / n_units, ends / n_units
    out["sentence_start"] = np.maximum(starts == 0, has_before * bit(before_flags, SENTENCE_END))
    return {
        name: np.where(valid, np.asarray(values, np.float64), 0.0) for name, values in out.items()
    }


def _auxiliaries(ids, starts, ends, has_before) -> dict[str, np.ndarray]:
    """Whether the span's last word (``"the bag will"``), or the word just before it (``"will | the authors"``), is
    an auxiliary or modal (``ids`` ``(N, U)``: the rows' word ids)."""
    auxiliary = np.isin(ids, _ids_of(AUXILIARIES))
    return {
        "last_auxiliary": _take(auxiliary, ends - 1) * 1.0,
        "before_auxiliary": has_before * _take(auxiliary, starts - 1),
    }


def _clause_reach(flags, starts, ends, num_units) -> dict[str, np.ndarray]:
    """How far a candidate stops short of its clause's edges: the units (log1p) between the clause's start (a
    ``CLAUSE_BEFORE`` unit or the text's start) and the span's start, and between its end and the clause's end (a
    ``CLAUSE_AFTER`` unit or the text's end); a span that stops a few words short of a comma often cuts a clause."""
    width = flags.shape[1]
    position = np.broadcast_to(np.arange(width), flags.shape)
    opens = np.maximum.accumulate(np.where((flags & CLAUSE_BEFORE) > 0, position, 0), axis=1)
    last = np.maximum(num_units[:, None] - 1, 0)
    closing = np.where(((flags & CLAUSE_AFTER) > 0) | (position >= last), position, width)
    closes = np.minimum.accumulate(closing[:, ::-1], axis=1)[:, ::-1]
    before = np.maximum(starts - _take(opens, starts), 0)
    after = np.maximum(_take(np.minimum(closes, last), ends - 1) - (ends - 1), 0)
    return {"clause_rest_before": np.log1p(before), "clause_rest_after": np.log1p(after)}


def _shared_words(
    ids, queries, edges, starts, ends, has_before, has_after
) -> dict[str, np.ndarray]:
    """The features of the words a candidate shares with its query (``ids`` ``(N, U)``: the rows' word ids)."""
    has_word = (ids >= 0).astype(np.int64)
    hits = ids[:, :, None] == queries[:, None, :]  # (N, U, J): unit u is query word j
    in_query = hits.any(-1)
    zero = np.zeros((len(ids), 1), np.int64)
    word_prefix = np.concatenate([zero, has_word.cumsum(1)], axis=1)
    hit_prefix = np.concatenate([zero, in_query.cumsum(1)], axis=1)
    words_inside = _take(word_prefix, ends) - _take(word_prefix, starts)
    prefix = np.concatenate(
        [np.zeros((len(ids), 1, hits.shape[2]), np.int32), hits.cumsum(1, dtype=np.int32)], 1
    )
    hits_to_end = np.take_along_axis(prefix, ends[..., None], 1)
    present = hits_to_end - np.take_along_axis(prefix, starts[..., None], 1)
    distinct = np.maximum((queries >= 0).sum(1), 1)[:, None]
    return {
        "cand_in_query": (_take(hit_prefix, ends) - _take(hit_prefix, starts))
        / np.maximum(words_inside, 1),
        "query_in_cand": (present > 0).sum(-1) / distinct,
        "first_match": _edge_word_is(ids, edges[:, 0], starts, ends, first=True),
        "last_match": _edge_word_is(ids, edges[:, 1], starts, ends, first=False),
        "before_in_query": has_before * _take(in_query, starts - 1),
        "after_in_query": has_after * _take(in_query, ends),
    }


def _edge_word_is(
    ids: np.ndarray, target: np.ndarray, starts: np.ndarray, ends: np.ndarray, first: bool
) -> np.ndarray:
    """Whether the first (or last) unit with a word in ``[start, end)`` is the word ``target`` (``(N,)`` ids): the
    nearest unit with a word at or after the start (at or before the last unit), found per row once."""
    width = ids.shape[1]
    position = np.broadcast_to(np.arange(width), ids.shape)
    if first:
        backwards = np.where(ids >= 0, position, width)[:, ::-1]
        nearest = np.minimum.accumulate(backwards, axis=1)[:, ::-1]
        at = _take(nearest, starts)
        found = at < ends
    else:
        at = _take(np.maximum.accumulate(np.where(ids >= 0, position, -1), axis=1), ends - 1)
        found = at >= starts
    word_at = np.take_along_axis(ids, np.clip(at, 0, width - 1), 1)
    return (found & (word_at == target[:, None])).astype(np.float64)


@dataclass
class RerankRows:
    """The rows (windows, an index's segments) whose candidates are re-ranked: units as token ranges (``boundaries``),
    their :class:`UnitWords`; ``cosines(starts, ends)``: cosines of spans ``(B, Q, k)`` of the searched lengths (as
    :func:`slice_st.spans.span_cosine_grid`'s)."""

    boundaries: torch.Tensor
    num_units: torch.Tensor
    units: UnitWords
    flags: torch.Tensor
    cosines: Callable


@dataclass
class Rerank:
    """What re-ranking needs of the queries: the shipped model, each query's word ids and first / last word."""

    reranker: Reranker
    word_ids: np.ndarray
    edges: np.ndarray

    def best(
        self,
        fused,
        top_k: int,
        overlap: bool,
        rows: RerankRows,
        queries,
        costs,
        profiles,
        pairs,
        config,
    ):
        """The ``top_k`` spans of each (row, query) picked by the re-ranker among ``fused(k, overlap=...)``, the
        scorer's top spans, its own places filling what they leave (so the first spans do not depend on ``top_k``);
        ``pairs`` ``(B, Q)``: each cell's query."""
        found = fused(self.reranker.candidates, overlap=True)
        batch, num_queries, k = found.starts.shape
        cells = (batch * num_queries, k)
        rows_of = np.repeat(np.arange(batch), num_queries)
        query_of = np.broadcast_to(pairs, (batch, num_queries)).reshape(-1)
        profile = profiles if profiles.dim() == 3 else profiles[None].expand(batch, -1, -1)
        profile = profile.cpu().numpy().reshape(batch * num_queries, -1).astype(np.float64)
        scores = found.scores.float().cpu().numpy().reshape(cells)
        values = candidate_features(
            found.similarities.float().cpu().numpy().reshape(cells),
            scores,
            *_moved(found.starts, found.ends, rows, queries, costs, config),
            found.starts.cpu().numpy().reshape(cells),
            found.ends.cpu().numpy().reshape(cells),
            rows.num_units.cpu().numpy()[rows_of],
            rows.flags.cpu().numpy()[rows_of],
            profile,
            rows.units,
            rows_of,
            self.word_ids[query_of],
            self.edges[query_of],
        )
        features = np.stack([values[name] for name in self.reranker.features], axis=-1)
        logits = self.reranker.logits(features, profile[:, 0])
        logits = np.where(np.isfinite(scores), logits, -np.inf).reshape(batch, num_queries, k)
        places = None
        if top_k > 1 and (top_k > found.scores.shape[2] or not overlap):
            places = fused(top_k, overlap=overlap)
        return pick(found, logits, top_k, overlap, places)


def merge_key(scores: np.ndarray, ranks: np.ndarray, in_pick_order) -> np.ndarray:
    """The order a text's windows' (an index's segments') spans merge in: a re-ranked query's (``in_pick_order``) by
    place among their window's picks, then score, so a text's first spans do not depend on ``top_k``; else by score."""
    scores = np.asarray(scores, np.float64)
    # 1e3: past any score gap
    return np.where(in_pick_order, scores - 1e3 * np.asarray(ranks), scores)


def rerank_context(scorer: SpanScorer, queries: list[str]) -> Rerank | None:
    """The re-ranking context of ``scorer`` (``None`` when it does not re-rank)."""
    if scorer.rerank is None:
        return None
    try:
        reranker = load_reranker(scorer.rerank)
    except ValueError as error:
        raise SpanInputError(str(error)) from None
    return Rerank(reranker, query_word_ids(queries), query_edges(queries))


def _moved(starts, ends, rows: RerankRows, queries, costs, config) -> tuple[np.ndarray, np.ndarray]:
    """The cosines and scores ``(4, B * Q, k)`` of the candidates ``(B, Q, k)`` moved by each of :data:`MOVES`."""
    batch, num_queries, k = starts.shape
    width = rows.boundaries.shape[1] - 1
    num_units = rows.num_units.to(starts.device)[:, None, None]
    first = torch.cat([starts + shift for _, shift, _ in MOVES], dim=2)  # (B, Q, 4k): move by move
    end = torch.cat([ends + shift for _, _, shift in MOVES], dim=2)
    ok = (starts >= 0).repeat(1, 1, len(MOVES)) & (first >= 0) & (end <= num_units) & (end > first)
    ok &= (end - first >= config.min_span) & (end - first <= config.max_span)
    first, end = torch.where(ok, first, 0), torch.where(ok, end, 1).clamp(max=max(width, 1))
    cosines = rows.cosines(first, end).view_as(first)
    scores = cosines - costs.of_spans(first.mT, end.mT, config.min_span).mT.to(cosines.dtype)

    def as_moves(values: torch.Tensor) -> np.ndarray:
        """``(B, Q, 4k)`` → ``(4, B * Q, k)``, ``nan`` where the moved span does not exist."""
        moves = torch.where(ok, values, float("nan")).view(batch, num_queries, len(MOVES), k)
        array = moves.permute(2, 0, 1, 3).float().cpu().numpy()
        return array.reshape(len(MOVES), batch * num_queries, k)

    return as_moves(cosines), as_moves(scores)


def pick(found, logits: np.ndarray, top_k: int, overlap: bool, places=None):
    """The ``top_k`` candidates of each (row, query) by ``logits`` ``(B, Q, k)``, disjoint unless ``overlap``, then
    the ``places`` (the scorer's own top-k) not overlapping (with ``overlap``: not equal to) a kept span."""
    key = torch.as_tensor(logits) + 1e6  # every candidate before any place
    if places is not None:
        rank = -torch.arange(places.scores.shape[2], dtype=key.dtype).expand(places.scores.shape)
        key = torch.cat(
            [key, torch.where(torch.isfinite(places.scores.cpu()), rank, float("-inf"))], dim=2
        )
        found = BestSpans(
            *(torch.cat([a, b], dim=2) for a, b in zip(vars(found).values(), vars(places).values()))
        )
    # with overlap, a place that is a candidate already picked is not picked again
    chosen = greedy_picks(key, found.starts.cpu(), found.ends.cpu(), top_k, overlap)
    missing = (chosen < 0).to(found.scores.device)
    index = chosen.clamp(min=0).to(found.scores.device)
    take = lambda values, fill: values.gather(2, index).masked_fill(missing, fill)  # noqa: E731
    return BestSpans(
        take(found.scores, float("-inf")),
        take(found.starts, -1),
        take(found.ends, -1),
        take(found.similarities, float("-inf")),
    )


def keep_governors(
    found: BestSpans, governors: np.ndarray, flags, cosines: Callable, config, overlap: bool
):
    """``found`` ``(B, Q, k)`` with each span moved left to keep a negation or condition that governs it in its clause
    (:func:`~slice_st.scoring.governed_starts`; ``governors`` ``(B, U)`` codes of
    :func:`~slice_st.scoring.governor_units`): its similarity is the moved span's (``cosines(starts, ends)``
    ``(B, Q, k)``), its score the scored span's, capped at that similarity (the move is query-independent: it changes
    what is shown, not how well the text matched); without ``overlap``, a span that would then overlap a better one
    of its row and query stays as it was."""
    batch = found.starts.shape[0]
    if not governors.any():
        return found
    starts, ends = found.starts.cpu().numpy(), found.ends.cpu().numpy()
    flat = (value.reshape(batch, -1) for value in (starts, ends))
    flags = flags.cpu().numpy() if isinstance(flags, torch.Tensor) else np.asarray(flags)
    moved = governed_starts(governors, flags, *flat, config.max_span).reshape(starts.shape)
    for rank in range(1, starts.shape[2] if not overlap else 1):
        for better in range(rank):
            clash = (moved[..., rank] < ends[..., better]) & (ends[..., rank] > moved[..., better])
            moved[..., rank] = np.where(
                clash & (starts[..., better] >= 0), starts[..., rank], moved[..., rank]
            )
    if (moved == starts).all():
        return found
    device = found.starts.device
    changed = torch.from_numpy(moved != starts).to(device)
    new_starts = torch.from_numpy(moved).to(device)
    similarity = cosines(new_starts, found.ends).to(device=device, dtype=found.similarities.dtype)
    # the scored span's rank, within the similarity
    score = torch.minimum(found.scores.to(similarity), similarity)
    return BestSpans(
        torch.where(changed, score.to(found.scores.dtype), found.scores),
        torch.where(changed, new_starts, found.starts),
        found.ends,
        torch.where(changed, similarity, found.similarities),
    )
