"""encode_spans / embed_texts on a tiny random BERT: offsets, units, options, vectors vs naive means."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest
import torch
from helpers import (
    count_spans,
    expected_span_units,
    naive_token_span_vectors,
    naive_token_vectors,
    naive_word_span_vectors,
    texts,
    whitespace_words,
)
from hypothesis import given
from sentence_transformers import SentenceTransformer

import slice_st
from slice_st import SpanIndex, SpanInputError
from slice_st.encode import SpanEncoding

UNICODE_TEXTS = [
    "A man plays the guitar.",
    "Café déjà vu, naïve résumé!",
    "I don't know... ok?! It's fine.",
    "😀 emoji 🎸 guitar 👩‍💻 coder",
    "中文 字符 测试 東京",
    "multiple   spaces\there\nnewline\r\nwindows",
    "   leading and trailing whitespace \t\n ",
    "Ünïcödé — dash – “quotes” (parens) [brackets]",
    "e.g. U.S.A. 3.14 $5 50% #tag @user",
    "hi😀there l'été Straße İstanbul",
    "x",
]


def check_word_spans(result: SpanEncoding, text: str, min_span: int, max_span: int) -> None:
    """Offsets and units are exactly the whitespace-word spans, start-major then by length."""
    words = whitespace_words(text)
    expected_units = expected_span_units(len(words), min_span, max_span)
    assert len(result) == count_spans(len(words), min_span, max_span) == len(expected_units)
    assert [tuple(u) for u in result.units.tolist()] == expected_units
    expected_offsets = [(words[s][0], words[e - 1][1]) for s, e in expected_units]
    assert [tuple(o) for o in result.offsets.tolist()] == expected_offsets
    assert result.spans == [text[s:e] for s, e in expected_offsets]
    for span, (s, e) in zip(result.spans, expected_units):
        assert span.split() == text.split()[s:e]  # never splits a whitespace word


@pytest.mark.parametrize("text", UNICODE_TEXTS)
def test_word_span_offsets_round_trip_unicode(tiny_model, text):
    result = tiny_model.encode_spans(text, max_span=3)
    assert isinstance(result, SpanEncoding)
    assert result.text == text
    assert result.offsets.dtype.kind == "i" and result.units.dtype.kind == "i"
    check_word_spans(result, text, 1, 3)
    assert result.embeddings.shape == (len(result), 32)


@given(text=texts(min_words=1, max_words=12))
def test_word_span_offsets_round_trip_property(tiny_model, text):
    check_word_spans(tiny_model.encode_spans(text, min_span=1, max_span=4), text, 1, 4)


@pytest.mark.parametrize("min_span, max_span", [(1, 1), (2, 3), (3, 20), (6, 9)])
def test_span_bounds_are_respected(tiny_model, min_span, max_span):
    text = "One two three four five six seven."
    result = tiny_model.encode_spans(text, min_span=min_span, max_span=max_span)
    check_word_spans(result, text, min_span, max_span)
    lengths = result.units[:, 1] - result.units[:, 0]
    if len(result):
        assert lengths.min() >= min_span and lengths.max() <= max_span


def test_min_span_longer_than_text_gives_no_spans(tiny_model):
    result = tiny_model.encode_spans("only three words", min_span=4, max_span=6)
    assert len(result) == 0
    assert result.embeddings.shape == (0, 32)
    assert result.spans == []


def test_default_span_settings_are_1_to_20_words(tiny_model):
    text = " ".join(f"w{i}" for i in range(25))
    check_word_spans(tiny_model.encode_spans(text), text, 1, 20)


@pytest.mark.parametrize(
    "text", ["I don't know, café au lait!", "中文 字符", "supercalifragilisticexpialidocious x"]
)
def test_token_units(tiny_model, text):
    result = tiny_model.encode_spans(text, unit="token", max_span=3)
    _, offsets = naive_token_vectors(tiny_model, text)
    expected_units = expected_span_units(len(offsets), 1, 3)
    assert [tuple(u) for u in result.units.tolist()] == expected_units
    assert [tuple(o) for o in result.offsets.tolist()] == [
        (offsets[s][0], offsets[e - 1][1]) for s, e in expected_units
    ]
    assert result.spans == [text[s:e] for s, e in result.offsets.tolist()]


def test_word_vectors_equal_naive_mean_of_token_vectors(tiny_model):
    text = "  Yesterday, a man didn't play   the guitar… badly! 🎸 "
    result = tiny_model.encode_spans(text, max_span=4)
    naive = naive_word_span_vectors(tiny_model, text, 1, 4)
    assert len(result) == len(naive)
    for units, vector in zip(result.units.tolist(), result.embeddings):
        np.testing.assert_allclose(vector, naive[tuple(units)], atol=1e-5, rtol=1e-4)


def test_token_vectors_equal_naive_token_vectors(tiny_model):
    text = "Internationalization isn't trivial."
    result = tiny_model.encode_spans(text, unit="token", min_span=1, max_span=3)
    naive = naive_token_span_vectors(tiny_model, text, 1, 3)
    assert len(result) == len(naive)
    for units, vector in zip(result.units.tolist(), result.embeddings):
        np.testing.assert_allclose(vector, naive[tuple(units)], atol=1e-5, rtol=1e-4)


def test_batch_equals_one_by_one(tiny_model):
    batch = [
        "A man plays the guitar.",
        "",
        "Short.",
        "  A somewhat longer sentence, with commas; and more words here. ",
        "x y",
    ]
    together = tiny_model.encode_spans(batch, max_span=3, batch_size=2)
    assert isinstance(together, list) and len(together) == len(batch)
    for text, result in zip(batch, together):
        if not text:
            assert len(result) == 0
            continue
        alone = tiny_model.encode_spans(text, max_span=3)
        assert result.text == text
        np.testing.assert_array_equal(result.offsets, alone.offsets)
        np.testing.assert_array_equal(result.units, alone.units)
        np.testing.assert_allclose(result.embeddings, alone.embeddings, atol=1e-5)


def test_normalize_embeddings(tiny_model):
    text = "A man plays the guitar on stage."
    raw = tiny_model.encode_spans(text, max_span=3)
    unit = tiny_model.encode_spans(text, max_span=3, normalize_embeddings=True)
    np.testing.assert_array_equal(raw.offsets, unit.offsets)
    np.testing.assert_allclose(np.linalg.norm(unit.embeddings, axis=1), 1.0, atol=1e-5)
    expected = raw.embeddings / np.linalg.norm(raw.embeddings, axis=1, keepdims=True)
    np.testing.assert_allclose(unit.embeddings, expected, atol=1e-5)


def test_convert_to_tensor(tiny_model):
    text = "A man plays the guitar."
    as_numpy = tiny_model.encode_spans(text, max_span=2)
    as_tensor = tiny_model.encode_spans(text, max_span=2, convert_to_tensor=True)
    assert isinstance(as_numpy.embeddings, np.ndarray)
    assert isinstance(as_tensor.embeddings, torch.Tensor)
    assert as_tensor.embeddings.device == tiny_model.device
    np.testing.assert_allclose(as_tensor.embeddings.cpu().numpy(), as_numpy.embeddings, atol=1e-6)
    np.testing.assert_array_equal(as_tensor.offsets, as_numpy.offsets)
    empty = tiny_model.encode_spans(["", "a b"], max_span=2, convert_to_tensor=True)[0]
    assert isinstance(empty.embeddings, torch.Tensor) and tuple(empty.embeddings.shape) == (0, 32)


def test_convert_to_numpy_false_gives_tensor(tiny_model):
    result = tiny_model.encode_spans("a b c", max_span=2, convert_to_numpy=False)
    assert isinstance(result.embeddings, torch.Tensor)


def test_single_string_gives_single_result_and_list_gives_list(tiny_model):
    single = tiny_model.encode_spans("A man plays.", max_span=2)
    listed = tiny_model.encode_spans(["A man plays."], max_span=2)
    assert isinstance(single, SpanEncoding)
    assert isinstance(listed, list) and len(listed) == 1 and isinstance(listed[0], SpanEncoding)
    np.testing.assert_array_equal(single.offsets, listed[0].offsets)
    from_tuple = tiny_model.encode_spans(("A man plays.", "b"), max_span=2)
    assert isinstance(from_tuple, list) and len(from_tuple) == 2
    from_generator = tiny_model.encode_spans((t for t in ["A man plays."]), max_span=2)
    np.testing.assert_array_equal(from_generator[0].offsets, single.offsets)


def test_methods_are_attached_to_sentence_transformer(tiny_model):
    assert SentenceTransformer.encode_spans is slice_st.encode_spans
    assert SentenceTransformer.best_spans is slice_st.best_spans
    assert tiny_model.encode_spans.__self__ is tiny_model
    functional = slice_st.encode_spans(tiny_model, "a b c", max_span=2)
    method = tiny_model.encode_spans("a b c", max_span=2)
    np.testing.assert_array_equal(functional.embeddings, method.embeddings)


def test_empty_and_whitespace_texts_have_no_spans(tiny_model):
    results = tiny_model.encode_spans(["", "   ", "\t\n", "a b"], max_span=2)
    for result in results[:3]:
        assert len(result) == 0
        assert result.offsets.shape == (0, 2) and result.units.shape == (0, 2)
        assert result.embeddings.shape == (0, 32)
        assert result.spans == []
    assert len(results[3]) == 3


@pytest.mark.parametrize("texts_", ["", "   ", ["", " \n\t"], "\u200b"])
def test_only_empty_texts_give_empty_results(tiny_model, texts_):
    results = tiny_model.encode_spans(texts_, max_span=2)
    results = [results] if isinstance(results, SpanEncoding) else results
    assert all(len(result) == 0 for result in results)


def test_empty_list_gives_empty_list(tiny_model):
    assert tiny_model.encode_spans([]) == []


@pytest.mark.parametrize(
    "text",
    [
        "I ❤️ it",  # U+FE0F variation selector dropped: span '❤' instead of '❤️'
        unicodedata.normalize(
            "NFD", "Café au lait"
        ),  # decomposed accent dropped at the word end: 'Cafe'
        "x\u0301y z",  # combining accent inside a word: 'x' and 'y' become two words
    ],
)
def test_word_spans_align_with_whitespace_words_for_dropped_characters(tiny_model, text):
    check_word_spans(tiny_model.encode_spans(text, max_span=2), text, 1, 2)


# ---------------------------------------------------------------------------------------------
# embed_texts
# ---------------------------------------------------------------------------------------------


def test_embed_texts_is_mean_of_content_tokens(tiny_model):
    queries = ["plays the guitar", "Don't stop believing!", "  spaced  out  "]
    vectors = slice_st.encode.embed_texts(tiny_model, queries)
    assert isinstance(vectors, torch.Tensor) and vectors.shape == (3, 32)
    for query, vector in zip(queries, vectors):
        tokens, _ = naive_token_vectors(tiny_model, query)
        np.testing.assert_allclose(vector.cpu().numpy(), tokens.mean(axis=0), atol=1e-5)


def test_embed_texts_equals_whole_text_span(tiny_model):
    text = "a man plays the guitar"
    vector = slice_st.encode.embed_texts(tiny_model, text)[0].cpu().numpy()
    spans = tiny_model.encode_spans(text, min_span=5, max_span=5)
    assert len(spans) == 1
    np.testing.assert_allclose(spans.embeddings[0], vector, atol=1e-5)


def test_b17_huge_sizes_are_capped(tiny_model, monkeypatch):
    capped = tiny_model.encode_spans(
        "a man plays the guitar", max_span=10**9
    )  # no 72 GB allocation
    assert len(capped) == len(tiny_model.encode_spans("a man plays the guitar", max_span=5))
    result = tiny_model.best_spans(
        ["guitar"], ["a man plays", "the guitar"], top_k=10**7, max_span=2, overlap=True
    )
    assert result.scores.shape[2] < 1000 and len(result[0][1]) == 3
    disjoint = tiny_model.best_spans(
        ["guitar"], ["a man plays", "the guitar"], top_k=10**7, max_span=2
    )
    assert (
        disjoint.scores.shape[2] < 1000 and len(disjoint[0][1]) == 1
    )  # "the guitar", "the", "guitar" overlap
    index = SpanIndex.build(["a man plays the guitar", "the dog barks"], tiny_model, max_span=3)
    real_scan = slice_st.index.span_index.top_spans_flat
    asked = []

    def scan(queries, unit_vectors, span_norms, top_k, *args, **kwargs):
        asked.append(top_k)
        assert top_k <= 1000, "top_k was not capped"
        return real_scan(queries, unit_vectors, span_norms, top_k, *args, **kwargs)

    monkeypatch.setattr(slice_st.index.span_index, "top_spans_flat", scan)
    assert (
        len(index.search("guitar", top_k=10**7, overlap=True)[0]) == 5 * 3 - 3 + 3 * 3 - 3
    )  # every span of both documents
    assert len(index.search("guitar", top_k=10**7, per_document=1)[0]) == 2
    with pytest.raises(SpanInputError, match="min_span=200 is longer than a model window"):
        tiny_model.encode_spans("a b", min_span=200, max_span=10**9)


def test_model_level_truncate_dim_is_honoured(tiny_model_dir):
    import numpy as np
    from sentence_transformers import SentenceTransformer

    short = SentenceTransformer(tiny_model_dir, device="cpu", truncate_dim=8)
    full = SentenceTransformer(tiny_model_dir, device="cpu")
    assert short.encode("the dog").shape == (8,)
    assert short.encode_spans("the dog barks", max_span=2).embeddings.shape == (
        5,
        8,
    )  # like encode: 8-d, not 32-d
    assert short.encode_span_queries("dog").shape == (8,)
    assert short.encode_spans("the dog barks", max_span=2, truncate_dim=4).embeddings.shape == (
        5,
        4,
    )  # the argument wins
    found = short.best_spans("dog", "the dog barks at the mailman", max_span=2)[0][0][0]
    spans = full.encode_spans("the dog barks at the mailman", max_span=2)
    query, vector = (
        full.encode_span_queries("dog")[:8],
        spans.embeddings[spans.spans.index(found.span)][:8],
    )
    assert (
        abs(
            found.similarity
            - float(query @ vector / np.linalg.norm(query) / np.linalg.norm(vector))
        )
        < 1e-5
    )  # scored in 8-d


def test_cuda_on_a_cpu_torch_is_a_clear_error(tiny_model):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for call in (
        lambda: tiny_model.encode_spans("the dog", device="cuda"),
        lambda: tiny_model.best_spans("dog", "the dog", device="cuda"),
        lambda: tiny_model.encode_span_queries("dog", device="cuda:0"),
    ):
        with pytest.raises(ValueError, match="CUDA is not available here"):
            call()


def test_the_tokenizer_is_locked_while_model_encode_runs(tiny_model, monkeypatch):
    """Two threads encoding with one model (two searches of one index) must not tokenize at once: a fast
    tokenizer's padding is a setting of its one Rust object, and one thread could pad the other's batch wrongly."""
    import threading

    from slice_st.tokens import tokenizer_lock

    lock, encode, taken_elsewhere = tokenizer_lock(tiny_model.tokenizer), tiny_model.encode, []

    def watched(*args, **kwargs):
        other = threading.Thread(
            target=lambda: taken_elsewhere.append(lock.acquire(blocking=False))
        )
        other.start()
        other.join()
        return encode(*args, **kwargs)

    monkeypatch.setattr(tiny_model, "encode", watched)
    slice_st.encode_spans(tiny_model, ["A man plays the guitar.", "The flight was late."])
    assert taken_elsewhere and not any(taken_elsewhere)
    assert tokenizer_lock(tiny_model.tokenizer) is lock


def test_searches_from_threads_find_what_they_find_alone(tiny_model):
    from concurrent.futures import ThreadPoolExecutor

    passages = [
        "A man played the guitar on stage.",
        "The flight was late.",
        "Short.",
        "He never paid the bill.",
    ]
    queries = [
        ["plays the guitar"],
        ["the flight was delayed", "an unpaid bill that was never settled at all"],
    ]

    def run(i: int):
        found = slice_st.best_spans(tiny_model, queries[i % 2], passages[: 1 + i % 4], top_k=2)
        return [[(m.span, round(m.score, 6)) for row in query for m in row] for query in found]

    alone = [run(i) for i in range(16)]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(run, range(16))) == alone
