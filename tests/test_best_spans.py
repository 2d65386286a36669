"""best_spans: structure, ordering, scores equal to cosine of embed_texts and encode_spans vectors; ranked()."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import cosine

import slice_st
from slice_st.search import SpanMatch, SpanSearchResult, best_spans_paired

QUERIES = ["plays the guitar", "a pot of soup"]
TEXTS = [
    "Yesterday a man played the guitar badly.",
    "She cooked a large pot of vegetable soup for dinner.",
    "Hello",
    "The committee discussed the budget for the coming year.",
]


@pytest.fixture(scope="module")
def search(real_model) -> SpanSearchResult:
    # the paper's protocol: every span ranked by its cosine, overlapping spans allowed (brute-force comparable)
    return real_model.best_spans(
        QUERIES, TEXTS, top_k=3, max_span=5, scorer="max-cosine", overlap=True
    )


@pytest.fixture(scope="module")
def spans(real_model):
    return real_model.encode_spans(TEXTS, max_span=5)


@pytest.fixture(scope="module")
def query_vectors(real_model):
    return slice_st.encode.embed_texts(real_model, QUERIES).cpu().numpy()


def test_result_structure(search):
    assert isinstance(search, SpanSearchResult)
    assert len(search) == len(QUERIES)
    assert search.queries == QUERIES and search.texts == TEXTS
    for name in ("scores", "starts", "ends", "unit_starts", "unit_ends"):
        assert getattr(search, name).shape == (len(QUERIES), len(TEXTS), 3)
    for q in range(len(QUERIES)):
        per_text = search[q]
        assert len(per_text) == len(TEXTS)
        assert per_text == [search.matches(q, t) for t in range(len(TEXTS))]
        for t, matches in enumerate(per_text):
            assert len(matches) == (1 if TEXTS[t] == "Hello" else 3)
            assert all(isinstance(m, SpanMatch) for m in matches)
            scores = [m.score for m in matches]
            assert scores == sorted(scores, reverse=True)
            assert len({(m.start, m.end) for m in matches}) == len(matches)
            for m in matches:
                assert (m.query_index, m.text_index) == (q, t)
                assert m.span == TEXTS[t][m.start : m.end]
                assert m.span.split() == TEXTS[t].split()[m.unit_start : m.unit_end]
                assert 1 <= m.unit_end - m.unit_start <= 5
                assert -1.0 - 1e-5 <= m.score <= 1.0 + 1e-5
    # missing entries of the one-span text
    assert np.isneginf(search.scores[:, 2, 1:]).all() and (search.starts[:, 2, 1:] == -1).all()
    assert search[0:1] == [search[0]]
    assert search[-1] == search[len(QUERIES) - 1]


def test_semantic_best_spans(search):
    assert search[0][0][0].span == "played the guitar"
    assert "soup" in search[1][1][0].span
    assert search.ranked(0)[0].text_index == 0
    assert search.ranked(1)[0].text_index == 1


def test_scores_are_cosines_of_embed_texts_and_encode_spans(search, spans, query_vectors):
    for q, query in enumerate(query_vectors):
        for t, encoding in enumerate(spans):
            offsets = [tuple(o) for o in encoding.offsets.tolist()]
            brute = np.array([cosine(query, vector) for vector in encoding.embeddings])
            order = np.argsort(-brute, kind="stable")[:3]
            matches = search[q][t]
            np.testing.assert_allclose([m.score for m in matches], brute[order], atol=1e-4)
            for m in matches:
                index = offsets.index((m.start, m.end))
                assert abs(cosine(query, encoding.embeddings[index]) - m.score) < 1e-4
                assert tuple(encoding.units[index]) == (m.unit_start, m.unit_end)


def test_best_and_ranked(search):
    for q in range(len(QUERIES)):
        best = search.best(q)
        np.testing.assert_array_equal(best, search.scores[q, :, 0])
        ranked = search.ranked(q)
        assert [m.score for m in ranked] == sorted(best.tolist(), reverse=True)
        assert sorted(m.text_index for m in ranked) == list(range(len(TEXTS)))
        assert all(m == search[q][m.text_index][0] for m in ranked)
        assert [m.text_index for m in search.ranked(q, top_k=2)] == [
            m.text_index for m in ranked[:2]
        ]
        threshold = float(np.median(best))
        cut = search.ranked(q, threshold=threshold)
        assert cut == [m for m in ranked if m.score >= threshold]
        assert search.ranked(q, threshold=2.0) == []
        assert search.ranked(q, top_k=1, threshold=-2.0) == ranked[:1]
    assert search.ranked(-1) == search.ranked(len(QUERIES) - 1)


def test_single_strings_and_top_k_one(real_model):
    result = real_model.best_spans("plays the guitar", TEXTS[0], max_span=4)
    assert len(result) == 1 and len(result[0]) == 1
    (match,) = result[0][0]
    assert match.span == "played the guitar"
    assert match.score > 0.6


def test_top_k_prefix_is_consistent(real_model, search):
    top1 = real_model.best_spans(QUERIES, TEXTS, top_k=1, max_span=5, scorer="max-cosine")
    for q in range(len(QUERIES)):
        for t in range(len(TEXTS)):
            assert top1[q][t][0].span == search[q][t][0].span
            assert abs(top1[q][t][0].score - search[q][t][0].score) < 1e-5


def test_min_span_longer_than_text_gives_no_match(tiny_model):
    result = tiny_model.best_spans(
        ["a query"],
        ["one two", "one two three four"],
        min_span=3,
        max_span=4,
        top_k=5,
        overlap=True,
    )
    assert result[0][0] == []
    assert np.isneginf(result.best(0)[0])
    assert sorted(m.span for m in result[0][1]) == [
        "one two three",
        "one two three four",
        "two three four",
    ]


def test_token_units(tiny_model):
    text = "Internationalization isn't trivial."
    result = tiny_model.best_spans(
        ["nation"], [text], unit="token", max_span=2, top_k=50, overlap=True
    )
    encoding = tiny_model.encode_spans(text, unit="token", max_span=2)
    matches = result[0][0]
    assert len(matches) == len(encoding)  # top_k larger than the span count: every span, once
    assert {(m.start, m.end) for m in matches} == {tuple(o) for o in encoding.offsets.tolist()}
    query = slice_st.encode.embed_texts(tiny_model, "nation")[0].numpy()
    lookup = {tuple(o): v for o, v in zip(encoding.offsets.tolist(), encoding.embeddings)}
    for (
        m
    ) in matches:  # the default scorer ranks by cosine minus costs; similarity is the plain cosine
        assert abs(cosine(query, lookup[(m.start, m.end)]) - m.similarity) < 1e-4
        assert m.score <= m.similarity + 1e-6


def test_saved_span_settings_are_used(make_tiny_model):
    model = make_tiny_model()
    slice_st.set_span_config(model, min_span=2, max_span=2)
    result = model.best_spans(["x"], ["a b c d"], top_k=10, overlap=True)
    assert sorted(m.span for m in result[0][0]) == ["a b", "b c", "c d"]


# ---------------------------------------------------------------------------------------------
# best_spans_paired
# ---------------------------------------------------------------------------------------------


def test_best_spans_paired_equals_diagonal_of_best_spans(real_model, search):
    queries, texts = QUERIES + ["budget"], TEXTS[:2] + [TEXTS[3]]
    paired = slice_st.search.best_spans_paired(real_model, queries, texts, max_span=5)
    full = real_model.best_spans(queries, texts, max_span=5)  # both with the default scorer
    assert len(paired) == len(queries)
    for i, match in enumerate(paired):
        expected = full[i][i][0]
        assert (match.query_index, match.text_index) == (i, i)
        assert (match.start, match.end, match.span) == (expected.start, expected.end, expected.span)
        assert (match.unit_start, match.unit_end) == (expected.unit_start, expected.unit_end)
        assert abs(match.score - expected.score) < 1e-5
    assert paired[0].span == "played the guitar"


def test_best_spans_paired_gives_the_confidence_and_keeps_min_confidence(real_model):
    """Each pair's confidence is best_spans' for that pair; min_confidence leaves out (None) the pairs below it,
    as best_spans leaves out their spans."""
    queries, texts = QUERIES + ["budget"], TEXTS[:2] + [TEXTS[3]]
    full = real_model.best_spans(queries, texts, max_span=5)
    confidences = [full[i][i][0].confidence for i in range(len(queries))]
    paired = slice_st.search.best_spans_paired(real_model, queries, texts, max_span=5)
    assert all(c is not None for c in confidences)
    assert [m.confidence for m in paired] == pytest.approx(confidences, abs=1e-6)
    cut = sorted(confidences)[1]  # between the lowest and the others
    kept = slice_st.search.best_spans_paired(
        real_model, queries, texts, max_span=5, min_confidence=cut
    )
    assert [m is not None for m in kept] == [c >= cut for c in confidences]
    assert any(m is None for m in kept) and any(m is not None for m in kept)
    with pytest.raises(slice_st.SpanInputError, match="min_confidence needs"):
        slice_st.search.best_spans_paired(
            real_model, queries, texts, scorer="phrase", min_confidence=cut
        )


def test_best_spans_paired_windows_and_missing(tiny_model_short, tiny_model):
    long_text = " ".join(["the quick brown fox jumps over the lazy dog"] * 6)
    queries, texts = ["lazy dog", "x", "brown fox"], [long_text, "", "one"]
    paired = slice_st.search.best_spans_paired(
        tiny_model_short, queries, texts, max_span=3, window_context=2
    )
    assert paired[1] is None
    full = tiny_model_short.best_spans(queries, texts, max_span=3, window_context=2)
    for i in (0, 2):
        assert (paired[i].start, paired[i].end) == (full[i][i][0].start, full[i][i][0].end)
        assert abs(paired[i].score - full[i][i][0].score) < 1e-5


def test_best_spans_paired_input_errors(tiny_model):
    assert slice_st.search.best_spans_paired(tiny_model, [], []) == []
    with pytest.raises(slice_st.SpanInputError, match="pair up"):
        slice_st.search.best_spans_paired(tiny_model, ["a", "b"], ["a b"])
    with pytest.raises(slice_st.SpanInputError):
        slice_st.search.best_spans_paired(tiny_model, [" "], ["a b"])
    with pytest.raises(slice_st.SpanInputError):
        slice_st.search.best_spans_paired(tiny_model, ["a"], [None])
    with pytest.raises(slice_st.SpanInputError):
        slice_st.search.best_spans_paired(tiny_model, ["a"], ["a b"], min_span=0)


#: Clauses from real licences (and two policy-style sentences), queries (negated and not), and the governing negation
#: or condition the default scorer's span must keep.
GOVERNED = [
    (
        "This software is provided 'as-is', without any express or implied warranty. In no event will the authors be"
        " held liable for any damages arising from the use of this software.",  # zlib
        ["the authors are not liable for any damages", "the authors are liable for damages"],
        "In no event",
    ),
    (
        "3. Neither the name of the copyright holder nor the names of its contributors may be used to endorse or"
        " promote products derived from this software without specific prior written permission.",  # BSD-3-Clause
        [
            "don't use our names to promote your product",
            "our names may be used to promote products",
        ],
        "nor",
    ),
    (
        "1. The origin of this software must not be misrepresented; you must not claim that you wrote the original"
        " software.",  # zlib
        ["do not pretend you wrote the original code", "claim you wrote the original software"],
        "not claim",
    ),
    (
        "You may not remove or alter the substance of any license notices contained within the Source Code Form of"
        " the Covered Software.",  # MPL-2.0 3.4
        ["remove or alter license notices", "you can't delete the licence notices"],
        "may not",
    ),
    (
        "The contents of the NOTICE file are for informational purposes only and do not modify the License.",  # Apache
        ["the NOTICE file modifies the License", "the notice file does not change the licence"],
        "do not modify",
    ),
    (  # written for the test
        "Personal data is never shared with third parties unless you give your explicit consent.",
        ["personal data is shared with third parties", "we share data when you consent"],
        "never shared",
    ),
    (  # written for the test
        "Refunds are available within 30 days, except for digital downloads that have been opened.",
        ["refunds for opened digital downloads", "digital downloads that were opened"],
        "except for",
    ),
]


@pytest.mark.parametrize(("text", "queries", "governor"), GOVERNED, ids=[g for _, _, g in GOVERNED])
def test_the_default_scorer_keeps_the_negation_or_condition_of_its_clause(
    real_model, text, queries, governor
):
    result = real_model.best_spans(queries, [text])
    for query in range(len(queries)):
        match = result[query][0][0]
        assert governor in match.span, (queries[query], match.span)
        assert match.score <= match.similarity + 1e-6
        assert match.span == text[match.start : match.end]


def test_the_papers_protocol_and_token_units_keep_their_spans(real_model):
    text, queries, _ = GOVERNED[0]
    plain = real_model.best_spans(queries[0], text, scorer="max-cosine")[0][0][0]
    assert (
        plain.span == "the authors be held liable for any damages arising from"
    )  # max-cosine: as scored
    tokens = real_model.best_spans(queries[0], text, unit="token")[0][0][0]
    assert tokens.span == text[tokens.start : tokens.end] and "In no event" not in tokens.span


def test_ranked_merge_identical(tiny_model):
    """Texts whose best spans are identical (case, spacing, edge punctuation aside) give one result listing each;
    ``top_k`` counts distinct spans, in the order without merging; default off: no places."""
    from helpers import make_docs

    from slice_st.search import SpanPlace, identity_key

    clause = [
        "The software is provided as is.",
        "the software  is provided AS IS.",
        "THE SOFTWARE IS PROVIDED AS IS.",
    ]
    texts = [*make_docs(5, seed=1), *clause, *make_docs(5, seed=2)]
    result = slice_st.best_spans(
        tiny_model, "the software is provided as is", texts, max_span=8, scorer="phrase"
    )
    plain = result.ranked(0)
    assert [m.text_index for m in plain[:3]] == [5, 6, 7] and all(
        m.places == () and m.count == 1 for m in plain
    )
    merged = result.ranked(0, top_k=3, merge_identical=True)
    keys = list(dict.fromkeys(identity_key(m.span) for m in plain))
    assert [identity_key(m.span) for m in merged] == keys[:3]
    assert merged[0].count == 3 and [p.text_index for p in merged[0].places] == [5, 6, 7]
    assert merged[0].places[0] == SpanPlace(
        text_index=5, start=merged[0].start, end=merged[0].end, score=plain[0].score
    )
    assert [p.doc_id for p in merged[0].places] == [None] * 3
    assert len(result.ranked(0, merge_identical=True)) == len(keys)
    with pytest.raises(slice_st.SpanInputError, match="merge_identical"):
        result.ranked(0, merge_identical=1)


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ("The Software,", "the  software.", True),
        ("as is\n", "AS IS", True),
        ("Straße", "STRASSE", True),  # case-folded, not only lower-cased
        ("as, is", "as is", False),  # punctuation inside counts
        ("...", "!!!", False),  # nothing but punctuation: kept
        ("as is", "as it", False),
    ],
)
def test_identity_key(left, right, same):
    from slice_st.search import identity_key

    assert (identity_key(left) == identity_key(right)) is same


LICENCE = [
    "Copyright (c) 1995 the authors. In no event will the authors be held liable for any damages arising from "
    "the use of this software.",
    "The cat sat on the mat and purred all afternoon.",
]


def test_a_shipped_model_gives_each_match_a_confidence(real_model):
    result = real_model.best_spans(
        ["the authors are not liable for any damages", "a dog barked"], LICENCE
    )
    first, other = result[0][0][0], result[0][1][0]
    assert 0.9 < first.confidence <= 1 and other.confidence < 0.1  # the clause, and noise
    assert all(m.confidence < 0.5 for m in result.ranked(1))  # a query without an answer
    assert [m.text_index for m in result.ranked(0, min_confidence=0.5)] == [0]
    assert result.ranked(1, min_confidence="default") == []  # slice-minilm's documented cut
    kept = real_model.best_spans(
        ["the authors are not liable for any damages", "a dog barked"], LICENCE, min_confidence=0.5
    )
    assert [[len(kept[q][t]) for t in range(2)] for q in range(2)] == [[1, 0], [0, 0]]
    assert kept[0][0][0] == first and kept.best(1).tolist() == [-np.inf, -np.inf]


def test_min_confidence_keeps_each_texts_confident_spans_first(real_model):
    full = real_model.best_spans(["liable for damages"], LICENCE, top_k=4, overlap=True)
    cut = sorted(m.confidence for m in full[0][0])[1]  # drops the least confident span
    kept = real_model.best_spans(
        ["liable for damages"], LICENCE, top_k=4, overlap=True, min_confidence=cut
    )
    assert kept[0][0] == [m for m in full[0][0] if m.confidence >= cut]
    assert kept.best(0)[0] == kept[0][0][0].score


def test_no_confidence_without_a_calibrated_model_and_scorer(real_model, tiny_model):
    for model, options in ((real_model, {"scorer": "phrase"}), (tiny_model, {})):
        result = model.best_spans(["a late flight"], ["the flight was late"], **options)
        assert result[0][0][0].confidence is None
        with pytest.raises(
            slice_st.SpanInputError, match="min_confidence needs a calibrated confidence"
        ):
            result.ranked(0, min_confidence=0.5)
        with pytest.raises(
            slice_st.SpanInputError, match="min_confidence needs a calibrated confidence"
        ):
            model.best_spans(
                ["a late flight"], ["the flight was late"], min_confidence=0.5, **options
            )
    for model, options in ((real_model, {"scorer": "phrase"}), (tiny_model, {})):
        paired = best_spans_paired(model, ["a late flight"], ["the flight was late"], **options)
        assert paired[0].confidence is None


@pytest.mark.parametrize("value", [1.5, -0.1, "high", True, float("nan")])
def test_bad_min_confidence_is_refused(real_model, value):
    with pytest.raises(
        slice_st.SpanInputError, match="min_confidence must be a number from 0 to 1"
    ):
        real_model.best_spans(["a late flight"], ["the flight was late"], min_confidence=value)
