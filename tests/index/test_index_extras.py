"""SpanIndex extras: corpus loaders, calibration, the FAISS candidate stage."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import QUERIES, make_docs

from slice_st import SpanIndex, SpanInputError
from slice_st.data.corpus import CorpusError, Document, documents_from_dataset, read_corpus, read_jsonl
from slice_st.index.calibration import Calibration, fit_calibration, fit_sts_calibration


# ------------------------------------------------------------------------------------ loaders
def test_text_file_lines_and_paragraphs(tmp_path):
    path = tmp_path / "calls.txt"
    path.write_text("first call\n\nsecond call\nstill second\n")
    lines = read_corpus([str(path)])
    assert [(d.id, d.text, d.line) for d in lines] == [
        (f"{path}:1", "first call", 1),
        (f"{path}:3", "second call", 3),
        (f"{path}:4", "still second", 4),
    ]
    paragraphs = read_corpus([str(path)], split="paragraph")
    assert [d.text for d in paragraphs] == ["first call", "second call\nstill second"]


def test_jsonl_fields_and_errors(tmp_path):
    path = tmp_path / "tickets.jsonl"
    path.write_text('{"ticket": "T1", "body": "refund please"}\n\n{"ticket": "2", "body": "lost bag"}\n')
    documents = read_corpus([str(path)], id_field="ticket", text_field="body")
    assert [(d.id, d.text, d.line) for d in documents] == [("T1", "refund please", 1), ("2", "lost bag", 3)]
    numeric = tmp_path / "numeric.jsonl"
    numeric.write_text('{"ticket": 2, "body": "lost bag"}\n')  # ids are strings (README): not silently "2"
    with pytest.raises(CorpusError, match=r"line 1: id field 'ticket' must be a string, got int 2"):
        read_corpus([str(numeric)], id_field="ticket", text_field="body")
    with pytest.raises(CorpusError, match=r"tickets.jsonl, line 1: missing id field 'id'"):
        read_jsonl(str(path))
    with pytest.raises(CorpusError, match=r"line 1: missing text field 'text'"):
        read_jsonl(str(path), id_field="ticket")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "ok"}\n{"id": "b", "text": 5}\n[1]\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl, line 2: text field 'text' must be a string"):
        read_jsonl(str(bad))
    bad.write_text('{"id": "a", "text": "ok"}\nnot json\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl, line 2: not valid JSON"):
        read_jsonl(str(bad))
    duplicate = tmp_path / "dup.jsonl"
    duplicate.write_text('{"id": "a", "text": "one"}\n{"id": "a", "text": "two"}\n')
    with pytest.raises(CorpusError, match=r"duplicate document id 'a': .*dup.jsonl, line 2 \(first seen in .*line 1\)"):
        read_corpus([str(duplicate)])
    with pytest.raises(FileNotFoundError):
        read_corpus([str(tmp_path / "missing.jsonl")])


def test_build_from_files_documents_and_dataset(tiny_model, tmp_path):
    import datasets

    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "the dog barks"}\n{"id": "b", "text": "a man plays the guitar"}\n')
    from_files = SpanIndex.from_files(str(path), tiny_model, max_span=3)
    assert from_files.doc_ids == ["a", "b"]
    rows = datasets.Dataset.from_dict({"key": ["a", "b"], "content": ["the dog barks", "a man plays the guitar"]})
    from_dataset = SpanIndex.build(rows, tiny_model, text_field="content", id_field="key", max_span=3)
    assert from_dataset.doc_ids == ["a", "b"]
    numbered = SpanIndex.build(rows, tiny_model, text_field="content", id_field=None, max_span=3)
    assert numbered.doc_ids == ["0", "1"]
    from_documents = SpanIndex.build([Document("x", "the dog barks"), Document("y", "a cat")], tiny_model, max_span=3)
    assert from_documents.doc_ids == ["x", "y"]
    a, b = from_files.search(QUERIES, top_k=5), from_dataset.search(QUERIES, top_k=5)
    assert [[(m.doc_id, m.span, m.score) for m in x] for x in a] == [
        [(m.doc_id, m.span, m.score) for m in x] for x in b
    ]
    with pytest.raises(CorpusError, match="no column 'body'"):
        documents_from_dataset(rows, text_field="body")


# ------------------------------------------------------------------------------------ calibration
def test_calibration_matches_sklearn_and_round_trips(tmp_path):
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(0)
    cosines = rng.uniform(0, 1, 300)
    gold = np.clip(5 * cosines**2 + rng.normal(0, 0.7, 300), 0, 5)
    calibration = fit_calibration(cosines, gold)
    reference = IsotonicRegression(y_min=0, y_max=5, out_of_bounds="clip").fit(cosines, gold)
    probe = np.linspace(-0.5, 1.5, 101)
    np.testing.assert_allclose(calibration(probe), reference.predict(probe), atol=1e-9)
    assert np.all(np.diff(calibration(probe)) >= 0) and calibration.spearman > 0.8
    saved = calibration.save(tmp_path)  # a folder (e.g. a saved model) gets calibration.json
    assert saved.endswith("calibration.json")
    assert Calibration.load(tmp_path) == calibration
    with pytest.raises(ValueError, match="non-decreasing"):
        Calibration(x=[0.5, 0.2], y=[1.0, 2.0])
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "isotonic", "format_version": 1, "x": [1], "y": []}))
    with pytest.raises(ValueError, match="invalid calibration"):
        Calibration.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="at least 2"):
        fit_calibration([0.5], [3.0])


STS_ROWS = [
    ("A man is playing a guitar.", "A man plays the guitar.", 4.8),
    ("A woman is slicing an onion.", "A woman cuts an onion.", 4.2),
    ("A dog runs in the park.", "A cat sleeps on the sofa.", 0.6),
    ("The flight was delayed.", "The plane left late.", 3.9),
    ("Children are playing football.", "A chef is cooking pasta.", 0.0),
    ("A man is riding a horse.", "A person rides a horse.", 4.0),
    ("The stock market fell.", "A girl is dancing.", 0.2),
    ("Two men are talking.", "Two people are having a chat.", 3.6),
]


def test_sts_calibration_with_the_index(tiny_model, tmp_path, make_tiny_model):
    sts = tmp_path / "sts.csv"
    sts.write_text(
        "".join(
            f"main-captions\tMSRvid\t2012\t{i:04d}\t{score:.3f}\t{a}\t{b}\n" for i, (a, b, score) in enumerate(STS_ROWS)
        )
    )
    calibration = fit_sts_calibration(tiny_model, sts)
    assert (
        calibration.pairs == len(STS_ROWS) and calibration.source == "sts.csv" and calibration.pair_score == "sentence"
    )
    spans = fit_sts_calibration(tiny_model, sts, "best_span", limit=4)
    assert spans.pairs == 4 and spans.pair_score == "best_span"
    index = SpanIndex.build(make_docs(20), tiny_model, max_span=4)
    index.set_calibration(calibration)
    matches = index.search(QUERIES, top_k=3)
    for match in (m for ms in matches for m in ms):
        assert match.calibrated == pytest.approx(
            calibration.degree(match.similarity), abs=1e-4
        )  # the cosine, not the score
        assert 0.0 <= match.calibrated <= 5.0
    index.save(tmp_path / "ix")
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    assert loaded.calibration == calibration and loaded.info()["calibration"]["pairs"] == len(STS_ROWS)
    assert [m.calibrated for m in loaded.search(QUERIES, top_k=3)[0]] == [m.calibrated for m in matches[0]]
    calibration.save(tmp_path / "cal.json")
    index.set_calibration(str(tmp_path / "cal.json"))
    other = Calibration(x=[0.0, 1.0], y=[0.0, 5.0], model_fingerprint="0123456789abcdef")
    with pytest.raises(SpanInputError, match="another model"):
        index.set_calibration(other)
    index.set_calibration(None)
    assert index.search("dog", top_k=1)[0][0].calibrated is None


# ------------------------------------------------------------------------------------ FAISS
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
        {(m.doc_id, m.start, m.end): m.score for m in ms} for ms in index.search(QUERIES, top_k=3000, scorer="phrase")
    ]
    approximate = index.search(QUERIES, top_k=10, approximate=True, scorer="phrase")
    for matches in approximate:
        assert len(matches) == 10
        scores = [m.score for m in matches]
        assert scores == sorted(scores, reverse=True)
    # every returned score is the exact score of that span (nprobe = nlist: the IVF is exhaustive here)
    full = index.search(QUERIES, top_k=10, scorer="phrase")
    for a, b, scores in zip(approximate, full, exact):
        assert a[0].score == pytest.approx(b[0].score, abs=1e-5) or len(set(_keys(a)) & set(_keys(b))) >= 5
        for m in a:
            if (m.doc_id, m.start, m.end) in scores:
                assert m.score == pytest.approx(scores[(m.doc_id, m.start, m.end)], abs=1e-5)
    index.save(tmp_path / "ix")
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    assert loaded.info()["candidates"] == index.info()["candidates"]
    for a, b in zip(loaded.search(QUERIES, top_k=10, approximate=True, scorer="phrase"), approximate):
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
