"""The span scorer (slice_st.scoring) through best_spans: equal to a brute-force reference, disjoint top-k, whole
phrases."""

from __future__ import annotations

import math

import numpy as np
import pytest

import slice_st
from slice_st.errors import SpanInputError
from slice_st.scoring import (
    CLAUSE_BEFORE,
    CLAUSE_MARK,
    SENTENCE_END,
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


def _reference(model, query: str, text: str, scorer: SpanScorer, max_span: int, top_k: int):
    """Every span materialised: cosine minus costs, then greedy disjoint picks (no fused code involved)."""
    encoding = model.encode_spans(text, max_span=max_span)
    if not len(encoding):
        return []
    vector = slice_st.encode.embed_texts(model, query)[0].numpy()
    embeddings = np.asarray(encoding.embeddings)
    cosines = embeddings @ vector / np.linalg.norm(embeddings, axis=1) / np.linalg.norm(vector)
    starts, ends, _ = text_units(model.tokenizer, [text])[0]
    units = [text[a:b] for a, b in zip(starts, ends)]
    flags = unit_flags(units)
    profile = query_profiles([query], [len(text_units(model.tokenizer, [query])[0][0])])[0]
    spans = np.asarray(encoding.units)
    scores = cosines - costs_of_spans(
        scorer, flags, mark_prefix(flags), profile, spans[:, 0], spans[:, 1] - spans[:, 0]
    )
    kept: list[tuple[int, int, float, float]] = []
    for index in np.argsort(-scores, kind="stable"):
        start, end = (int(x) for x in spans[index])
        if any(start < b and a < end for a, b, _, _ in kept):
            continue
        kept.append((start, end, float(scores[index]), float(cosines[index])))
        if len(kept) == top_k:
            break
    return kept


@pytest.mark.parametrize("top_k", [1, 3])
def test_default_scorer_equals_brute_force(tiny_model, top_k):
    result = tiny_model.best_spans(QUERIES, TEXTS, max_span=5, top_k=top_k, scorer="phrase")
    assert result.scorer == "phrase"
    for q, query in enumerate(QUERIES):
        for t, text in enumerate(TEXTS):
            expected = _reference(tiny_model, query, text, SPAN_SCORERS["phrase"], 5, top_k)
            found = result[q][t]
            assert [(m.unit_start, m.unit_end) for m in found] == [
                (s, e) for s, e, _, _ in expected
            ]
            np.testing.assert_allclose(
                [m.score for m in found], [x for _, _, x, _ in expected], atol=1e-4
            )
            np.testing.assert_allclose(
                [m.similarity for m in found], [c for _, _, _, c in expected], atol=1e-4
            )


def test_custom_scorer_and_paired(tiny_model):
    scorer = SpanScorer(
        name="length-only",
        length_short=0.3,
        length_long=0.3,
        start_word=0,
        after_determiner=0,
        end_word=0,
        clause=0,
        sentence=0,
    )
    paired = slice_st.search.best_spans_paired(
        tiny_model, QUERIES, TEXTS, max_span=5, scorer=scorer
    )
    for query, text, match in zip(QUERIES, TEXTS, paired):
        ((start, end, score, similarity),) = _reference(tiny_model, query, text, scorer, 5, 1)
        assert (match.unit_start, match.unit_end) == (start, end)
        assert math.isclose(match.score, score, abs_tol=1e-4) and math.isclose(
            match.similarity, similarity, abs_tol=1e-4
        )


def test_max_cosine_scores_are_cosines(tiny_model):
    result = tiny_model.best_spans(
        QUERIES, TEXTS, max_span=5, top_k=4, scorer="max-cosine", overlap=True
    )
    for q in range(len(QUERIES)):
        for t in range(len(TEXTS)):
            for match in result[q][t]:
                assert match.score == pytest.approx(match.similarity, abs=1e-6)


def test_top_k_never_overlaps_by_default_even_across_windows(tiny_model_short):
    long_text = " ".join(
        f"word{i} and the cat sat." for i in range(40)
    )  # many windows of the short-window model
    result = tiny_model_short.best_spans(
        ["the cat sat", "word3"], [long_text, TEXTS[0]], max_span=4, top_k=12, window_context=2
    )
    for q in range(2):
        for t in range(2):
            matches = result[q][t]
            assert matches
            spans = sorted((m.unit_start, m.unit_end) for m in matches)
            assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    overlapping = tiny_model_short.best_spans(
        ["the cat sat"], [long_text], max_span=4, top_k=12, window_context=2, overlap=True
    )
    spans = sorted((m.unit_start, m.unit_end) for m in overlapping[0][0])
    assert any(a_end > b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_costs_follow_the_rules():
    flags = unit_flags(["I", "saw", "a", "man", "and", "left.", "Then", "rain"])
    marks = mark_prefix(flags)
    phrase = resolve_scorer("phrase")
    profile = query_profiles(["saw a man"], [3])[0]
    starts, lengths = np.array([1, 3, 1, 4]), np.array([3, 3, 4, 3])
    # «saw a man»: free; «man and left.»: cut after "a"; «saw a man and»: ends on "and", longer;
    # «and left. Then»: starts on "and", ends on "then", crosses a sentence end (also a clause mark)
    costs = costs_of_spans(phrase, flags, marks, profile, starts, lengths)
    assert costs[0] == 0
    assert costs[1] == pytest.approx(phrase.after_determiner)
    assert costs[2] == pytest.approx(phrase.end_word + phrase.length_long * math.log(4 / 3))
    assert costs[3] == pytest.approx(
        phrase.start_word + phrase.end_word + phrase.sentence + phrase.clause
    )
    # a query that starts on a function word lifts the start cost
    assert (
        costs_of_spans(
            phrase, flags, marks, query_profiles(["and left"], [2])[0], np.array([4]), np.array([2])
        )[0]
        == 0
    )

    # a whole-sentence query: a span should also start and end where a clause does
    sentence = query_profiles(["I saw a man."], [4])[0]
    costs = costs_of_spans(phrase, flags, marks, sentence, np.array([0, 1, 0]), np.array([4, 3, 6]))
    assert costs[0] == pytest.approx(
        phrase.open_end
    )  # «I saw a man»: open end ("man" ends no clause)
    assert costs[1] == pytest.approx(
        phrase.open_start + phrase.open_end + phrase.length_short * math.log(4 / 3)
    )
    assert costs[2] == pytest.approx(
        phrase.length_long * math.log(6 / 4)
    )  # «I saw a man and left.»: a whole clause


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), True, "1"])
def test_scorer_weights_are_checked(bad):
    with pytest.raises(ValueError, match="length_short"):
        SpanScorer(length_short=bad)


def test_bad_scorer_and_overlap_are_clear_errors(tiny_model):
    with pytest.raises(SpanInputError, match="scorer must be one of"):
        tiny_model.best_spans("a", "a b", scorer="best")
    with pytest.raises(SpanInputError, match="overlap must be True or False"):
        tiny_model.best_spans("a", "a b", overlap="yes")
    with pytest.raises(SpanInputError, match="scorer must be one of"):
        slice_st.search.best_spans_paired(tiny_model, ["a"], ["a b"], scorer=3)


# What users see first: the README / `make demo` cases come out as whole phrases (the real shipped model).
WHOLE = [
    (
        "a man plays the guitar",
        "Customer: My son plays the guitar and wants to bring it on board as hand luggage.",
        "plays the guitar",
    ),
    (
        "the flight was delayed",
        "Agent: I'm sorry about that, the departure got delayed because of the storm in Chicago.",
        "the departure got delayed",
    ),
    (
        "my bag was lost",
        "Customer: Last time the luggage went missing for a week, which was a nightmare.",
        "the luggage went missing",
    ),
    (
        "take back the last edit",
        "Undo the last edit. Take care with the redo command.",
        "Undo the last edit.",
    ),
]


@pytest.mark.parametrize(("query", "text", "span"), WHOLE)
def test_readme_cases_come_out_whole(real_model, query, text, span):
    result = real_model.best_spans(query, text, top_k=3, scorer="phrase")
    matches = result[0][0]
    assert matches[0].span == span
    spans = sorted((m.start, m.end) for m in matches)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_a_title_or_latin_abbreviation_ends_no_sentence():
    flags = unit_flags(["ask", "Dr.", "Smith.", "Mrs.", "Lee", "(e.g.", "i.e.", "No.", "dr."])
    ends = [bool(f & SENTENCE_END) for f in flags]
    assert ends == [False, False, True, False, False, False, False, True, True]
    assert not flags[1] & CLAUSE_MARK and not flags[2] & CLAUSE_BEFORE


def test_a_title_stays_in_the_span(real_model):
    """A support line's "Dr. Smith": the span is not cut after the title as after a sentence."""
    text = "B: Dr. Smith is in his office, please take a seat. A: Thanks."
    match = real_model.best_spans("the doctor is in his office, sit down please", text)[0][0][0]
    assert match.span.startswith("Dr. Smith is in his office")


@pytest.mark.parametrize("field", ["sentence", "clause", "length_short"])
@pytest.mark.parametrize("value", [3.5e38, 1e300, 1e6 + 1])
def test_span_scorer_refuses_costs_past_float32(field, value):
    """A cost past MAX_COST would overflow the float32 scores (a raw RuntimeError, or no match at all)."""
    from slice_st.scoring import SpanScorer

    with pytest.raises(ValueError, match=f"SpanScorer.{field} must be a number from 0 to"):
        SpanScorer(**{field: value})
    assert SpanScorer(**{field: 1e6}).to_dict()[field] == 1e6


# --------------------------------------------------------------------------- negations and conditions kept
def _governed(units, starts, ends, max_span=20):
    from slice_st.scoring import governed_starts, governor_units

    return governed_starts(
        governor_units(units)[None], unit_flags(units)[None], [starts], [ends], max_span
    )[0].tolist()


def test_governor_units_word_list_contractions_and_leads():
    from slice_st.scoring import BREAKS, GOVERNS, governor_units

    units = [
        "Under",
        "no",
        "circumstances",
        "you",
        "can't",
        "sue,",
        "unless",
        "it",
        "is",
        "not",
        "the",
        "case.",
    ]
    assert (governor_units(units) == GOVERNS).nonzero()[0].tolist() == [0, 1, 4, 6, 9]
    assert (governor_units(["Neither", "the", "name", "nor", "the", "names"]) == GOVERNS).nonzero()[
        0
    ].tolist() == [
        0,
        3,
    ]
    assert governor_units(["don’t", "use", "the", "name", "as", "–"]).tolist() == [
        GOVERNS,
        0,
        0,
        0,
        BREAKS,
        BREAKS,
    ]
    assert not governor_units(
        ["no", "es", "nada", "si", "nunca"]
    ).any()  # not English-like: no governor
    assert not governor_units(
        ["a", "non-exclusive,", "no-charge", "licence", "for", "the", "code"]
    ).any()
    assert governor_units([]).shape == (0,)


def test_a_span_starts_at_its_clause_when_a_governor_is_left_of_it():
    units = "This software is provided as-is. In no event will the authors be held liable for any damages.".split()
    assert _governed(units, [9, 0], [17, 5]) == [
        5,
        0,
    ]  # «the authors ... damages» → «In no event ...»; [0, 5) has none
    assert _governed(units, [5], [17]) == [5]  # already holds it
    clauses = "you may copy it, but you must not claim that you wrote it.".split()
    assert _governed(clauses, [8], [12]) == [
        5
    ]  # from after "but" (a scope break), not the text's start
    assert _governed(clauses, [10], [13]) == [10]  # «you wrote it.»: "that" opens a new scope
    dash = "too adorable not to photograph - four dogs playing".split()
    assert _governed(dash, [6], [9]) == [6]  # a dash ends the negation's scope
    assert _governed("It is free, unless you sell it.".split(), [4], [7]) == [3]  # a condition
    assert _governed("If it is free, you may share it.".split(), [4], [8]) == [
        4
    ]  # another clause's condition


def test_a_long_clause_keeps_the_first_governor_within_max_span():
    units = (
        "3. Neither the name of the University nor the names of its contributors may be used to endorse or "
        "promote products derived from this software."
    ).split()
    span = (8, 22)  # «the names ... derived»: from "Neither" (1) it would be 21 units
    assert _governed(units, [span[0]], [span[1]], max_span=20) == [7]  # «nor the names ...»
    assert _governed(units, [span[0]], [span[1]], max_span=21) == [1]  # the whole clause fits
    assert _governed(units, [span[0]], [span[1]], max_span=14) == [8]  # no governor fits: as scored
    assert _governed(units, [-1], [-1]) == [-1]  # a missing span stays missing


def test_a_shipped_model_with_its_own_reranker_gets_it(monkeypatch, tmp_path):
    """``reranked`` takes the re-ranker fitted for the shipped model when the package has one
    (``pretrained/rerank/<name>-rerank.json``); other models, and other scorers, are left as they are."""
    import importlib.resources

    from slice_st.scoring import DEFAULT_RERANKER, resolve_scorer, scorer_for_model

    (tmp_path / "rerank").mkdir()
    (tmp_path / "rerank" / "slice-mpnet-rerank.json").write_text("{}")
    monkeypatch.setattr(importlib.resources, "files", lambda package: tmp_path)
    assert scorer_for_model(resolve_scorer(None), "slice-mpnet").rerank == "slice-mpnet-rerank"
    assert scorer_for_model(resolve_scorer(None), "my-model").rerank == DEFAULT_RERANKER
    assert scorer_for_model(resolve_scorer(None), None).rerank == DEFAULT_RERANKER
    assert scorer_for_model(resolve_scorer("phrase"), "slice-mpnet").rerank is None
