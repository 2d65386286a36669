"""The paper's offline training data (research.offline_data): sentence-data readers, the triplet builder."""

from __future__ import annotations

import json

import pytest

from research.offline_data import (
    build_training_triplets,
    detokenize,
    pairs_to_triples,
    read_ppdb_pairs,
    read_sick_pairs,
    read_snli_triplets,
)
from slice_st.errors import DataFormatError

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone plays an acoustic guitar.",
    "The stock market fell sharply on Monday.",
    "Two dogs run across a snowy field.",
    "A woman slices onions in the kitchen.",
    "Children are swimming in a lake.",
    "The train arrived two hours late.",
    "A chef is cooking pasta for dinner.",
]


def test_detokenize_undoes_snli_spaces():
    assert detokenize("It is n't John 's dog ,\n he said !") == "It isn't John's dog, he said!"


def test_snli_sick_ppdb_readers(tmp_path):
    snli = tmp_path / "snli.tsv"
    snli.write_text(
        "anchor\tpositive\tnegative\nTwo women are embracing . \tTwo women hug . \tMen fight . \n",
        encoding="utf-8",
    )
    assert read_snli_triplets(snli) == [
        ("Two women are embracing.", "Two women hug.", "Men fight.")
    ]
    bad = tmp_path / "bad_snli.tsv"
    bad.write_text("a\tb\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="header"):
        read_snli_triplets(bad)

    sick = tmp_path / "SICK.txt"
    sick.write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
        "1\tA dog runs.\tA dog is running.\t4.8\tENTAILMENT\n2\tA cat.\tA car.\t1.2\tNEUTRAL\n",
        encoding="utf-8",
    )
    assert read_sick_pairs(sick) == [("A dog runs.", "A dog is running.")]

    ppdb = tmp_path / "ppdb.json"
    ppdb.write_text(
        json.dumps([["very hard", "really hard", "pos"], ["very hard", "been hard", "neg"]]),
        encoding="utf-8",
    )
    positives, negatives = read_ppdb_pairs(ppdb)
    assert positives == [("very hard", "really hard")] and negatives == {"very hard": ["been hard"]}
    ppdb.write_text(json.dumps([["a", "b", "maybe"]]), encoding="utf-8")
    with pytest.raises(DataFormatError, match="item 0"):
        read_ppdb_pairs(ppdb)


def test_pairs_to_triples_uses_given_or_unrelated_negatives():
    pairs = [
        (SENTENCES[0], SENTENCES[1]),
        (SENTENCES[2], SENTENCES[3]),
        (SENTENCES[4], SENTENCES[5]),
    ]
    triples = pairs_to_triples(pairs, {SENTENCES[0]: ["given negative"]}, seed=3)
    assert triples[0] == (SENTENCES[0], SENTENCES[1], "given negative")
    for query, positive, negative in triples[1:]:
        assert negative not in (query, positive)


def test_builder_places_sentences_verbatim_and_excludes_dev_sentences():
    triples = [
        (SENTENCES[i], SENTENCES[i + 1], SENTENCES[(i + 4) % len(SENTENCES)])
        for i in range(len(SENTENCES) - 1)
    ]
    excluded = {SENTENCES[2]}
    dataset = build_training_triplets(triples, exclude_sentences=excluded, words=15, seed=1)
    assert len(dataset) == sum(1 for t in triples if SENTENCES[2] not in t)
    for row in dataset:
        assert row["positive_span"] in row["positive"] and row["negative_span"] in row["negative"]
        assert len(row["positive"].split()) >= 15
        assert SENTENCES[2] not in (row["anchor"], row["positive_span"], row["negative_span"])
    again = build_training_triplets(triples, exclude_sentences=excluded, words=15, seed=1)
    assert again.to_dict() == dataset.to_dict()  # seeded, reproducible
    with pytest.raises(ValueError, match="at least 2 usable triples"):
        build_training_triplets(triples[:1])
