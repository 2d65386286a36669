"""slice_st.confidence: the features of a match, the shipped calibrators and which model and scorer get one."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from slice_st.confidence import (
    FEATURES,
    Calibrator,
    calibrator_for,
    load_calibrator,
    match_features,
)
from slice_st.scoring import DEFAULT_RERANKER

SHIPPED = ("slice-minilm", "slice-mpnet")


def test_features_of_a_match():
    values = match_features(
        ["the authors are not liable", "x"],
        ["In no event will the authors be liable", "y z"],
        [0.8, 0.1],
        [0.85, 0.2],
    )
    assert values.shape == (2, len(FEATURES))
    score, similarity, query_words, ratio, overlap = values[0]
    assert (score, similarity) == (0.8, 0.85)
    assert query_words == pytest.approx(np.log(5)) and ratio == pytest.approx(np.log(8 / 5))
    assert (
        overlap == 1.0
    )  # the query's words of over 3 characters, "authors" and "liable", are both there
    assert values[1, 4] == 0.0  # a query of short words counts all of them: "x" is not in "y z"
    assert match_features([], [], [], []).shape == (0, len(FEATURES))


def test_overlap_counts_a_word_by_its_first_five_characters():
    (row,) = match_features(["checked bags"], ["checking the bag"], [0.5], [0.5])
    assert row[4] == 0.5  # "checked" ~ "checking" ("check"); "bags" is not "bag"


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_model_has_a_calibrator_for_its_own_reranker(name):
    calibrator = load_calibrator(name)
    assert calibrator is not None and calibrator.name == name
    assert calibrator.rerank == f"{name}-rerank"
    assert 0.5 <= calibrator.default_min_confidence < 1
    assert Calibrator.from_dict(calibrator.to_dict()).to_dict() == calibrator.to_dict()
    # more score, all else equal: more confidence
    low, high = calibrator(
        ["a late flight"] * 2, ["the flight was late"] * 2, [0.3, 0.8], [0.3, 0.8]
    )
    assert 0 <= low < high <= 1


def test_every_calibrator_file_is_one_of_a_shipped_model():
    folder = resources.files("slice_st.pretrained").joinpath("confidence")
    names = sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".json"))
    assert names == [f"{name}.json" for name in SHIPPED]
    for name in names:
        assert json.loads(folder.joinpath(name).read_text(encoding="utf-8"))["features"] == list(
            FEATURES
        )


@pytest.mark.parametrize("name", ["no-such-model", "../slice-minilm", ""])
def test_no_calibrator_for_other_names(name):
    assert load_calibrator(name) is None


def test_a_file_with_other_features_is_refused():
    data = load_calibrator("slice-minilm").to_dict() | {"features": ["score"]}
    with pytest.raises(ValueError, match="features"):
        Calibrator.from_dict(data)


def test_only_a_shipped_model_with_its_own_reranker_gets_one(real_model, tiny_model):
    assert calibrator_for(real_model, "slice-minilm-rerank") is load_calibrator("slice-minilm")
    assert calibrator_for(real_model, None) is None  # another scorer
    assert calibrator_for(tiny_model, DEFAULT_RERANKER) is None  # not a shipped model
