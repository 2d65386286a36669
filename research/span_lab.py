"""Span math used only by the research scripts: document similarity (MaxSim over all spans, span
selection) and the hard negatives of span-score distillation. Built on :mod:`slice_st.spans`."""

from __future__ import annotations

import torch
from torch import Tensor

from slice_st.spans import check_span_bounds, prefix_sums, span_sum_norms


def unit_prefix_sums(token_embeddings: Tensor, boundaries: Tensor) -> Tensor:
    """Prefix sums of the token vectors at the unit boundaries, ``(B, U + 1, d)``: span ``[u, v)`` is
    ``[v] - [u]``."""
    sums = prefix_sums(token_embeddings)
    index = boundaries[..., None].expand(*boundaries.shape, sums.shape[-1])
    return sums.gather(1, index)


def max_span_cosines(
    queries: Tensor,
    token_embeddings: Tensor,
    boundaries: Tensor,
    num_units: Tensor,
    min_span: int,
    max_span: int,
    owned: tuple[Tensor, Tensor] | None = None,
    *,
    query_chunk: int = 1024,
    eps: float = 1e-12,
) -> Tensor:
    """For every query and row, the best cosine over **all** spans of the row: ``(B, Q)`` (MaxSim).

    ``queries`` ``(Q, d)`` are shared by all rows. The same fused math as :func:`best_span_scores`
    (prefix sums gathered at unit boundaries, one matmul with the queries, span norms one length at
    a time) with a running maximum instead of a top-k: no ``(B, S, d)`` span matrix and no span
    indices; per span length one subtraction, one fused multiply-add (inverse norm, ``-inf`` for
    spans that do not exist) and one max. Queries go ``query_chunk`` at a time to bound the
    ``(B, U, chunk)`` buffers. Rows without a span give ``-inf``.

    >>> emb = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])
    >>> bounds = torch.tensor([[0, 1, 2, 3]])
    >>> max_span_cosines(torch.tensor([[0.0, 1.0], [1.0, 1.0]]), emb, bounds, torch.tensor([3]), 1,
    ...     2).round(decimals=4).tolist()
    [[1.0, 1.0]]
    """
    check_span_bounds(min_span, max_span)
    if queries.dim() != 2 or queries.shape[1] != token_embeddings.shape[-1]:
        raise ValueError(
            f"queries must be (Q, d={token_embeddings.shape[-1]}), got {tuple(queries.shape)}."
        )
    batch, device = token_embeddings.shape[0], token_embeddings.device
    width = boundaries.shape[1] - 1
    unit_queries = torch.nn.functional.normalize(queries.float().to(device), dim=-1, eps=eps)
    best = torch.full((batch, unit_queries.shape[0]), float("-inf"), device=device)
    if width == 0 or unit_queries.shape[0] == 0:
        return best
    with torch.inference_mode():
        unit_prefix = unit_prefix_sums(token_embeddings, boundaries)  # (B, U+1, d)
        norms = span_sum_norms(
            token_embeddings, boundaries, num_units, min_span, max_span, owned
        )  # nan: no span
        exists = ~torch.isnan(norms)
        inverse = torch.where(exists, 1.0 / norms.clamp(min=eps), torch.zeros_like(norms))
        absent = torch.where(exists, torch.zeros_like(norms), torch.full_like(norms, float("-inf")))
        for first in range(0, unit_queries.shape[0], query_chunk):
            chunk = unit_queries[first : first + query_chunk]
            query_sums = unit_prefix @ chunk.T  # (B, U+1, q)
            running = best[:, first : first + chunk.shape[0]]
            buffer = torch.empty(batch, width, chunk.shape[0], device=device)
            for length in range(min_span, min(max_span, width) + 1):
                count, column = width - length + 1, length - min_span
                dots = torch.sub(
                    query_sums[:, length : length + count],
                    query_sums[:, :count],
                    out=buffer[:, :count],
                )
                scores = torch.addcmul(
                    absent[:, :count, column, None],
                    dots,
                    inverse[:, :count, column, None],
                    out=buffer[:, :count],
                )
                torch.maximum(running, scores.amax(dim=1), out=running)
    return best


def span_cosine_grid(
    vectors: Tensor,
    token_embeddings: Tensor,
    boundaries: Tensor,
    num_units: Tensor,
    min_span: int,
    max_span: int,
    owned: tuple[Tensor, Tensor] | None = None,
    eps: float = 1e-12,
) -> Tensor:
    """Cosine of every span of row ``b`` to ``vectors[b]``, as a ``(B, U, L)`` grid over (start, length).

    ``[b, u, l]`` is the span of ``min_span + l`` units starting at unit ``u`` (``nan`` where it does
    not exist), the layout of :func:`span_sum_norms`. Fused: one dot product per token (the span's
    numerator is a difference of their prefix sums), no span matrix. E.g. each span's cosine to its
    document's mean vector ("centrality").

    >>> emb = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    >>> span_cosine_grid(torch.tensor([[1.0, 0.0]]), emb, torch.tensor([[0, 1, 2]]), torch.tensor([2]), 1,
    ...     2).double().round(decimals=4).tolist()
    [[[1.0, 0.7071], [0.0, nan]]]
    """
    check_span_bounds(min_span, max_span)
    width = boundaries.shape[1] - 1
    unit_vectors = torch.nn.functional.normalize(
        vectors.float().to(token_embeddings.device), dim=-1, eps=eps
    )
    with torch.inference_mode():
        unit_prefix = unit_prefix_sums(token_embeddings, boundaries)  # (B, U+1, d)
        dot_prefix = (unit_prefix @ unit_vectors[:, :, None])[..., 0]  # (B, U+1)
        norms = span_sum_norms(token_embeddings, boundaries, num_units, min_span, max_span, owned)
        grid = torch.full_like(norms, float("nan"))
        for length in range(min_span, min(max_span, width) + 1):
            count = width - length + 1
            grid[:, :count, length - min_span] = (
                dot_prefix[:, length : length + count] - dot_prefix[:, :count]
            ) / norms[:, :count, length - min_span].clamp(min=eps)
        return grid  # nan where the norm is nan: the span does not exist


def greedy_disjoint_spans(
    scores: Tensor, count: Tensor | int, min_span: int = 1
) -> tuple[Tensor, Tensor]:
    """Greedy non-overlapping spans by score: ``(starts, ends)`` ``(B, m)`` in units, ``-1`` where none.

    ``scores`` is a ``(B, U, L)`` grid over (start unit, length ``min_span + l``) as
    :func:`span_sum_norms` lays it out (``nan`` or ``-inf``: not a candidate). Row ``b`` takes up to
    ``count[b]`` spans (``m = max(count)``): repeatedly the best remaining span, after which every
    span overlapping it is dropped. Spans come in the order they were chosen. The loop runs over
    the ``m`` choices, each vectorised over rows and spans.

    >>> grid = torch.tensor([[[0.1, 0.9], [0.5, float("nan")]]])     # 2 units, lengths 1 and 2
    >>> greedy_disjoint_spans(grid, 2)
    (tensor([[ 0, -1]]), tensor([[ 2, -1]]))
    """
    batch, width, widths = scores.shape
    device = scores.device
    counts = (
        torch.as_tensor(count, device=device).expand(batch)
        if not torch.is_tensor(count) or count.dim() == 0
        else count.to(device)
    )
    steps = int(counts.max()) if batch else 0
    starts_out = torch.full((batch, steps), -1, dtype=torch.long, device=device)
    ends_out = starts_out.clone()
    if steps == 0 or width == 0:
        return starts_out, ends_out
    remaining = torch.nan_to_num(scores.float(), nan=float("-inf")).clone()
    unit_starts = torch.arange(width, device=device)[:, None]  # (U, 1)
    unit_ends = (
        unit_starts + torch.arange(min_span, min_span + widths, device=device)[None, :]
    )  # (U, L)
    rows = torch.arange(batch, device=device)
    for step in range(steps):
        values, flat = remaining.view(batch, -1).max(dim=1)
        take = torch.isfinite(values) & (step < counts)
        start, end = flat // widths, flat // widths + flat % widths + min_span
        starts_out[:, step] = torch.where(take, start, -1)
        ends_out[:, step] = torch.where(take, end, -1)
        overlap = (
            (unit_starts[None] < end[:, None, None])
            & (unit_ends[None] > start[:, None, None])
            & take[:, None, None]
        )
        remaining.masked_fill_(overlap, float("-inf"))
        remaining[rows[~take]] = float("-inf")
    return starts_out, ends_out


def tile_spans(num_units: Tensor, count: Tensor | int) -> tuple[Tensor, Tensor]:
    """Cut each row's units into ``count`` contiguous, near-equal spans covering all of them.

    Returns ``(starts, ends)`` ``(B, m)`` in units (``m = max(count)``, ``-1`` past a row's
    tiles); a row with fewer units than ``count`` gets one span per unit. Tile ``i`` of a row of
    ``U`` units and ``c`` tiles is ``[⌊iU/c⌋, ⌊(i+1)U/c⌋)``.

    >>> tile_spans(torch.tensor([5, 2]), 2)
    (tensor([[0, 2],
            [0, 1]]), tensor([[2, 5],
            [1, 2]]))
    """
    num_units = num_units.long()
    counts = (
        torch.as_tensor(count, device=num_units.device).long().expand(num_units.shape[0]).clone()
        if not torch.is_tensor(count) or count.dim() == 0
        else count.long().clone()
    )
    counts = torch.minimum(counts, num_units)
    steps = int(counts.max()) if counts.numel() else 0
    index = torch.arange(steps, device=num_units.device)[None, :]
    safe = counts.clamp(min=1)[:, None]
    starts = index * num_units[:, None] // safe
    ends = (index + 1) * num_units[:, None] // safe
    missing = index >= counts[:, None]
    return starts.masked_fill(missing, -1), ends.masked_fill(missing, -1)


def shift_spans(
    starts: Tensor,
    ends: Tensor,
    num_units: Tensor,
    count: int,
    max_shift: int,
    min_span: int = 1,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """``count`` extra spans per row that overlap drawn ones: copies with each end moved by up to ``max_shift`` units.

    Hard negatives for span training (a span and its near neighbours must be told apart). Each new
    span copies a random valid span of its row and moves its start and end independently by
    ``-max_shift..max_shift``, kept inside the row's units and at least ``min_span`` long; rows
    without a valid span get ``-1``. Returns ``(starts, ends)`` of shape ``(B, count)``.

    >>> s, e = shift_spans(torch.tensor([[2, -1]]), torch.tensor([[5, -1]]), torch.tensor([9]), 3, 1,
    ...     generator=torch.Generator().manual_seed(0))
    >>> bool(((s >= 1) & (s <= 3) & (e >= 4) & (e <= 6) & (e - s >= 1)).all())
    True
    """
    if count < 0 or max_shift < 0:
        raise ValueError(f"count and max_shift must be >= 0, got {count} and {max_shift}.")
    device = starts.device
    batch, drawn = starts.shape
    valid = starts >= 0
    weights = (
        valid.float() + (~valid.any(dim=1, keepdim=True)).float()
    )  # rows without a span: any pick, masked below
    pick = (
        torch.multinomial(weights.cpu(), count, replacement=True, generator=generator).to(device)
        if count
        else starts[:, :0]
    )
    base_starts, base_ends = starts.gather(1, pick), ends.gather(1, pick)
    moves = torch.randint(-max_shift, max_shift + 1, (2, batch, count), generator=generator).to(
        device
    )
    new_starts = (base_starts + moves[0]).clamp(min=0)
    new_ends = torch.minimum(base_ends + moves[1], num_units[:, None])
    new_ends = torch.maximum(new_ends, new_starts + min_span)
    bad = (base_starts < 0) | (new_ends > num_units[:, None])
    return new_starts.masked_fill(bad, -1), new_ends.masked_fill(bad, -1)
