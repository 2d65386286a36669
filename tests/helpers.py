"""Naive reference helpers shared by the test modules (import as ``from helpers import ...``)."""

from __future__ import annotations

import re

import numpy as np


def whitespace_words(text: str) -> list[tuple[int, int]]:
    """Character ranges of the whitespace-delimited words of ``text`` (what ``str.split()`` returns)."""
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def expected_span_units(num_units: int, min_span: int, max_span: int) -> list[tuple[int, int]]:
    """All (start, end) unit spans, start-major then by length (the library's documented order)."""
    return [
        (start, start + length)
        for start in range(num_units)
        for length in range(min_span, max_span + 1)
        if start + length <= num_units
    ]


def count_spans(num_units: int, min_span: int, max_span: int) -> int:
    return sum(max(0, num_units - length + 1) for length in range(min_span, max_span + 1))


def cosine(a, b) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
