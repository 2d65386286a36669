"""SpanIndex: exact search vs brute-force materialised span vectors, persistence, add/remove, bad input."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from helpers import QUERIES, build_index_cli, cli_fails, make_docs, run_cli

import slice_st
from slice_st import SpanIndex, SpanInputError
from slice_st.cli import main
from slice_st.index.search import IndexMatch
from slice_st.index.storage import MANIFEST


def brute_force(model, texts, queries, top_k, min_span, max_span):
    """Materialise every span vector (``encode_spans``), cosine to each query, sort: [(doc, start, end, score)]."""
    encodings = model.encode_spans(
        texts, min_span=min_span, max_span=max_span, show_progress_bar=False
    )
    vectors = np.concatenate([e.embeddings for e in encodings]).astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    meta = [(t, int(s), int(e)) for t, enc in enumerate(encodings) for s, e in enc.offsets]
    query_vectors = slice_st.encode.embed_texts(model, queries).double().numpy()
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    results = []
    for q in range(len(queries)):
        scores = vectors @ query_vectors[q]
        order = np.argsort(-scores, kind="stable")[:top_k]
        results.append([(*meta[i], float(scores[i])) for i in order])
    return results


def assert_same_ranking(got, expected, tolerance=1e-5):
    """Same scores rank by rank (to ``tolerance``) and the same spans, except where two scores tie within it."""
    assert len(got) == len(expected)
    got_scores = np.array([m.score for m in got])
    expected_scores = np.array([e[3] for e in expected])
    np.testing.assert_allclose(got_scores, expected_scores, atol=tolerance, rtol=0)
    all_scores = expected_scores
    for rank, (match, (doc, start, end, score)) in enumerate(zip(got, expected)):
        if (match.text_index, match.start, match.end) != (doc, start, end):
            gaps = np.abs(np.delete(all_scores, rank) - score)
            assert gaps.min() < tolerance, f"rank {rank}: {match} != {(doc, start, end, score)}"


@pytest.fixture(scope="module")
def docs():
    return make_docs(300)


@pytest.fixture(scope="module", params=["exact", "compressed"])
def index(tiny_model, docs, request):
    """The exact index, and one with a compressed tier (float32 exact tier; its default 500 candidate documents are
    every document here, so results are exact search's: tests/index/test_index_compressed.py covers fewer)."""
    compression = "pq16" if request.param == "compressed" else None
    return SpanIndex.build(docs, tiny_model, max_span=8, dtype="float32", compression=compression)


def test_search_equals_brute_force(tiny_model, docs, index):
    expected = brute_force(tiny_model, docs, QUERIES, 25, 1, 8)
    results = index.search(
        QUERIES, top_k=25, scorer="max-cosine", overlap=True
    )  # the cosine ranking (the scorer: test_search_scoring)
    for got, want in zip(results, expected):
        assert_same_ranking(got, want)
        for match in got:
            assert match.span == docs[match.text_index][match.start : match.end]
            assert match.doc_id == str(match.text_index)


def test_search_sub_range_equals_brute_force(tiny_model, docs, index):
    expected = brute_force(tiny_model, docs, QUERIES[:2], 15, 2, 5)
    for got, want in zip(
        index.search(
            QUERIES[:2], top_k=15, min_span=2, max_span=5, scorer="max-cosine", overlap=True
        ),
        expected,
    ):
        assert_same_ranking(got, want)
        assert all(2 <= m.unit_end - m.unit_start <= 5 for m in got)


def test_per_document_equals_brute_force(tiny_model, docs, index):
    expected = brute_force(tiny_model, docs, QUERIES, 100_000, 1, 8)
    for per_document in (1, 2):
        for got, want in zip(
            index.search(
                QUERIES, top_k=12, per_document=per_document, scorer="max-cosine", overlap=True
            ),
            expected,
        ):
            kept, seen = [], {}
            for entry in want:
                if seen.get(entry[0], 0) < per_document:
                    seen[entry[0]] = seen.get(entry[0], 0) + 1
                    kept.append(entry)
            assert_same_ranking(got, kept[:12])
    with pytest.raises(SpanInputError, match="per_document"):
        index.search("dog", per_document=0)


@pytest.mark.parametrize("per_document", [1, None])
def test_threshold_and_single_query(index, per_document):
    """A list is sorted by the score shown; ``threshold`` keeps what scores at least that (with one span per
    document, exactly the matches of the full list that do)."""
    full = index.search("a man plays the guitar", top_k=10, per_document=per_document)[0]
    assert [m.score for m in full] == sorted((m.score for m in full), reverse=True)
    threshold = (
        full[4].score + full[5].score
    ) / 2  # not a shown score: those of "phrase" differ in the last bits
    cut = index.search(
        "a man plays the guitar", top_k=10, threshold=threshold, per_document=per_document
    )[0]
    assert len(cut) >= 4 and all(m.score >= threshold for m in cut)
    kept = [m for m in full if m.score >= threshold]
    if per_document == 1:
        assert cut == kept
    else:
        assert all(m in kept for m in cut)


def test_windowed_documents_equal_brute_force(make_tiny_model):
    model = make_tiny_model(48)  # 46-token windows: every document is windowed
    docs = make_docs(6, seed=3, low=60, high=120)
    index = SpanIndex.build(docs, model, max_span=4)
    assert index.info()["segments"] > 3 * len(docs)
    expected = brute_force(model, docs, QUERIES, 30, 1, 4)
    for got, want in zip(
        index.search(QUERIES, top_k=30, scorer="max-cosine", overlap=True), expected
    ):
        assert_same_ranking(got, want)


def test_20k_word_document_is_exact(tiny_model):
    """Precision guard: one 20k-word document, scored from float64 prefix sums reset per block."""
    document = make_docs(1, seed=7, low=20_000, high=20_000)[0]
    index = SpanIndex.build([document], tiny_model, max_span=6)
    assert index.num_units >= 20_000
    expected = brute_force(tiny_model, [document], QUERIES[:2], 20, 1, 6)
    for got, want in zip(
        index.search(QUERIES[:2], top_k=20, scorer="max-cosine", overlap=True), expected
    ):
        assert_same_ranking(got, want, tolerance=1e-5)
    # every span's score, not only the top: compare the whole ranking of one query
    everything = index.search(QUERIES[0], top_k=2000, scorer="max-cosine", overlap=True)[0]
    want = brute_force(tiny_model, [document], QUERIES[:1], 2000, 1, 6)[0]
    np.testing.assert_allclose(
        [m.score for m in everything], [w[3] for w in want], atol=1e-5, rtol=0
    )


def test_small_search_blocks_give_the_same_result(index, monkeypatch):
    expected = index.search(QUERIES, top_k=12)
    monkeypatch.setattr(slice_st.spans, "FLAT_BLOCK_UNITS", 37)  # spans straddle many block edges
    got = index.search(QUERIES, top_k=12)
    for a, b in zip(got, expected):
        assert [(m.text_index, m.start, m.end) for m in a] == [
            (m.text_index, m.start, m.end) for m in b
        ]
        np.testing.assert_allclose([m.score for m in a], [m.score for m in b], atol=1e-9)


def test_float16_is_close(tiny_model, docs, index):
    half = SpanIndex.build(docs, tiny_model, max_span=8, dtype="float16")
    assert half.arrays["unit_vectors"].dtype == np.float16
    assert half.info()["array_bytes"] < 0.75 * index.info()["array_bytes"]
    # "phrase": scores in ranking order (the default re-ranks each document's spans, whose scores need not fall)
    full_results, half_results = (
        searched.search(QUERIES, top_k=10, scorer="phrase") for searched in (index, half)
    )
    for a, b in zip(full_results, half_results):
        np.testing.assert_allclose([m.score for m in a], [m.score for m in b], atol=2e-3)
        overlap = {(m.text_index, m.start, m.end) for m in a} & {
            (m.text_index, m.start, m.end) for m in b
        }
        assert len(overlap) >= 5


def test_float16_span_norms_and_older_float32_norms_still_load(tiny_model, docs, tmp_path):
    """A float16 index stores its span norms in float16 too; one saved with float32 norms (before they were float16)
    loads and searches the same, and what is added to it comes in float16."""
    half = SpanIndex.build(docs[:40], tiny_model, max_span=8, dtype="float16")
    assert half.arrays["span_norms"].dtype == np.float16
    half.save(tmp_path / "new")
    assert SpanIndex.load(tmp_path / "new", tiny_model).arrays["span_norms"].dtype == np.float16
    old = SpanIndex.build(docs[:40], tiny_model, max_span=8, dtype="float16")
    old.arrays["span_norms"] = old.arrays["span_norms"].astype(
        np.float32
    )  # the layout older versions wrote
    old.save(tmp_path / "old")
    loaded = SpanIndex.load(tmp_path / "old", tiny_model)
    assert loaded.arrays["span_norms"].dtype == np.float32
    _same(loaded.search(QUERIES, top_k=10), half.search(QUERIES, top_k=10), atol=2e-3)
    loaded.add(["the man plays the loud guitar"], ["new"])
    assert loaded.arrays["span_norms"].dtype == np.float16


def test_memory_is_much_smaller_than_materialised(index):
    info = index.info()
    assert info["spans"] == sum(
        len(e) for e in index.model.encode_spans(index.texts, max_span=8, show_progress_bar=False)
    )
    assert (
        info["array_bytes"] < info["materialised_span_bytes"] / 3
    )  # short docs, K=8: see the benchmark for K=20


# ------------------------------------------------------------------------------------ persistence
def _same(a, b, atol=1e-9):
    for x, y in zip(a, b):
        assert [(m.doc_id, m.start, m.end, m.span) for m in x] == [
            (m.doc_id, m.start, m.end, m.span) for m in y
        ]
        np.testing.assert_allclose([m.score for m in x], [m.score for m in y], atol=atol)


def test_save_load_mmap_same_results(tiny_model, index, tmp_path):
    index.save(tmp_path / "ix")
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    assert isinstance(loaded.arrays["unit_vectors"], np.memmap)
    assert loaded.doc_ids == index.doc_ids and loaded.texts == index.texts
    _same(loaded.search(QUERIES, top_k=10), index.search(QUERIES, top_k=10))
    in_memory = SpanIndex.load(tmp_path / "ix", tiny_model, mmap=False)
    assert not isinstance(in_memory.arrays["unit_vectors"], np.memmap)
    # saving again replaces the data folder; only one remains
    loaded.save(tmp_path / "ix")
    assert len([d for d in os.listdir(tmp_path / "ix") if d.startswith("data-")]) == 1
    _same(
        SpanIndex.load(tmp_path / "ix", tiny_model).search(QUERIES, top_k=10),
        index.search(QUERIES, top_k=10),
    )


def test_add_remove_then_search(tiny_model, tmp_path):
    docs = make_docs(40, seed=11)
    index = SpanIndex.build(docs[:25], tiny_model, ids=[f"d{i}" for i in range(25)], max_span=5)
    assert index.add(docs[25:], [f"d{i}" for i in range(25, 40)]) == [
        f"d{i}" for i in range(25, 40)
    ]
    assert index.remove(["d3", "d30", "d0"]) == 3
    keep = [i for i in range(40) if i not in (0, 3, 30)]
    fresh = SpanIndex.build(
        [docs[i] for i in keep], tiny_model, ids=[f"d{i}" for i in keep], max_span=5
    )
    assert index.doc_ids == fresh.doc_ids
    # Same spans; scores to float32 rounding: the stored arrays are laid out differently, so sums run in another order.
    _same(index.search(QUERIES, top_k=15), fresh.search(QUERIES, top_k=15), atol=1e-6)
    # the same on a memory-mapped index, and after a save/load round trip
    index.save(tmp_path / "ix")
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    loaded.add(["the man plays the loud guitar"], ["new"])
    loaded.remove(["d1"])
    loaded.save(tmp_path / "ix")
    again = SpanIndex.load(tmp_path / "ix", tiny_model)
    assert "new" in again.doc_ids and "d1" not in again.doc_ids
    best = again.search("the man plays the loud guitar", top_k=1)[0][0]
    assert best.doc_id == "new" and best.span in "the man plays the loud guitar"


def test_auto_ids_skip_existing(tiny_model):
    index = SpanIndex.build(["one two", "three four"], tiny_model, ids=["1", "x"], max_span=2)
    assert index.add(["five six", "seven"]) == ["2", "3"]


def test_merge_shards_equals_one_index(tiny_model, docs, index):
    shards = [
        SpanIndex.build(
            docs[i : i + 100], tiny_model, ids=[str(j) for j in range(i, i + 100)], max_span=8
        )
        for i in (0, 100, 200)
    ]
    merged = SpanIndex.merge(shards)
    assert merged.doc_ids == index.doc_ids
    _same(
        merged.search(QUERIES, top_k=10, scorer="max-cosine", overlap=True),
        index.search(QUERIES, top_k=10, scorer="max-cosine", overlap=True),
    )
    # the default scorer too (separately built: the unit sums differ by float rounding, ~1e-7)
    for x, y in zip(merged.search(QUERIES, top_k=10), index.search(QUERIES, top_k=10)):
        assert [(m.doc_id, m.start, m.end) for m in x] == [(m.doc_id, m.start, m.end) for m in y]
        np.testing.assert_allclose([m.score for m in x], [m.score for m in y], atol=1e-6)
    with pytest.raises(SpanInputError, match="Duplicate"):
        SpanIndex.merge([shards[0], shards[0]])
    with pytest.raises(SpanInputError, match="other settings"):
        SpanIndex.merge([shards[0], SpanIndex.build(["a b"], tiny_model, ids=["z"], max_span=3)])


def test_crash_mid_save_keeps_previous_index(tiny_model, index, tmp_path, monkeypatch):
    path = tmp_path / "ix"
    index.save(path)
    before = SpanIndex.load(path, tiny_model).search(QUERIES, top_k=5)
    bigger = SpanIndex.merge(
        [index, SpanIndex.build(["a new document"], tiny_model, ids=["new"], max_span=8)]
    )
    calls = {"n": 0}
    real_save = slice_st.index.storage.save_array

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full (simulated)")
        return real_save(*args, **kwargs)

    monkeypatch.setattr(slice_st.index.storage, "save_array", failing)
    with pytest.raises(OSError, match="simulated"):
        bigger.save(path)
    monkeypatch.setattr(slice_st.index.storage, "save_array", real_save)
    assert (
        len([d for d in os.listdir(path) if d.startswith("data-")]) == 1
    )  # the partial folder was removed
    loaded = SpanIndex.load(path, tiny_model)
    assert len(loaded) == len(index)
    _same(loaded.search(QUERIES, top_k=5), before)

    # a crash at the commit point (manifest replace) also leaves the old version
    def failing_replace(*args, **kwargs):
        raise OSError("power cut (simulated)")

    monkeypatch.setattr(slice_st.index.span_index.os, "replace", failing_replace)
    with pytest.raises(OSError, match="power cut"):
        bigger.save(path)
    monkeypatch.undo()
    _same(SpanIndex.load(path, tiny_model).search(QUERIES, top_k=5), before)


def test_failed_add_leaves_index_unchanged(tiny_model, index):
    size, units = len(index), index.num_units
    with pytest.raises(SpanInputError, match="Duplicate"):
        index.add(["another text"], ["0"])
    with pytest.raises(SpanInputError, match="must be a string"):
        index.add(["fine", None])
    assert (len(index), index.num_units) == (size, units)


def test_half_written_or_corrupt_directory(tiny_model, index, tmp_path):
    path = tmp_path / "ix"
    index.save(path)
    manifest = json.loads((path / MANIFEST).read_text())
    # a data folder without a manifest (a first save that crashed before its commit point)
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    os.rename(path / manifest["data"], lonely / manifest["data"])
    with pytest.raises(SpanInputError, match="not a SpanIndex.*no manifest.json"):
        SpanIndex.load(lonely, tiny_model)
    # a manifest whose data folder is missing
    with pytest.raises(SpanInputError, match="missing or corrupt"):
        SpanIndex.load(path, tiny_model)
    os.rename(lonely / manifest["data"], path / manifest["data"])
    SpanIndex.load(path, tiny_model)
    # a truncated array
    array = path / manifest["data"] / "span_norms.npy"
    data = array.read_bytes()
    array.write_bytes(data[: len(data) // 2])
    with pytest.raises(SpanInputError, match="missing or corrupt|does not match"):
        SpanIndex.load(path, tiny_model)
    array.write_bytes(data)
    # garbage manifest, unknown version, no directory
    (path / MANIFEST).write_text("{not json")
    with pytest.raises(SpanInputError, match="unreadable index manifest"):
        SpanIndex.load(path, tiny_model)
    (path / MANIFEST).write_text(json.dumps(manifest | {"format_version": 99}))
    with pytest.raises(SpanInputError, match="format 99 is not supported"):
        SpanIndex.load(path, tiny_model)
    with pytest.raises(FileNotFoundError, match="No index"):
        SpanIndex.load(tmp_path / "nowhere", tiny_model)


def test_model_mismatch_is_refused(make_tiny_model, index, tmp_path):
    index.save(tmp_path / "ix")
    other = make_tiny_model(128)
    with torch.no_grad():
        next(other.parameters())[0, 0] += 1.0
    with pytest.raises(SpanInputError, match="built with another model.*fingerprint"):
        SpanIndex.load(tmp_path / "ix", other)


# ------------------------------------------------------------------------------------ bad input
def test_bad_input(tiny_model, index):
    with pytest.raises(SpanInputError, match="corpus is empty"):
        SpanIndex.build([], tiny_model)
    with pytest.raises(SpanInputError, match="Duplicate document id 'a'"):
        SpanIndex.build(["x", "y"], tiny_model, ids=["a", "a"])
    with pytest.raises(SpanInputError, match="Got 1 ids for 2 documents"):
        SpanIndex.build(["x", "y"], tiny_model, ids=["a"])
    with pytest.raises(SpanInputError, match="non-empty string"):
        SpanIndex.build(["x", "y"], tiny_model, ids=["a", ""])
    with pytest.raises(SpanInputError, match="queries is empty"):
        index.search([])
    with pytest.raises(SpanInputError, match="empty or whitespace"):
        index.search(["fine", "  "])
    for top_k in (0, -1, 1.5, True):
        with pytest.raises(SpanInputError, match="top_k"):
            index.search("dog", top_k=top_k)
    with pytest.raises(SpanInputError, match="holds spans of 1..8 words"):
        index.search("dog", max_span=9)
    with pytest.raises(SpanInputError, match="min_span"):
        index.search("dog", min_span=5, max_span=3)
    with pytest.raises(SpanInputError, match="Unknown document ids"):
        index.remove(["no-such-id"])
    with pytest.raises(SpanInputError, match="dtype"):
        SpanIndex.build(["x"], tiny_model, dtype="int8")
    with pytest.raises(SpanInputError, match="candidate stage"):
        index.search("dog", approximate=True)


def test_skip_documents_that_cannot_be_windowed(make_tiny_model):
    model = make_tiny_model(24)  # 22 content tokens per window
    bad = (
        "a " * 5 + "." * 60 + " b" * 5
    )  # one 'word' of dot leaders: 8-word spans cannot fit a window
    docs = ["the dog barks", bad, "a man plays the guitar"]
    with pytest.raises(SpanInputError, match="do not fit|longer than the model window"):
        SpanIndex.build(docs, model, max_span=8)
    index = SpanIndex.build(docs, model, max_span=8, on_error="skip")
    assert index.doc_ids == ["0", "2"] and [doc_id for doc_id, _ in index.skipped] == ["1"]
    assert "Document '1'" in index.skipped[0][1]


def test_documents_without_spans_are_fine(tiny_model):
    index = SpanIndex.build(["", "   ", "a dog barks"], tiny_model, max_span=3)
    assert len(index) == 3
    assert {m.doc_id for m in index.search("dog", top_k=10)[0]} == {"2"}


def test_unit_profile_peaks_at_each_documents_best_span(tiny_model_short):
    """Long documents (several windows) too: the profile's maximum is the document's best span score, on its words."""
    docs = make_docs(6, seed=3, low=20, high=60)
    index = SpanIndex.build(docs, tiny_model_short, max_span=4)
    assert len(index.arrays["segment_docs"]) > len(docs)  # windowed
    query = "a quiet morning walk"
    best = {
        match.doc_id: match
        for match in index.search(
            query, top_k=len(docs), per_document=1, min_span=2, scorer="max-cosine"
        )[0]
    }
    for doc_id, text in zip(index.doc_ids, docs):
        chars, scores = index.unit_profile(query, doc_id, min_span=2)
        assert [text[start:end] for start, end in chars] == text.split()
        assert scores.max() == pytest.approx(best[doc_id].score, abs=1e-5)
        assert np.allclose(
            scores[best[doc_id].unit_start : best[doc_id].unit_end], best[doc_id].score, atol=1e-5
        )
        assert np.all(np.isfinite(scores))
    assert index.unit_profile(None, index.doc_ids[0])[1] is None
    with pytest.raises(SpanInputError, match="Unknown document"):
        index.unit_profile(query, "missing")
    with pytest.raises(SpanInputError, match="cannot search"):
        index.unit_profile(query, index.doc_ids[0], max_span=9)


def test_b14_search_threshold_must_be_a_number(tiny_model):
    index = SpanIndex.build(["a man plays the guitar"], tiny_model, max_span=3)
    with pytest.raises(SpanInputError, match="threshold must be a number"):
        index.search("guitar", threshold="0.5")


def test_b16_unit_must_match_the_index(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    build_index_cli(capsys, corpus, tmp_path / "ix", tiny_model_dir, "--max-span", "3")
    assert "this index holds word spans" in cli_fails(
        capsys, "mine", "--index", tmp_path / "ix", "-q", "guitar", "--unit", "token"
    )
    assert (
        run_cli(capsys, "mine", "--index", tmp_path / "ix", "-q", "guitar", "--unit", "word")[0]
        == 0
    )
    assert "needs --index" in cli_fails(capsys, "mine", "-q", "guitar", corpus, "--approximate")


@pytest.mark.parametrize("top_k", [-1, 0, 1.5, True])
def test_b18_ranked_top_k_is_checked(tiny_model, top_k):
    result = tiny_model.best_spans(["guitar"], ["a guitar", "the man", "x"], max_span=2)
    assert len(result.ranked(0, top_k=None)) == 3
    with pytest.raises(SpanInputError, match="top_k must be a positive integer"):
        result.ranked(0, top_k=top_k)


def test_b18_nan_threshold_is_one_error_everywhere(tiny_model, tiny_model_dir, tmp_path, capsys):
    nan = float("nan")
    result = tiny_model.best_spans(["guitar"], ["a guitar"], max_span=2)
    index = SpanIndex.build(["a guitar"], tiny_model, max_span=2)
    sharded = slice_st.index.ShardedSpanIndex([index])
    for call in (
        lambda: result.ranked(0, threshold=nan),
        lambda: index.search("guitar", threshold=nan),
        lambda: sharded.search("guitar", threshold=nan),
        lambda: index.search("guitar", threshold=float("inf")),
    ):
        with pytest.raises(SpanInputError, match="threshold must be a finite number"):
            call()
    corpus = tmp_path / "c.txt"
    corpus.write_text("a guitar\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["mine", "-q", "guitar", str(corpus), "--threshold", "nan", "-m", tiny_model_dir])
    assert exit_info.value.code == 2 and "finite number" in capsys.readouterr().err


def test_nan_vectors_are_an_error_not_no_match(make_tiny_model, tmp_path, monkeypatch, capsys):
    import torch

    import slice_st

    model = make_tiny_model(128)
    with torch.no_grad():
        model[0].auto_model.embeddings.LayerNorm.weight[0] = float(
            "nan"
        )  # as a NaN in a damaged checkpoint or adapter
    with pytest.raises(slice_st.ModelLoadError, match="NaN or infinite token vectors"):
        model.best_spans("dog", "the dog barks")
    with pytest.raises(slice_st.ModelLoadError, match="NaN or infinite token vectors"):
        model.encode_spans("the dog barks")
    monkeypatch.setattr(slice_st, "load_model", lambda *a, **k: model)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    assert "NaN or infinite token vectors" in cli_fails(
        capsys, "mine", "-q", "dog", corpus, "--no-progress"
    )


def test_nlist_above_the_chunks_is_a_clear_error(tiny_model, tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("faiss")
    from slice_st import SpanIndex, SpanInputError

    index = SpanIndex.build(
        ["the dog barks at the mailman", "a man plays the guitar"], tiny_model, max_span=3
    )
    with pytest.raises(SpanInputError, match="nlist=5000 is more than the .* chunks of this index"):
        index.build_candidates(kind="ivf", nlist=5000)
    index.save(str(tmp_path / "ix"))
    assert "nlist=5000 is more than" in cli_fails(
        capsys, "index", "candidates", tmp_path / "ix", "--nlist", "5000"
    )
    for nlist in (0, -2, 1.5):
        with pytest.raises(SpanInputError, match="nlist must be a positive integer"):
            index.build_candidates(kind="ivf", nlist=nlist)


def test_removing_documents_keeps_an_ivf_stage_with_as_many_lists_as_chunks_are_left(tiny_model):
    pytest.importorskip("faiss")
    from slice_st import SpanIndex

    texts = [
        "the dog barks at the mailman every day",
        "a man plays the guitar",
        "rain is falling on the city",
    ]
    index = SpanIndex.build(texts, tiny_model, max_span=3)
    index.build_candidates(kind="ivf", chunk=2, stride=1, nlist=11)
    chunks = index.info()["candidates"]["chunks"]
    assert chunks >= 11
    assert (
        index.remove(["0"]) == 1
    )  # fewer chunks than lists now: the stage is rebuilt, not lost with an error
    left = index.info()["candidates"]
    assert (
        index.doc_ids == ["1", "2"]
        and left["chunks"] < chunks
        and left["nlist"] == min(11, left["chunks"])
    )
    assert index.search("a man plays the guitar", top_k=1, approximate=True)[0][0].doc_id == "1"


def test_index_match_old_names_are_deprecated_aliases():
    """``IndexMatch`` names a match as ``SpanMatch`` does; ``doc_index`` and ``cosine`` still answer, with a warning."""
    fields = dict(
        query_index=0, doc_id="a", text_index=3, start=0, end=1, span="x", score=0.5, unit_start=0
    )
    match = IndexMatch(**fields, unit_end=1, similarity=0.75)
    with pytest.warns(DeprecationWarning, match="use text_index"):
        assert match.doc_index == 3
    with pytest.warns(DeprecationWarning, match="use similarity"):
        assert match.cosine == 0.75


def _wrapped_corpus(tmp_path):
    """Two folders each holding an ``x.txt``, and a JSONL file."""
    for folder, words in (("a", "guitar on stage"), ("b", "flight was late")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.txt").write_text(
            f"A man played the {words}.\nThe second line is here.\n"
        )
    (tmp_path / "t.jsonl").write_text('{"id": "T1", "text": "Refund the ticket please."}\n')
    return [str(tmp_path / "a" / "x.txt"), str(tmp_path / "b" / "x.txt"), str(tmp_path / "t.jsonl")]


def test_documents_list_files_and_sizes_and_survive_a_save(tiny_model, tmp_path):
    from slice_st.data.corpus import read_corpus

    paths = _wrapped_corpus(tmp_path)
    index = SpanIndex.build(read_corpus(paths), tiny_model, max_span=3)
    index.add(["a text given as a string"], ["s1"])
    rows = index.documents()
    assert [(row["id"], row["file"]) for row in rows] == [
        (f"{paths[0]}:1", paths[0]),
        (f"{paths[0]}:2", paths[0]),
        (f"{paths[1]}:1", paths[1]),
        (f"{paths[1]}:2", paths[1]),
        ("T1", paths[2]),  # a JSONL document: its file is kept, though its id does not name it
        ("s1", None),
    ]
    assert (
        rows[0]["characters"] == len("A man played the guitar on stage.") and rows[0]["units"] == 7
    )
    assert sum(row["units"] for row in rows) == index.num_units
    index.save(tmp_path / "ix")
    assert SpanIndex.load(tmp_path / "ix", tiny_model).documents() == rows
    assert SpanIndex.saved_documents(tmp_path / "ix") == rows  # without the model


def test_an_index_of_text_files_stores_no_sources_file(tiny_model, tmp_path):
    """Text files' documents name their file in their ids: the data folder is as before, and loads as before."""
    from slice_st.data.corpus import read_corpus
    from slice_st.index.span_index import SOURCES_FILE

    paths = _wrapped_corpus(tmp_path)[:2]
    SpanIndex.build(read_corpus(paths), tiny_model, max_span=3).save(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / MANIFEST).read_text())
    assert SOURCES_FILE not in manifest["files"]
    assert {row["file"] for row in SpanIndex.load(tmp_path / "ix", tiny_model).documents()} == set(
        paths
    )


def test_remove_a_file(tiny_model, tmp_path):
    from slice_st.data.corpus import read_corpus

    paths = _wrapped_corpus(tmp_path)
    index = SpanIndex.build(read_corpus(paths), tiny_model, max_span=3)
    units = index.num_units
    assert index.remove(file=paths[0]) == 2
    assert [row["file"] for row in index.documents()] == [paths[1], paths[1], paths[2]]
    assert index.num_units == units - 7 - 5
    # another spelling of the same file: the same documents
    assert index.remove(file=os.path.relpath(paths[2])) == 1
    with pytest.raises(
        SpanInputError, match=r"No document of .*a/x\.txt in the index \(its files: .*b/x\.txt\)"
    ):
        index.remove(file=paths[0])
    with pytest.raises(SpanInputError, match="ids or file"):
        index.remove()
    with pytest.raises(SpanInputError, match="ids or file"):
        index.remove(["x"], file=paths[1])
    assert len(index) == 2  # nothing removed by the errors


def test_add_replace_replaces_the_documents_of_a_file(tiny_model, tmp_path):
    from slice_st.data.corpus import read_corpus

    paths = _wrapped_corpus(tmp_path)
    index = SpanIndex.build(read_corpus(paths), tiny_model, max_span=3)
    with pytest.raises(SpanInputError, match="Duplicate document id"):
        index.add(read_corpus(paths[:1]))
    (tmp_path / "a" / "x.txt").write_text("Only one line now, about a guitar.\n")
    assert index.add(read_corpus(paths[:1]), replace=True) == [f"{paths[0]}:1"]
    assert index.replaced == [f"{paths[0]}:1", f"{paths[0]}:2"]
    assert [row["file"] for row in index.documents()] == [paths[1], paths[1], paths[2], paths[0]]
    fresh = SpanIndex.build(read_corpus([paths[1], paths[2], paths[0]]), tiny_model, max_span=3)
    assert index.doc_ids == fresh.doc_ids and index.texts == fresh.texts
    _same(index.search(QUERIES, top_k=5), fresh.search(QUERIES, top_k=5), atol=1e-6)
    # the same file spelt otherwise (relative, not absolute): its documents are the ones replaced
    relative = os.path.relpath(paths[0])
    index.add(read_corpus([relative]), replace=True)
    assert (
        index.replaced == [f"{paths[0]}:1"]
        and index.doc_ids[-1] == f"{os.path.normpath(relative)}:1"
    )
    assert len(index) == len(fresh)
    # a file not in the index yet is added; a generator of documents too
    (tmp_path / "c.txt").write_text("A new file.\n")
    index.add((d for d in read_corpus([str(tmp_path / "c.txt")])), replace=True)
    assert index.replaced == [] and index.doc_ids[-1] == f"{tmp_path / 'c.txt'}:1"


def test_add_replace_that_fails_changes_nothing(tiny_model, tmp_path):
    from slice_st.data.corpus import Document, read_corpus

    paths = _wrapped_corpus(tmp_path)
    index = SpanIndex.build(read_corpus(paths), tiny_model, max_span=3)
    before = (list(index.doc_ids), list(index.sources), index.num_units)
    bad = [
        Document(f"{paths[0]}:1", "fine", paths[0], 1),
        Document("T1", "a clash with the JSONL id", paths[0], 2),
    ]
    with pytest.raises(SpanInputError, match="Duplicate document id 'T1'"):
        index.add(bad, replace=True)
    assert (index.doc_ids, index.sources, index.num_units) == before


def test_repr_says_what_the_index_holds(tiny_model):
    index = SpanIndex.build(["one two three", "four five"], tiny_model, max_span=3)
    text = repr(index)
    assert (
        text.startswith("SpanIndex(model=")
        and "documents=2, units=5, unit='word', spans=1..3" in text
    )
    assert "dtype='float32'" in text and "0x" not in text


#: One clause in three documents, spelt with other case and spacing (the tokenizer is uncased: the same vectors).
CLAUSE_DOCS = [
    "The software is provided as is, without warranty.",
    "the software  is provided as is, without warranty.",
    "THE SOFTWARE IS PROVIDED\nAS IS, WITHOUT WARRANTY.",
]


@pytest.fixture(scope="module", params=["exact", "compressed"])
def clause_index(tiny_model, request):
    """Forty documents and the clause in three (ids ``gpl``, ``agpl``, ``lgpl``), exact or with a compressed tier."""
    texts = [*make_docs(20, seed=3), *CLAUSE_DOCS, *make_docs(20, seed=4)]
    ids = [*map(str, range(20)), "gpl", "agpl", "lgpl", *map(str, range(20, 40))]
    compression = "pq16" if request.param == "compressed" else None
    return SpanIndex.build(
        texts, tiny_model, ids=ids, max_span=8, dtype="float32", compression=compression
    )


@pytest.mark.parametrize("scorer", ["max-cosine", "phrase", "reranked"])
def test_merge_identical_lists_every_place_and_keeps_k_distinct(clause_index, scorer):
    from slice_st.search import SpanPlace, identity_key

    query = "the software is provided as is, without warranty"
    options = dict(
        per_document=1, scorer=scorer, candidates=30
    )  # compressed: 30 of 43 documents searched exactly
    plain = clause_index.search(query, top_k=3, **options)[0]
    assert [m.doc_id for m in plain] == [
        "gpl",
        "agpl",
        "lgpl",
    ]  # the clause fills the unmerged top 3
    assert all(m.places == () and m.count == 1 for m in plain)
    merged = clause_index.search(query, top_k=3, merge_identical=True, **options)[0]
    assert len(merged) == 3 and len({identity_key(m.span) for m in merged}) == 3  # k distinct spans
    first = merged[0]
    assert first.count == 3 and first.doc_id == "gpl" and first.span == plain[0].span
    assert [(p.doc_id, p.text_index) for p in first.places] == [
        ("gpl", 20),
        ("agpl", 21),
        ("lgpl", 22),
    ]
    assert first.places[0] == SpanPlace(
        text_index=20, start=first.start, end=first.end, score=first.score, doc_id="gpl"
    )
    for place in first.places:
        assert identity_key(
            clause_index.texts[place.text_index][place.start : place.end]
        ) == identity_key(first.span)
    # the distinct spans in the unmerged order; the places are the unmerged list down to the last result
    longer = clause_index.search(query, top_k=40, **options)[0]
    keys = list(dict.fromkeys(identity_key(m.span) for m in longer))[:3]
    assert [identity_key(m.span) for m in merged] == keys
    flat = [(p.doc_id, p.start, p.end) for m in merged for p in m.places]
    assert sorted(flat) == sorted(
        (m.doc_id, m.start, m.end) for m in longer[: sum(m.count for m in merged)]
    )
    assert [m.score for m in merged] == sorted((m.score for m in merged), reverse=True)


def test_merge_identical_without_copies_changes_nothing_but_places(index):
    """Default off: the results are those of before; with the option and no copies, the same results, one place each."""
    plain = index.search(QUERIES, top_k=8)
    merged = index.search(QUERIES, top_k=8, merge_identical=True)
    for got, want in zip(merged, plain):
        distinct = list(dict.fromkeys(slice_st.search.identity_key(m.span) for m in want))
        if len(distinct) < len(want):
            continue  # the random corpus repeats a span here: the first test covers it
        assert [dataclasses.replace(m, places=()) for m in got] == want
        assert all(m.count == 1 and len(m.places) == 1 for m in got)
    with pytest.raises(SpanInputError, match="merge_identical must be True or False"):
        index.search("dog", merge_identical="yes")


def test_merge_identical_stops_when_the_corpus_runs_out(tiny_model):
    index = SpanIndex.build(CLAUSE_DOCS, tiny_model, ids=["gpl", "agpl", "lgpl"], max_span=3)
    merged = index.search("the software", top_k=50, per_document=1, merge_identical=True)[0]
    assert (
        sum(m.count for m in merged) == 3
    )  # one span per document: every document's, as few results as there are


LICENCES = [
    "Copyright (c) 1995 the authors. In no event will the authors be held liable for any damages arising from "
    "the use of this software.",
    "The cat sat on the mat and purred all afternoon.",
    "IN NO EVENT SHALL THE AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY.",
]


@pytest.mark.parametrize("compression", [None, "pq8"])
def test_search_gives_a_shipped_models_confidence_and_cuts_by_it(real_model, compression):
    index = SpanIndex.build(LICENCES, real_model, compression=compression)
    query = ["the authors are not liable for any damages"]
    matches = index.search(query, top_k=5, candidates=3)[0]
    assert all(0 <= m.confidence <= 1 for m in matches) and matches[0].confidence > 0.9
    spans = real_model.best_spans(query, LICENCES).ranked(0)
    assert matches[0].confidence == pytest.approx(
        spans[0].confidence, abs=1e-4
    )  # the same match, the same number
    kept = index.search(query, top_k=5, min_confidence=0.5, candidates=3)[0]
    assert kept == [m for m in matches if m.confidence >= 0.5] and len(kept) < len(matches)
    merged = index.search(
        query, top_k=5, merge_identical=True, min_confidence="default", candidates=3
    )[0]
    assert merged and all(m.confidence >= 0.5 for m in merged)


def test_search_without_a_calibrated_confidence(real_model, tiny_model):
    phrase = SpanIndex.build(LICENCES, real_model).search(["liable"], scorer="phrase")[0]
    assert all(match.confidence is None for match in phrase)
    tiny = SpanIndex.build(LICENCES, tiny_model)
    assert all(match.confidence is None for match in tiny.search(["liable"])[0])
    with pytest.raises(SpanInputError, match="min_confidence needs a calibrated confidence"):
        tiny.search(["liable"], min_confidence=0.5)
    with pytest.raises(SpanInputError, match="min_confidence must be a number from 0 to 1"):
        tiny.search(["liable"], min_confidence=2)


def test_merge_limit_bounds_the_spans_searched(tiny_model):
    """A template in 12 documents: without a limit the copies are all listed and the second distinct span found; with
    merge_limit=4 the copies fill the 4 spans searched (one result, 4 places)."""
    texts = ["We will get back to you within two working days."] * 12 + ["A refund for the bag."]
    index = SpanIndex.build(texts, tiny_model, max_span=5)
    options = dict(top_k=2, per_document=1, scorer="max-cosine", merge_identical=True)
    query = "We will get back to"
    assert [m.count for m in index.search(query, **options)[0]] == [12, 1]
    assert [m.count for m in index.search(query, merge_limit=4, **options)[0]] == [4]
    with pytest.raises(SpanInputError, match="merge_limit"):
        index.search("answer", merge_limit=0)
