"""slice_st.index.calibration: cosine → score calibration, alone and with an index (STS scale)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import QUERIES, STS_ROWS, make_docs

from slice_st import SpanIndex, SpanInputError
from slice_st.index.calibration import Calibration, fit_calibration, fit_sts_calibration


def test_calibration_matches_sklearn_and_round_trips(tmp_path):
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(0)
    cosines = rng.uniform(0, 1, 300)
    gold = np.clip(5 * cosines**2 + rng.normal(0, 0.7, 300), 0, 5)
    calibration = fit_calibration(cosines, gold)
    reference = IsotonicRegression(y_min=0, y_max=5, out_of_bounds="clip").fit(cosines, gold)
    probe = np.linspace(-0.5, 1.5, 101)
    np.testing.assert_allclose(calibration(probe), reference.predict(probe), atol=1e-9)
    assert np.all(np.diff(calibration(probe)) >= 0) and calibration.spearman > 0.8
    saved = calibration.save(tmp_path)  # a folder (e.g. a saved model) gets calibration.json
    assert saved.endswith("calibration.json")
    assert Calibration.load(tmp_path) == calibration
    with pytest.raises(ValueError, match="non-decreasing"):
        Calibration(x=[0.5, 0.2], y=[1.0, 2.0])
    (tmp_path / "bad.json").write_text(
        json.dumps({"kind": "isotonic", "format_version": 1, "x": [1], "y": []})
    )
    with pytest.raises(ValueError, match="invalid calibration"):
        Calibration.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="at least 2"):
        fit_calibration([0.5], [3.0])


def test_sts_calibration_with_the_index(tiny_model, tmp_path, make_tiny_model):
    sts = tmp_path / "sts.csv"
    sts.write_text(
        "".join(
            f"main-captions\tMSRvid\t2012\t{i:04d}\t{score:.3f}\t{a}\t{b}\n"
            for i, (a, b, score) in enumerate(STS_ROWS)
        )
    )
    calibration = fit_sts_calibration(tiny_model, sts)
    assert (
        calibration.pairs == len(STS_ROWS)
        and calibration.source == "sts.csv"
        and calibration.pair_score == "sentence"
    )
    spans = fit_sts_calibration(tiny_model, sts, "best_span", limit=4)
    assert spans.pairs == 4 and spans.pair_score == "best_span"
    index = SpanIndex.build(make_docs(20), tiny_model, max_span=4)
    index.set_calibration(calibration)
    matches = index.search(QUERIES, top_k=3)
    for match in (m for ms in matches for m in ms):
        assert match.calibrated == pytest.approx(
            calibration.degree(match.similarity), abs=1e-4
        )  # the cosine, not the score
        assert 0.0 <= match.calibrated <= 5.0
    index.save(tmp_path / "ix")
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    assert loaded.calibration == calibration and loaded.info()["calibration"]["pairs"] == len(
        STS_ROWS
    )
    assert [m.calibrated for m in loaded.search(QUERIES, top_k=3)[0]] == [
        m.calibrated for m in matches[0]
    ]
    calibration.save(tmp_path / "cal.json")
    index.set_calibration(str(tmp_path / "cal.json"))
    other = Calibration(x=[0.0, 1.0], y=[0.0, 5.0], model_fingerprint="0123456789abcdef")
    with pytest.raises(SpanInputError, match="another model"):
        index.set_calibration(other)
    index.set_calibration(None)
    assert index.search("dog", top_k=1)[0][0].calibrated is None
