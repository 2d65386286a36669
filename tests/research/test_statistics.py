"""The Williams test and the comparison with the best system (research.statistics)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from research.statistics import compare_to_best, williams_test


def test_williams_test_values():
    assert williams_test(0.7, 0.7, 0.9, 100) == pytest.approx(0.5)
    assert williams_test(0.8, 0.7, 0.75, 1000) < 1e-6
    assert williams_test(0.7, 0.8, 0.75, 1000) > 1 - 1e-6
    # more agreement between the systems makes the same gap more significant
    assert williams_test(0.6, 0.55, 0.9, 200) < williams_test(0.6, 0.55, 0.5, 200)
    with pytest.raises(ValueError, match="n > 3"):
        williams_test(0.5, 0.4, 0.3, 3)


def test_williams_test_is_calibrated_under_the_null():
    """Two systems equally correlated with gold: one-sided p < 0.05 about 5% of the time."""
    rng = np.random.default_rng(0)
    n, trials, rejections = 60, 1000, 0
    for _ in range(trials):
        gold = rng.normal(size=n)
        shared = rng.normal(size=n)
        a = gold + shared + rng.normal(size=n)
        b = gold + shared + rng.normal(size=n)
        r = np.corrcoef([gold, a, b])
        rejections += williams_test(r[0, 1], r[0, 2], r[1, 2], n) < 0.05
    assert 0.03 < rejections / trials < 0.07


def test_compare_to_best():
    rng = np.random.default_rng(1)
    gold = rng.normal(size=300)
    systems = {"good": gold + 0.3 * rng.normal(size=300), "bad": gold + 2.0 * rng.normal(size=300)}
    for method in ("pearson", "spearman"):
        p = compare_to_best(gold, systems, method)
        assert math.isnan(p["good"]) and p["bad"] < 1e-6
