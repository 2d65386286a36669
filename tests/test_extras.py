"""slice_st._extras: optional imports in a ``needs_extra`` block name the extra that installs a missing module, and
let any other import failure through as it is."""

from __future__ import annotations

import sys

import pytest

from slice_st._extras import needs_extra
from slice_st.errors import MissingExtraError


def test_a_missing_module_names_its_extra():
    with (
        pytest.raises(MissingExtraError, match=r"pip install 'slice-st\[eval\]'") as caught,
        needs_extra("eval", "the BM25 baseline"),
    ):
        import surely_not_installed_module  # noqa: F401
    assert (
        isinstance(caught.value, ImportError) and caught.value.name == "surely_not_installed_module"
    )
    assert str(caught.value).startswith(
        "the BM25 baseline needs surely_not_installed_module, which is not installed"
    )


def test_an_installed_module_imports_as_usual():
    with needs_extra("train", "anything"):
        import json
    assert json.dumps([1]) == "[1]"


def test_a_module_hidden_from_the_interpreter_counts_as_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # what the tests of each extra do
    with (
        pytest.raises(MissingExtraError, match=r"needs faiss, .*slice-st\[faiss\]"),
        needs_extra("faiss", "the FAISS candidate stage"),
    ):
        import faiss  # noqa: F401


def test_an_installed_module_that_fails_is_not_called_missing(tmp_path, monkeypatch):
    """A package that is there but breaks on import (one of its own imports fails) is a bug to see, not an extra."""
    (tmp_path / "broken_package.py").write_text("from json import no_such_name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with (
        pytest.raises(ImportError, match="no_such_name") as caught,
        needs_extra("eval", "a feature"),
    ):
        import broken_package  # noqa: F401
    assert not isinstance(caught.value, MissingExtraError)


def test_other_errors_pass_through():
    with pytest.raises(KeyError), needs_extra("eval", "a feature"):
        raise KeyError("x")
