"""The examples in the research modules' docstrings run (``--doctest-modules`` covers only the package)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import research

MODULES = sorted(
    info.name for info in pkgutil.iter_modules(research.__path__, "research.") if not info.ispkg
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
