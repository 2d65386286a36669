"""Span math (slice_st.spans) against naive Python loops, property-based."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import expected_span_units
from hypothesis import given
from hypothesis import strategies as st

from slice_st.spans import (
    best_span_scores,
    check_span_bounds,
    pool_spans,
    pool_units,
    prefix_sums,
    span_grid,
    span_sum_norms,
    unit_sums,
)

# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------


@st.composite
def span_batches(draw, max_rows: int = 4, max_units: int = 7):
    """A padded batch following the library's conventions.

    Each row: ``lead`` non-unit tokens (e.g. [CLS]), ``n`` units of 1..3 tokens each, then non-unit
    tokens up to the common length (e.g. [SEP] and padding). Boundaries of rows with fewer units are
    padded by repeating their last boundary. Returns ``(embeddings, boundaries, num_units)``.
    """
    batch = draw(st.integers(1, max_rows))
    dim = draw(st.integers(1, 5))
    rows = []
    for _ in range(batch):
        num_units = draw(st.integers(0, max_units))
        sizes = draw(st.lists(st.integers(1, 3), min_size=num_units, max_size=num_units))
        lead = draw(st.integers(0, 2))
        rows.append((lead, sizes))
    trail = draw(st.integers(0, 3))
    length = max(1, max(lead + sum(sizes) for lead, sizes in rows) + trail)
    width = max(len(sizes) for _, sizes in rows)
    boundaries = torch.zeros(batch, width + 1, dtype=torch.long)
    for row, (lead, sizes) in enumerate(rows):
        cuts = (lead + np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])).tolist()
        cuts += [cuts[-1]] * (width + 1 - len(cuts))
        boundaries[row] = torch.tensor(cuts)
    num_units = torch.tensor([len(sizes) for _, sizes in rows])
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(batch, length, dim, generator=generator)
    return embeddings, boundaries, num_units


bounds = st.integers(1, 4).flatmap(lambda lo: st.tuples(st.just(lo), st.integers(lo, lo + 4)))


@st.composite
def owned_ranges(draw, num_units: torch.Tensor):
    """``None`` or per-row ``(lo, hi)`` start-unit ranges, ``0 <= lo <= hi <= num_units + 1``."""
    if draw(st.booleans()):
        return None
    lo, hi = [], []
    for n in num_units.tolist():
        a = draw(st.integers(0, n + 1))
        b = draw(st.integers(a, n + 1))
        lo.append(a)
        hi.append(b)
    return torch.tensor(lo), torch.tensor(hi)


# ---------------------------------------------------------------------------------------------
# Naive references
# ---------------------------------------------------------------------------------------------


def naive_span_exists(row: int, start: int, end: int, num_units, owned) -> bool:
    if end > int(num_units[row]):
        return False
    if owned is not None:
        lo, hi = int(owned[0][row]), int(owned[1][row])
        if not lo <= start < hi:
            return False
    return True


def naive_mean(embeddings, boundaries, row: int, start: int, end: int) -> np.ndarray:
    first, last = int(boundaries[row, start]), int(boundaries[row, end])
    vectors = [embeddings[row, token].double().numpy() for token in range(first, last)]
    return sum(vectors) / len(vectors)


def naive_cosine(query: np.ndarray, vector: np.ndarray) -> float:
    return float(query @ vector / (np.linalg.norm(query) * np.linalg.norm(vector)))


# ---------------------------------------------------------------------------------------------
# check_span_bounds / span_grid / prefix_sums
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("min_span, max_span", [(1, 1), (1, 20), (3, 3), (2, 7)])
def test_check_span_bounds_accepts_valid(min_span, max_span):
    assert check_span_bounds(min_span, max_span) is None


@pytest.mark.parametrize(
    "min_span, max_span, message",
    [
        (0, 3, "min_span must be >= 1"),
        (-2, 3, "min_span must be >= 1"),
        (4, 3, "must be <= max_span"),
        (1.0, 3, "integer"),
        (1, 3.0, "integer"),
        ("1", 3, "integer"),
        (1, None, "integer"),
        (True, 3, "integer"),
        (1, np.float64(2), "integer"),
    ],
)
def test_check_span_bounds_rejects(min_span, max_span, message):
    with pytest.raises(ValueError, match=message):
        check_span_bounds(min_span, max_span)


@given(num_units=st.integers(-2, 12), span_bounds=bounds)
def test_span_grid_matches_naive_start_major(num_units, span_bounds):
    min_span, max_span = span_bounds
    starts, ends = span_grid(num_units, min_span, max_span)
    got = list(zip(starts.tolist(), ends.tolist()))
    assert got == expected_span_units(max(num_units, 0), min_span, max_span)
    assert starts.dtype == ends.dtype == torch.long
    lengths = ends - starts
    if got:
        assert int(lengths.min()) >= min_span and int(lengths.max()) <= max_span
        assert int(starts.min()) >= 0 and int(ends.max()) <= num_units
        # start-major: starts never decrease, and lengths increase within one start
        assert all(a <= b for a, b in zip(starts.tolist(), starts.tolist()[1:]))


def test_span_grid_rejects_bad_bounds():
    with pytest.raises(ValueError):
        span_grid(5, 3, 2)
    with pytest.raises(ValueError):
        span_grid(5, 0, 2)


@given(
    shape=st.tuples(st.integers(1, 3), st.integers(0, 6), st.integers(1, 4)),
    seed=st.integers(0, 2**31 - 1),
    half=st.booleans(),
)
def test_prefix_sums_matches_naive(shape, seed, half):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    if half:
        x = x.half()
    sums = prefix_sums(x)
    batch, length, dim = shape
    assert sums.shape == (batch, length + 1, dim)
    assert sums.dtype == torch.float32
    reference = x.double()
    for b in range(batch):
        assert torch.all(sums[b, 0] == 0)
        for t in range(length + 1):
            expected = reference[b, :t].sum(dim=0) if t else torch.zeros(dim, dtype=torch.float64)
            assert torch.allclose(sums[b, t].double(), expected, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# pool_spans
# ---------------------------------------------------------------------------------------------


@given(data=st.data(), batch=span_batches(), span_bounds=bounds)
def test_pool_spans_matches_naive_mean(data, batch, span_bounds):
    embeddings, boundaries, num_units = batch
    min_span, max_span = span_bounds
    owned = data.draw(owned_ranges(num_units))
    out = pool_spans(embeddings, boundaries, num_units, min_span, max_span, owned=owned)

    width = boundaries.shape[1] - 1
    grid = expected_span_units(width, min_span, max_span)
    assert list(zip(out.starts.tolist(), out.ends.tolist())) == grid
    assert out.embeddings.shape == (embeddings.shape[0], len(grid), embeddings.shape[2])
    assert out.mask.shape == (embeddings.shape[0], len(grid))
    assert out.mask.dtype == torch.bool
    for row in range(embeddings.shape[0]):
        for index, (start, end) in enumerate(grid):
            exists = naive_span_exists(row, start, end, num_units, owned)
            assert bool(out.mask[row, index]) == exists, (row, start, end)
            if exists:
                expected = naive_mean(embeddings, boundaries, row, start, end)
                np.testing.assert_allclose(
                    out.embeddings[row, index].double().numpy(), expected, atol=1e-5, rtol=1e-4
                )


def test_pool_spans_doc_example():
    emb = torch.arange(6.0).reshape(1, 3, 2)
    out = pool_spans(emb, torch.tensor([[0, 1, 3]]), torch.tensor([2]), 1, 2)
    assert out.embeddings[0][out.mask[0]].tolist() == [[0.0, 1.0], [2.0, 3.0], [3.0, 4.0]]


def test_pool_spans_min_span_longer_than_every_row():
    emb = torch.randn(2, 6, 3)
    boundaries = torch.tensor([[1, 2, 3, 4], [1, 3, 3, 3]])
    out = pool_spans(emb, boundaries, torch.tensor([3, 1]), 4, 6)
    assert out.embeddings.shape == (2, 0, 3)
    assert out.mask.shape == (2, 0)
    assert out.starts.numel() == out.ends.numel() == 0


def test_pool_spans_half_precision_is_pooled_in_float32():
    emb = torch.randn(1, 5, 4).half()
    out = pool_spans(emb, torch.tensor([[1, 2, 4]]), torch.tensor([2]), 1, 2)
    assert out.embeddings.dtype == torch.float32
    expected = emb[0, 1:4].float().mean(dim=0)
    assert torch.allclose(out.embeddings[0, 1], expected, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# pool_units
# ---------------------------------------------------------------------------------------------


@given(data=st.data(), batch=span_batches())
def test_pool_units_matches_naive_sum(data, batch):
    embeddings, boundaries, num_units = batch
    lo, hi = [], []
    for n in num_units.tolist():
        a = data.draw(st.integers(0, n))
        lo.append(a)
        hi.append(data.draw(st.integers(a, n)))
    total, count = pool_units(embeddings, boundaries, torch.tensor(lo), torch.tensor(hi))
    assert total.shape == (embeddings.shape[0], embeddings.shape[2])
    assert count.shape == (embeddings.shape[0],)
    for row, (a, b) in enumerate(zip(lo, hi)):
        first, last = int(boundaries[row, a]), int(boundaries[row, b])
        assert int(count[row]) == last - first
        expected = embeddings[row, first:last].double().sum(dim=0)
        np.testing.assert_allclose(total[row].double().numpy(), expected.numpy(), atol=1e-4)


def test_pool_units_whole_text_mean_is_text_span_vector():
    """Mean over all units (the query vector) equals the span covering all units."""
    emb = torch.randn(1, 7, 3)
    boundaries = torch.tensor([[1, 3, 4, 6]])
    num_units = torch.tensor([3])
    total, count = pool_units(emb, boundaries, torch.tensor([0]), num_units)
    spans = pool_spans(emb, boundaries, num_units, 3, 3)
    assert torch.allclose(total / count[:, None], spans.embeddings[0, 0], atol=1e-6)


# ---------------------------------------------------------------------------------------------
# unit_sums / span_sum_norms
# ---------------------------------------------------------------------------------------------


@given(batch=span_batches())
def test_unit_sums_matches_naive(batch):
    embeddings, boundaries, num_units = batch
    sums, counts = unit_sums(embeddings, boundaries)
    width = boundaries.shape[1] - 1
    assert sums.shape == (embeddings.shape[0], width, embeddings.shape[2])
    assert counts.shape == (embeddings.shape[0], width)
    for row in range(embeddings.shape[0]):
        for u in range(width):
            first, last = int(boundaries[row, u]), int(boundaries[row, u + 1])
            assert int(counts[row, u]) == last - first  # 0 for padding units
            expected = embeddings[row, first:last].double().sum(dim=0)
            np.testing.assert_allclose(sums[row, u].double().numpy(), expected.numpy(), atol=1e-4)


@given(data=st.data(), batch=span_batches(), span_bounds=bounds)
def test_span_sum_norms_matches_naive(data, batch, span_bounds):
    embeddings, boundaries, num_units = batch
    min_span, max_span = span_bounds
    owned = data.draw(owned_ranges(num_units))
    norms = span_sum_norms(embeddings, boundaries, num_units, min_span, max_span, owned=owned)
    width = boundaries.shape[1] - 1
    assert norms.shape == (embeddings.shape[0], width, max_span - min_span + 1)
    for row in range(embeddings.shape[0]):
        for start in range(width):
            for index, length in enumerate(range(min_span, max_span + 1)):
                end = start + length
                value = float(norms[row, start, index])
                if end <= width and naive_span_exists(row, start, end, num_units, owned):
                    first, last = int(boundaries[row, start]), int(boundaries[row, end])
                    expected = float(embeddings[row, first:last].double().sum(dim=0).norm())
                    assert math.isclose(value, expected, rel_tol=1e-4, abs_tol=1e-4)
                else:
                    assert math.isnan(value), (row, start, end)


def test_span_sum_norms_doc_example():
    emb = torch.tensor([[[3.0, 0.0], [0.0, 4.0]]])
    norms = span_sum_norms(emb, torch.tensor([[0, 1, 2]]), torch.tensor([2]), 1, 2)
    assert norms[0, :, 0].tolist() == [3.0, 4.0]
    assert norms[0, 0, 1].item() == 5.0 and math.isnan(norms[0, 1, 1].item())


# ---------------------------------------------------------------------------------------------
# best_span_scores
# ---------------------------------------------------------------------------------------------


@given(
    data=st.data(),
    batch=span_batches(),
    span_bounds=bounds,
    top_k=st.integers(1, 5),
    num_queries=st.integers(1, 3),
    paired=st.booleans(),
)
def test_best_span_scores_matches_naive_top_k(data, batch, span_bounds, top_k, num_queries, paired):
    """Shared ``(Q, d)`` queries, or ``paired`` per-row ``(B, Q, d)`` queries."""
    embeddings, boundaries, num_units = batch
    min_span, max_span = span_bounds
    owned = data.draw(owned_ranges(num_units))
    seed = data.draw(st.integers(0, 2**31 - 1))
    shape = (
        (embeddings.shape[0], num_queries, embeddings.shape[2])
        if paired
        else (num_queries, embeddings.shape[2])
    )
    queries = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))

    best = best_span_scores(
        queries, embeddings, boundaries, num_units, min_span, max_span, top_k=top_k, owned=owned
    )
    batch_size = embeddings.shape[0]
    assert (
        best.scores.shape
        == best.starts.shape
        == best.ends.shape
        == (batch_size, num_queries, top_k)
    )

    width = boundaries.shape[1] - 1
    for row in range(batch_size):
        valid = [
            (start, end)
            for start, end in expected_span_units(width, min_span, max_span)
            if naive_span_exists(row, start, end, num_units, owned)
        ]
        vectors = {span: naive_mean(embeddings, boundaries, row, *span) for span in valid}
        for q in range(num_queries):
            query = (queries[row, q] if paired else queries[q]).double().numpy()
            naive = sorted((naive_cosine(query, vectors[span]) for span in valid), reverse=True)
            found = min(top_k, len(valid))
            scores = best.scores[row, q].tolist()
            starts, ends = best.starts[row, q].tolist(), best.ends[row, q].tolist()
            # scores: the naive top-k, best first
            np.testing.assert_allclose(scores[:found], naive[:found], atol=1e-4)
            assert scores[:found] == sorted(scores[:found], reverse=True)
            # each returned span is a valid, distinct span whose own cosine is the reported score
            returned = list(zip(starts[:found], ends[:found]))
            assert len(set(returned)) == found
            for (start, end), score in zip(returned, scores[:found]):
                assert (start, end) in vectors
                assert math.isclose(naive_cosine(query, vectors[(start, end)]), score, abs_tol=1e-4)
                assert -1.0 - 1e-5 <= score <= 1.0 + 1e-5
            # missing entries
            assert all(s == float("-inf") for s in scores[found:])
            assert starts[found:] == [-1] * (top_k - found)
            assert ends[found:] == [-1] * (top_k - found)


def test_best_span_scores_doc_example():
    emb = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])
    bounds_ = torch.tensor([[0, 1, 2, 3]])
    best = best_span_scores(torch.tensor([[0.0, 1.0]]), emb, bounds_, torch.tensor([3]), 1, 2)
    assert best.scores.tolist() == [[[1.0]]]
    assert best.starts.tolist() == [[[1]]]
    assert best.ends.tolist() == [[[2]]]


def test_best_span_scores_min_span_above_num_units_gives_missing():
    emb = torch.randn(2, 5, 3)
    boundaries = torch.tensor([[1, 2, 3, 4], [1, 2, 2, 2]])
    best = best_span_scores(torch.randn(2, 3), emb, boundaries, torch.tensor([3, 1]), 4, 5, top_k=2)
    assert torch.isinf(best.scores).all() and (best.scores < 0).all()
    assert (best.starts == -1).all() and (best.ends == -1).all()


def test_best_span_scores_row_without_units():
    emb = torch.randn(2, 4, 3)
    boundaries = torch.tensor([[1, 2, 3], [0, 0, 0]])
    best = best_span_scores(torch.randn(1, 3), emb, boundaries, torch.tensor([2, 0]), 1, 2, top_k=3)
    assert torch.isfinite(best.scores[0, 0]).all()
    assert torch.isinf(best.scores[1]).all()
    assert (best.starts[1] == -1).all()


@pytest.mark.parametrize("top_k", [0, -1])
def test_best_span_scores_rejects_bad_top_k(top_k):
    with pytest.raises(ValueError, match="top_k"):
        best_span_scores(
            torch.randn(1, 3),
            torch.randn(1, 4, 3),
            torch.tensor([[1, 2, 3]]),
            torch.tensor([2]),
            1,
            2,
            top_k=top_k,
        )


def test_best_span_scores_paired_equals_one_row_at_a_time():
    generator = torch.Generator().manual_seed(1)
    emb = torch.randn(3, 6, 4, generator=generator)
    boundaries = torch.tensor([[1, 2, 4, 5], [1, 3, 4, 4], [0, 1, 2, 3]])
    num_units = torch.tensor([3, 2, 3])
    queries = torch.randn(3, 2, 4, generator=generator)
    paired = best_span_scores(queries, emb, boundaries, num_units, 1, 2, top_k=2)
    for row in range(3):
        alone = best_span_scores(
            queries[row],
            emb[row : row + 1],
            boundaries[row : row + 1],
            num_units[row : row + 1],
            1,
            2,
            top_k=2,
        )
        assert torch.allclose(paired.scores[row], alone.scores[0], atol=1e-6)
        assert torch.equal(paired.starts[row], alone.starts[0]) and torch.equal(
            paired.ends[row], alone.ends[0]
        )


@pytest.mark.parametrize("shape", [(4,), (2, 1, 3, 4), (3, 1, 4)])
def test_best_span_scores_rejects_bad_query_shapes(shape):
    with pytest.raises(ValueError, match="queries must be"):
        best_span_scores(
            torch.randn(*shape),
            torch.randn(2, 4, 4),
            torch.tensor([[1, 2, 3], [1, 2, 3]]),
            torch.tensor([2, 2]),
            1,
            2,
        )


def test_best_span_scores_rejects_bad_bounds():
    with pytest.raises(ValueError):
        best_span_scores(
            torch.randn(1, 3),
            torch.randn(1, 4, 3),
            torch.tensor([[1, 2, 3]]),
            torch.tensor([2]),
            3,
            2,
        )


@given(st.integers(1, 12), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**16))
def test_unit_peak_scores_is_the_best_covering_span(units, max_span, queries, seed):
    from slice_st.spans import unit_peak_scores

    generator = torch.Generator().manual_seed(seed)
    vectors = torch.randn(units, 5, generator=generator)
    query = torch.nn.functional.normalize(torch.randn(queries, 5, generator=generator), dim=-1)
    boundary = int(
        torch.randint(0, units + 1, (1,), generator=generator)
    )  # two documents: no span crosses it
    norms = torch.full((units, max_span), float("nan"))
    for start in range(units):
        for length in range(1, max_span + 1):
            end = start + length
            if end <= units and not (start < boundary < end):
                norms[start, length - 1] = vectors[start:end].sum(0).norm()
    min_span = 1 + seed % max_span
    found = unit_peak_scores(query @ vectors.T, norms, min_span, max_span)
    expected = torch.full((queries, units), float("-inf"), dtype=torch.float64)
    for q in range(queries):
        for start in range(units):
            for length in range(min_span, max_span + 1):
                if start + length <= units and torch.isfinite(norms[start, length - 1]):
                    score = float(query[q] @ vectors[start : start + length].sum(0)) / float(
                        norms[start, length - 1]
                    )
                    for unit in range(start, start + length):
                        expected[q, unit] = max(expected[q, unit], score)
    assert found.shape == (queries, units) and found.dtype == torch.float64
    assert torch.allclose(found, expected, atol=1e-5)


def test_unit_peak_scores_rejects_bad_input():
    from slice_st.spans import unit_peak_scores

    with pytest.raises(ValueError, match="dots"):
        unit_peak_scores(torch.zeros(3), torch.ones(3, 2), 1, 2)
    with pytest.raises(ValueError, match="span_norms"):
        unit_peak_scores(torch.zeros(1, 3), torch.ones(3, 2), 1, 3)


def test_span_cosine_grid_equals_summed_span_cosines():
    """The re-ranker's cosines of moved spans, read from prefix dot products and the norm grid, are the cosines of
    the spans' summed vectors (shared and per-row queries; units of several tokens)."""
    from slice_st.spans import span_cosine_grid, span_cosines

    generator = torch.Generator().manual_seed(0)
    emb = torch.randn(3, 12, 8, generator=generator)
    bounds = torch.tensor([[0, 1, 3, 4, 6, 7, 9, 10, 12]] * 3)
    num_units = torch.tensor([8, 6, 8])
    starts = torch.randint(0, 4, (3, 2, 5), generator=generator)
    ends = (starts + torch.randint(1, 5, (3, 2, 5), generator=generator)).minimum(
        num_units[:, None, None]
    )
    for queries in (
        torch.randn(2, 8, generator=generator),
        torch.randn(3, 2, 8, generator=generator),
    ):
        grid = span_cosine_grid(queries, emb, bounds, num_units, 1, 4)(starts, ends)
        rows = queries if queries.dim() == 3 else queries[None].expand(3, -1, -1)
        spread = rows[:, :, None, :].expand(-1, -1, 5, -1).flatten(1, 2)  # (B, Q * k, d)
        summed = span_cosines(spread, emb, bounds, starts.flatten(1), ends.flatten(1))
        assert torch.allclose(grid, summed.view_as(grid), atol=1e-5)
