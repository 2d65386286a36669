"""Index search with a span scorer (issue 22): the ranking equals a brute-force reference built from every materialised
span, results of one document never overlap by default, "max-cosine" with overlap=True is the plain cosine top-k."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from helpers import QUERIES, make_docs

import slice_st
from slice_st import SpanIndex, SpanInputError
from slice_st.index import ShardedSpanIndex
from slice_st.index.search import _segments, index_unit_flags
from slice_st.rerank import unit_words
from slice_st.scoring import (
    AFTER_DETERMINER,
    costs_of_spans,
    mark_prefix,
    query_profiles,
    resolve_scorer,
    unit_flags,
)
from slice_st.tokens import text_units

MAX_SPAN = 6
SCORED_QUERIES = [
    *QUERIES,
    "the guitar on stage",
    "and the dog was",
]  # the last one starts and ends on function words


@pytest.fixture(scope="module")
def docs():
    return make_docs(90, seed=5, low=3, high=24)


@pytest.fixture(scope="module")
def index(tiny_model, docs):
    return SpanIndex.build(docs, tiny_model, max_span=MAX_SPAN)


@pytest.fixture(scope="module")
def sharded(tiny_model, docs):
    parts = [docs[:30], docs[30:55], docs[55:]]
    bases = [0, 30, 55]
    return ShardedSpanIndex(
        [
            SpanIndex.build(
                part, tiny_model, [str(base + i) for i in range(len(part))], max_span=MAX_SPAN
            )
            for part, base in zip(parts, bases)
        ]
    )


def every_span(model, texts, queries, scorer, min_span=1, max_span=MAX_SPAN, unit="word"):
    """Every span of every text materialised (``encode_spans``): per query, arrays doc, unit start, unit end, cosine,
    score.

    The costs come from each text's own units (``text_units``), flagged text by text: independent of the index's arrays.
    """
    scorer = resolve_scorer(scorer)
    encodings = model.encode_spans(
        texts, min_span=min_span, max_span=max_span, unit=unit, show_progress_bar=False
    )
    vectors = np.concatenate([e.embeddings for e in encodings]).astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    docs = np.concatenate([np.full(len(e), t) for t, e in enumerate(encodings)])
    units = np.concatenate([e.units for e in encodings]).astype(np.int64)
    query_vectors = slice_st.encode.embed_texts(model, queries).double().numpy()
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    profiles = query_profiles(
        queries, [len(s) for s, _, _ in text_units(model.tokenizer, queries, unit)]
    )
    flags = []
    for text, (starts, ends, _) in zip(texts, text_units(model.tokenizer, texts, unit)):
        flags.append(unit_flags([text[a:b] for a, b in zip(starts.tolist(), ends.tolist())]))
    out = []
    for q in range(len(queries)):
        cosines = vectors @ query_vectors[q]
        costs = np.zeros(len(cosines))
        for t, doc_flags in enumerate(flags):
            rows = docs == t
            costs[rows] = costs_of_spans(
                scorer,
                doc_flags,
                mark_prefix(doc_flags),
                profiles[q],
                units[rows, 0],
                units[rows, 1] - units[rows, 0],
            )
        out.append((docs, units[:, 0], units[:, 1], cosines, cosines - costs))
    return out


def reference(spans, top_k, per_document=None, threshold=None, overlap=False):
    """Sort every span by score, drop those below ``threshold``, then keep greedily (per-document cap, overlap
    filter)."""
    docs, starts, ends, cosines, scores = spans
    kept, used = [], {}
    for i in np.argsort(-scores, kind="stable"):
        if len(kept) == top_k or (threshold is not None and scores[i] < threshold):
            break
        doc = int(docs[i])
        if per_document is not None and used.get(doc, 0) >= per_document:
            continue
        if not overlap and any(
            docs[j] == doc and starts[j] < ends[i] and ends[j] > starts[i] for j in kept
        ):
            continue
        kept.append(i)
        used[doc] = used.get(doc, 0) + 1
    return [
        (int(docs[i]), int(starts[i]), int(ends[i]), float(cosines[i]), float(scores[i]))
        for i in kept
    ]


def assert_same(got, expected, tolerance=1e-5):
    assert len(got) == len(expected)
    np.testing.assert_allclose(
        [m.score for m in got], [e[4] for e in expected], atol=tolerance, rtol=0
    )
    np.testing.assert_allclose(
        [m.similarity for m in got], [e[3] for e in expected], atol=tolerance, rtol=0
    )
    for rank, (match, want) in enumerate(zip(got, expected)):
        if (match.text_index, match.unit_start, match.unit_end) != want[
            :3
        ]:  # only a near-tie may swap two spans
            assert abs(match.score - want[4]) < tolerance, f"rank {rank}: {match} != {want}"


OPTIONS = [
    {"top_k": 10},
    {"top_k": 1},
    {"top_k": 25, "per_document": 1},
    {"top_k": 12, "per_document": 2},
    {"top_k": 40, "threshold": 0.85},
    {"top_k": 8, "per_document": 1, "threshold": 0.8},
    {
        "top_k": 100_000,
        "threshold": 0.9,
    },  # every span above the threshold: the scan grows to the whole index
]


@pytest.mark.parametrize("scorer", ["phrase", "max-cosine"])
@pytest.mark.parametrize("options", OPTIONS)
def test_scored_search_equals_brute_force(tiny_model, docs, index, sharded, scorer, options):
    spans = every_span(tiny_model, docs, SCORED_QUERIES, scorer)
    for overlap in (False, True):
        expected = [
            reference(
                s, options["top_k"], options.get("per_document"), options.get("threshold"), overlap
            )
            for s in spans
        ]
        for searched in (index, sharded):
            results = searched.search(SCORED_QUERIES, scorer=scorer, overlap=overlap, **options)
            for got, want in zip(results, expected):
                assert_same(got, want)
                for match in got:
                    assert match.span == docs[match.text_index][
                        match.start : match.end
                    ] and match.doc_id == str(match.text_index)
                    assert match.score <= match.similarity + 1e-12


def test_token_spans_and_a_sub_range_equal_brute_force(tiny_model, docs):
    """Token units: the queries' lengths and the flags are counted in tokens ("city." is two units, "." a sentence
    end)."""
    tokens = SpanIndex.build(docs[:40], tiny_model, max_span=5, unit="token")
    spans = every_span(
        tiny_model, docs[:40], SCORED_QUERIES, "phrase", min_span=2, max_span=4, unit="token"
    )
    for overlap, per_document in ((False, None), (True, 2)):
        results = tokens.search(
            SCORED_QUERIES,
            top_k=12,
            min_span=2,
            max_span=4,
            per_document=per_document,
            overlap=overlap,
            scorer="phrase",
        )
        for got, want in zip(results, spans):
            assert_same(got, reference(want, 12, per_document, None, overlap))


def test_phrase_changes_the_ranking_and_ranks_the_default(docs, index):
    default = index.search(SCORED_QUERIES, top_k=10, scorer="phrase")
    phrase = index.search(SCORED_QUERIES, top_k=10, scorer="phrase", overlap=False)
    reranked = index.search(
        SCORED_QUERIES, top_k=10
    )  # the default re-ranks each document's spans: same documents
    assert [Counter(m.text_index for m in ms) for ms in reranked] == [
        Counter(m.text_index for m in ms) for ms in phrase
    ]
    assert all(
        [m.score for m in ms] == sorted((m.score for m in ms), reverse=True) for ms in reranked
    )
    plain = index.search(SCORED_QUERIES, top_k=10, scorer="max-cosine", overlap=True)
    assert default == phrase
    assert any(m.score < m.similarity for matches in default for m in matches)  # costs were paid
    assert [[(m.text_index, m.start, m.end) for m in ms] for ms in default] != [
        [(m.text_index, m.start, m.end) for m in ms] for ms in plain
    ]


@pytest.mark.parametrize("searched", ["index", "sharded"])
def test_max_cosine_with_overlap_is_the_plain_cosine_top_k(searched, index, sharded):
    """Exactly the old search: the scan's top-k by cosine (each document capped), scores bit for bit."""
    searched = {"index": index, "sharded": sharded}[searched]
    vectors = searched.embed_queries(SCORED_QUERIES)
    everything = searched.num_units * MAX_SPAN
    full = (
        index.top_spans(vectors, everything, 1, MAX_SPAN)
        if searched is index
        else searched.scan(vectors, everything)
    )
    for options in (
        {"top_k": 15},
        {"top_k": 9, "per_document": 1},
        {"top_k": 20, "per_document": 3, "threshold": 0.8},
    ):
        results = searched.search(SCORED_QUERIES, scorer="max-cosine", overlap=True, **options)
        for q, matches in enumerate(results):
            scores, units, _ = (values[q] for values in full)
            docs, first, _ = searched.locate(units, full[2][q])
            expected, used = [], {}
            for score, _unit, doc, start in zip(scores, units, docs, first):
                cap = options.get("per_document")
                if (cap is not None and used.get(doc, 0) >= cap) or score < options.get(
                    "threshold", -np.inf
                ):
                    continue
                used[doc] = used.get(doc, 0) + 1
                expected.append((int(doc), int(start), float(score)))
            assert [(m.text_index, m.unit_start, m.score) for m in matches] == expected[
                : options["top_k"]
            ]
            assert all(m.score == m.similarity for m in matches)


def test_results_of_one_document_never_overlap_by_default(index, sharded):
    for searched in (index, sharded):
        for per_document in (None, 3):
            for matches in searched.search(SCORED_QUERIES, top_k=60, per_document=per_document):
                for a in matches:
                    for b in matches:
                        if a is not b and a.text_index == b.text_index:
                            assert a.unit_end <= b.unit_start or b.unit_end <= a.unit_start, (a, b)
    # the filter is what keeps them apart: with overlap=True nested copies of one place come back
    allowed = index.search(SCORED_QUERIES, top_k=60, overlap=True)
    assert any(
        a.text_index == b.text_index and a.unit_start < b.unit_end and b.unit_start < a.unit_end
        for matches in allowed
        for a in matches
        for b in matches
        if a is not b
    )


def test_bad_scorer_and_overlap_are_clear_errors(index, sharded):
    for searched in (index, sharded):
        with pytest.raises(
            SpanInputError, match=r"scorer must be one of \['max-cosine', 'phrase', 'reranked'\]"
        ):
            searched.search("dog", scorer="cosine")
        with pytest.raises(SpanInputError, match="scorer must be one of"):
            searched.search("dog", scorer=3)
        with pytest.raises(SpanInputError, match="overlap must be True or False"):
            searched.search("dog", overlap="yes")


def test_a_scorer_object_is_used_as_given(index):
    custom = slice_st.scoring.SpanScorer(
        name="sentences-only",
        length_short=0,
        length_long=0,
        start_word=0,
        after_determiner=0,
        end_word=0,
        clause=0,
        sentence=0.5,
    )
    for matches in index.search(SCORED_QUERIES, top_k=20, scorer=custom, overlap=True):
        for match in matches:
            crossed = any(
                ch in match.span[:-1] for ch in "."
            )  # "city." inside the span: a sentence end crossed
            assert match.score == pytest.approx(
                match.similarity - (0.5 if crossed else 0.0), abs=1e-12
            )


def test_unit_flags_are_per_document_and_follow_changes(tiny_model, tiny_model_short):
    texts = ["he saw the", "man, who left. A dog"] + [
        " ".join(["the guitar was loud, and the dog barked."] * 6)
    ]
    index = SpanIndex.build(
        texts, tiny_model_short, max_span=4
    )  # the long text is cut into overlapping windows
    assert len(index.arrays["segment_docs"]) > len(texts)
    flags, marks = index.unit_flags()
    expected = []
    for text, (starts, ends, _) in zip(
        texts, text_units(tiny_model_short.tokenizer, texts, "word")
    ):
        expected.append(unit_flags([text[a:b] for a, b in zip(starts.tolist(), ends.tolist())]))
    docs, first, _ = index.locate(
        np.arange(index.num_units), np.ones(index.num_units, dtype=np.int64)
    )
    assert np.array_equal(marks, mark_prefix(flags))
    assert flags.tolist() == [int(expected[d][u]) for d, u in zip(docs, first)]
    assert (
        not flags[np.flatnonzero((docs == 1) & (first == 0))[0]] & AFTER_DETERMINER
    )  # "man," follows "the" of another text
    assert index.unit_flags()[0] is flags  # cached
    index.add(["the end"])
    assert len(index.unit_flags()[0]) == index.num_units  # new arrays: new flags
    assert index_unit_flags(
        [],
        {
            "segment_units": np.zeros(1, np.int64),
            "segment_docs": np.zeros(0, np.int64),
            "segment_first_unit": np.zeros(0, np.int64),
            "unit_chars": np.zeros((0, 2), np.int64),
        },
    ).shape == (0,)


def test_segments_read_their_windows_flags_and_words_from_the_index_tables(tiny_model_short):
    """The re-ranking of a stored segment reads its flags and words from the index's tables: equal to those of its
    unit strings as a window of its text (what best_spans reads), also where a window starts after "the" or a
    clause mark, or ends inside a sentence."""
    texts = [
        "he saw the",
        "  man, who left. A dog",
        " ".join(["the guitar was loud, and the dog barked."] * 6),
        "x",
    ]
    index = SpanIndex.build(
        texts, tiny_model_short, max_span=4
    )  # the long text is cut into overlapping windows
    found = _segments(index, list(range(len(texts))), index.span_config)
    bounds, table = index.arrays["segment_units"], index.unit_flags()[0]
    edges_differ = 0
    for segment, doc in enumerate(index.arrays["segment_docs"].tolist()):
        window, text = found[doc].pop(0), texts[doc]
        strings = [text[a:b] for a, b in window.chars.tolist()]
        expected = unit_flags(
            strings, not text[: window.chars[0, 0]].strip(), not text[window.chars[-1, 1] :].strip()
        )
        assert window.flags.tolist() == expected.tolist()
        edges_differ += expected.tolist() != table[bounds[segment] : bounds[segment + 1]].tolist()
        for name, values in vars(unit_words([strings])).items():
            assert getattr(window.words, name).tolist() == values.tolist()
    assert edges_differ >= 2 and not any(found.values())
    with np.errstate(
        all="raise"
    ):  # a neighbour span whose norm another segment stores is summed, never inf
        index.search(["the dog was loud and barked", "and the guitar"], top_k=8, per_document=None)


def test_approximate_search_is_scored_and_filtered(tiny_model, docs, index):
    pytest.importorskip("faiss")
    copy = SpanIndex.merge([index])
    copy.build_candidates(kind="flat", chunk=4, stride=2)
    chunks = len(
        copy._candidates.chunks
    )  # every chunk a candidate: the approximate search sees every span
    for options in (
        {"top_k": 10},
        {"top_k": 6, "per_document": 1},
        {"top_k": 8, "scorer": "max-cosine", "overlap": True},
    ):
        exact = copy.search(SCORED_QUERIES, **options)
        approximate = copy.search(SCORED_QUERIES, approximate=True, candidates=chunks, **options)
        for a, b in zip(exact, approximate):
            assert [(m.text_index, m.unit_start, m.unit_end) for m in a] == [
                (m.text_index, m.unit_start, m.unit_end) for m in b
            ]
            np.testing.assert_allclose([m.score for m in a], [m.score for m in b], atol=1e-6)
    few = copy.search(SCORED_QUERIES, top_k=10, approximate=True, candidates=4)
    for matches in few:
        assert all(m.score <= m.similarity for m in matches)
        assert all(
            a.unit_end <= b.unit_start or b.unit_end <= a.unit_start
            for a in matches
            for b in matches
            if a is not b and a.text_index == b.text_index
        )


def test_cli_mine_index_scorer_and_overlap(tiny_model, tiny_model_dir, docs, tmp_path, capsys):
    from slice_st.cli import main
    from slice_st.scoring import DEFAULT_SCORER, SPAN_SCORERS

    index = SpanIndex.build(docs[:40], tiny_model, max_span=MAX_SPAN)
    index.save(tmp_path / "ix")
    query = SCORED_QUERIES[0]

    def mine(*options):
        code = main(
            [
                "mine",
                "--index",
                str(tmp_path / "ix"),
                "--model",
                tiny_model_dir,
                "-q",
                query,
                "--spans",
                "15",
                "--per-text",
                "0",
                "-f",
                "jsonl",
                *options,
            ]
        )
        assert code == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    seen = set()
    for options, scorer, overlap in (
        ((), "reranked", False),  # the default
        (("--scorer", "max-cosine"), "max-cosine", False),
        (("--scorer", "max-cosine", "--overlap"), "max-cosine", True),
        (("--overlap",), "reranked", True),
    ):
        rows = mine(*options)
        expected = index.search(query, top_k=15, scorer=scorer, overlap=overlap)[0]
        assert [(r["doc_id"], r["start"], r["end"]) for r in rows] == [
            (m.doc_id, m.start, m.end) for m in expected
        ]
        assert [r["score"] for r in rows] == [round(m.score, 6) for m in expected]
        assert [r["cosine"] for r in rows] == [round(m.similarity, 6) for m in expected]
        assert {r["scorer"] for r in rows} == {scorer}
        seen.add(tuple((r["doc_id"], r["start"], r["end"], r["score"]) for r in rows))
    assert len(seen) == 4  # each option changes the result: none is ignored
    assert set(SPAN_SCORERS) == {
        DEFAULT_SCORER,
        "phrase",
        "max-cosine",
    }  # the CLI's --scorer choices
    with pytest.raises(SystemExit) as exit_info:
        main(["mine", "--index", str(tmp_path / "ix"), "-q", "dog", "--scorer", "cosine"])
    assert exit_info.value.code == 2 and "invalid choice: 'cosine'" in capsys.readouterr().err


def test_the_score_grid_of_a_segment_is_the_per_length_one():
    """The re-ranking's score grid, all lengths at once, equals the grid built length by length with
    SpanCosts.of_length (bit for bit), -inf past a row and where no norm is stored."""
    import torch

    from slice_st.index.search import _score_grids
    from slice_st.scoring import span_costs

    rng = np.random.default_rng(0)
    words = "the a man, sat on . and dog. barked! loud; it".split()
    batch, width, min_span, max_span = 5, 9, 2, 6
    counts = [width, 1, 4, 7, 9]
    flags = torch.zeros((batch, width), dtype=torch.long)
    for row, count in enumerate(counts):
        flags[row, :count] = torch.from_numpy(
            unit_flags(list(rng.choice(words, count))).astype(np.int64)
        )
    profiles = torch.from_numpy(query_profiles(["a man, sat."] * batch, [3] * batch))[:, None, :]
    costs = span_costs(resolve_scorer("phrase"), flags, profiles, min_span, max_span)
    dots = torch.nn.functional.pad(
        torch.from_numpy(rng.normal(size=(batch, width))).cumsum(1), (1, 0)
    )
    norms = torch.from_numpy(
        rng.uniform(0.5, 3, size=(batch, width, max_span - min_span + 1)).astype(np.float32)
    )
    norms[torch.from_numpy(rng.uniform(size=norms.shape) < 0.2)] = float("nan")
    cosines, scores = _score_grids(dots, norms, costs, min_span)
    for column, length in enumerate(range(min_span, max_span + 1)):
        count = width - length + 1
        span = ((dots[:, length:] - dots[:, :count]).float() / norms[:, :count, column]).nan_to_num(
            nan=-np.inf
        )
        assert torch.equal(cosines[:, :count, column], span)
        assert torch.equal(
            scores[:, :count, column], span - costs.of_length(length, count, min_span)[..., 0]
        )
        assert (
            torch.isneginf(scores[:, count:, column]).all()
            and torch.isneginf(cosines[:, count:, column]).all()
        )


def test_the_default_search_keeps_a_clauses_negation_as_best_spans_does(real_model):
    """The index re-picks each document's spans as best_spans does, the negation of the span's clause included."""
    texts = [
        "This software is provided 'as-is', without any express or implied warranty. In no event will the authors be"
        " held liable for any damages arising from the use of this software.",
        "Permission is granted to anyone to use this software for any purpose, including commercial applications.",
    ]
    query = "the authors are not liable for any damages"
    index = SpanIndex.build(texts, real_model)
    found = index.search([query], top_k=1)[0][0]
    direct = real_model.best_spans(query, texts[0])[0][0][0]
    assert found.doc_index == 0 and found.span == direct.span
    assert found.span.startswith("In no event")
    assert (
        found.score == pytest.approx(direct.score, abs=1e-3) and found.score <= found.cosine + 1e-6
    )


@pytest.mark.parametrize("scorer", [None, "phrase"])
def test_index_spans_keep_the_negation_or_condition_as_best_spans_does(real_model, scorer):
    """Every clause of the licence and policy test: the index's span (default and ``phrase`` scorers, exact and
    compressed) holds its governing negation or condition, and is the span, score and similarity of ``best_spans``."""
    from test_best_spans import GOVERNED

    texts = [text for text, _, _ in GOVERNED]
    exact = SpanIndex.build(texts, real_model)
    packed = SpanIndex.build(texts, real_model, compression="pq8")  # float16 vectors
    for doc, (text, queries, governor) in enumerate(GOVERNED):
        expected = real_model.best_spans(queries, [text], scorer=scorer)
        for index, tolerance in ((exact, 1e-5), (packed, 1e-3)):
            found = index.search(
                queries, top_k=len(texts), scorer=scorer, candidates=len(texts) - 1
            )
            for query, matches in enumerate(found):
                match = next(m for m in matches if m.text_index == doc)
                assert governor in match.span, (queries[query], match.span)
                best = expected[query][0][0]
                assert (match.start, match.end) == (best.start, best.end)
                assert match.score == pytest.approx(best.score, abs=tolerance)
                assert match.similarity == pytest.approx(best.similarity, abs=tolerance)
