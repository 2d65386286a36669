"""encode_spans / encode_span_queries / best_spans / SpanIndex.search follow SentenceTransformer.encode's
conventions: prompts (query side and span side), precision, truncate_dim, device, similarity_fn_name;
and a warning for models whose sentence embedding is not a token mean."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import slice_st
from slice_st import SpanIndex, SpanInputError
from slice_st.errors import SpanPoolingWarning

TEXT = "Yesterday a man played the guitar on the stage."
QUERY = "plays the guitar"


@pytest.fixture()
def prompted(make_tiny_model):
    """A tiny model with e5-style prompts (a fresh one: prompts are model state)."""
    model = make_tiny_model(128)
    model.prompts = {"query": "query: ", "document": "passage: "}
    return model


def _naive_spans(model, text, prompt, max_span):
    """Span means from model.encode(prompt + text) token vectors, the prompt's tokens dropped."""
    vectors = model.encode([prompt + text], output_value="token_embeddings", prompt="")[0].float()
    encoded = model.tokenizer(
        prompt + text, return_offsets_mapping=True, return_special_tokens_mask=True
    )
    keep = [
        i
        for i, (special, (start, _)) in enumerate(
            zip(encoded["special_tokens_mask"], encoded["offset_mapping"])
        )
        if not special and start >= len(prompt)
    ]
    words = []  # whitespace words of the text → their token rows
    for i in keep:
        start = encoded["offset_mapping"][i][0] - len(prompt)
        if not words or text[start - 1].isspace():
            words.append([])
        words[-1].append(i)
    spans = {}
    for first in range(len(words)):
        for length in range(1, max_span + 1):
            if first + length <= len(words):
                rows = [i for word in words[first : first + length] for i in word]
                spans[(first, first + length)] = vectors[rows].mean(0).numpy()
    return spans


@pytest.mark.parametrize(
    "prompt", ["query: ", "Represent this sentence for searching relevant passages:"]
)
def test_prompt_tokens_belong_to_no_span(tiny_model, prompt):
    plain = tiny_model.encode_spans(TEXT, max_span=3, prompt="")
    with_prompt = tiny_model.encode_spans(TEXT, max_span=3, prompt=prompt)
    assert (
        with_prompt.spans == plain.spans
        and (with_prompt.offsets == plain.offsets).all()
        and (with_prompt.units == plain.units).all()
    )
    assert not np.allclose(
        with_prompt.embeddings, plain.embeddings
    )  # the prompt conditions the tokens
    naive = _naive_spans(tiny_model, TEXT, prompt, 3)
    for (start, end), vector in zip(with_prompt.units.tolist(), with_prompt.embeddings):
        np.testing.assert_allclose(vector, naive[(start, end)], atol=1e-5)


def test_prompt_with_long_texts_is_in_every_window(tiny_model_short):
    text = " ".join(["word"] * 40)
    result = tiny_model_short.encode_spans(text, max_span=2, window_context=2, prompt="query: ")
    assert result.spans == tiny_model_short.encode_spans(text, max_span=2, window_context=2).spans


def test_default_prompts_follow_encode_query_and_encode_document(prompted):
    assert slice_st.encode.resolve_prompt(prompted, role="query") == "query: "
    spans = prompted.encode_spans(TEXT, max_span=2)
    np.testing.assert_allclose(
        spans.embeddings,
        prompted.encode_spans(TEXT, max_span=2, prompt="passage: ").embeddings,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        spans.embeddings,
        prompted.encode_spans(TEXT, max_span=2, prompt_name="document").embeddings,
        atol=1e-6,
    )
    queries = prompted.encode_span_queries([QUERY])
    np.testing.assert_allclose(
        queries, prompted.encode_span_queries([QUERY], prompt="query: "), atol=1e-6
    )
    assert not np.allclose(queries, prompted.encode_span_queries([QUERY], prompt=""))
    with pytest.raises(SpanInputError, match="not one of the model's prompts"):
        prompted.encode_spans(TEXT, prompt_name="nope")


def test_best_spans_prompts_per_side(prompted):
    """best_spans scores = cosine(encode_span_queries(query prompt), encode_spans(text prompt))."""
    result = prompted.best_spans(
        [QUERY], [TEXT], max_span=3, query_prompt="query: ", prompt="passage: ", scorer="max-cosine"
    )
    match = result[0][0][0]
    query = prompted.encode_span_queries(QUERY, prompt="query: ")
    spans = prompted.encode_spans(TEXT, max_span=3, prompt="passage: ")
    cosines = (
        spans.embeddings @ query / np.linalg.norm(spans.embeddings, axis=1) / np.linalg.norm(query)
    )
    assert spans.spans[int(np.argmax(cosines))] == match.span
    assert match.score == pytest.approx(float(cosines.max()), abs=1e-5)
    default = prompted.best_spans([QUERY], [TEXT], max_span=3, scorer="max-cosine")[0][0][0]
    assert default.score == pytest.approx(
        match.score, abs=1e-6
    )  # the defaults are those two prompts
    other = prompted.best_spans(
        [QUERY], [TEXT], max_span=3, query_prompt="", prompt="", scorer="max-cosine"
    )[0][0][0]
    assert other.score != pytest.approx(match.score, abs=1e-6)


def test_encode_span_queries_is_the_query_side_of_best_spans(real_model):
    query = real_model.encode_span_queries(QUERY)
    assert query.shape == (384,)
    torch.testing.assert_close(
        torch.from_numpy(query), slice_st.encode.embed_texts(real_model, [QUERY])[0].cpu()
    )
    from sentence_transformers import SentenceTransformer

    assert SentenceTransformer.encode_span_queries is slice_st.encode_span_queries


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_precision_as_in_encode(tiny_model, precision):
    from sentence_transformers import quantize_embeddings

    texts = ["A man plays the guitar.", "The flight was delayed by three hours."]
    floats = tiny_model.encode_spans(texts, max_span=3)
    quantized = tiny_model.encode_spans(texts, max_span=3, precision=precision)
    expected = quantize_embeddings(
        [f.embeddings for f in floats], precision=precision
    )  # ranges shared across texts
    for got, want in zip(quantized, expected):
        assert got.embeddings.dtype == want.dtype and np.array_equal(got.embeddings, want)
    assert quantized[0].spans == floats[0].spans
    queries = tiny_model.encode_span_queries(["a man", "a flight", "a guitar"], precision=precision)
    assert np.array_equal(
        queries,
        quantize_embeddings(
            tiny_model.encode_span_queries(["a man", "a flight", "a guitar"]), precision=precision
        ),
    )
    with pytest.raises(SpanInputError, match="precision"):
        tiny_model.encode_spans(texts, precision="float16")


def test_truncate_dim_and_device(tiny_model):
    full = tiny_model.encode_spans(TEXT, max_span=2, device="cpu")
    short = tiny_model.encode_spans(
        TEXT, max_span=2, truncate_dim=8, device="cpu", convert_to_tensor=True
    )
    assert short.embeddings.shape == (len(full), 8) and short.embeddings.device.type == "cpu"
    np.testing.assert_allclose(short.embeddings.numpy(), full.embeddings[:, :8], atol=1e-6)
    assert tiny_model.encode_span_queries([QUERY], truncate_dim=4).shape == (1, 4)
    with pytest.raises(SpanInputError, match="truncate_dim"):
        tiny_model.encode_spans(TEXT, truncate_dim=0)


@pytest.mark.parametrize("name", ["dot", "euclidean", "manhattan", "cosine"])
def test_best_spans_follows_similarity_fn_name(make_tiny_model, name):
    from sentence_transformers import util

    model = make_tiny_model(128)
    model.similarity_fn_name = name
    texts = [TEXT, "The flight was late again."]
    result = model.best_spans(
        [QUERY, "a flight"], texts, max_span=3, top_k=2, scorer="max-cosine", overlap=True
    )
    assert result.similarity_fn_name == name
    queries = torch.from_numpy(model.encode_span_queries([QUERY, "a flight"]))
    function = {
        "cosine": util.cos_sim,
        "dot": util.dot_score,
        "euclidean": util.euclidean_sim,
        "manhattan": util.manhattan_sim,
    }[name]
    for t, text in enumerate(texts):
        spans = model.encode_spans(text, max_span=3)
        scores = function(
            queries, torch.from_numpy(spans.embeddings)
        )  # (Q, S), as sentence-transformers defines them
        for q in range(2):
            best = scores[q].topk(2)
            assert [m.span for m in result[q][t]] == [spans.spans[i] for i in best.indices.tolist()]
            np.testing.assert_allclose(
                [m.score for m in result[q][t]], best.values.numpy(), rtol=1e-4, atol=1e-4
            )


@pytest.mark.parametrize("name", ["dot", "euclidean", "manhattan"])
def test_phrase_scorer_costs_are_for_cosine_only(make_tiny_model, name):
    model = make_tiny_model(128)
    model.similarity_fn_name = name
    default = model.best_spans([QUERY], [TEXT], max_span=3, top_k=2)
    plain = model.best_spans([QUERY], [TEXT], max_span=3, top_k=2, scorer="max-cosine")
    assert default.scorer == f"max-{name}"
    assert [(m.span, m.score) for m in default[0][0]] == [(m.span, m.score) for m in plain[0][0]]


def test_unknown_similarity_is_a_clear_error(tiny_model):
    with pytest.raises(SpanInputError, match="similarity_fn_name"):
        tiny_model.best_spans([QUERY], [TEXT], similarity_fn_name="jaccard")


def test_index_search_prompt_and_device(prompted):
    index = SpanIndex.build([TEXT, "The flight was late again."], prompted, max_span=3)
    found = index.search(QUERY, top_k=1, prompt="query: ", device="cpu")[0][
        0
    ]  # the index's default: "phrase"
    expected = prompted.best_spans(
        [QUERY], [TEXT, "The flight was late again."], max_span=3, scorer="phrase"
    )
    best = expected.ranked(0)[0]
    assert (found.span, found.text_index) == (best.span, best.text_index)
    assert found.score == pytest.approx(best.score, abs=1e-5)
    assert found.similarity == pytest.approx(best.similarity, abs=1e-5)
    assert index.search(QUERY, top_k=1)[0][0].score == pytest.approx(
        found.score, abs=1e-6
    )  # default: the "query" prompt


def _pooling_model(tiny_model_dir, mode="mean", dense=False):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    modules = [Transformer(tiny_model_dir, max_seq_length=64), Pooling(32, mode)]
    if dense:
        modules.append(Dense(32, 16))
    modules.append(Normalize())
    return SentenceTransformer(modules=modules, device="cpu")


@pytest.mark.parametrize(
    ("mode", "dense", "expected"),
    [("cls", False, "pooling is cls"), ("mean", True, "Dense follows")],
)
def test_warning_when_pooling_is_not_a_token_mean(tiny_model_dir, mode, dense, expected):
    model = _pooling_model(tiny_model_dir, mode, dense)
    with pytest.warns(SpanPoolingWarning, match=expected):
        model.encode_spans(TEXT, max_span=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpanPoolingWarning)
        model.encode_spans(TEXT, max_span=2)  # once per model


def test_no_warning_for_mean_pooling_and_normalize(tiny_model_dir):
    model = _pooling_model(tiny_model_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpanPoolingWarning)
        model.best_spans([QUERY], [TEXT], max_span=2)


# ------------------------------------------------------------------------- docstrings (sentence-transformers style)
DOCUMENTED_MODULES = (
    "slice_st",
    "slice_st.losses",
    "slice_st.models",
    "slice_st.evaluation",
    "slice_st.index",
    "slice_st.data",
    "slice_st.training",
    "slice_st.encode",
    "slice_st.config",
    "slice_st.loading",
)


def _public_callables():
    """Every public class and function exported by the package and its API sub-packages (``__all__``)."""
    import importlib
    import inspect

    seen = {}
    for module_name in DOCUMENTED_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if (inspect.isclass(value) or inspect.isfunction(value)) and id(value) not in seen:
                seen[id(value)] = (f"{module_name}.{name}", value)
    return sorted(seen.values(), key=lambda item: item[0])


def _takes_arguments(value) -> bool:
    import dataclasses
    import inspect

    target = value.__init__ if inspect.isclass(value) else value
    if inspect.isclass(value) and (
        target is object.__init__ or dataclasses.is_dataclass(value) and not value.__doc__
    ):
        return False
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    return any(
        name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for name, p in parameters.items()
    )


@pytest.mark.parametrize(
    ("name", "value"), _public_callables(), ids=lambda item: item if isinstance(item, str) else ""
)
def test_public_names_have_sentence_transformers_style_docstrings(name, value):
    """Every public class and function has a docstring; those that take arguments document them in an ``Args:``
    section (as sentence-transformers does); losses also say ``References:`` and ``Inputs:``."""
    import inspect

    doc = inspect.getdoc(value)
    assert doc and len(doc.strip()) > 20, f"{name} has no docstring"
    if _takes_arguments(value):
        assert "\nArgs:\n" in "\n" + doc, f"{name}: no 'Args:' section"
    if name.endswith("Loss"):
        assert "\nReferences:\n" in doc and "\nInputs:\n" in doc, (
            f"{name}: losses document References and Inputs"
        )
