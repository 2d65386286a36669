"""Long texts: windowed encoding gives exactly the full set of spans; nothing is truncated."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import SHORT_WORDS, cosine, count_spans, expected_span_units, texts, whitespace_words
from hypothesis import given, settings
from hypothesis import strategies as st

import slice_st
from slice_st.encode import model_window
from slice_st.tokens import plan_windows

LONG_TEXT = " ".join(
    [
        "The quick brown fox jumps over the lazy dog.",
        "Internationalization doesn't matter, said the naïve café owner!",
        "中文 text and emoji 🎸 mixed in — with “quotes” and (parentheses).",
        "Another sentence follows here, with several ordinary words in it.",
        "Finally: the end of this paragraph, which is long enough to need windows.",
    ]
)  # ~80 tokens: one window of the 128-token tiny model, many of the 24-token one


def assert_same_spans(windowed, full):
    np.testing.assert_array_equal(windowed.offsets, full.offsets)
    np.testing.assert_array_equal(windowed.units, full.units)
    assert windowed.spans == full.spans


def test_long_text_needs_several_windows(tiny_model_short, tiny_model):
    window = model_window(tiny_model_short)
    assert window == 22
    assert len(plan_windows(tiny_model_short.tokenizer, [LONG_TEXT], window, 3, 2)) >= 3
    assert len(plan_windows(tiny_model.tokenizer, [LONG_TEXT], model_window(tiny_model), 3, 2)) == 1


@pytest.mark.parametrize("window_context", [0, 2, 6, 16])
@pytest.mark.parametrize("min_span, max_span", [(1, 3), (2, 4)])
def test_windowed_spans_equal_full_span_set(
    tiny_model_short, tiny_model, window_context, min_span, max_span
):
    windowed = tiny_model_short.encode_spans(
        LONG_TEXT, min_span=min_span, max_span=max_span, window_context=window_context
    )
    full = tiny_model.encode_spans(LONG_TEXT, min_span=min_span, max_span=max_span)
    assert_same_spans(windowed, full)
    words = whitespace_words(LONG_TEXT)
    expected = expected_span_units(len(words), min_span, max_span)
    assert [
        tuple(u) for u in windowed.units.tolist()
    ] == expected  # each span once, by start then length
    assert len(set(map(tuple, windowed.offsets.tolist()))) == len(windowed)
    assert windowed.embeddings.shape == (len(expected), 32)
    assert np.isfinite(windowed.embeddings).all()


def test_windowed_token_units_equal_full_span_set(tiny_model_short, tiny_model):
    windowed = tiny_model_short.encode_spans(LONG_TEXT, unit="token", max_span=3, window_context=2)
    full = tiny_model.encode_spans(LONG_TEXT, unit="token", max_span=3)
    assert_same_spans(windowed, full)
    num_tokens = len(tiny_model.tokenizer(LONG_TEXT, add_special_tokens=False)["input_ids"])
    assert len(windowed) == count_spans(num_tokens, 1, 3)


@settings(max_examples=15)
@given(
    batch=st.lists(
        texts(min_words=0, max_words=40, vocabulary=SHORT_WORDS), min_size=1, max_size=4
    ),
    max_span=st.integers(1, 3),
    window_context=st.integers(0, 3),
    batch_size=st.integers(1, 5),
)
def test_windowed_batches_equal_full_span_sets_property(
    tiny_model_short, tiny_model, batch, max_span, window_context, batch_size
):
    batch = batch + [
        "a b c"
    ]  # at least one text with tokens (all-empty calls: known bug, see test_encode)
    windowed = tiny_model_short.encode_spans(
        batch, max_span=max_span, window_context=window_context, batch_size=batch_size
    )
    full = tiny_model.encode_spans(batch, max_span=max_span)
    for text, w, f in zip(batch, windowed, full):
        assert w.text == text
        assert_same_spans(w, f)


def test_text_that_fits_gives_identical_vectors_in_small_and_large_window(
    tiny_model_short, tiny_model
):
    text = "A man plays the guitar on a stage."
    small = tiny_model_short.encode_spans(text, max_span=3)
    large = tiny_model.encode_spans(text, max_span=3)
    assert_same_spans(small, large)
    np.testing.assert_allclose(small.embeddings, large.embeddings, atol=1e-5)


def test_mixed_batch_equals_one_by_one(tiny_model_short):
    batch = [LONG_TEXT, "short one", "", LONG_TEXT[:200], "x"]
    together = tiny_model_short.encode_spans(batch, max_span=3, window_context=2, batch_size=3)
    for text, result in zip(batch, together):
        if not text:
            assert len(result) == 0
            continue
        alone = tiny_model_short.encode_spans(text, max_span=3, window_context=2)
        assert_same_spans(result, alone)
        np.testing.assert_allclose(result.embeddings, alone.embeddings, atol=1e-5)


def test_thousand_word_text_is_not_truncated(tiny_model):
    words = [f"w{i}" if i % 7 else "internationalization" for i in range(999)] + ["finalword."]
    text = "  " + " ".join(words) + " \n"
    result = tiny_model.encode_spans(text, max_span=2, window_context=4)
    assert len(result) == count_spans(1000, 1, 2)
    assert result.spans[-1] == "finalword."
    assert result.offsets[-1, 1] == len(text.rstrip())
    assert result.spans[0] == "internationalization"
    assert result.units[-1].tolist() == [999, 1000]


def test_best_spans_over_windows_equal_brute_force(tiny_model_short):
    """Fused search merged across windows finds exactly the top-k of all encode_spans vectors."""
    queries = ["the lazy dog", "naïve café owner"]
    top_k = 4
    found = tiny_model_short.best_spans(
        queries,
        [LONG_TEXT, "a short text"],
        top_k=top_k,
        max_span=3,
        window_context=2,
        scorer="max-cosine",
        overlap=True,
    )
    spans = tiny_model_short.encode_spans(LONG_TEXT, max_span=3, window_context=2)
    query_vectors = slice_st.encode.embed_texts(tiny_model_short, queries).numpy()
    for q, query in enumerate(query_vectors):
        brute = np.array([cosine(query, vector) for vector in spans.embeddings])
        order = np.argsort(-brute, kind="stable")[:top_k]
        matches = found[q][0]
        assert len(matches) == top_k
        np.testing.assert_allclose([m.score for m in matches], brute[order], atol=1e-4)
        for match in matches:
            index = next(
                i
                for i, (s, e) in enumerate(spans.offsets.tolist())
                if (s, e) == (match.start, match.end)
            )
            assert abs(brute[index] - match.score) < 1e-4
            assert tuple(spans.units[index]) == (match.unit_start, match.unit_end)
            assert match.span == LONG_TEXT[match.start : match.end]


def test_disjoint_best_spans_over_windows(tiny_model_short):
    """Without overlap, the spans merged across windows are disjoint, best first, and the first is the global best."""
    found = tiny_model_short.best_spans(
        ["the lazy dog"], [LONG_TEXT], top_k=6, max_span=3, window_context=2, scorer="max-cosine"
    )
    spans = tiny_model_short.encode_spans(LONG_TEXT, max_span=3, window_context=2)
    query = slice_st.encode.embed_texts(tiny_model_short, ["the lazy dog"]).numpy()[0]
    brute = np.array([cosine(query, vector) for vector in spans.embeddings])
    matches = found[0][0]
    assert len(matches) == 6 and abs(matches[0].score - brute.max()) < 1e-4
    assert [m.score for m in matches] == sorted((m.score for m in matches), reverse=True)
    for i, a in enumerate(matches):
        assert all(
            a.unit_end <= b.unit_start or b.unit_end <= a.unit_start for b in matches[i + 1 :]
        )
    assert (found.unit_starts[0, 0] >= 0).all()


# ---------------------------------------------------------------------------------------------
# Real model: the best span of a long text is found as in the short text
# ---------------------------------------------------------------------------------------------

FILLERS = [
    "The weather was cold and grey for most of the week.",
    "She cooked a large pot of vegetable soup for dinner.",
    "The train to the city left the station ten minutes late.",
    "Several children were reading books in the quiet library.",
    "Our neighbours painted their fence a bright shade of green.",
    "The committee discussed the budget for the coming year.",
    "A small boat drifted slowly across the calm lake.",
    "He forgot his umbrella and got soaked on the way home.",
]
TARGET = "Yesterday a man played the guitar badly."
QUERY = "plays the guitar"


@pytest.fixture(scope="module")
def real_model_short():
    """A separate instance of the real model with a 64-token window (the shared one stays untouched)."""
    model = slice_st.load_model(device="cpu").eval()
    model.max_seq_length = 64
    return model


def test_real_model_long_text_same_best_span_as_short_text(real_model, real_model_short):
    long_text = " ".join(FILLERS * 2 + [TARGET] + FILLERS[::-1] * 2)
    assert (
        len(
            plan_windows(
                real_model_short.tokenizer, [long_text], model_window(real_model_short), 5, 16
            )
        )
        > 3
    )

    short = real_model.best_spans([QUERY], [TARGET], max_span=5)[0][0][0]
    long = real_model_short.best_spans([QUERY], [long_text], max_span=5)[0][0][0]
    assert short.span == "played the guitar"
    assert long.span == short.span
    offset = long_text.index(TARGET)
    assert (long.start - offset, long.end - offset) == (short.start, short.end)
    assert long.score > 0.6
    # same answer, with the real model's full window, on the long text
    assert (
        real_model.best_spans([QUERY], [long_text], max_span=5)[0][0][0].span == "played the guitar"
    )


def test_long_query_on_small_window_model(tiny_model_short):
    query = " ".join(["internationalization"] * 30)  # 60 tokens, 2 per word
    assert slice_st.encode.embed_texts(tiny_model_short, query).shape == (1, 32)
    result = tiny_model_short.best_spans([query], ["a b"], max_span=2, window_context=0)
    assert len(result[0][0]) == 1


def test_one_encode_call_holds_a_bounded_number_of_tokens(tiny_model_short, monkeypatch):
    """A long text's windows go to ``model.encode`` in runs of about ``TOKENS_PER_CALL`` tokens (it was up to 1,024
    windows, whatever their length), with the same spans and vectors."""
    import slice_st.encode as encode

    text = " ".join(SHORT_WORDS * 12)
    expected = slice_st.encode_spans(tiny_model_short, [text, "a man"], max_span=3)
    calls = []
    original = type(tiny_model_short).encode

    def counting(model, sentences, **kwargs):
        calls.append(
            sum(len(model.tokenizer(s, add_special_tokens=False)["input_ids"]) for s in sentences)
        )
        return original(model, sentences, **kwargs)

    monkeypatch.setattr(encode, "TOKENS_PER_CALL", 60)
    monkeypatch.setattr(type(tiny_model_short), "encode", counting)
    found = slice_st.encode_spans(tiny_model_short, [text, "a man"], max_span=3)
    assert len(calls) > 3 and max(calls) <= 60, calls
    for got, want in zip(found, expected):
        assert got.spans == want.spans
        np.testing.assert_allclose(got.embeddings, want.embeddings, atol=1e-5)
