"""The learned re-ranker (the default "reranked" scorer): equal to a reference built from every materialised span,
disjoint results, the shipped file, the cases it was built for, and the index's refusal."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import slice_st
from slice_st import rerank
from slice_st.errors import SpanInputError
from slice_st.scoring import (
    DEFAULT_SCORER,
    SPAN_SCORERS,
    SpanScorer,
    costs_of_spans,
    mark_prefix,
    query_profiles,
    resolve_scorer,
    unit_flags,
)
from slice_st.tokens import text_units

TEXTS = [
    "The cat sat on the mat, and then it left. A dog barked at the moon.",
    "Hello",
    "In the morning the committee discussed the budget for the coming year and the new plans.",
]
QUERIES = ["a dog barks", "the committee talked about money", "and then"]
MAX_SPAN = 5


def _reference(model, query: str, text: str, top_k: int, overlap: bool = False):
    """Every span materialised: phrase scores, top candidates, the re-ranker's features and picks (no fused code)."""
    encoding = model.encode_spans(text, max_span=MAX_SPAN)
    if not len(encoding):
        return []
    vector = slice_st.encode.embed_texts(model, query)[0].numpy()
    embeddings = np.asarray(encoding.embeddings, np.float64)
    cosines = embeddings @ vector / np.linalg.norm(embeddings, axis=1) / np.linalg.norm(vector)
    starts, ends, _ = text_units(model.tokenizer, [text])[0]
    units = [text[a:b] for a, b in zip(starts, ends)]
    flags = unit_flags(units)
    profile = query_profiles([query], [len(text_units(model.tokenizer, [query])[0][0])])[0]
    spans = np.asarray(encoding.units)
    scores = cosines - costs_of_spans(
        SPAN_SCORERS["phrase"],
        flags,
        mark_prefix(flags),
        profile,
        spans[:, 0],
        spans[:, 1] - spans[:, 0],
    )
    by_span = {(int(a), int(b)): (c, s) for (a, b), c, s in zip(spans, cosines, scores)}
    reranker = rerank.load_reranker(SPAN_SCORERS[DEFAULT_SCORER].rerank)
    top = np.argsort(-scores, kind="stable")[: reranker.candidates]
    first, end = spans[top, 0], spans[top, 1]
    moved = [
        [by_span.get((int(a) + da, int(b) + db), (np.nan, np.nan)) for a, b in zip(first, end)]
        for _, da, db in rerank.MOVES
    ]
    values = rerank.candidate_features(
        cosines[top][None],
        scores[top][None],
        np.array([[[c for c, _ in move]] for move in moved]),
        np.array([[[s for _, s in move]] for move in moved]),
        first[None],
        end[None],
        np.array([len(units)]),
        flags[None].astype(np.int64),
        profile[None].astype(np.float64),
        rerank.unit_words([units]),
        np.array([0]),
        rerank.query_word_ids([query]),
        rerank.query_edges([query]),
    )
    logits = reranker.logits(np.stack([values[name] for name in reranker.features], axis=-1))[0]
    if (
        profile[0] < reranker.min_query_units
    ):  # shorter than any training query: the phrase scorer's order
        logits = -np.arange(len(top), dtype=np.float64)
    kept: list[tuple[int, int, float, float]] = []
    for index in np.argsort(-logits, kind="stable"):
        a, b = int(first[index]), int(end[index])
        if not overlap and any(a < y and x < b for x, y, _, _ in kept):
            continue
        kept.append((a, b, float(scores[top][index]), float(cosines[top][index])))
        if len(kept) == top_k:
            return kept
    if not overlap:  # the phrase scorer's own disjoint places fill what the candidates leave
        places: list[tuple[int, int]] = []
        for index in np.argsort(-scores, kind="stable"):
            a, b = (int(x) for x in spans[index])
            if len(places) < top_k and not any(a < y and x < b for x, y in places):
                places.append((a, b))
                if not any(a < y and x < b for x, y, _, _ in kept) and len(kept) < top_k:
                    kept.append((a, b, float(scores[index]), float(cosines[index])))
    return kept


@pytest.mark.parametrize(("top_k", "overlap"), [(1, False), (3, False), (3, True)])
def test_default_scorer_reranks_like_the_reference(tiny_model, top_k, overlap):
    result = tiny_model.best_spans(QUERIES, TEXTS, max_span=MAX_SPAN, top_k=top_k, overlap=overlap)
    assert result.scorer == DEFAULT_SCORER == "reranked"
    for q, query in enumerate(QUERIES):
        for t, text in enumerate(TEXTS):
            expected = _reference(tiny_model, query, text, top_k, overlap)
            found = result[q][t]
            assert [(m.unit_start, m.unit_end) for m in found] == [
                (a, b) for a, b, _, _ in expected
            ]
            np.testing.assert_allclose(
                [m.score for m in found], [s for _, _, s, _ in expected], atol=1e-4
            )
            np.testing.assert_allclose(
                [m.similarity for m in found], [c for _, _, _, c in expected], atol=1e-4
            )
            assert all(
                m.score <= m.similarity + 1e-6 for m in found
            )  # the score stays the phrase score


def test_paired_and_windowed_texts_rerank_the_same(tiny_model, tiny_model_short):
    paired = slice_st.search.best_spans_paired(tiny_model, QUERIES, TEXTS, max_span=MAX_SPAN)
    full = tiny_model.best_spans(QUERIES, TEXTS, max_span=MAX_SPAN)
    for i, match in enumerate(paired):
        expected = full[i][i][0] if full[i][i] else None
        assert (match is None) == (expected is None)
        if match is not None:
            assert (match.unit_start, match.unit_end, match.score) == pytest.approx(
                (expected.unit_start, expected.unit_end, expected.score), abs=1e-5
            )
    # texts longer than one window: spans stay disjoint and inside their text
    long_text = " ".join(TEXTS) * 3
    windowed = tiny_model_short.best_spans(QUERIES, [long_text], max_span=4, top_k=6)
    for q in range(len(QUERIES)):
        ranges = sorted((m.unit_start, m.unit_end) for m in windowed[q][0])
        assert len(ranges) == 6 and all(b <= c for (_, b), (c, _) in zip(ranges, ranges[1:]))
        assert all(long_text[m.start : m.end] == m.span for m in windowed[q][0])


def test_the_shipped_reranker_file():
    """The file names exactly the features the package computes, with finite weights and its provenance."""
    path = resources.files("slice_st.pretrained").joinpath("rerank", "slice-minilm-rerank.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    reranker = rerank.load_reranker("slice-minilm-rerank")
    assert len(path.read_bytes()) < 64 * 1024
    assert {"model", "train", "data", "command"} <= set(data["provenance"])
    assert (
        len(reranker.features) == len(reranker.weights) == len(reranker.mean) == len(reranker.scale)
    )
    assert reranker.candidates == 40 and reranker.min_query_units == 4
    assert np.isfinite(reranker.weights).all() and (reranker.scale > 0).all()
    empty = np.zeros((1, 2))
    values = rerank.candidate_features(
        empty, empty, np.full((4, 1, 2), np.nan), np.full((4, 1, 2), np.nan), np.array([[0, 1]]), np.array([[1, 2]]),
        np.array([2]), np.zeros((1, 2), np.int64), np.ones((1, 5)), rerank.unit_words([["a", "b"]]), np.array([0]),
        rerank.query_word_ids(["a"]), rerank.query_edges(["a"]),
    )  # fmt: skip
    assert set(values) == set(reranker.features)


def test_the_phrase_shape_features():
    """A span ending on an auxiliary ("the bag will") is marked; one starting on a determiner, or right after one,
    is marked as such only for a query that starts with a determiner; the cost deltas are the costs' change."""
    units = ["the", "bag", "will", "arrive."]
    starts, ends = np.array([[0, 1, 0]]), np.array([[3, 3, 4]])
    cosines, scores = np.full((1, 3), 0.4), np.full((1, 3), 0.35)
    for query, det in (("my bag was lost", 1.0), ("bags get lost", 0.0)):
        values = rerank.candidate_features(
            cosines, scores, np.full((4, 1, 3), 0.5), np.full((4, 1, 3), 0.3), starts, ends, np.array([4]),
            unit_flags(units)[None].astype(np.int64), query_profiles([query], [len(query.split())]).astype(np.float64),
            rerank.unit_words([units]), np.array([0]), rerank.query_word_ids([query]), rerank.query_edges([query]),
        )  # fmt: skip
        np.testing.assert_array_equal(values["last_auxiliary"], [[1, 1, 0]])
        np.testing.assert_array_equal(values["first_det_query_det"], [[det, 0, det]])
        np.testing.assert_array_equal(values["after_det_query_det"], [[0, det, 0]])
        np.testing.assert_allclose(values["dcos_grow_left"], 0.1)
        np.testing.assert_allclose(values["dcost_grow_left"], 0.15)


def test_the_clause_reach_features():
    """A span starting right after an auxiliary ("will | the authors") is marked; the clause features count the units
    (log1p) between the clause's start and the span's, and between the span's end and the clause's (a comma, or the
    text's end)."""
    units = ["In", "no", "event", "will", "the", "authors", "be", "liable,", "nor", "sued"]
    starts, ends = np.array([[0, 4, 8, 4]]), np.array([[8, 7, 9, 6]])
    query = "the authors are not liable"
    values = rerank.candidate_features(
        np.full((1, 4), 0.4), np.full((1, 4), 0.35), np.full((4, 1, 4), 0.5), np.full((4, 1, 4), 0.3), starts, ends,
        np.array([10]), unit_flags(units)[None].astype(np.int64),
        query_profiles([query], [5]).astype(np.float64), rerank.unit_words([units]), np.array([0]),
        rerank.query_word_ids([query]), rerank.query_edges([query]),
    )  # fmt: skip
    np.testing.assert_array_equal(values["before_auxiliary"], [[0, 1, 0, 1]])
    np.testing.assert_allclose(values["clause_rest_before"], np.log1p([[0, 4, 0, 4]]))
    np.testing.assert_allclose(values["clause_rest_after"], np.log1p([[0, 1, 1, 2]]))


def test_scorer_and_reranker_names_are_checked(tiny_model):
    assert (
        resolve_scorer(None).rerank == "slice-minilm-rerank" and not resolve_scorer(None).is_plain
    )
    assert resolve_scorer("phrase").rerank is None
    for bad in ("../secrets", "", 3):
        with pytest.raises(ValueError, match="rerank"):
            SpanScorer(name="x", rerank=bad)
    with pytest.raises(SpanInputError, match="no shipped re-ranker"):
        tiny_model.best_spans("a", "a b", scorer=SpanScorer(name="x", rerank="missing"))


@pytest.mark.parametrize("per_document", [1, 2, None])
def test_an_index_reranks_each_document_as_best_spans(tiny_model, tiny_model_short, per_document):
    """An index returns the documents of the best "phrase" spans (exact); each document's spans are those best_spans
    picks in its text (the re-ranker), from the stored vectors, and the list is sorted by the score shown: single,
    sharded, and texts longer than a window."""
    from slice_st.index import ShardedSpanIndex, SpanIndex

    texts = [*TEXTS, " ".join(TEXTS) * 3]
    queries = [*QUERIES, "a dog was barking at the moon", "the cat sat on the mat and left"]
    changed = 0
    for model in (tiny_model, tiny_model_short):  # one window per text; windowed texts
        index = SpanIndex.build(texts, model, max_span=MAX_SPAN)
        parts = [
            SpanIndex.build(texts[a:b], model, [str(i) for i in range(a, b)], max_span=MAX_SPAN)
            for a, b in ((0, 2), (2, 4))
        ]
        phrase = index.search(queries, top_k=6, per_document=per_document, scorer="phrase")
        for searched in (index, ShardedSpanIndex(parts)):
            got = searched.search(queries, top_k=6, per_document=per_document)
            assert got == searched.search(
                queries, top_k=6, per_document=per_document, scorer="reranked"
            )
            for q, (matches, ranked) in enumerate(zip(got, phrase)):
                assert Counter(m.text_index for m in matches) == Counter(
                    m.text_index for m in ranked
                )  # documents stay
                assert [m.score for m in matches] == sorted(
                    (m.score for m in matches), reverse=True
                )
                changed += [(m.unit_start, m.unit_end) for m in matches] != [
                    (m.unit_start, m.unit_end) for m in ranked
                ]
                for doc in dict.fromkeys(m.text_index for m in matches):
                    spans = [m for m in matches if m.text_index == doc]
                    result = model.best_spans(
                        queries[q], texts[doc], max_span=MAX_SPAN, top_k=len(spans)
                    )
                    expected = sorted(result[0][0], key=lambda match: -match.score)
                    assert [(m.unit_start, m.unit_end, m.span) for m in spans] == [
                        (e.unit_start, e.unit_end, e.span) for e in expected
                    ]
                    np.testing.assert_allclose(
                        [m.score for m in spans], [e.score for e in expected], atol=1e-5
                    )
                    np.testing.assert_allclose(
                        [m.similarity for m in spans], [e.similarity for e in expected], atol=1e-5
                    )
    assert changed  # the re-ranker moved some spans off the "phrase" choice


def test_a_short_query_keeps_the_phrase_choice(tiny_model):
    """Queries shorter than any the re-ranker was trained on (under 4 words) get the "phrase" scorer's spans."""
    short = ["a dog barks", "and then", "budget"]
    for overlap in (False, True):
        reranked = tiny_model.best_spans(short, TEXTS, max_span=MAX_SPAN, top_k=3, overlap=overlap)
        phrase = tiny_model.best_spans(
            short, TEXTS, max_span=MAX_SPAN, top_k=3, overlap=overlap, scorer="phrase"
        )
        np.testing.assert_array_equal(reranked.unit_starts, phrase.unit_starts)
        np.testing.assert_array_equal(reranked.unit_ends, phrase.unit_ends)
        np.testing.assert_allclose(reranked.scores, phrase.scores, atol=1e-6)


def test_the_demo_flight_comes_out_whole(real_model):
    """`make demo`: "the flight was delayed" over the sample corpus finds the whole clause of line 2 (from «my flight
    to Denver was pushed back» on), where the "phrase" scorer showed only «my flight»."""
    with open(
        Path(__file__).parents[1] / "examples" / "sample_corpus.txt", encoding="utf-8"
    ) as handle:
        texts = [line.rstrip("\n") for line in handle if line.strip()]
    line = texts.index(
        "Customer: Hi, my flight to Denver was pushed back by three hours and nobody told me."
    )
    for scorer, whole in (("reranked", True), ("phrase", False)):
        result = real_model.best_spans(["the flight was delayed"], texts, top_k=3, scorer=scorer)
        spans = [match.span for match in result.ranked(0, top_k=3) if match.text_index == line]
        if whole:
            assert any(span.startswith("my flight to Denver was pushed back") for span in spans)
        else:
            assert "my flight" in spans


def test_the_sample_corpus_index_shows_the_spans_best_spans_shows(real_model):
    """The served page and `mine --index` over the sample corpus, with the real model: each document's span is the
    one best_spans picks in its line; the demo's flight and lost luggage come out whole there too."""
    from slice_st.index import SpanIndex

    index = SpanIndex.from_files(
        [str(Path(__file__).parents[1] / "examples" / "sample_corpus.txt")], real_model
    )
    queries = ["the flight was delayed", "my suitcase never arrived", "my bag was lost"]
    found = index.search(queries, top_k=5, per_document=1)
    result = real_model.best_spans(queries, index.texts)
    for q, matches in enumerate(found):
        assert [m.span for m in matches] == [result[q][m.text_index][0].span for m in matches]
        assert [m.score for m in matches] == sorted((m.score for m in matches), reverse=True)
    shown = [[m.span for m in matches] for matches in found]
    assert any(span.startswith("my flight to Denver was pushed back") for span in shown[0])
    assert shown[1][0] == "Last time the luggage went missing for a week,"
    assert shown[2][:3] == [
        "the lost baggage claim from March.",
        "Last time the luggage went missing for a week,",
        "my checked bag will make the connection.",
    ]


def test_first_and_last_word_match_as_a_scan_of_each_span():
    """first_match / last_match: the first (last) unit with a word inside the span is the query's first (last) word,
    as a plain scan of each span finds it."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        ids = rng.integers(-1, 4, (3, 9))
        starts = rng.integers(0, 9, (3, 5))
        ends = np.minimum(starts + rng.integers(1, 10, (3, 5)), 9)
        target = rng.integers(-2, 4, 3)
        for first in (True, False):
            expected = np.zeros(starts.shape)
            for row, column in np.ndindex(*starts.shape):
                words = [
                    u for u in range(starts[row, column], ends[row, column]) if ids[row, u] >= 0
                ]
                edge = words[0 if first else -1] if words else None
                expected[row, column] = edge is not None and ids[row, edge] == target[row]
            assert (
                rerank._edge_word_is(ids, target, starts, ends, first).tolist() == expected.tolist()
            )


def test_a_long_texts_first_spans_do_not_depend_on_top_k(real_model):
    """A text of several windows: its windows' re-ranked picks merge in pick order first, so ``top_k=n`` starts with
    the spans ``top_k=m < n`` gives, in ``best_spans`` and in an index alike (merged by score they did not)."""
    from slice_st.index import SpanIndex

    with open(
        Path(__file__).parents[1] / "examples" / "sample_corpus.txt", encoding="utf-8"
    ) as handle:
        text = " ".join(line.strip() for line in handle if line.strip())
    queries = [
        "my bag was lost",
        "the flight was delayed by hours",
        "I want a refund for the upgrade",
    ]
    index = SpanIndex.build([text], real_model)
    assert len(real_model.best_spans(queries[:1], [text], top_k=1)[0][0]) == 1
    for query in queries:
        picks = [real_model.best_spans([query], [text], top_k=k)[0][0] for k in (1, 2, 3, 5)]
        spans = [[(m.unit_start, m.unit_end) for m in matches] for matches in picks]
        for shorter, longer in zip(spans, spans[1:]):
            assert longer[: len(shorter)] == shorter, (query, spans)
        found = [
            {(m.unit_start, m.unit_end) for m in index.search(query, top_k=k)[0]}
            for k in (1, 2, 3, 5)
        ]
        assert found == [set(chosen) for chosen in spans], query  # an index lists them by score
