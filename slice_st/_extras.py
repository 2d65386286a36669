"""Optional dependencies as plain imports (which deptry checks against pyproject.toml's extras), in a block that names
the extra of a missing one: ``with needs_extra("faiss", "the FAISS candidate stage"): import faiss``."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager

from slice_st.errors import MissingExtraError


@contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Run the imports of ``feature``: a module that is not installed raises :class:`MissingExtraError` saying
    ``pip install 'slice-st[extra]'``; an installed one that fails to import (a broken install, a bug) is re-raised."""
    try:
        yield
    except ImportError as error:
        top = (error.name or "").split(".")[0]
        if not top or importlib.util.find_spec(top) is not None:
            raise
        message = f"{feature} needs {top}, which is not installed: pip install 'slice-st[{extra}]'"
        raise MissingExtraError(message, name=top) from None
