"""Calibrated similarity: map a span cosine to the STS 0–5 scale with isotonic regression.

A cosine is only comparable within one model; users want a *degree* of similarity to threshold.
:func:`fit_calibration` fits a monotone map cosine → 0–5 (scikit-learn's ``IsotonicRegression``) on
scored pairs, e.g. the STS benchmark train split (:func:`fit_sts_calibration`). The fitted map is a
piecewise-linear function given by its thresholds, saved as JSON (with the index, or beside a
model) and applied with ``numpy.interp`` — no scikit-learn needed to use it.

Which cosine is fitted: ``pair_score="sentence"`` (default) scores a pair by the cosine of the two
sentences' mean token vectors (:func:`slice_st.encode.embed_texts`). That is exactly the cosine the index
reports for a span that covers the whole of sentence 2 — a span vector *is* a mean of token vectors
— and the STS gold score describes the whole sentences, so cosine and gold refer to the same
pieces of text. ``pair_score="best_span"`` (:func:`slice_st.encode.best_spans_paired`) scores the best
sub-span of sentence 2 instead: it is ≥ the sentence cosine and its gold label still describes the
whole sentence, so it maps high cosines to lower degrees (conservative); offered for comparison.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from slice_st.errors import DataFormatError
from slice_st.text import atomic_file, require

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

CALIBRATION_FILE = "calibration.json"
CALIBRATION_FORMAT_VERSION = 1
PAIR_SCORES = ("sentence", "best_span")


@dataclass(frozen=True)
class Calibration:
    """A monotone piecewise-linear map from cosine to a 0–5 degree of similarity.

    ``x`` (ascending cosines) and ``y`` (non-decreasing degrees) are the isotonic fit's thresholds;
    values outside ``[x[0], x[-1]]`` are clipped to the end degrees.

    Args:
        x: Ascending cosine thresholds.
        y: Non-decreasing degrees (0–5) at those thresholds.
        pair_score: How a pair was scored when fitting (``"sentence"`` or a span setting).
        source: What it was fitted on.
        pairs: How many pairs.
        model_fingerprint: The model it was fitted for.
        spearman: Spearman of the fit on its pairs.
        extra: Anything else to keep.

    Example:
        >>> calibration = Calibration(x=[0.2, 0.5, 0.9], y=[0.0, 2.0, 5.0])
        >>> calibration([0.1, 0.35, 0.7, 1.0]).round(6).tolist()
        [0.0, 1.0, 3.5, 5.0]
    """

    x: list[float]
    y: list[float]
    pair_score: str = "sentence"
    source: str = ""
    pairs: int = 0
    model_fingerprint: str = ""
    spearman: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        x, y = np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)
        if x.ndim != 1 or x.shape != y.shape or len(x) == 0:
            raise DataFormatError("A calibration needs equally long, non-empty threshold lists x and y.")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise DataFormatError("Calibration thresholds must be finite numbers.")
        if np.any(np.diff(x) < 0) or np.any(np.diff(y) < 0):
            raise DataFormatError("Calibration thresholds must be non-decreasing in x and y.")

    def __call__(self, cosines) -> np.ndarray:
        """Degrees (0–5) for an array of cosines."""
        values = np.asarray(cosines, dtype=np.float64)
        return np.interp(values, self.x, self.y)

    def degree(self, cosine: float) -> float:
        """One cosine → one degree."""
        return float(self(np.array([cosine]))[0])

    def cosine_for(self, degree: float) -> float:
        """The smallest cosine reaching ``degree`` (to turn a 0–5 threshold into a cosine threshold)."""
        x, y = np.asarray(self.x), np.asarray(self.y)
        if degree <= y[0]:
            return float("-inf")
        if degree > y[-1]:
            return float("inf")
        i = int(np.searchsorted(y, degree, side="left"))
        if y[i] == degree or i == 0:
            return float(x[i])
        return float(x[i - 1] + (degree - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1]))

    # -------------------------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        return {"format_version": CALIBRATION_FORMAT_VERSION, "kind": "isotonic"} | asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "calibration") -> Calibration:
        if not isinstance(data, dict) or data.get("kind") != "isotonic":
            raise DataFormatError(f"{name}: not an isotonic calibration.")
        if data.get("format_version") != CALIBRATION_FORMAT_VERSION:
            raise DataFormatError(f"{name}: calibration format {data.get('format_version')} is not supported.")
        fields = {
            key: data[key]
            for key in ("x", "y", "pair_score", "source", "pairs", "model_fingerprint", "spearman", "extra")
            if key in data
        }
        try:
            return cls(**fields)
        except (TypeError, ValueError) as error:
            raise DataFormatError(f"{name}: invalid calibration ({error}).") from None

    def save(self, path: str | os.PathLike) -> str:
        """Write JSON to ``path`` (a file, or a folder such as a saved model: ``<folder>/calibration.json``)."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, CALIBRATION_FILE)
        with atomic_file(path, "w", encoding="utf-8") as handle:  # a new temporary file, then os.replace
            json.dump(self.to_dict(), handle, indent=1)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> Calibration:
        """Read a calibration written by :meth:`save` (a file or a folder holding ``calibration.json``)."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, CALIBRATION_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"No calibration at {path!r}.")
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except ValueError as error:
            raise DataFormatError(f"{path}: unreadable calibration ({error}).") from None
        return cls.from_dict(data, path)


def fit_calibration(
    cosines: Sequence[float], scores: Sequence[float], *, low: float = 0.0, high: float = 5.0, **info
) -> Calibration:
    """Isotonic regression (increasing, clipped to ``[low, high]``) from cosines to gold scores.

    Args:
        cosines: Cosines of the pairs.
        scores: Their gold scores.
        low: Lowest degree.
        high: Highest degree.
        **info: Stored in the :class:`Calibration` (``source``, ``pairs``, …).

    Returns:
        The fitted :class:`Calibration`.

    Example:
        >>> cal = fit_calibration([0.1, 0.3, 0.5, 0.7, 0.9], [0.0, 1.0, 0.8, 4.0, 5.0])
        >>> cal([0.1, 0.4, 0.9]).round(2).tolist()
        [0.0, 0.9, 5.0]
    """
    spearmanr = require("scipy.stats", "eval", "calibration").spearmanr
    IsotonicRegression = require("sklearn.isotonic", "eval", "calibration").IsotonicRegression

    x = np.asarray(cosines, dtype=np.float64)
    y = np.asarray(scores, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise DataFormatError(f"cosines and scores must be equally long 1-d sequences, got {x.shape} and {y.shape}.")
    if len(x) < 2:
        raise DataFormatError("Calibration needs at least 2 scored pairs.")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise DataFormatError("Calibration pairs must have finite cosines and scores.")
    model = IsotonicRegression(y_min=low, y_max=high, increasing=True, out_of_bounds="clip").fit(x, y)
    rho = spearmanr(x, y).statistic
    return Calibration(
        x=model.X_thresholds_.tolist(),
        y=model.y_thresholds_.tolist(),
        pairs=len(x),
        spearman=None if not np.isfinite(rho) else round(float(rho), 4),
        **info,
    )


def sts_pair_cosines(
    model: SentenceTransformer,
    sentences1: Sequence[str],
    sentences2: Sequence[str],
    pair_score: str = "sentence",
    *,
    batch_size: int = 32,
    max_span: int | None = None,
) -> np.ndarray:
    """Cosine of each pair ``(sentences1[i], sentences2[i])``, scored as the index scores spans (see module doc).

    Args:
        model: The ``SentenceTransformer``.
        sentences1: First sentence of each pair.
        sentences2: Second sentence of each pair.
        pair_score: How a pair is scored (see above).
        batch_size: Batch size of the encoding.
        max_span: Longest span for span scoring.

    Returns:
        ``(N,)`` cosines.
    """
    from slice_st.encode import best_spans_paired, embed_texts

    if pair_score not in PAIR_SCORES:
        raise DataFormatError(f"pair_score must be one of {PAIR_SCORES}, got {pair_score!r}.")
    if pair_score == "sentence":
        import torch

        first = torch.nn.functional.normalize(
            embed_texts(model, list(sentences1), batch_size=batch_size).float(), dim=-1
        )
        second = torch.nn.functional.normalize(
            embed_texts(model, list(sentences2), batch_size=batch_size).float(), dim=-1
        )
        return (first * second).sum(dim=-1).cpu().numpy().astype(np.float64)
    matches = best_spans_paired(model, list(sentences1), list(sentences2), batch_size=batch_size, max_span=max_span)
    return np.array([match.score if match is not None else np.nan for match in matches], dtype=np.float64)


def fit_sts_calibration(
    model: SentenceTransformer,
    path: str | os.PathLike,
    pair_score: str = "sentence",
    *,
    limit: int | None = None,
    batch_size: int = 32,
    max_span: int | None = None,
) -> Calibration:
    """Fit the cosine → 0–5 map on an STS-benchmark TSV (e.g. ``sts-train.csv``), read in place from ``path``.

    Args:
        model: The ``SentenceTransformer``.
        path: An STS-benchmark TSV (e.g. ``sts-train.csv``).
        pair_score: How a pair is scored (see :func:`sts_pair_cosines`).
        limit: Use the first ``limit`` pairs.
        batch_size: Batch size of the encoding.
        max_span: Longest span for span scoring.

    Returns:
        The fitted :class:`Calibration`.
    """
    from slice_st.data.stsb import read_stsb
    from slice_st.loading import model_fingerprint

    rows = read_stsb(path)
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    cosines = sts_pair_cosines(
        model, rows["sentence1"], rows["sentence2"], pair_score, batch_size=batch_size, max_span=max_span
    )
    gold = np.asarray(rows["score"], dtype=np.float64)
    keep = np.isfinite(cosines)
    return fit_calibration(
        cosines[keep],
        gold[keep],
        pair_score=pair_score,
        source=os.path.basename(os.fspath(path)),
        model_fingerprint=model_fingerprint(model),
    )
