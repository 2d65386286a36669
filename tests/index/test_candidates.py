"""slice_st.index.candidates: the FAISS candidate stage (flat and IVF) against the exact search."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import QUERIES, make_docs

from slice_st import SpanIndex, SpanInputError


def _keys(matches):
    return [(m.doc_id, m.start, m.end) for m in matches]


def test_flat_candidates_with_all_chunks_equal_exact(tiny_model):
    index = SpanIndex.build(make_docs(120, seed=5), tiny_model, max_span=6)
    index.build_candidates(kind="flat", chunk=6, stride=3)
    chunks = index.info()["candidates"]["chunks"]
    exact = index.search(QUERIES, top_k=10)
    approximate = index.search(QUERIES, top_k=10, approximate=True, candidates=chunks)
    for a, b in zip(exact, approximate):
        assert _keys(a) == _keys(b)
        np.testing.assert_allclose([m.score for m in a], [m.score for m in b], atol=1e-5)


def test_ivf_candidates_rescore_exactly_and_persist(tiny_model, tmp_path):
    docs = make_docs(200, seed=6)
    index = SpanIndex.build(docs, tiny_model, max_span=6)
    index.build_candidates(kind="ivf", nlist=8, nprobe=8, candidates=64)
    assert index.info()["candidates"]["faiss_type"] == "IndexIVFScalarQuantizer"
    exact = [
        {(m.doc_id, m.start, m.end): m.score for m in ms}
        for ms in index.search(QUERIES, top_k=3000, scorer="phrase")
    ]
    approximate = index.search(QUERIES, top_k=10, approximate=True, scorer="phrase")
    for matches in approximate:
        assert len(matches) == 10
        scores = [m.score for m in matches]
        assert scores == sorted(scores, reverse=True)
    # every returned score is the exact score of that span (nprobe = nlist: the IVF is exhaustive here)
    full = index.search(QUERIES, top_k=10, scorer="phrase")
    for a, b, scores in zip(approximate, full, exact):
        assert (
            a[0].score == pytest.approx(b[0].score, abs=1e-5)
            or len(set(_keys(a)) & set(_keys(b))) >= 5
        )
        for m in a:
            if (m.doc_id, m.start, m.end) in scores:
                assert m.score == pytest.approx(scores[(m.doc_id, m.start, m.end)], abs=1e-5)
    index.save(tmp_path / "ix")
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    assert loaded.info()["candidates"] == index.info()["candidates"]
    for a, b in zip(
        loaded.search(QUERIES, top_k=10, approximate=True, scorer="phrase"), approximate
    ):
        assert _keys(a) == _keys(b)
    # add extends the candidate stage; remove rebuilds it
    loaded.add(["a man plays the guitar"], ["new"])
    assert loaded.info()["candidates"]["chunks"] > index.info()["candidates"]["chunks"]
    assert loaded.search("a man plays the guitar", top_k=1, approximate=True)[0][0].doc_id == "new"
    loaded.remove(["new"])
    assert loaded.info()["candidates"]["chunks"] == index.info()["candidates"]["chunks"]
    with pytest.raises(SpanInputError, match="stride"):
        index.build_candidates(chunk=2, stride=4)
    with pytest.raises(SpanInputError, match="candidates"):
        index.search("dog", approximate=True, candidates=0)
