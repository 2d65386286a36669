"""Optional dependencies: plain ``import`` statements (which deptry checks against the extras of pyproject.toml),
inside a block that turns a missing module into an error naming the extra that installs it::

    with needs_extra("faiss", "the FAISS candidate stage"):
        import faiss
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager

from slice_st.errors import MissingExtraError


@contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Run the imports of ``feature``: a module that is not installed raises :class:`MissingExtraError` saying
    ``pip install 'slice-st[extra]'``. An installed module that fails to import (a broken install, a bug) is re-raised
    as it is.

    >>> with needs_extra("eval", "the BM25 baseline"):
    ...     import surely_not_installed_module
    Traceback (most recent call last):
    slice_st.errors.MissingExtraError: the BM25 baseline needs surely_not_installed_module, which is not installed: pip install 'slice-st[eval]'
    """  # noqa: E501
    try:
        yield
    except ImportError as error:
        top = (error.name or "").split(".")[0]
        if not top or importlib.util.find_spec(top) is not None:
            raise
        message = f"{feature} needs {top}, which is not installed: pip install 'slice-st[{extra}]'"
        raise MissingExtraError(message, name=top) from None
