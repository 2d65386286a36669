"""SpanIndex: multi-process encoding, shards searched together, the save lock, the recorded model name."""

from __future__ import annotations

import fcntl
import json
import os

import numpy as np
import pytest
import torch
from helpers import QUERIES, make_docs

import slice_st
from slice_st import SpanIndex, SpanInputError
from slice_st.cli import main
from slice_st.index import ShardedSpanIndex
from slice_st.index.storage import LOCK_FILE
from slice_st.loading import model_identity


@pytest.fixture(scope="module")
def docs():
    return make_docs(90, seed=5, low=3, high=60)


@pytest.fixture(scope="module")
def shards(tiny_model, docs):
    return [
        SpanIndex.build(
            docs[i : i + 30], tiny_model, ids=[f"d{j}" for j in range(i, i + 30)], max_span=6
        )
        for i in (0, 30, 60)
    ]


def _key(results):
    return [
        [
            (m.doc_id, m.text_index, m.start, m.end, m.span, m.unit_start, m.unit_end)
            for m in matches
        ]
        for matches in results
    ]


def _scores(results):
    return [[m.score for m in matches] for matches in results]


def test_two_process_build_equals_one_process(make_tiny_model, docs):
    model = make_tiny_model(48)  # windowed documents too
    one = SpanIndex.build(docs[:40], model, max_span=5)
    two = SpanIndex.build(docs[:40], model, max_span=5, processes=2)
    assert two.doc_ids == one.doc_ids and model.device.type == "cpu"
    for name, values in one.arrays.items():
        other = two.arrays[name]
        assert other.shape == values.shape and other.dtype == values.dtype, name
        np.testing.assert_allclose(
            np.asarray(other),
            np.asarray(values),
            atol=1e-5,
            rtol=1e-5,
            equal_nan=True,
            err_msg=name,
        )
    assert _key(two.search(QUERIES, top_k=8)) == _key(one.search(QUERIES, top_k=8))


def test_multi_process_bad_options(tiny_model):
    for options, message in (
        ({"processes": 0}, "processes must be a positive integer"),
        ({"devices": "cpu"}, "devices must be a non-empty list"),
        ({"devices": []}, "devices must be a non-empty list"),
        ({"devices": ["cpu", "cpu"], "processes": 3}, "does not match"),
        ({"devices": ["gpu:0"]}, "Unknown device"),
        ({"pool": {"processes": []}}, "start_multi_process_pool"),
    ):
        with pytest.raises(SpanInputError, match=message):
            SpanIndex.build(["a b c"], tiny_model, max_span=2, **options)
    if not torch.cuda.is_available():
        with pytest.raises(SpanInputError, match="CUDA is not available"):
            SpanIndex.build(["a b c"], tiny_model, max_span=2, devices=["cuda:0", "cuda:1"])


def test_shards_searched_together_equal_the_merged_index(tiny_model, shards, tmp_path):
    merged = SpanIndex.merge(shards)
    for position, shard in enumerate(shards):
        shard.save(tmp_path / "shards" / f"shard-{position}")
    loaded = ShardedSpanIndex.load(
        [tmp_path / "shards" / f"shard-{p}" for p in range(3)], tiny_model
    )
    assert all(
        isinstance(s.arrays["unit_vectors"], np.memmap) for s in loaded.shards
    )  # never merged into memory
    assert (
        len(loaded) == len(merged)
        and loaded.num_units == merged.num_units
        and loaded.doc_ids == merged.doc_ids
    )
    for options in (
        {"top_k": 15},
        {"top_k": 6, "min_span": 2, "max_span": 4},
        {"top_k": 5, "per_document": 1},
        {"top_k": 30, "threshold": 0.2},
    ):
        expected, got = merged.search(QUERIES, **options), loaded.search(QUERIES, **options)
        assert _key(got) == _key(expected), options
        np.testing.assert_allclose(sum(_scores(got), []), sum(_scores(expected), []), atol=1e-12)
    # a directory of shards is the same as listing them
    by_directory = ShardedSpanIndex.load(tmp_path / "shards", tiny_model)
    assert _key(by_directory.search(QUERIES, top_k=7)) == _key(merged.search(QUERIES, top_k=7))
    assert by_directory.info()["shards"] == 3


def test_sharded_bad_input(tiny_model, shards, make_tiny_model, tmp_path):
    with pytest.raises(SpanInputError, match="more than one shard"):
        ShardedSpanIndex([shards[0], shards[0]])
    with pytest.raises(SpanInputError, match="span settings"):
        ShardedSpanIndex([shards[0], SpanIndex.build(["x y"], tiny_model, ids=["x"], max_span=3)])
    other = make_tiny_model()
    with torch.no_grad():
        next(other.parameters()).add_(1.0)  # other weights: another fingerprint
    with pytest.raises(SpanInputError, match="another model"):
        ShardedSpanIndex([shards[0], SpanIndex.build(["x y"], other, ids=["x"], max_span=6)])
    with pytest.raises(SpanInputError, match="at least one"):
        ShardedSpanIndex([])
    together = ShardedSpanIndex(shards)
    assert together.documents() == [row for shard in shards for row in shard.documents()]
    assert repr(together).startswith(f"ShardedSpanIndex(shards={len(shards)}, model=")
    assert f"documents={len(together)}, units={together.num_units}" in repr(together)
    with pytest.raises(SpanInputError, match="candidate stage in every shard"):
        together.search("dog", approximate=True)
    with pytest.raises(SpanInputError, match="top_k"):
        together.search("dog", top_k=0)
    with pytest.raises(SpanInputError, match="empty"):
        together.search([])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpanInputError, match="nor a directory of indexes"):
        ShardedSpanIndex.load(tmp_path / "empty", tiny_model)
    with pytest.raises(FileNotFoundError):
        ShardedSpanIndex.load(tmp_path / "missing", tiny_model)


def test_cli_mine_over_a_directory_of_shards(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    texts = make_docs(12, seed=9, low=4, high=20)
    corpus.write_text("\n".join(texts) + "\n")
    part_a, part_b = tmp_path / "a.txt", tmp_path / "b.txt"
    part_a.write_text("\n".join(texts[:6]) + "\n")
    part_b.write_text("\n".join(texts[6:]) + "\n")
    common = ["--model", tiny_model_dir, "--max-span", "4", "--no-progress"]
    assert main(["index", "build", str(corpus), "-o", str(tmp_path / "whole"), *common]) == 0
    assert main(["index", "build", str(part_a), "-o", str(tmp_path / "shards" / "a"), *common]) == 0
    assert main(["index", "build", str(part_b), "-o", str(tmp_path / "shards" / "b"), *common]) == 0
    capsys.readouterr()
    query = ["-q", "a man plays the guitar", "--spans", "5", "-f", "jsonl", "--per-text", "0"]
    main(["mine", "--index", str(tmp_path / "whole"), *query])
    whole = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    main(["mine", "--index", str(tmp_path / "shards"), *query])
    sharded = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["span"], r["score"]) for r in sharded] == [(r["span"], r["score"]) for r in whole]
    line = lambda row: int(row["doc_id"].rsplit(":", 1)[1]) + (6 if "b.txt" in row["doc_id"] else 0)  # noqa: E731
    assert [line(r) for r in sharded] == [line(r) for r in whole]
    main(
        [
            "mine",
            "--index",
            str(tmp_path / "shards" / "a"),
            "--index",
            str(tmp_path / "shards" / "b"),
            *query,
        ]
    )  # repeated --index
    repeated = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["doc_id"], r["span"], r["score"]) for r in repeated] == [
        (r["doc_id"], r["span"], r["score"]) for r in sharded
    ]


def test_concurrent_save_is_refused(tiny_model, shards, tmp_path):
    path = tmp_path / "ix"
    shards[0].save(path)
    with open(path / LOCK_FILE, "a+") as holder:  # another save in progress holds the lock
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SpanInputError, match="being saved by another process"):
            shards[1].save(path)
    assert SpanIndex.load(path, tiny_model).doc_ids == shards[0].doc_ids  # untouched
    shards[1].save(path)  # the lock is free again
    assert SpanIndex.load(path, tiny_model).doc_ids == shards[1].doc_ids


def test_model_name_recorded_for_a_local_model(
    tiny_model, tiny_model_dir, shards, tmp_path, capsys
):
    name, path = model_identity(tiny_model)
    assert name == os.path.basename(tiny_model_dir) and path == os.path.abspath(tiny_model_dir)
    shards[0].save(tmp_path / "ix")
    assert main(["index", "info", str(tmp_path / "ix")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (
        info["model_name"] == name
        and info["model_path"] == path
        and info["model_fingerprint"] == shards[0].fingerprint
    )
    assert model_identity(slice_st.load_model("base")) == (
        "sentence-transformers/all-MiniLM-L6-v2",
        "",
    )
    assert model_identity(slice_st.load_model()) == ("slice-minilm", "")  # the shipped default


def test_cli_bad_devices(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("one two three\n")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "index",
                "build",
                str(corpus),
                "-o",
                str(tmp_path / "ix"),
                "--model",
                tiny_model_dir,
                "--devices",
                "nope:0",
            ]
        )
    assert exit_info.value.code == 2 and "Unknown device 'nope:0'" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "ix" / "manifest.json")


def test_merge_identical_across_shards_equals_one_index(tiny_model):
    """The clause in a document of each shard: one result listing both, as the merged index gives it."""
    clause = ["The software is provided as is.", "the software is PROVIDED as is."]
    first, second = [*make_docs(8, seed=7), clause[0]], [clause[1], *make_docs(8, seed=8)]
    shards = [
        SpanIndex.build(texts, tiny_model, ids=[f"{name}{n}" for n in range(9)], max_span=6)
        for name, texts in (("a", first), ("b", second))
    ]
    options = dict(top_k=3, per_document=1, scorer="max-cosine", merge_identical=True)
    got = ShardedSpanIndex(shards).search("the software is provided as is", **options)[0]
    want = SpanIndex.merge(shards).search("the software is provided as is", **options)[0]
    assert [(m.doc_id, m.count, [p.doc_id for p in m.places]) for m in got] == [
        (m.doc_id, m.count, [p.doc_id for p in m.places]) for m in want
    ]
    assert got[0].count == 2 and {p.doc_id for p in got[0].places} == {"a8", "b0"} and len(got) == 3


def test_shards_of_a_shipped_model_give_the_confidence_of_the_merged_index(real_model):
    texts = [
        "In no event will the authors be held liable for any damages arising from the use of this software.",
        "The cat sat on the mat and purred all afternoon.",
        "THE SOFTWARE IS PROVIDED AS IS, WITHOUT WARRANTY OF ANY KIND.",
        "Refund the ticket please, the train never came.",
    ]
    parts = [
        SpanIndex.build(texts[i : i + 2], real_model, ids=[f"d{i}", f"d{i + 1}"]) for i in (0, 2)
    ]
    merged = SpanIndex.build(texts, real_model, ids=["d0", "d1", "d2", "d3"])
    query = ["the authors are not liable", "no warranty is given"]
    found = ShardedSpanIndex(parts).search(query, top_k=3, min_confidence=0.2)
    expected = merged.search(query, top_k=3, min_confidence=0.2)
    assert _key(found) == _key(expected) and found[0]
    confidences = [[m.confidence for m in r] for r in (*found, *expected)]
    assert np.allclose(sum(confidences[:2], []), sum(confidences[2:], []), atol=1e-5)
