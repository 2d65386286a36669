"""A calibrated confidence beside each match's score: the probability that the span is a real match for the query.

Scores rank the spans of one query, but a score that is a match for one query is noise for another. A shipped
model's calibrator (``slice_st/pretrained/confidence/<model>.json``, fitted by ``research/realtext/confidence.py``)
is a logistic model of a few features of the match: its score and similarity, the query's length, the span's length
against the query's and the share of the query's words that the span repeats. It holds for the model and the scorer
it was fitted with (the default scorer of that shipped model); any other model or scorer gets no confidence.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

__all__ = ["Calibrator", "load_calibrator", "match_features"]

#: The features of a match, in the order a calibrator's weights take them.
FEATURES = ("score", "similarity", "query_words", "length_ratio", "overlap")

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The case-folded words of ``text`` (runs of letters, digits and ``_``), as the features read them."""
    return [w.casefold() for w in _WORD.findall(text)]


def _overlap(query: list[str], span: set[str]) -> float:
    """The share of the query's longer words (over 3 characters; all of them when it has none) the span repeats;
    a word counts when it shares its first five characters with one of the span's (``checked`` ~ ``checking``)."""
    words = [w for w in query if len(w) > 3] or query
    if not words:
        return 0.0
    stems = {w[:5] for w in span}
    return sum(w[:5] in stems for w in words) / len(words)


def match_features(
    queries: Sequence[str], spans: Sequence[str], scores: Sequence[float], similarities
) -> np.ndarray:
    """``(N, len(FEATURES))`` features of ``N`` matches (the query, the span's text, its score and similarity).

    >>> match_features(["not liable for damages"], ["be held liable for any damages"], [0.8], [0.85]).round(2)
    array([[0.8 , 0.85, 1.39, 0.41, 1.  ]])
    """
    rows = []
    for query, span, score, similarity in zip(queries, spans, scores, similarities):
        query_words, span_words = words(query), words(span)
        nq, ns = max(len(query_words), 1), max(len(span_words), 1)
        overlap = _overlap(query_words, set(span_words))
        rows.append((score, similarity, math.log(nq), math.log(ns / nq), overlap))
    return np.asarray(rows, np.float64).reshape(len(rows), len(FEATURES))


@dataclass(frozen=True)
class Calibrator:
    """A shipped calibrator: logistic weights over standardised :data:`FEATURES`.

    Args:
        name: The shipped model it was fitted for.
        rerank: The re-ranker of the scorer whose scores it reads (the model's default scorer).
        mean: Per-feature mean of the fit's data.
        scale: Per-feature standard deviation.
        weights: Per-feature weight (on the standardised feature).
        bias: The intercept.
        default_min_confidence: The documented default cut (precision ≥ 0.8 on the tune half's first results).
    """

    name: str
    rerank: str
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    default_min_confidence: float

    def __call__(
        self, queries: Sequence[str], spans: Sequence[str], scores, similarities
    ) -> np.ndarray:
        """``(N,)`` probabilities that each match is a real one."""
        if not len(spans):
            return np.zeros(0)
        values = (match_features(queries, spans, scores, similarities) - self.mean) / self.scale
        return 1.0 / (1.0 + np.exp(-(values @ self.weights + self.bias)))

    def to_dict(self) -> dict[str, Any]:
        """The calibrator as its JSON file holds it."""
        names = ("mean", "scale", "weights")
        arrays = {key: [round(float(v), 6) for v in getattr(self, key)] for key in names}
        return dict(name=self.name, rerank=self.rerank, features=list(FEATURES), **arrays) | dict(
            bias=round(self.bias, 6), default_min_confidence=self.default_min_confidence
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibrator:
        """The calibrator of a JSON file's contents (features in :data:`FEATURES`' order)."""
        if tuple(data["features"]) != FEATURES:
            raise ValueError(f"calibrator features {data['features']} are not {list(FEATURES)}.")
        arrays = {key: np.asarray(data[key], np.float64) for key in ("mean", "scale", "weights")}
        return cls(
            name=data["name"],
            rerank=data["rerank"],
            bias=float(data["bias"]),
            default_min_confidence=float(data["default_min_confidence"]),
            **arrays,
        )


@functools.lru_cache(maxsize=4)
def load_calibrator(name: str) -> Calibrator | None:
    """The calibrator shipped for the model ``name`` (``slice_st/pretrained/confidence/<name>.json``), or ``None``."""
    if not re.fullmatch(r"[\w.-]+", name):
        return None
    path = resources.files("slice_st.pretrained").joinpath("confidence", f"{name}.json")
    if not path.is_file():
        return None
    return Calibrator.from_dict(json.loads(path.read_text(encoding="utf-8")))


def calibrator_for(model: Any, rerank: str | None) -> Calibrator | None:
    """The calibrator of ``model`` (a shipped model) when ``rerank`` is the re-ranker it was fitted with, else
    ``None``: a confidence holds only for the model and scorer it was fitted for."""
    name = getattr(getattr(model, "model_card_data", None), "shipped_name", None)
    calibrator = load_calibrator(name) if isinstance(name, str) else None
    if calibrator is None or rerank != calibrator.rerank:
        return None
    return calibrator
