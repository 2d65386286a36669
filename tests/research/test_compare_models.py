"""research/compare_models.py: paired bootstrap intervals of two models' figures on the same rows."""

from __future__ import annotations

import numpy as np

from research.compare_models import compare, figures


def _rows(score, exact, f1):
    return {
        "score": np.asarray(score, float),
        "exact": np.asarray(exact, float),
        "f1": np.asarray(f1, float),
    }


def test_figures_leave_out_rows_that_are_not_strong_and_located():
    rows = _rows([0.1, 0.2, 0.3, 0.4], [100, np.nan, 0, np.nan], [100, np.nan, 50, np.nan])
    found = figures(rows, np.array([1.0, 2.0, 3.0, 4.0]), np.arange(4))
    assert found == {"spearman": 100.0, "exact": 50.0, "f1": 75.0}


def test_an_equal_model_has_a_zero_interval_and_a_better_one_a_positive_one():
    rng = np.random.default_rng(1)
    gold = rng.uniform(0, 5, 200)
    first = _rows(
        gold + rng.normal(0, 2, 200), rng.integers(0, 2, 200) * 100.0, rng.uniform(0, 100, 200)
    )
    same = compare(first, first, gold, samples=200)
    assert all(v["gain_95ci"] == [0.0, 0.0] for part in same.values() for v in part.values())
    better = _rows(gold + rng.normal(0, 0.2, 200), np.full(200, 100.0), np.full(200, 100.0))
    report = compare(first, better, gold, samples=200)
    assert set(report) == {"odd", "even", "all"}
    assert all(report["odd"][key]["gain_95ci"][0] > 0 for key in ("spearman", "exact", "f1"))
