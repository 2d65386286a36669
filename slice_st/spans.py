"""Span math: span enumeration, prefix-sum pooling and fused best-span scoring, in plain torch.

Conventions (decided here, never re-derived elsewhere):

* A **unit** is a word or a sub-word token. ``boundaries`` ``(B, U + 1)`` holds token positions: unit ``u`` of row
  ``b`` covers tokens ``boundaries[b, u] : boundaries[b, u + 1]``; shorter rows repeat their last boundary and
  ``num_units[b]`` says how many units row ``b`` has. Special tokens and padding lie outside every unit.
* A **span** is ``(start, end)`` in units, end exclusive, ``min_span <= end - start <= max_span``, enumerated
  start-major (by start, then by length). Its vector is the **mean of its token vectors** (SLICE), by prefix sums.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

from slice_st.errors import SpanInputError

if TYPE_CHECKING:
    from slice_st.scoring import SpanCosts

#: Span similarities, named as sentence-transformers' ``similarity_fn_name``.
SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")


def check_span_bounds(min_span: int, max_span: int) -> None:
    """Raise a clear :class:`~slice_st.errors.SpanInputError` (a ``ValueError``) for impossible span bounds."""
    for name, value in (("min_span", min_span), ("max_span", max_span)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpanInputError(f"{name} must be an integer, got {value!r}.")
    if min_span < 1:
        raise SpanInputError(f"min_span must be >= 1, got {min_span}.")
    if min_span > max_span:
        raise SpanInputError(f"min_span ({min_span}) must be <= max_span ({max_span}).")


def span_grid(
    num_units: int, min_span: int, max_span: int, device: Any = None
) -> tuple[Tensor, Tensor]:
    """All spans over ``num_units`` units, start-major, as ``(starts, ends)``."""
    check_span_bounds(min_span, max_span)
    lengths = torch.arange(min_span, max_span + 1, device=device)
    starts = torch.arange(max(num_units, 0), device=device)[:, None].expand(-1, lengths.numel())
    ends = starts + lengths[None, :]
    return starts[ends <= num_units], ends[ends <= num_units]


def prefix_sums(token_embeddings: Tensor) -> Tensor:
    """``(B, T, d)`` → ``(B, T + 1, d)`` float32 prefix sums with a leading zero row (keep ``T`` a model window)."""
    return torch.nn.functional.pad(token_embeddings.float().cumsum(dim=1), (0, 0, 1, 0))


def _gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """``values (B, T, *)`` gathered at ``index (B, N)`` along dim 1 → ``(B, N, *)``."""
    expanded = index.reshape(*index.shape, *([1] * (values.dim() - 2))).expand(
        *index.shape, *values.shape[2:]
    )
    return values.gather(1, expanded)


def _start_mask(num_units: Tensor, width: int, owned: tuple[Tensor, Tensor] | None) -> Tensor:
    """``(B, width)`` bool: which start units a row may use (inside the text and, if given, owned)."""
    positions = torch.arange(width, device=num_units.device)[None, :]
    mask = positions < num_units[:, None]
    if owned is not None:
        mask &= (positions >= owned[0][:, None]) & (positions < owned[1][:, None])
    return mask


@dataclass
class SpanBatch:
    """Mean-pooled spans of a padded batch: ``embeddings`` ``(B, S, d)``, the ``(S,)`` unit grid ``starts``/``ends``,
    and ``mask`` ``(B, S)``: which spans exist in each row."""

    embeddings: Tensor
    starts: Tensor
    ends: Tensor
    mask: Tensor


def pool_spans(
    token_embeddings: Tensor,
    boundaries: Tensor,
    num_units: Tensor,
    min_span: int,
    max_span: int,
    owned: Any = None,
    weights: Tensor | None = None,
) -> SpanBatch:
    """Mean vector of every span of ``min_span..max_span`` units; ``owned=(lo, hi)`` (each ``(B,)``) keeps only spans
    starting in ``[lo, hi)`` (each span of a long text comes from exactly one window). ``weights`` ``(B, T)`` (0 or 1,
    the vectors of weight-0 tokens already zero): the mean of the weight-1 tokens; a span without any is masked out.

    >>> emb = torch.arange(6.0).reshape(1, 3, 2)          # 3 tokens, d = 2
    >>> bounds = torch.tensor([[0, 1, 3]])                 # unit 0 = token 0, unit 1 = tokens 1..2
    >>> out = pool_spans(emb, bounds, torch.tensor([2]), 1, 2)
    >>> out.embeddings[0][out.mask[0]].tolist()
    [[0.0, 1.0], [2.0, 3.0], [3.0, 4.0]]
    """
    width = boundaries.shape[1] - 1
    starts, ends = span_grid(width, min_span, max_span, device=token_embeddings.device)
    unit_prefix = _gather_rows(prefix_sums(token_embeddings), boundaries)  # (B, U + 1, d)
    totals = unit_prefix[:, ends] - unit_prefix[:, starts]
    tokens = boundaries if weights is None else _weight_prefix(weights, boundaries)
    counts = tokens[:, ends] - tokens[:, starts]
    mask = (
        (ends[None, :] <= num_units[:, None])
        & _start_mask(num_units, width, owned)[:, starts]
        & (counts > 0)
    )
    means = totals / counts.clamp(min=1).unsqueeze(-1).to(totals.dtype)
    return SpanBatch(means, starts, ends, mask)


def pool_units(
    token_embeddings: Tensor,
    boundaries: Tensor,
    lo: Tensor,
    hi: Tensor,
    weights: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Sum and token count of units ``[lo, hi)`` of each row, ``((B, d), (B,))``: a whole text's is its query vector.
    ``weights`` as in :func:`pool_spans`: the count is of weight-1 tokens."""
    lo, hi = lo[:, None].long(), hi[:, None].long()
    sums, counts = _span_sums(token_embeddings, boundaries, lo, hi)
    if weights is not None:
        tokens = _weight_prefix(weights, boundaries)
        counts = (tokens.gather(1, hi) - tokens.gather(1, lo)).round().long()
    return sums[:, 0], counts[:, 0]


def _weight_prefix(weights: Tensor, boundaries: Tensor) -> Tensor:
    """``(B, U + 1)``: the sum of the token ``weights`` ``(B, T)`` before each unit boundary."""
    prefix = torch.nn.functional.pad(weights.float().cumsum(dim=1), (1, 0))
    return prefix.gather(1, boundaries.clamp(max=prefix.shape[1] - 1))


def unit_sums(token_embeddings: Tensor, boundaries: Tensor) -> tuple[Tensor, Tensor]:
    """Sum of the token vectors of every unit, and its token count: ``((B, U, d), (B, U))``."""
    unit_prefix = _gather_rows(prefix_sums(token_embeddings), boundaries)
    return unit_prefix.diff(dim=1), boundaries.diff(dim=1)


def span_sum_norms(
    token_embeddings: Tensor,
    boundaries: Tensor,
    num_units: Tensor,
    min_span: int,
    max_span: int,
    owned: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """L2 norm of every span's token-vector **sum**, ``(B, U, L)``: ``[b, u, l]`` is the span of ``min_span + l``
    units starting at unit ``u`` (``nan``: no such span, past the text or a start outside ``owned``)."""
    unit_prefix = _gather_rows(prefix_sums(token_embeddings), boundaries)
    return _span_sum_norms(unit_prefix, num_units, min_span, max_span, owned)


def _span_sum_norms(
    unit_prefix: Tensor, num_units: Tensor, min_span: int, max_span: int, owned
) -> Tensor:
    """:func:`span_sum_norms` from the prefix sums at unit boundaries ``(B, U + 1, d)``, one length at a time."""
    batch, width = unit_prefix.shape[0], unit_prefix.shape[1] - 1
    device = unit_prefix.device
    norms = torch.full((batch, width, max_span - min_span + 1), float("nan"), device=device)
    start_ok = _start_mask(num_units, width, owned)
    positions = torch.arange(width, device=device)[None, :]
    differentiable = torch.is_grad_enabled() and unit_prefix.requires_grad
    for length in range(min_span, min(max_span, width) + 1):
        count = width - length + 1
        span = unit_prefix[:, length : length + count] - unit_prefix[:, :count]
        valid = start_ok[:, :count] & (positions[:, :count] + length <= num_units[:, None])
        # masked spans are often all-zero sums: keep norm()'s backward away from 0/0
        if differentiable:
            span = torch.where(valid[..., None], span, torch.ones_like(span))
        norms[:, :count, length - min_span] = span.norm(dim=-1).masked_fill(~valid, float("nan"))
    return norms


def span_cosine_grid(
    queries: Tensor,
    token_embeddings: Tensor,
    boundaries: Tensor,
    num_units: Tensor,
    min_span: int,
    max_span: int,
    eps: float = 1e-12,
) -> Callable[[Tensor, Tensor], Tensor]:
    """``cosines(starts, ends)``: the cosines ``(B, Q, k)`` of spans ``(B, Q, k)`` of ``min_span..max_span`` units to
    the queries ``(Q, d)`` or ``(B, Q, d)``, as :func:`best_span_scores` computes them (prefix dot products over the
    norm of each span's sum, the norms once per row): cheaper than summing vectors when a row has many spans.

    >>> emb = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    >>> cosines = span_cosine_grid(torch.tensor([[0.0, 1.0]]), emb, torch.tensor([[0, 1, 2]]), torch.tensor([2]), 1, 2)
    >>> [round(x, 4) for x in cosines(torch.tensor([[[1, 0]]]), torch.tensor([[[2, 2]]]))[0, 0].tolist()]
    [1.0, 0.7071]
    """
    unit_prefix = _gather_rows(prefix_sums(token_embeddings), boundaries)
    norms = _span_sum_norms(unit_prefix, num_units, min_span, max_span, None).clamp(min=eps)
    vectors = torch.nn.functional.normalize(queries.float(), dim=-1, eps=eps).to(unit_prefix)
    sums = (unit_prefix @ vectors.mT).transpose(1, 2)  # (B, Q, U + 1)
    lengths = norms.shape[2]

    def cosines(starts: Tensor, ends: Tensor) -> Tensor:
        first, end = starts.clamp(min=0), ends.clamp(min=0)
        dots = sums.gather(2, end) - sums.gather(2, first)
        column = (end - first - min_span).clamp(0, lengths - 1)
        place = (first.clamp(max=norms.shape[1] - 1) * lengths + column).flatten(1)
        return dots / norms.flatten(1).gather(1, place).view_as(dots)

    return cosines


@dataclass
class BestSpans:
    """Top spans per (row, query), each ``(B, Q, k)``: ``scores`` rank them (the similarity minus the scorer's costs),
    ``similarities`` are plain. Missing entries have score ``-inf`` and start = end = -1."""

    scores: Tensor
    starts: Tensor
    ends: Tensor
    similarities: Tensor


def best_span_scores(
    queries: Tensor,
    token_embeddings: Tensor,
    boundaries: Tensor,
    num_units: Tensor,
    min_span: int,
    max_span: int,
    top_k: int = 1,
    owned: tuple[Tensor, Tensor] | None = None,
    eps: float = 1e-12,
    similarity: str = "cosine",
    costs: SpanCosts | None = None,
    overlap: bool = True,
) -> BestSpans:
    """The top-``k`` spans of each row for each query ``(Q, d)`` (or ``(B, Q, d)``: per row) by ``similarity`` (a
    ``similarity_fn_name``, distances negated) minus ``costs``; ``overlap=False``: pairwise disjoint, greedy. No span
    matrix: one matmul with the prefix sums at unit boundaries, then a loop over the span lengths.

    >>> emb = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])
    >>> bounds = torch.tensor([[0, 1, 2, 3]])
    >>> best = best_span_scores(torch.tensor([[0.0, 1.0]]), emb, bounds, torch.tensor([3]), 1, 2)
    >>> best.scores.tolist(), best.starts.tolist(), best.ends.tolist()
    ([[[1.0]]], [[[1]]], [[[2]]])
    """
    check_span_bounds(min_span, max_span)
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}.")
    batch, device = token_embeddings.shape[0], token_embeddings.device
    width = boundaries.shape[1] - 1
    if queries.dim() not in (2, 3) or (queries.dim() == 3 and queries.shape[0] != batch):
        raise ValueError(
            f"queries must be (Q, d) or (B={batch}, Q, d), got {tuple(queries.shape)}."
        )
    query_vectors = queries.float().to(device)
    if similarity == "cosine":
        query_vectors = torch.nn.functional.normalize(query_vectors, dim=-1, eps=eps)
    # (B, U+1, d): gathered once
    unit_prefix = _gather_rows(prefix_sums(token_embeddings), boundaries)
    norms = _span_sum_norms(unit_prefix, num_units, min_span, max_span, owned)
    # a zero sum (tokens all out of scoring) has no direction: no span
    exists = ~torch.isnan(norms) & (norms > 0)
    # Mask by selection, never by NaN arithmetic, so gradients of real spans stay finite.
    norms = torch.where(exists, norms, torch.ones_like(norms)).clamp(min=eps)
    lengths = _length_similarity(similarity, unit_prefix, query_vectors, boundaries.to(device))
    no_scores = torch.full((batch, top_k, queries.shape[-2]), float("-inf"), device=device)
    no_starts = torch.full_like(no_scores, -1, dtype=torch.long)
    # the running top-k (never in place)
    best: tuple[Tensor, ...] = (no_scores, no_scores, no_starts, no_starts)
    grid: list[list[Tensor]] = []
    for length in range(min_span, min(max_span, width) + 1):
        count, column = width - length + 1, length - min_span
        similarities = lengths(length, count, norms[:, :count, column, None])
        similarities = similarities.masked_fill(~exists[:, :count, column, None], float("-inf"))
        scores = similarities
        if costs is not None:
            scores = scores - costs.of_length(length, count, min_span).to(scores.dtype)
        if overlap or top_k == 1:
            best = _merge_length(best, scores, similarities, length)
        else:  # padded to the full width, stacked into a (B, U, L, Q) grid
            pad = (0, 0, 0, width - count)
            grid.append(
                [
                    torch.nn.functional.pad(x, pad, value=float("-inf"))
                    for x in (scores, similarities)
                ]
            )
    if grid:
        best = grid_top_k(*(torch.stack(part, dim=2) for part in zip(*grid)), top_k, min_span)
    scores, similarities, starts, ends = (values.transpose(1, 2) for values in best)
    missing = torch.isinf(scores)
    return BestSpans(
        scores, starts.masked_fill(missing, -1), ends.masked_fill(missing, -1), similarities
    )


def _length_similarity(
    similarity: str, unit_prefix: Tensor, query_vectors: Tensor, token_bounds: Tensor
) -> Callable[[int, int, Tensor], Tensor]:
    """``similarities(length, count, norms)``: the ``(B, count, Q)`` similarities of all spans of one length to the
    queries, from the prefix sums."""
    shared = query_vectors.dim() == 2
    query_sums = unit_prefix @ query_vectors.mT  # (B, U+1, Q)
    norms2 = (query_vectors**2).sum(-1)  # for euclidean
    query_norms2 = norms2[None, None, :] if shared else norms2[:, None, :]
    targets = query_vectors[None].expand(unit_prefix.shape[0], -1, -1) if shared else query_vectors

    def similarities(length: int, count: int, norms: Tensor) -> Tensor:
        # q · span sum
        dots = query_sums[:, length : length + count] - query_sums[:, :count]
        if similarity == "cosine":
            return dots / norms
        tokens = token_bounds[:, length : length + count] - token_bounds[:, :count]
        tokens = tokens.clamp(min=1).float()[..., None]
        if similarity == "dot":
            return dots / tokens
        if similarity == "euclidean":
            return -(query_norms2 - 2 * dots / tokens + (norms / tokens) ** 2).clamp(min=0).sqrt()
        means = (unit_prefix[:, length : length + count] - unit_prefix[:, :count]) / tokens
        return -torch.cdist(means, targets, p=1)  # manhattan

    return similarities


def _merge_length(
    best: tuple[Tensor, ...], scores: Tensor, similarities: Tensor, length: int
) -> tuple[Tensor, ...]:
    """Merge the ``(B, n, Q)`` spans of one length into the running ``(B, k, Q)`` top-k."""
    starts = torch.arange(scores.shape[1], device=scores.device)[None, :, None].expand_as(scores)
    merged = [
        torch.cat(pair, dim=1)
        for pair in zip(best, (scores, similarities, starts, starts + length))
    ]
    top, order = merged[0].topk(best[0].shape[1], dim=1)  # merged has k + n rows: always enough
    return (top, *(values.gather(1, order) for values in merged[1:]))


def grid_top_k(
    scores: Tensor, similarities: Tensor, top_k: int, min_span: int, overlap: bool = False
) -> tuple[Tensor, ...]:
    """The ``top_k`` spans of ``(B, U, L, Q)`` grids over (start, length), disjoint (:func:`greedy_disjoint`) unless
    ``overlap``: ``(B, k, Q)`` scores, similarities, starts, ends (``-inf``/``-1``: none)."""
    batch, width, widths, num_queries = scores.shape
    rows, device = batch * num_queries, scores.device
    flat, plain = (
        values.permute(0, 3, 1, 2).reshape(rows, width * widths)
        for values in (scores, similarities)
    )
    starts = torch.arange(width, device=device).repeat_interleave(widths)
    ends = starts + torch.arange(min_span, min_span + widths, device=device).repeat(width)
    starts, ends = starts.expand(rows, -1), ends.expand(rows, -1)
    if overlap:
        picks = flat.topk(min(top_k, flat.shape[1]), dim=1).indices
        picks = torch.nn.functional.pad(picks, (0, top_k - picks.shape[1]), value=-1)
        picks = picks.masked_fill(~torch.isfinite(flat.gather(1, picks.clamp(min=0))), -1)
    else:
        picks = greedy_disjoint(flat, starts, ends, top_k)
    missing, index = picks < 0, picks.clamp(min=0)
    out = [values.gather(1, index).masked_fill(missing, float("-inf")) for values in (flat, plain)]
    out += [values.gather(1, index).masked_fill(missing, -1) for values in (starts, ends)]
    return tuple(values.view(batch, num_queries, top_k).transpose(1, 2) for values in out)


def greedy_disjoint(scores: Tensor, starts: Tensor, ends: Tensor, top_k: int) -> Tensor:
    """Positions ``(..., k)`` along the last dim of the ``top_k`` best candidates that overlap no better one (greedy,
    best first, exact ties: the earlier one; ``-1`` past the last). The loop runs over the ``k`` picks.

    >>> greedy_disjoint(torch.tensor([[0.9, 0.8, 0.5]]), torch.tensor([[0, 1, 3]]), torch.tensor([[2, 3, 4]]), 3)
    tensor([[ 0,  2, -1]])
    """
    return greedy_picks(scores, starts, ends, top_k, overlap=False)


def greedy_picks(scores: Tensor, starts: Tensor, ends: Tensor, top_k: int, overlap: bool) -> Tensor:
    """:func:`greedy_disjoint`; with ``overlap``, the candidates left out are those equal to a better one."""
    alive = torch.isfinite(scores)
    chosen = torch.full((*scores.shape[:-1], top_k), -1, dtype=torch.long, device=scores.device)
    for step in range(min(top_k, scores.shape[-1])):
        best, pick = scores.masked_fill(~alive, float("-inf")).max(dim=-1)
        found = torch.isfinite(best)
        if not bool(found.any()):
            break
        chosen[..., step] = torch.where(found, pick, -1)
        first, end = starts.gather(-1, pick[..., None]), ends.gather(-1, pick[..., None])
        clash = (starts == first) & (ends == end) if overlap else (starts < end) & (ends > first)
        alive &= ~(clash & found[..., None])
    return chosen


def span_means(
    token_embeddings: Tensor, boundaries: Tensor, starts: Tensor, ends: Tensor
) -> tuple[Tensor, Tensor]:
    """Mean token vector of the spans ``starts``/``ends`` ``(B, N)`` (units, ``-1``: missing), differentiable:
    ``((B, N, d), (B, N) valid)``; a missing or empty span has a zero vector and is not valid."""
    sums, counts = _span_sums(token_embeddings, boundaries, starts, ends)
    return sums / counts.clamp(min=1)[..., None].to(sums.dtype), (starts >= 0) & (counts > 0)


def _span_sums(
    token_embeddings: Tensor, boundaries: Tensor, starts: Tensor, ends: Tensor
) -> tuple[Tensor, Tensor]:
    """Token-vector sums ``(B, N, d)`` and token counts ``(B, N)`` of the given unit spans (missing → 0)."""
    sums, token_starts = prefix_sums(token_embeddings), boundaries.gather(1, starts.clamp(min=0))
    token_ends = torch.where(
        (starts < 0) | (ends < 0), token_starts, boundaries.gather(1, ends.clamp(min=0))
    )
    return _gather_rows(sums, token_ends) - _gather_rows(sums, token_starts), (
        token_ends - token_starts
    )


def sample_spans(
    num_units: Tensor,
    num_spans: int,
    min_span: int,
    max_span: int,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Random spans ``(starts, ends)``, each ``(B, num_spans)``: lengths stratified over ``min_span..min(max_span,
    num_units)``, starts uniform where the span fits; ``-1`` in rows with fewer than ``min_span`` units."""
    if num_spans < 1:
        raise ValueError(f"num_spans must be >= 1, got {num_spans}.")
    device, batch = num_units.device, num_units.shape[0]

    def uniform(columns: int) -> Tensor:  # drawn on the CPU: the same spans on any device
        return torch.rand(batch, columns, generator=generator, device="cpu").to(device)

    # how many lengths each row allows
    choices = (num_units.clamp(max=max_span) - min_span + 1).clamp(min=0)
    # (B, n) in [0, 1)
    strata = (torch.arange(num_spans, device=device)[None, :] + uniform(1)) / num_spans
    lengths = min_span + (strata * choices[:, None]).floor().long().clamp(
        max=(choices - 1).clamp(min=0)[:, None]
    )
    lengths = lengths.gather(1, torch.argsort(uniform(num_spans), dim=1))
    room = (num_units[:, None] - lengths + 1).clamp(min=1)
    starts = torch.minimum((uniform(num_spans) * room).floor().long(), room - 1)
    ends = starts + lengths
    missing = (choices == 0)[:, None].expand(-1, num_spans)
    return starts.masked_fill(missing, -1), ends.masked_fill(missing, -1)


def span_cosines(
    queries: Tensor, token_embeddings: Tensor, boundaries: Tensor, starts: Tensor, ends: Tensor
) -> Tensor:
    """Cosine ``(B, Q)`` between queries ``(Q, d)`` or ``(B, Q, d)`` and the spans ``starts``/``ends`` ``(B, Q)``
    (``-1``: missing, ``-inf``), differentiable. Training finds the best spans without gradient, then calls this: the
    max over spans passes gradient to its arg-max only, so this is the gradient of the full max.

    >>> emb = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    >>> span_cosines(torch.tensor([[0.0, 1.0]]), emb, torch.tensor([[0, 1, 2]]), torch.tensor([[1]]),
    ...     torch.tensor([[2]])).tolist()
    [[1.0]]
    """
    if queries.dim() == 2:
        queries = queries[None].expand(token_embeddings.shape[0], -1, -1)
    span_sums, _ = _span_sums(token_embeddings, boundaries, starts, ends)  # (B, Q, d)
    cosines = torch.nn.functional.cosine_similarity(span_sums, queries.to(span_sums.dtype), dim=-1)
    return cosines.masked_fill(starts < 0, float("-inf"))


# Flat corpus scan (the SpanIndex): all spans of many documents laid end to end.
#: Units scored per block of :func:`top_spans_flat`: bounds its buffers; prefix sums restart per block.
FLAT_BLOCK_UNITS = 1 << 16
#: Scores held per block, (queries × span lengths × units): the block shrinks with many queries.
FLAT_SCORE_BUFFER = 1 << 21


class FlatTopSpans(NamedTuple):
    """Top spans of a flat corpus per query: ``scores`` float64, ``starts`` (unit rows) and ``lengths``, all ``(Q, k)``;
    missing entries (fewer than ``k`` spans exist) have score ``-inf``, start ``-1`` and length ``0``."""

    scores: Tensor
    starts: Tensor
    lengths: Tensor


def top_spans_flat(
    queries: Tensor,
    unit_vectors: Tensor,
    span_norms: Tensor,
    top_k: int,
    min_span: int,
    max_span: int,
    *,
    norm_min_span: int = 1,
    block: int | None = None,
    floor: Tensor | None = None,
    eps: float = 1e-12,
) -> FlatTopSpans:
    """Exact top-``k`` spans by cosine over a flat corpus: ``unit_vectors (N, d)``, each unit's token-vector sum
    (documents end to end), and ``span_norms (N, K)``, the sum's norm of the span of ``norm_min_span + j`` units from
    each unit (``nan``: none). Scanned by blocks; final scores in float64 (exact ties: the earlier span first).
    ``floor (Q,)`` leaves out spans scoring at or below it.

    >>> vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])     # 3 units of one document
    >>> norms = torch.tensor([[1.0, 2 ** 0.5], [1.0, 5 ** 0.5], [2 ** 0.5, float("nan")]])  # lengths 1 and 2
    >>> best = top_spans_flat(torch.tensor([[0.0, 1.0]]), vectors, norms, 2, 1, 2)
    >>> best.scores.round(decimals=4).tolist(), best.starts.tolist(), best.lengths.tolist()
    ([[1.0, 0.8944]], [[1, 1]], [[1, 2]])
    """
    if queries.dim() != 2 or unit_vectors.dim() != 2 or queries.shape[1] != unit_vectors.shape[1]:
        raise ValueError(
            f"queries must be (Q, d) and unit_vectors (N, d) with the same d, got {tuple(queries.shape)} and "
            f"{tuple(unit_vectors.shape)}."
        )
    if not unit_vectors.is_floating_point():
        raise ValueError("unit_vectors must be floating point.")
    num_queries, device = queries.shape[0], unit_vectors.device
    unit_queries = torch.nn.functional.normalize(
        queries.to(device=device, dtype=torch.float32), dim=-1, eps=eps
    )
    # float32 copies of another dtype's vectors, made at the first block (the largest)
    vector_buffer: list[Tensor] = []

    def block_dots(lo: int, hi: int) -> Tensor:
        vectors = unit_vectors[lo:hi]
        if unit_vectors.dtype != torch.float32:
            if not vector_buffer:
                vector_buffer.append(torch.empty(hi - lo, unit_vectors.shape[1], device=device))
            vectors = vector_buffer[0][: hi - lo].copy_(vectors)
        # one query: a matrix-vector product (gemv), ~25% faster than a (1, d) @ (d, units) matmul
        if num_queries == 1:
            return torch.mv(vectors, unit_queries[0])[None]
        return unit_queries @ vectors.T

    with torch.inference_mode():
        shape = (num_queries, unit_vectors.shape[0])
        spans = (top_k, min_span, max_span, norm_min_span, block, floor)
        _, best_ids, starts, lengths = _scan_top_k(block_dots, span_norms, shape, *spans)
        exact = _exact_scores(
            unit_queries, unit_vectors, span_norms, starts, lengths, norm_min_span
        )
        return _ranked_spans(exact, best_ids, starts, lengths)


def top_spans_from_dots(
    dots: Tensor,
    span_norms: Tensor,
    top_k: int,
    min_span: int,
    max_span: int,
    *,
    norm_min_span: int = 1,
) -> FlatTopSpans:
    """:func:`top_spans_flat` from the ``(Q, N)`` dot products of unit-norm queries and unit vectors (no rescore)."""
    _dots_width(dots)
    with torch.inference_mode():
        spans = (top_k, min_span, max_span, norm_min_span, None, None)
        return _ranked_spans(
            *_scan_top_k(lambda lo, hi: dots[:, lo:hi], span_norms, dots.shape, *spans)
        )


def _exact_scores(
    queries: Tensor,
    unit_vectors: Tensor,
    span_norms: Tensor,
    starts: Tensor,
    lengths: Tensor,
    norm_min_span: int,
) -> Tensor:
    """Float64 cosines of the spans ``(Q, k)`` of unit-norm ``queries`` (``-inf``: ``starts < 0`` or no such span),
    numerators summed from the unit vectors, each (query, unit) dot product once."""
    chunk, total, device = 4096, unit_vectors.shape[0], unit_vectors.device
    unit_queries = torch.nn.functional.normalize(queries.double(), dim=-1)
    scores = torch.full(starts.shape, float("-inf"), dtype=torch.float64, device=device)
    rows, slots = (starts >= 0).nonzero(as_tuple=True)
    if not rows.numel():
        return scores
    span_starts, span_lengths = starts[rows, slots], lengths[rows, slots]
    steps = torch.arange(int(span_lengths.max()), device=device)
    units = (span_starts[:, None] + steps[None, :]).clamp(max=total - 1)  # (n, widest)
    inside = steps[None, :] < span_lengths[:, None]
    keys = (rows[:, None] * total + units)[inside]
    distinct, inverse = torch.unique(keys, return_inverse=True)
    dots = torch.empty(distinct.numel(), dtype=torch.float64, device=device)
    for first in range(0, distinct.numel(), chunk):
        part = distinct[first : first + chunk]
        dots[first : first + chunk] = (
            unit_vectors[part % total].double() * unit_queries[part // total]
        ).sum(-1)
    per_unit = torch.zeros(units.shape, dtype=torch.float64, device=device)
    per_unit[inside] = dots[inverse]
    norms = span_norms[span_starts, span_lengths - norm_min_span].double()
    scores[rows, slots] = torch.where(
        torch.isfinite(norms) & (norms > 0), per_unit.sum(-1) / norms, float("-inf")
    )
    return scores


def unit_peak_scores(
    dots: Tensor, span_norms: Tensor, min_span: int, max_span: int, *, norm_min_span: int = 1
) -> Tensor:
    """Per unit, the best cosine of any span of ``min_span..max_span`` units containing it (``-inf``: none), ``(Q, N)``
    float64: where along a text a query peaks. Arguments as :func:`top_spans_from_dots`; a sliding-window maximum
    per span length."""
    first_column = _check_flat(span_norms, _dots_width(dots), min_span, max_span, norm_min_span)
    num_queries, total = dots.shape
    with torch.inference_mode():
        prefix = torch.nn.functional.pad(torch.cumsum(dots.double(), dim=-1), (1, 0))
        best = torch.full(
            (num_queries, total), float("-inf"), dtype=torch.float64, device=dots.device
        )
        for length in range(min_span, min(max_span, total) + 1):
            count = total - length + 1
            norms = span_norms[:count, first_column + length - min_span].double()
            sums = prefix[:, length:] - prefix[:, :count]
            scores = torch.where(torch.isfinite(norms) & (norms > 0), sums / norms, float("-inf"))
            # unit u is covered by the spans starting at u - length + 1 .. u: a sliding maximum of width ``length``
            padded = torch.nn.functional.pad(scores, (length - 1, length - 1), value=float("-inf"))
            best = torch.maximum(best, padded.unfold(-1, length, 1).amax(dim=-1))
        return best


def start_peak_scores(dots: Tensor, inverse_norms: Tensor, min_span: int) -> Tensor:
    """Per unit, the best cosine of the spans starting there ``(Q, N)``, from ``(Q, N)`` dot products and the ``(L, N)``
    reciprocals of the span norms of lengths ``min_span..min_span + L - 1`` (0: no such span), in the dots'
    precision: the prefix-sum scan without its top-k, for ranking documents by their best span. A unit starting no
    span gets ``-inf``; one starting some, at least 0 (a missing length counts as 0: no mask per length).

    >>> inverse = torch.tensor([[1.0, 1.0], [2 ** -0.5, 0.0]])
    >>> start_peak_scores(torch.tensor([[0.5, 1.0]]), inverse, 1).tolist()
    [[1.0606601238250732, 1.0]]
    """
    with torch.inference_mode():
        prefix = torch.nn.functional.pad(torch.cumsum(dots, dim=-1), (1, 0))
        inverse = inverse_norms.to(dots.dtype)
        best = _best_by_start(prefix, inverse, min_span, dots.shape[1])
        return best.masked_fill_(~(inverse > 0).any(dim=0)[None], float("-inf"))


def _best_by_start(prefix: Tensor, inverse: Tensor, min_span: int, count: int) -> Tensor:
    """``(Q, count)``: each start unit's best score over the span lengths, from the dot products' ``(Q, units + 1)``
    ``prefix`` sums and the ``(L, count)`` ``inverse`` norms (no span: ``-inf``)."""
    units = prefix.shape[1] - 1
    best = torch.full(
        (prefix.shape[0], count), float("-inf"), dtype=prefix.dtype, device=prefix.device
    )
    row = torch.empty_like(best)
    for column in range(inverse.shape[0]):
        length = min_span + column
        valid = max(min(count, units - length + 1), 0)  # spans must end inside the corpus
        if not valid:
            break
        part, kept = row[:, :valid], best[:, :valid]
        torch.sub(prefix[:, length : length + valid], prefix[:, :valid], out=part)
        part.mul_(inverse[column, :valid])
        torch.maximum(kept, part, out=kept)
    return best


def _check_flat(span_norms: Tensor, total: int, min_span, max_span, norm_min_span) -> int:
    """The one check of the flat-scan span arguments: the column of ``min_span`` in ``span_norms``."""
    check_span_bounds(min_span, max_span)
    first_column, widths = min_span - norm_min_span, max_span - min_span + 1
    if (
        span_norms.dim() != 2
        or span_norms.shape[0] != total
        or not 0 <= first_column <= span_norms.shape[1] - widths
    ):
        raise ValueError(
            f"span_norms {tuple(span_norms.shape)} must be (N={total}, K) with columns for span lengths "
            f"{min_span}..{max_span} (column 0 = length {norm_min_span})."
        )
    if not span_norms.is_floating_point():
        raise ValueError("span_norms must be floating point.")
    return first_column


def _dots_width(dots: Tensor) -> int:
    """``N`` of checked ``(Q, N)`` dot products."""
    if dots.dim() != 2 or not dots.is_floating_point():
        raise ValueError(
            f"dots must be a floating-point (Q, N) tensor, got {tuple(dots.shape)} {dots.dtype}."
        )
    return dots.shape[1]


def _scan_top_k(
    block_dots, span_norms: Tensor, shape, top_k, min_span, max_span, norm_min_span, block, floor
):
    """The checked blockwise scan of ``(Q, N)`` dot products ``shape``, given by ``block_dots(lo, hi)`` (units
    ``lo..hi``): top-k float64 scores, ids (``start * widths + column``), starts, lengths, all ``(Q, k)``;
    ``floor (Q,)`` (or ``None``) as :func:`top_spans_flat`'s."""
    num_queries, total = shape
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}.")
    first_column = _check_flat(span_norms, total, min_span, max_span, norm_min_span)
    widths = max_span - min_span + 1
    if block is None:  # as large as the buffers allow
        block = min(FLAT_BLOCK_UNITS, max(256, FLAT_SCORE_BUFFER // (widths * max(num_queries, 1))))
    block = max(int(block), 1)
    if floor is not None:
        floor = torch.as_tensor(floor, dtype=torch.float64, device=span_norms.device).reshape(-1, 1)
        if floor.shape[0] != num_queries:
            raise ValueError(
                f"floor must hold one score per query ({num_queries}), got {floor.shape[0]}."
            )
    device = span_norms.device
    best_scores = torch.full(
        (num_queries, top_k), float("-inf"), dtype=torch.float64, device=device
    )
    best_ids = torch.full((num_queries, top_k), -1, dtype=torch.long, device=device)
    inverse_buffer = torch.empty(widths, min(block, total), dtype=torch.float64, device=device)
    for block_start in range(0, total, block):
        block_end = min(block_start + block, total)
        # spans starting in the block may run past its end
        stop = min(block_end + max_span - 1, total)
        units, count = stop - block_start, block_end - block_start
        prefix = torch.zeros(num_queries, units + 1, dtype=torch.float64, device=device)
        # restarts per block
        torch.cumsum(block_dots(block_start, stop), dim=1, dtype=torch.float64, out=prefix[:, 1:])
        norms = span_norms[block_start:block_end, first_column : first_column + widths]
        inverse = _inverse_norms(norms, inverse_buffer[:, :count])
        threshold = (
            best_scores[:, -1:] if floor is None else torch.maximum(best_scores[:, -1:], floor)
        )
        rows, columns, values = _block_survivors(
            prefix, norms, inverse, threshold, top_k, min_span, units, count
        )
        if rows.numel():
            ids = (block_start + columns % count) * widths + columns // count
            best_scores, best_ids = _merge_top_k(best_scores, best_ids, rows, values, ids)
    found = best_ids >= 0
    starts = torch.where(found, best_ids // widths, -1)
    lengths = torch.where(found, best_ids % widths + min_span, 0)
    return best_scores, best_ids, starts, lengths


def _ranked_spans(scores: Tensor, ids: Tensor, starts: Tensor, lengths: Tensor) -> FlatTopSpans:
    """Sort each row by score, best first; exact ties keep the earlier span first; missing entries last."""
    order = torch.sort(
        ids.masked_fill(ids < 0, torch.iinfo(torch.long).max), dim=1, stable=True
    ).indices
    order = order.gather(1, torch.sort(-scores.gather(1, order), dim=1, stable=True).indices)
    scores, starts, lengths = (values.gather(1, order) for values in (scores, starts, lengths))
    return FlatTopSpans(scores.masked_fill(starts < 0, float("-inf")), starts, lengths)


def _inverse_norms(norms: Tensor, out: Tensor, rows_per_copy: int = 2048) -> Tensor:
    """``1 / norms`` of a block, transposed to ``(L, count)`` float64 (``0``: no such span), copied a few thousand rows
    at a time (one strided copy of the whole block is as slow as its matmul)."""
    for first in range(0, norms.shape[0], rows_per_copy):
        out[:, first : first + rows_per_copy].copy_(norms[first : first + rows_per_copy].T)
    return torch.nan_to_num_(out, nan=float("inf")).reciprocal_()


def _block_survivors(
    prefix: Tensor, norms: Tensor, inverse: Tensor, threshold: Tensor, top_k, min_span, units, count
):
    """Spans of the block scoring above each query's ``threshold`` (its ``k``-th best): ``(rows, columns, scores)``.
    Each (query, start unit)'s best score over the lengths (none: ``±0``) picks the starts scored again with the
    stored norms; until a query has ``top_k`` scores, only starts at or above the block's ``top_k``-th best go on
    when that is above 0 (the others cannot enter)."""
    widths = inverse.shape[0]
    best = _best_by_start(prefix, inverse, min_span, count)
    starts_above = threshold
    if not bool(torch.isfinite(threshold).all()):
        kth = best.topk(min(top_k, count), dim=1).values[:, -1:]
        bound = torch.where(kth > 0, kth.nextafter(kth.new_tensor(float("-inf"))), float("-inf"))
        starts_above = torch.maximum(threshold, bound)
    rows, offsets = (best > starts_above).nonzero(as_tuple=True)
    if not rows.numel():
        return rows, offsets, prefix.new_zeros(0)
    lengths = torch.arange(min_span, min_span + widths, device=prefix.device)
    ends = offsets[:, None] + lengths[None, :]  # (n, L)
    inside = ends <= units
    numerators = prefix[rows[:, None], ends.clamp(max=units)] - prefix[rows, offsets][:, None]
    values = (numerators / norms[offsets].double()).masked_fill(~inside, float("nan"))
    keep_rows, keep_columns = (values > threshold[rows]).nonzero(as_tuple=True)
    return (
        rows[keep_rows],
        keep_columns * count + offsets[keep_rows],
        values[keep_rows, keep_columns],
    )


def _merge_top_k(
    best_scores: Tensor, best_ids: Tensor, rows: Tensor, scores: Tensor, ids: Tensor
) -> tuple[Tensor, Tensor]:
    """Merge candidates ``(rows, scores, ids)`` into each query's running top-k ``(Q, k)``, best first."""
    num_queries, top_k = best_scores.shape
    counts = torch.bincount(rows, minlength=num_queries)
    width = int(counts.max())
    # candidates laid out densely per row (their position inside the row by a stable sort on rows)
    order = torch.sort(rows, stable=True).indices
    sorted_rows = rows[order]
    row_starts = torch.cumsum(counts, 0) - counts
    position = torch.arange(rows.numel(), device=rows.device) - row_starts[sorted_rows]
    all_scores = torch.cat(
        [best_scores, best_scores.new_full((num_queries, width), float("-inf"))], dim=1
    )
    all_ids = torch.cat([best_ids, best_ids.new_full((num_queries, width), -1)], dim=1)
    all_scores[sorted_rows, top_k + position] = scores[order].to(all_scores.dtype)
    all_ids[sorted_rows, top_k + position] = ids[order]
    values, take = all_scores.topk(top_k, dim=1)
    return values, all_ids.gather(1, take).masked_fill(torch.isinf(values) & (values < 0), -1)
