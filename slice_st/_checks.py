"""Argument checks made once where a value enters (texts and queries, ``top_k``, thresholds, devices): each gives the
checked value or a :class:`~slice_st.errors.SpanInputError` that names the argument."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

from slice_st.errors import SpanInputError

#: The largest float32: scores are float32, so a threshold beyond it means it.
_FLOAT32_MAX = 3.4028234663852886e38


def as_text_list(texts: Any, what: str = "texts") -> tuple[list[str], bool]:
    """Validate ``texts`` (a string or an iterable of strings); return the list and whether it was one string."""
    if isinstance(texts, str):
        return [texts], True
    if texts is None or isinstance(texts, (bytes, dict)) or not isinstance(texts, Iterable):
        raise SpanInputError(
            f"{what} must be a string or a list of strings, got {type(texts).__name__}."
        )
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise SpanInputError(
                f"{what}[{index}] must be a string, got {type(text).__name__}: {text!r:.60}."
            )
    return texts, False


def query_list(queries: Any) -> list[str]:
    """:func:`as_text_list` of ``queries``, at least one."""
    queries, _ = as_text_list(queries, "queries")
    if not queries:
        raise SpanInputError("queries is empty: give at least one query.")
    return queries


def check_top_k(top_k: Any, name: str = "top_k", optional: bool = False) -> int | None:
    """A positive integer (``None`` too when ``optional``), else a :class:`SpanInputError`."""
    if optional and top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise SpanInputError(f"{name} must be a positive integer, got {top_k!r}.")
    return int(top_k)


def check_threshold(threshold: Any) -> float | None:
    """``None`` or a finite real number (a cosine cut-off), as a float; anything else is a :class:`SpanInputError`."""
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise SpanInputError(
            f"threshold must be a number (a cosine), got {type(threshold).__name__}."
        )
    value = float(threshold)
    if not math.isfinite(value):
        raise SpanInputError(f"threshold must be a finite number, got {value}.")
    # Scores are float32: a cut-off beyond its range means its largest value, without an overflow warning.
    return min(max(value, -_FLOAT32_MAX), _FLOAT32_MAX)


def check_min_confidence(value: Any) -> float | str | None:
    """``None``, ``"default"`` (the model's documented cut) or a number from 0 to 1 (a probability), as a float;
    anything else is a :class:`SpanInputError`."""
    if value is None or value == "default":
        return value
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not number or not 0 <= float(value) <= 1:
        raise SpanInputError(
            f"min_confidence must be a number from 0 to 1 or 'default', got {value!r}."
        )
    return float(value)


def check_overlap(overlap: Any) -> bool:
    """``overlap`` if it is a bool (whether a search may return spans overlapping a better one of the same text)."""
    if not isinstance(overlap, bool):
        raise SpanInputError(f"overlap must be True or False, got {overlap!r}.")
    return overlap


def check_merge_identical(merge_identical: Any) -> bool:
    """``merge_identical`` if it is a bool (whether identical spans of several texts become one result)."""
    if not isinstance(merge_identical, bool):
        raise SpanInputError(f"merge_identical must be True or False, got {merge_identical!r}.")
    return merge_identical


def check_device(device: Any) -> str | None:
    """``device`` as a string if this machine has it (``None`` stays ``None``), else a clear ``SpanInputError``."""
    if device is None:
        return None
    import torch

    if not isinstance(device, (str, torch.device)) or (
        isinstance(device, str) and not device.strip()
    ):
        raise SpanInputError(f"A device is a name such as 'cpu' or 'cuda:0', got {device!r}.")
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise SpanInputError(
            f"Unknown device {str(device)!r} (expected e.g. 'cpu', 'cuda:0')."
        ) from None
    checks = {"cuda": torch.cuda.is_available, "mps": torch.backends.mps.is_available}
    available = checks.get(parsed.type)
    if available is not None and not available():
        raise SpanInputError(
            f"Device {str(device)!r} was asked for, but {parsed.type.upper()} is not available here."
        )
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        raise SpanInputError(
            f"Device {str(device)!r} does not exist: {torch.cuda.device_count()} CUDA device(s) here."
        )
    if parsed.type not in ("cpu", "cuda", "mps") and not hasattr(torch, parsed.type):
        raise SpanInputError(f"Unsupported device {str(device)!r}.")
    return str(device)
