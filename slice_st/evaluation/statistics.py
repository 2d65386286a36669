"""Correlations with gold scores."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from slice_st.text import require

stats = require("scipy.stats", "eval", "correlations")


def correlations(gold: Sequence[float], predicted: Sequence[float]) -> tuple[float, float]:
    """Pearson and Spearman correlation of ``predicted`` with ``gold``.

    Args:
        gold: Gold scores.
        predicted: Predicted scores.

    Returns:
        ``(pearson, spearman)``.

    Example:
        >>> correlations([0, 1, 2, 3], [0.1, 0.2, 0.25, 0.9])  # doctest: +ELLIPSIS
        (0.8696..., 1.0)
    """
    gold_array, predicted_array = np.asarray(gold, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    if len(gold_array) < 3 or np.ptp(predicted_array) == 0 or np.ptp(gold_array) == 0:
        return float("nan"), float("nan")
    return float(stats.pearsonr(gold_array, predicted_array)[0]), float(stats.spearmanr(gold_array, predicted_array)[0])
