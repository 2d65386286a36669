"""Span math: the one home for span enumeration, prefix-sum pooling and fused best-span scoring.

Plain torch, no sentence-transformers imports. Every consumer (``SpanPooling``, ``encode_spans``,
``best_spans``, the losses, the evaluator, the index) calls these functions.

Conventions (decided here, never re-derived elsewhere):

* A **unit** is a word or a sub-word token. Units of a row are described by ``boundaries``, a
  ``(B, U + 1)`` long tensor of token positions: unit ``u`` of row ``b`` covers tokens
  ``boundaries[b, u] : boundaries[b, u + 1]``. Rows with fewer units are padded by repeating their
  last boundary; ``num_units[b]`` says how many units row ``b`` really has. Special tokens and
  padding lie outside every unit, so they can never belong to a span.
* A **span** is ``(start, end)`` in units, end exclusive, with ``min_span <= end - start <= max_span``.
  Spans are enumerated start-major: by start unit, then by length.
* A span's vector is the **mean of its token vectors** (SLICE); its cosine to a query only needs the
  sum, which prefix sums give in O(1) per span.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "SpanBatch",
    "BestSpans",
    "check_span_bounds",
    "span_grid",
    "prefix_sums",
    "pool_spans",
    "pool_units",
    "unit_sums",
    "span_sum_norms",
    "best_span_scores",
    "span_cosines",
]


def check_span_bounds(min_span: int, max_span: int) -> None:
    """Raise a clear ``ValueError`` for impossible span bounds.

    >>> check_span_bounds(1, 20)
    >>> check_span_bounds(3, 2)
    Traceback (most recent call last):
    ...
    ValueError: min_span (3) must be <= max_span (2).
    """
    for name, value in (("min_span", min_span), ("max_span", max_span)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer, got {value!r}.")
    if min_span < 1:
        raise ValueError(f"min_span must be >= 1, got {min_span}.")
    if min_span > max_span:
        raise ValueError(f"min_span ({min_span}) must be <= max_span ({max_span}).")


def span_grid(num_units: int, min_span: int, max_span: int, device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """All spans over ``num_units`` units, start-major: returns ``(starts, ends)``, each of shape ``(S,)``.

    Spans running past ``num_units`` are not produced.

    >>> starts, ends = span_grid(3, 1, 2)
    >>> list(zip(starts.tolist(), ends.tolist()))
    [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)]
    """
    check_span_bounds(min_span, max_span)
    lengths = torch.arange(min_span, max_span + 1, device=device)
    starts = torch.arange(max(num_units, 0), device=device)
    grid_starts = starts[:, None].expand(-1, lengths.numel())
    grid_ends = grid_starts + lengths[None, :]
    keep = grid_ends <= num_units
    return grid_starts[keep], grid_ends[keep]


def prefix_sums(token_embeddings: Tensor) -> Tensor:
    """``(B, T, d)`` → ``(B, T + 1, d)`` float32 prefix sums with a leading zero row.

    Half-precision inputs are summed in float32. Keep ``T`` moderate (a model window, a few hundred
    tokens) so that differences of prefix sums stay exact to float tolerance.

    >>> prefix_sums(torch.ones(1, 3, 2))[0, :, 0].tolist()
    [0.0, 1.0, 2.0, 3.0]
    """
    x = token_embeddings.float()
    zeros = x.new_zeros(x.shape[0], 1, x.shape[2])
    return torch.cat([zeros, x.cumsum(dim=1)], dim=1)


def _gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """``values (B, T, *)`` gathered at ``index (B, N)`` along dim 1 → ``(B, N, *)``."""
    if values.dim() == 2:
        return values.gather(1, index)
    expanded = index.reshape(*index.shape, *([1] * (values.dim() - 2))).expand(*index.shape, *values.shape[2:])
    return values.gather(1, expanded)


def _start_mask(num_units: Tensor, width: int, owned: tuple[Tensor, Tensor] | None) -> Tensor:
    """``(B, width)`` bool: which start units a row may use (inside the text and, if given, owned)."""
    positions = torch.arange(width, device=num_units.device)[None, :]
    mask = positions < num_units[:, None]
    if owned is not None:
        lo, hi = owned
        mask &= (positions >= lo[:, None]) & (positions < hi[:, None])
    return mask


@dataclass
class SpanBatch:
    """Mean-pooled spans of a padded batch.

    ``embeddings`` is ``(B, S, d)``; ``starts``/``ends`` are the shared ``(S,)`` unit grid; ``mask``
    ``(B, S)`` says which spans exist in each row.
    """

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
    owned: tuple[Tensor, Tensor] | None = None,
) -> SpanBatch:
    """Mean vector of every span of ``min_span..max_span`` units, by prefix sums (no loop over spans).

    ``owned=(lo, hi)`` (each ``(B,)``) keeps only spans whose start unit lies in ``[lo, hi)``; long
    texts split into windows use it so that each span is produced by exactly one window.

    >>> emb = torch.arange(6.0).reshape(1, 3, 2)          # 3 tokens, d = 2
    >>> bounds = torch.tensor([[0, 1, 3]])                 # unit 0 = token 0, unit 1 = tokens 1..2
    >>> out = pool_spans(emb, bounds, torch.tensor([2]), 1, 2)
    >>> out.embeddings[0][out.mask[0]].tolist()
    [[0.0, 1.0], [2.0, 3.0], [3.0, 4.0]]
    """
    batch, _, dim = token_embeddings.shape
    width = boundaries.shape[1] - 1
    starts, ends = span_grid(width, min_span, max_span, device=token_embeddings.device)
    if starts.numel() == 0:
        empty = token_embeddings.new_zeros(batch, 0, dim, dtype=torch.float32)
        return SpanBatch(empty, starts, ends, torch.zeros(batch, 0, dtype=torch.bool, device=token_embeddings.device))
    unit_prefix = _gather_rows(prefix_sums(token_embeddings), boundaries)  # (B, U + 1, d)
    totals = unit_prefix[:, ends] - unit_prefix[:, starts]
    counts = (boundaries[:, ends] - boundaries[:, starts]).clamp(min=1).unsqueeze(-1).to(totals.dtype)
    mask = (ends[None, :] <= num_units[:, None]) & _start_mask(num_units, width, owned)[:, starts]
    return SpanBatch(totals / counts, starts, ends, mask)


def pool_units(
    token_embeddings: Tensor, boundaries: Tensor, lo: Tensor, hi: Tensor
) -> tuple[Tensor, Tensor]:
    """Sum and token count of units ``[lo, hi)`` of each row: ``((B, d), (B,))``.

    The mean over all units of a text (``lo = 0``, ``hi = num_units``) is the text's own span vector:
    the representation queries get, so that query and span vectors are comparable.

    >>> total, count = pool_units(torch.ones(1, 4, 2), torch.tensor([[1, 2, 3]]), torch.tensor([0]), torch.tensor([2]))
    >>> total.tolist(), count.tolist()
    ([[2.0, 2.0]], [2])
    """
    sums = prefix_sums(token_embeddings)
    token_lo = boundaries.gather(1, lo[:, None].long())
    token_hi = boundaries.gather(1, hi[:, None].long())
    total = _gather_rows(sums, token_hi)[:, 0] - _gather_rows(sums, token_lo)[:, 0]
    return total, (token_hi - token_lo)[:, 0]


def unit_sums(token_embeddings: Tensor, boundaries: Tensor) -> tuple[Tensor, Tensor]:
    """Sum of the token vectors of every unit, and its token count: ``((B, U, d), (B, U))``.

    A span's sum is the sum of its units' sums, so an index can store one vector per unit.

    >>> sums, counts = unit_sums(torch.ones(1, 4, 2), torch.tensor([[1, 2, 4]]))
    >>> sums.tolist(), counts.tolist()
    ([[[1.0, 1.0], [2.0, 2.0]]], [[1, 2]])
    """
    sums = prefix_sums(token_embeddings)
    return _gather_rows(sums, boundaries[:, 1:]) - _gather_rows(sums, boundaries[:, :-1]), boundaries.diff(dim=1)


def span_sum_norms(
    token_embeddings: Tensor,
    boundaries: Tensor,
    num_units: Tensor,
    min_span: int,
    max_span: int,
    owned: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """L2 norm of the token-vector **sum** of every span, as a ``(B, U, L)`` grid over (start, length).

    ``[b, u, l]`` is the span of ``min_span + l`` units starting at unit ``u``; spans that do not
    exist (past the text, or a start outside ``owned``) are ``nan``. Computed one length at a time.

    >>> emb = torch.tensor([[[3.0, 0.0], [0.0, 4.0]]])
    >>> span_sum_norms(emb, torch.tensor([[0, 1, 2]]), torch.tensor([2]), 1, 2).tolist()
    [[[3.0, 5.0], [4.0, nan]]]
    """
    check_span_bounds(min_span, max_span)
    unit_prefix = _gather_rows(prefix_sums(token_embeddings), boundaries)
    return _span_sum_norms(unit_prefix, num_units, min_span, max_span, owned)


def _span_sum_norms(unit_prefix: Tensor, num_units: Tensor, min_span: int, max_span: int, owned) -> Tensor:
    """:func:`span_sum_norms` from the prefix sums at unit boundaries ``(B, U + 1, d)``: plain slices per length."""
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
        if differentiable:  # masked spans are often all-zero sums: keep norm()'s backward away from 0/0
            span = torch.where(valid[..., None], span, torch.ones_like(span))
        norms[:, :count, length - min_span] = span.norm(dim=-1).masked_fill(~valid, float("nan"))
    return norms


@dataclass
class BestSpans:
    """Top spans per (row, query): ``scores``, ``starts``, ``ends`` are ``(B, Q, k)``.

    Missing entries (a row with fewer than ``k`` spans) have score ``-inf`` and start = end = -1.
    """

    scores: Tensor
    starts: Tensor
    ends: Tensor


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
) -> BestSpans:
    """Fused best-span search: the top-``k`` cosine between each query and all spans of each row.

    ``queries`` is ``(Q, d)``, shared by all rows, or ``(B, Q, d)``: row ``b`` against its own queries
    (paired scoring, e.g. one origin phrase per passage). The ``(B, S, d)`` span matrix is never
    built: prefix sums are gathered once at the unit boundaries, query dot products come from one
    matmul with them (``q · (P_j - P_i)``), and span norms are computed one span length at a time with
    plain slices, so memory stays at the size of the token embeddings. The loop runs over the ``K``
    span lengths, never over spans.

    >>> emb = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])
    >>> bounds = torch.tensor([[0, 1, 2, 3]])
    >>> best = best_span_scores(torch.tensor([[0.0, 1.0]]), emb, bounds, torch.tensor([3]), 1, 2)
    >>> best.scores.tolist(), best.starts.tolist(), best.ends.tolist()
    ([[[1.0]]], [[[1]]], [[[2]]])
    """
    check_span_bounds(min_span, max_span)
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}.")
    batch = token_embeddings.shape[0]
    if queries.dim() not in (2, 3) or (queries.dim() == 3 and queries.shape[0] != batch):
        raise ValueError(f"queries must be (Q, d) or (B={batch}, Q, d), got {tuple(queries.shape)}.")
    num_queries = queries.shape[-2]
    device = token_embeddings.device
    width = boundaries.shape[1] - 1
    unit_queries = torch.nn.functional.normalize(queries.float().to(device), dim=-1, eps=eps)
    unit_prefix = _gather_rows(prefix_sums(token_embeddings), boundaries)  # (B, U+1, d): gathered once
    if unit_queries.dim() == 2:
        query_sums = unit_prefix @ unit_queries.T  # (B, U+1, Q)
    else:
        query_sums = unit_prefix @ unit_queries.transpose(1, 2)  # (B, U+1, d) @ (B, d, Q)
    norms = _span_sum_norms(unit_prefix, num_units, min_span, max_span, owned)
    exists = ~torch.isnan(norms)
    # Mask by selection, never by NaN arithmetic, so gradients of real spans stay finite.
    norms = torch.where(exists, norms, torch.ones_like(norms)).clamp(min=eps)

    best_scores = torch.full((batch, top_k, num_queries), float("-inf"), device=device)
    best_starts = torch.full((batch, top_k, num_queries), -1, dtype=torch.long, device=device)
    best_ends = best_starts.clone()
    for length in range(min_span, min(max_span, width) + 1):
        count = width - length + 1
        dots = query_sums[:, length : length + count] - query_sums[:, :count]  # (B, n, Q)
        scores = dots / norms[:, :count, length - min_span, None]
        scores = scores.masked_fill(~exists[:, :count, length - min_span, None], float("-inf"))
        starts = torch.arange(count, device=device)[None, :, None].expand(batch, count, num_queries)
        merged_scores = torch.cat([best_scores, scores], dim=1)
        merged_starts = torch.cat([best_starts, starts], dim=1)
        merged_ends = torch.cat([best_ends, starts + length], dim=1)
        best_scores, order = merged_scores.topk(top_k, dim=1)  # merged has top_k + n rows: always enough
        best_starts = merged_starts.gather(1, order)
        best_ends = merged_ends.gather(1, order)
    missing = torch.isinf(best_scores)
    best_starts = best_starts.masked_fill(missing, -1)
    best_ends = best_ends.masked_fill(missing, -1)
    return BestSpans(best_scores.transpose(1, 2), best_starts.transpose(1, 2), best_ends.transpose(1, 2))


def span_cosines(queries: Tensor, token_embeddings: Tensor, boundaries: Tensor, starts: Tensor, ends: Tensor) -> Tensor:
    """Cosine between queries and the given spans, differentiable: ``(B, Q)``.

    ``queries`` is ``(Q, d)`` or ``(B, Q, d)``; ``starts``/``ends`` ``(B, Q)`` are unit indices (as
    returned by :func:`best_span_scores`; ``-1`` marks a missing span, scored ``-inf``). Training
    finds the best spans without gradient and calls this on them: the max over spans only passes
    gradient to its arg-max, so the gradient is the same as differentiating the full max.

    >>> emb = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    >>> span_cosines(torch.tensor([[0.0, 1.0]]), emb, torch.tensor([[0, 1, 2]]), torch.tensor([[1]]), torch.tensor([[2]])).tolist()
    [[1.0]]
    """
    batch = token_embeddings.shape[0]
    if queries.dim() == 2:
        queries = queries[None].expand(batch, -1, -1)
    missing = starts < 0
    sums = prefix_sums(token_embeddings)
    token_starts = boundaries.gather(1, starts.clamp(min=0))
    token_ends = boundaries.gather(1, ends.clamp(min=0))
    span_sums = _gather_rows(sums, token_ends) - _gather_rows(sums, token_starts)  # (B, Q, d)
    cosines = torch.nn.functional.cosine_similarity(span_sums, queries.to(span_sums.dtype), dim=-1)
    return cosines.masked_fill(missing, float("-inf"))
