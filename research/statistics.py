"""The Williams test for comparing two correlated correlations (Table 1's significance marks)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

__all__ = ["williams_test", "compare_to_best"]


def williams_test(r12: float, r13: float, r23: float, n: int) -> float:
    """One-sided p-value that ``r12 > r13`` for two dependent correlations sharing variable 1.

    Williams (1959) as used by Graham & Baldwin (2014) for comparing evaluation metrics: variable 1
    is the gold score, 2 and 3 are two systems' predictions, ``r23`` their correlation with each
    other, ``n`` the number of pairs. Small p: system 2 correlates significantly better than 3.

    Args:
        r12: Correlation of the gold scores (variable 1) with system 2's predictions.
        r13: Correlation of the gold scores with system 3's predictions.
        r23: Correlation of the two systems' predictions.
        n: Number of pairs.

    Returns:
        The p-value.

    Example:
        >>> round(williams_test(0.80, 0.70, 0.75, 1000), 6) < 0.001
        True
        >>> round(williams_test(0.70, 0.70, 0.9, 100), 3)
        0.5
    """
    if n <= 3:
        raise ValueError(f"the Williams test needs n > 3 pairs, got {n}.")
    k = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    denominator = math.sqrt(
        max(2 * k * (n - 1) / (n - 3) + ((r12 + r13) ** 2 / 4) * (1 - r23) ** 3, 1e-300)
    )
    t_value = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)) / denominator
    return float(stats.t.sf(t_value, df=n - 3))


def compare_to_best(
    gold: Sequence[float], predictions: dict[str, Sequence[float]], method: str = "pearson"
) -> dict[str, float]:
    """Williams p-value of each system against the best one (by ``method`` correlation with ``gold``).

    The best system gets ``nan``. Spearman uses the same test on ranks.

    Args:
        gold: Gold scores.
        predictions: System name → predicted scores.
        method: ``"pearson"`` or ``"spearman"``.

    Returns:
        System name → p-value (``nan`` for the best system).

    Example:
        >>> gold = np.arange(50.0)
        >>> p = compare_to_best(gold, {"good": gold + np.sin(gold), "bad": gold[::-1] * 0 + np.cos(gold)})
        >>> math.isnan(p["good"]), p["bad"] < 0.01
        (True, True)
    """
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method must be 'pearson' or 'spearman', got {method!r}.")
    gold_values = np.asarray(gold, dtype=np.float64)
    series = {name: np.asarray(values, dtype=np.float64) for name, values in predictions.items()}
    if method == "spearman":
        gold_values = stats.rankdata(gold_values)
        series = {name: stats.rankdata(values) for name, values in series.items()}

    def corr(a: np.ndarray, b: np.ndarray) -> float:
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            return 0.0
        return float(np.corrcoef(a, b)[0, 1])

    with_gold = {name: corr(gold_values, values) for name, values in series.items()}
    best = max(with_gold, key=lambda name: with_gold[name])
    result = {}
    for name, values in series.items():
        if name == best:
            result[name] = float("nan")
        else:
            result[name] = williams_test(
                with_gold[best], with_gold[name], corr(series[best], values), len(gold_values)
            )
    return result
