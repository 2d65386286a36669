"""Bad input gives a clear SpanInputError (a ValueError), never a deep torch/tokenizer traceback."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import slice_st
from slice_st import SpanInputError
from slice_st.search import SpanSearchResult

BAD_TEXTS = [
    None,
    3,
    3.5,
    b"bytes",
    {"a": 1},
    [None],
    ["ok", 1],
    [b"x"],
    ["ok", None],
    [["nested"]],
    object(),
]


def _id(value) -> str:
    """A test id that is the same in every pytest-xdist worker (an object's repr holds its address)."""
    return type(value).__name__ if type(value) is object else repr(value)


BAD_SETTINGS = [
    dict(min_span=0),
    dict(min_span=-1),
    dict(min_span=3, max_span=2),
    dict(min_span=1.5),
    dict(max_span="3"),
    dict(max_span=None, min_span=True),
    dict(unit="char"),
    dict(unit="WORD"),
    dict(batch_size=0),
    dict(batch_size=-2),
    dict(batch_size=2.0),
    dict(window_context=-1),
]


#: Errors that keep a second built-in so that code catching what they were before keeps working: a Ray failure is a
#: RuntimeError and still a SpanInputError (a ValueError).
TWO_BUILT_INS = {"RayClusterError": {ValueError, RuntimeError}}


def test_each_library_error_subclasses_one_built_in():
    import builtins
    import inspect

    import slice_st.errors

    for name in slice_st.errors.__all__:
        error = getattr(slice_st.errors, name)
        if (
            issubclass(error, Warning) or error is slice_st.errors.SliceError
        ):  # the base alone is no built-in's kind
            continue
        assert issubclass(error, slice_st.errors.SliceError), name
        if name in TWO_BUILT_INS:
            assert all(issubclass(error, kind) for kind in TWO_BUILT_INS[name])
            continue
        built_ins = {
            base for base in error.__mro__ if getattr(builtins, base.__name__, None) is base
        } - {
            object,
            BaseException,
            Exception,
            Warning,
        }
        # one built-in and its own built-in bases (OSError is an Exception): a single chain, never two branches
        assert (
            len(
                [
                    b
                    for b in built_ins
                    if not any(b is not o and issubclass(o, b) for o in built_ins)
                ]
            )
            == 1
        ), name
        assert (
            inspect.getmro(error).count(ValueError) + inspect.getmro(error).count(OSError) <= 1
        ), name
    assert issubclass(SpanInputError, ValueError) and not issubclass(SpanInputError, TypeError)


def test_errors_are_named_for_what_they_report_and_old_names_still_catch_them():
    from slice_st.errors import (
        IndexBusyError,
        IndexConflictError,
        IndexFileError,
        RayClusterError,
        WindowError,
    )

    for error in (WindowError, IndexFileError, RayClusterError, IndexBusyError, IndexConflictError):
        assert issubclass(error, SpanInputError)  # `except SpanInputError` catches what it caught
    assert issubclass(RayClusterError, RuntimeError) and issubclass(
        slice_st.ModelLoadError, OSError
    )
    assert not issubclass(IndexFileError, RuntimeError) and not issubclass(WindowError, OSError)


def test_window_error_carries_its_fields():
    import pickle

    from slice_st.errors import WindowError

    error = WindowError(
        3, "a word of 60 tokens is longer than the model window.", [(3, "a"), (5, "b")]
    )
    assert (error.text_index, error.reason, error.errors) == (3, error.reason, [(3, "a"), (5, "b")])
    assert str(error) == "Text 3: a word of 60 tokens is longer than the model window. (and 1 more)"
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.args, again.errors) == (WindowError, error.args, error.errors)
    assert (
        WindowError(0, "why").errors == [(0, "why")] and str(WindowError(0, "why")) == "Text 0: why"
    )


@pytest.mark.parametrize("texts", BAD_TEXTS, ids=_id)
def test_encode_spans_rejects_non_strings(tiny_model, texts):
    with pytest.raises(SpanInputError, match="must be a string"):
        tiny_model.encode_spans(texts)


@pytest.mark.parametrize("texts", BAD_TEXTS, ids=_id)
def test_best_spans_rejects_non_string_texts(tiny_model, texts):
    with pytest.raises(SpanInputError, match="must be a string"):
        tiny_model.best_spans("a query", texts)


@pytest.mark.parametrize("queries", BAD_TEXTS, ids=_id)
def test_best_spans_rejects_non_string_queries(tiny_model, queries):
    with pytest.raises(SpanInputError, match="must be a string"):
        tiny_model.best_spans(queries, ["a text"])


@pytest.mark.parametrize("kwargs", BAD_SETTINGS, ids=repr)
def test_encode_spans_rejects_bad_settings(tiny_model, kwargs):
    with pytest.raises(SpanInputError):
        tiny_model.encode_spans("a man plays the guitar", **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    BAD_SETTINGS + [dict(top_k=0), dict(top_k=-1), dict(top_k=1.0), dict(top_k=True)],
    ids=repr,
)
def test_best_spans_rejects_bad_settings(tiny_model, kwargs):
    with pytest.raises(SpanInputError):
        tiny_model.best_spans("guitar", ["a man plays the guitar"], **kwargs)


@pytest.mark.parametrize("queries", [[], (), "", "   ", ["ok", ""], ["\t\n"]], ids=repr)
def test_best_spans_rejects_empty_queries(tiny_model, queries):
    with pytest.raises(SpanInputError, match="empty"):
        tiny_model.best_spans(queries, ["a man plays the guitar"])


def test_embed_texts_rejects_empty_queries(tiny_model):
    with pytest.raises(SpanInputError, match="empty"):
        slice_st.encode.embed_texts(tiny_model, ["fine", " "])
    with pytest.raises(SpanInputError):
        slice_st.encode.embed_texts(tiny_model, None)
    with pytest.raises(SpanInputError):
        slice_st.encode.embed_texts(tiny_model, "fine", batch_size=0)


def test_tokenless_query_is_a_span_input_error(tiny_model):
    with pytest.raises(SpanInputError):
        tiny_model.best_spans(["\u200b"], ["a man plays the guitar"])


def test_error_messages_are_clear(tiny_model):
    with pytest.raises(SpanInputError, match=r"texts\[1\] must be a string, got int"):
        tiny_model.encode_spans(["ok", 1])
    with pytest.raises(SpanInputError, match=r"min_span \(3\) must be <= max_span \(2\)"):
        tiny_model.encode_spans("a b", min_span=3, max_span=2)
    with pytest.raises(SpanInputError, match="unit must be one of"):
        tiny_model.encode_spans("a b", unit="char")
    with pytest.raises(SpanInputError, match="queries is empty"):
        tiny_model.best_spans([], ["a b"])
    with pytest.raises(SpanInputError, match=r"queries\[0\] is empty or whitespace"):
        tiny_model.best_spans([" "], ["a b"])


def test_window_too_small_is_a_span_input_error(tiny_model_short):
    text = " ".join(
        ["supercalifragilisticexpialidocious"] * 5 + ["a"] * 30
    )  # 11 tokens per long word
    with pytest.raises(
        SpanInputError, match="max_span=3 words do not fit"
    ) as caught:  # 3 x 11 > 22 tokens
        tiny_model_short.encode_spans(text, max_span=3, window_context=0)
    assert isinstance(caught.value, slice_st.errors.WindowError) and caught.value.text_index == 0
    assert caught.value.errors == [(0, caught.value.reason)] and "do not fit" in caught.value.reason
    word = "-".join("abcdefghijklmnopqrstuvwxyz")  # one whitespace word of 51 tokens
    with pytest.raises(SpanInputError, match="longer than the model window"):
        tiny_model_short.encode_spans("a " * 30 + word, max_span=1, window_context=0)


def test_non_integer_window_context_is_rejected(tiny_model_short):
    with pytest.raises(SpanInputError):
        tiny_model_short.encode_spans(" ".join(["word"] * 60), max_span=2, window_context=1.5)


def test_load_model_missing_path():
    with pytest.raises(FileNotFoundError, match="No model found"):
        slice_st.load_model("/no/such/dir")


# ---------------------------------------------------------------------------------------------
# Empty and whitespace-only texts are valid input with an empty result
# ---------------------------------------------------------------------------------------------


def test_empty_texts_have_no_matches(tiny_model):
    texts = ["", "a man plays", "   \n\t", "x"]
    result = tiny_model.best_spans(["guitar", "man"], texts, top_k=2, max_span=2)
    for q in range(2):
        assert result[q][0] == [] and result[q][2] == []
        assert len(result[q][1]) == 2 and len(result[q][3]) == 1
        assert np.isneginf(result.best(q)[[0, 2]]).all()
        assert [m.text_index for m in result.ranked(q)] in ([1, 3], [3, 1])
    assert (result.starts[:, [0, 2]] == -1).all() and (result.unit_ends[:, [0, 2]] == -1).all()


@pytest.mark.parametrize("texts", ["", ["", "  \n"], []], ids=repr)
def test_best_spans_only_empty_texts(tiny_model, texts):
    result = tiny_model.best_spans(["guitar"], texts)
    assert len(result) == 1
    assert all(matches == [] for matches in result[0])


def test_search_result_over_no_texts_iterates_once_per_query():
    empty = np.zeros((1, 0, 1))
    result = SpanSearchResult(
        ["q"], [], empty, *(empty.astype(np.int64) for _ in range(4)), "cosine", empty, "-", []
    )
    assert len(result) == 1
    assert list(itertools.islice(iter(result), 5)) == [
        []
    ]  # currently [[], [], [], [], []]: endless


def test_a_ray_cluster_that_does_not_answer_is_a_ray_cluster_error():
    from slice_st.errors import RayClusterError
    from slice_st.index.ray_cluster import probe_address

    with pytest.raises(
        RayClusterError, match=r"cannot connect to the Ray cluster at 127\.0\.0\.1:1"
    ) as caught:
        probe_address("127.0.0.1:1", timeout=5)
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, SpanInputError)


def test_a_folder_that_is_no_index_is_an_index_file_error(tmp_path):
    from slice_st.errors import IndexFileError
    from slice_st.index.storage import read_manifest

    with pytest.raises(IndexFileError, match="is not a SpanIndex"):
        read_manifest(str(tmp_path), must_exist=True)
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(IndexFileError, match="not an object"):
        read_manifest(str(tmp_path), must_exist=True)
