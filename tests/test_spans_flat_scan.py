"""slice_st.spans.top_spans_flat (the SpanIndex scan) against a naive enumeration of every span."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from slice_st.spans import top_spans_flat


def flat_corpus(
    seed: int, segments: list[int], dim: int = 6, max_span: int = 5, own_all: bool = True
):
    """Random unit sums of segments laid end to end, and the (N, max_span) span-sum norms (NaN across a segment end)."""
    generator = torch.Generator().manual_seed(seed)
    total = sum(segments)
    vectors = torch.randn(total, dim, generator=generator, dtype=torch.float64)
    norms = torch.full((total, max_span), float("nan"), dtype=torch.float64)
    start = 0
    for size in segments:
        for unit in range(start, start + size):
            for length in range(1, max_span + 1):
                if unit + length <= start + size:
                    norms[unit, length - 1] = vectors[unit : unit + length].sum(0).norm()
        start += size
    return vectors, norms


def naive(queries, vectors, norms, top_k, min_span, max_span):
    out = []
    for query in queries.double():
        query = query / query.norm()
        found = []
        for unit in range(len(vectors)):
            for length in range(min_span, max_span + 1):
                norm = float(norms[unit, length - 1])
                if math.isnan(norm):
                    continue
                found.append(
                    (float(vectors[unit : unit + length].sum(0) @ query) / norm, unit, length)
                )
        found.sort(key=lambda entry: (-entry[0], entry[1]))
        out.append(found[:top_k])
    return out


@pytest.mark.parametrize("block", [None, 7, 1, 64])
def test_top_spans_flat_equals_enumeration(block):
    vectors, norms = flat_corpus(0, [9, 1, 14, 3, 30, 2])
    queries = torch.randn(3, vectors.shape[1], generator=torch.Generator().manual_seed(1))
    for min_span, max_span, top_k in ((1, 5, 12), (2, 4, 7), (5, 5, 3), (1, 5, 500)):
        found = top_spans_flat(
            queries, vectors.float(), norms.float(), top_k, min_span, max_span, block=block
        )
        for q, expected in enumerate(
            naive(
                queries, vectors.float().double(), norms.float().double(), top_k, min_span, max_span
            )
        ):
            got = [
                (s, u, length)
                for s, u, length in zip(
                    found.scores[q].tolist(), found.starts[q].tolist(), found.lengths[q].tolist()
                )
                if u >= 0
            ]
            assert len(got) == len(expected)
            np.testing.assert_allclose([g[0] for g in got], [e[0] for e in expected], atol=1e-6)
            assert [(g[1], g[2]) for g in got] == [(e[1], e[2]) for e in expected]
        missing = found.starts < 0
        assert torch.isinf(found.scores[missing]).all() and (found.lengths[missing] == 0).all()


def test_float16_vectors_and_norm_columns():
    vectors, norms = flat_corpus(2, [40, 25])
    queries = torch.randn(2, vectors.shape[1], generator=torch.Generator().manual_seed(3))
    full = top_spans_flat(queries, vectors.float(), norms.float(), 10, 2, 4)
    half = top_spans_flat(queries, vectors.half(), norms.float(), 10, 2, 4, block=16)
    np.testing.assert_allclose(full.scores.numpy(), half.scores.numpy(), atol=5e-3)
    # norms stored from length 2 on: the same result
    shifted = top_spans_flat(
        queries, vectors.float(), norms[:, 1:].float(), 10, 2, 4, norm_min_span=2
    )
    assert torch.equal(shifted.starts, full.starts) and torch.allclose(shifted.scores, full.scores)


def test_long_corpus_precision():
    """Prefix sums restart every block: a long corpus of large-valued units scores as exactly as a short one."""
    vectors, norms = flat_corpus(4, [3000], dim=4, max_span=3)
    vectors = vectors + 50.0  # large, same-sign dot products: cumulative sums grow to ~1e5
    for length in range(1, 4):
        norms[: 3000 - length + 1, length - 1] = torch.stack(
            [vectors[u : u + length].sum(0) for u in range(3000 - length + 1)]
        ).norm(dim=1)
    query = torch.randn(1, 4, generator=torch.Generator().manual_seed(5))
    found = top_spans_flat(query, vectors.float(), norms.float(), 50, 1, 3, block=512)
    expected = naive(query, vectors.float().double(), norms.float().double(), 50, 1, 3)[0]
    np.testing.assert_allclose(found.scores[0].numpy(), [e[0] for e in expected], atol=1e-9)


def test_empty_corpus_and_bad_input():
    empty = top_spans_flat(torch.ones(2, 3), torch.zeros(0, 3), torch.zeros(0, 4), 5, 1, 4)
    assert (
        empty.scores.shape == (2, 5)
        and torch.isinf(empty.scores).all()
        and (empty.starts == -1).all()
    )
    vectors, norms = torch.ones(5, 3), torch.ones(5, 4)
    with pytest.raises(ValueError, match="top_k"):
        top_spans_flat(torch.ones(1, 3), vectors, norms, 0, 1, 4)
    with pytest.raises(ValueError, match="same d"):
        top_spans_flat(torch.ones(1, 2), vectors, norms, 1, 1, 4)
    with pytest.raises(ValueError, match="span lengths"):
        top_spans_flat(torch.ones(1, 3), vectors, norms, 1, 1, 5)
    with pytest.raises(ValueError, match="min_span"):
        top_spans_flat(torch.ones(1, 3), vectors, norms, 1, 3, 2)
    with pytest.raises(ValueError, match="floating point"):
        top_spans_flat(torch.ones(1, 3), vectors.long(), norms, 1, 1, 4)


def test_floor_leaves_out_what_cannot_enter():
    vectors, norms = flat_corpus(6, [20, 35, 11])
    queries = torch.randn(2, vectors.shape[1], generator=torch.Generator().manual_seed(7))
    full = top_spans_flat(queries, vectors.float(), norms.float(), 10, 1, 5)
    floor = full.scores[:, 4]  # the 5th best of each query
    cut = top_spans_flat(queries, vectors.float(), norms.float(), 10, 1, 5, floor=floor, block=8)
    for q in range(2):
        kept = cut.starts[q] >= 0
        assert int(kept.sum()) == 4  # only the spans strictly above the floor
        assert torch.equal(cut.starts[q][kept], full.starts[q][:4]) and torch.allclose(
            cut.scores[q][kept], full.scores[q][:4]
        )
    with pytest.raises(ValueError, match="one score per query"):
        top_spans_flat(queries, vectors.float(), norms.float(), 10, 1, 5, floor=floor[:1])
