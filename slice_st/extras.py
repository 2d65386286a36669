"""Optional dependencies: each is imported where it is used, through :func:`require`, which names the extra that
installs it when it is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from slice_st.errors import MissingExtraError


def require(module: str, extra: str, feature: str | None = None) -> ModuleType:
    """Import ``module``, or a :class:`MissingExtraError` naming the extra that installs it (``feature`` needs it)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        top = module.split(".")[0]
        if error.name is not None and error.name.split(".")[0] != top:  # the module is there, one of its imports not
            raise
        what = feature or f"this part of slice-st ({extra})"
        raise MissingExtraError(
            f"{what} needs {top}, which is not installed: pip install 'slice-st[{extra}]'", name=top
        ) from None
