"""Calibrated similarity: a span cosine mapped to the STS 0–5 scale by isotonic regression, saved as JSON and applied
with ``numpy.interp`` (no scikit-learn needed to use it). See docs/guides/corpus-index.md."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slice_st._extras import needs_extra
from slice_st.encode import embed_texts
from slice_st.errors import DataFormatError
from slice_st.files import atomic_file
from slice_st.loading import model_fingerprint
from slice_st.search import best_spans_paired

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

CALIBRATION_FILE = "calibration.json"
CALIBRATION_FORMAT_VERSION = 1
PAIR_SCORES = ("sentence", "best_span")


@dataclass(frozen=True)
class Calibration:
    """A monotone piecewise-linear map from cosine to a 0–5 degree of similarity (clipped outside ``[x[0], x[-1]]``).

    Args:
        x: Ascending cosine thresholds.
        y: Non-decreasing degrees (0–5) at those thresholds.
        pair_score: How a pair was scored when fitting (``"sentence"`` or ``"best_span"``).
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
            raise DataFormatError(
                "A calibration needs equally long, non-empty threshold lists x and y."
            )
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise DataFormatError("Calibration thresholds must be finite numbers.")
        if np.any(np.diff(x) < 0) or np.any(np.diff(y) < 0):
            raise DataFormatError("Calibration thresholds must be non-decreasing in x and y.")

    def __call__(self, cosines) -> np.ndarray:
        """Degrees (0–5) for an array of cosines."""
        return np.interp(np.asarray(cosines, dtype=np.float64), self.x, self.y)

    def degree(self, cosine: float) -> float:
        """One cosine → one degree."""
        return float(self(np.array([cosine]))[0])

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": CALIBRATION_FORMAT_VERSION, "kind": "isotonic"} | asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "calibration") -> Calibration:
        if not isinstance(data, dict) or data.get("kind") != "isotonic":
            raise DataFormatError(f"{name}: not an isotonic calibration.")
        if data.get("format_version") != CALIBRATION_FORMAT_VERSION:
            raise DataFormatError(
                f"{name}: calibration format {data.get('format_version')} is not supported."
            )
        try:
            return cls(
                **{member.name: data[member.name] for member in fields(cls) if member.name in data}
            )
        except (TypeError, ValueError) as error:
            raise DataFormatError(f"{name}: invalid calibration ({error}).") from None

    def save(self, path: str | os.PathLike) -> str:
        """Write JSON to ``path`` (a file, or a folder such as a saved model: ``<folder>/calibration.json``)."""
        path = os.path.join(path, CALIBRATION_FILE) if os.path.isdir(path) else os.fspath(path)
        with atomic_file(path, "w", encoding="utf-8") as handle:
            json.dump(self.to_dict(), handle, indent=1)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> Calibration:
        """Read a calibration written by :meth:`save` (a file or a folder holding ``calibration.json``)."""
        path = os.path.join(path, CALIBRATION_FILE) if os.path.isdir(path) else os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"No calibration at {path!r}.")
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except ValueError as error:
            raise DataFormatError(f"{path}: unreadable calibration ({error}).") from None
        return cls.from_dict(data, path)


def calibrated_degree(calibration: Calibration | None, cosine: float) -> float | None:
    """A match's ``calibrated``: ``cosine`` as a degree rounded to 4 places (``None`` without a calibration)."""
    return None if calibration is None else round(calibration.degree(float(cosine)), 4)


def fit_calibration(
    cosines: Sequence[float],
    scores: Sequence[float],
    *,
    low: float = 0.0,
    high: float = 5.0,
    **info: Any,
) -> Calibration:
    """Isotonic regression (increasing, clipped to ``[low, high]``) from cosines to gold scores; ``info`` is stored in
    the :class:`Calibration` (``source``, ``pairs``, …).

    Example:
        >>> cal = fit_calibration([0.1, 0.3, 0.5, 0.7, 0.9], [0.0, 1.0, 0.8, 4.0, 5.0])
        >>> cal([0.1, 0.4, 0.9]).round(2).tolist()
        [0.0, 0.9, 5.0]
    """
    with needs_extra("eval", "calibration"):
        from scipy.stats import spearmanr
        from sklearn.isotonic import IsotonicRegression

    x, y = np.asarray(cosines, dtype=np.float64), np.asarray(scores, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise DataFormatError(
            f"cosines and scores must be equally long 1-d sequences, got {x.shape} and {y.shape}."
        )
    if len(x) < 2:
        raise DataFormatError("Calibration needs at least 2 scored pairs.")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise DataFormatError("Calibration pairs must have finite cosines and scores.")
    model = IsotonicRegression(y_min=low, y_max=high, increasing=True, out_of_bounds="clip").fit(
        x, y
    )
    rho = spearmanr(x, y).statistic
    return Calibration(
        x=model.X_thresholds_.tolist(),
        y=model.y_thresholds_.tolist(),
        pairs=len(x),
        spearman=None if not np.isfinite(rho) else round(float(rho), 4),
        **info,
    )


def fit_sts_calibration(
    model: SentenceTransformer,
    path: str | os.PathLike,
    pair_score: str = "sentence",
    *,
    limit: int | None = None,
    batch_size: int = 32,
    max_span: int | None = None,
) -> Calibration:
    """Fit the cosine → 0–5 map on the first ``limit`` pairs of an STS-benchmark TSV (e.g. ``sts-train.csv``).

    A pair is scored by the cosine of its two sentences' mean token vectors (``pair_score="sentence"``: the cosine the
    index gives a span covering sentence 2), or of sentence 2's best span of at most ``max_span`` words
    (``"best_span"``).
    """
    from slice_st.data.stsb import read_stsb

    if pair_score not in PAIR_SCORES:
        raise DataFormatError(f"pair_score must be one of {PAIR_SCORES}, got {pair_score!r}.")
    rows = read_stsb(path)
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    first, second = list(rows["sentence1"]), list(rows["sentence2"])
    if pair_score == "sentence":
        left, right = (
            embed_texts(model, texts, batch_size=batch_size).float() for texts in (first, second)
        )
        cosines = torch.nn.functional.cosine_similarity(left, right, dim=-1).double().cpu().numpy()
    else:
        matches = best_spans_paired(model, first, second, batch_size=batch_size, max_span=max_span)
        cosines = np.array(
            [np.nan if match is None else match.score for match in matches], dtype=np.float64
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
