"""The index on Ray (slice-st[ray]): a Ray build equals the one-process build, Ray search equals ShardedSpanIndex, a
killed build resumes. One local Ray (2 CPUs) for the tests that need one (the option checks need none); the build and
search use 2 actors. The module is one xdist group: with ``--dist loadgroup`` its tests share one worker and one Ray.
Marked ``ray``: a local run skips them unless given ``--run-ray`` or ``-m ray``; ``make test`` runs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import ray  # slice-st[ray]: `make test` installs every extra
from helpers import QUERIES, build_index_cli, cli_fails, make_docs

from slice_st import SpanIndex, SpanInputError
from slice_st.cli import main
from slice_st.data.corpus import Document, read_corpus
from slice_st.errors import MissingExtraError
from slice_st.index import ShardedSpanIndex
from slice_st.index.compressed import CompressedTier, CompressionSpec
from slice_st.index.ray_cluster import check_address
from slice_st.index.ray_engine import BUILD_STATE, CODEBOOKS_FILE, RayBuild, _store_codebooks
from slice_st.index.sharded import RayShardedSpanIndex
from slice_st.index.storage import DATA_MARKER, MANIFEST, SHARD_LIST

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray")]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module: 2 CPUs, no dashboard; shut down at the end.

    Ray gives its raylet a fixed 30 s to register; on a loaded machine that can pass, so the start is tried again
    (a start that failed three times is a real failure)."""
    for attempt in range(3):
        try:
            ray.init(
                num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR"
            )
            break
        except Exception as error:  # Ray raises a bare Exception for "timed out during startup"
            ray.shutdown()
            if "timed out during startup" not in str(error) or attempt == 2:
                raise
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def model(make_tiny_model):
    return make_tiny_model(48)  # a short window: long documents are windowed, as in real corpora


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three text files, one JSONL file, one Parquet file (the Parquet documents, also as Documents)."""
    folder = tmp_path_factory.mktemp("ray_corpus")
    docs = make_docs(80, seed=11, low=3, high=70)
    for number in range(3):
        (folder / f"calls-{number}.txt").write_text(
            "\n".join(docs[number * 20 : number * 20 + 20]) + "\n\n"
        )
    (folder / "tickets.jsonl").write_text(
        "".join(
            json.dumps({"id": f"t{i}", "text": text}) + "\n" for i, text in enumerate(docs[60:70])
        )
    )
    import pyarrow
    import pyarrow.parquet

    rows = {"id": [f"p{i}" for i in range(10)], "text": docs[70:80]}
    pyarrow.parquet.write_table(pyarrow.table(rows), str(folder / "contracts.parquet"))
    files = [
        str(folder / name)
        for name in (
            "calls-0.txt",
            "calls-1.txt",
            "calls-2.txt",
            "tickets.jsonl",
            "contracts.parquet",
        )
    ]
    parquet_docs = [Document(doc_id, text) for doc_id, text in zip(rows["id"], rows["text"])]
    return files, parquet_docs


def _assert_same_index(shards: ShardedSpanIndex, one: SpanIndex) -> None:
    merged = SpanIndex.merge(shards.shards)
    assert merged.doc_ids == one.doc_ids and merged.texts == one.texts
    for name, values in one.arrays.items():
        other = np.asarray(merged.arrays[name])
        assert other.shape == values.shape and other.dtype == values.dtype, name
        tolerance = (
            2e-3 if other.dtype == np.float16 else 1e-5
        )  # one float16 step where float32 batches round apart
        np.testing.assert_allclose(
            other, np.asarray(values), atol=tolerance, rtol=tolerance, equal_nan=True, err_msg=name
        )


def _key(results):
    return [
        [
            (m.doc_id, m.text_index, m.start, m.end, m.span, m.unit_start, m.unit_end, m.score)
            for m in matches
        ]
        for matches in results
    ]


def _assert_same_matches(found, expected):
    """The same matches (all but the score) and scores within 1e-5."""
    assert [[key[:-1] for key in keys] for keys in _key(found)] == [
        [key[:-1] for key in keys] for keys in _key(expected)
    ]
    np.testing.assert_allclose(
        [[m.score for m in ms] for ms in found],
        [[m.score for m in ms] for ms in expected],
        atol=1e-5,
    )


@pytest.fixture(scope="module")
def single(model, corpus):
    files, parquet_docs = corpus
    return SpanIndex.build(read_corpus(files[:4]) + parquet_docs, model, max_span=6)


@pytest.fixture(scope="module")
def built(local_ray, model, corpus, tmp_path_factory):
    """The corpus built on Ray: 2 actors, ~1.5 kB of text per shard (several groups, several shards per group)."""
    output = tmp_path_factory.mktemp("ray_index") / "index"
    result = SpanIndex.from_files(
        corpus[0],
        model,
        engine="ray",
        output=str(output),
        max_span=6,
        concurrency=2,
        shard_bytes=1500,
    )
    return output, result


def test_ray_build_equals_single_process(built, single, model):
    output, result = built
    assert (
        isinstance(result, RayBuild)
        and result.shards_built == len(result.shards) > 4
        and result.shards_reused == 0
    )
    assert (
        result.documents == len(single) and result.units == single.num_units and result.groups > 2
    )
    listed = json.loads((output / SHARD_LIST).read_text())
    assert listed["complete"] and listed["shards"] == result.shards == sorted(result.shards)
    shards = ShardedSpanIndex.load(str(output), model)
    assert len(shards.shards) == len(result.shards)
    _assert_same_index(shards, single)  # ids, texts, offsets, unit sums and span norms
    _assert_same_matches(shards.search(QUERIES, top_k=6), single.search(QUERIES, top_k=6))


@pytest.mark.slow  # a second Ray build: the fast suite keeps one Ray build and search
def test_ray_build_of_texts_equals_single_process(local_ray, model, tmp_path):
    docs = make_docs(30, seed=3, low=2, high=40)
    docs[7] = "." * 400 + " tail"  # cannot be windowed: left out and listed with on_error="skip"
    result = SpanIndex.build(
        docs,
        model,
        engine="ray",
        output=tmp_path / "ix",
        max_span=4,
        dtype="float16",
        shard_bytes=400,
        on_error="skip",
        concurrency=1,
    )
    assert (
        len(result.shards) > 2
        and result.documents == 29
        and [doc_id for doc_id, _ in result.skipped] == ["7"]
    )
    single = SpanIndex.build(docs, model, max_span=4, dtype="float16", on_error="skip")
    _assert_same_index(ShardedSpanIndex.load(tmp_path / "ix", model), single)


def test_ray_search_equals_sharded_search(built, model):
    output, result = built
    for name in result.shards:  # the FAISS stage too: approximate search runs inside the actors
        with SpanIndex.open_for_update(output / name, model) as shard:
            shard.build_candidates(kind="flat", candidates=16)
    sharded = ShardedSpanIndex.load(str(output), model)
    with RayShardedSpanIndex.load(str(output), model, workers=2) as on_ray:
        assert on_ray.workers == 2 and len(on_ray) == len(sharded) and on_ray.info()["workers"] == 2
        for options in (
            {"top_k": 8},
            {"top_k": 5, "per_document": 1},
            {"top_k": 7, "min_span": 2, "max_span": 4, "threshold": 0.2},
            {"top_k": 10_000},
            {"top_k": 6, "approximate": True},
            {"top_k": 8, "scorer": "max-cosine", "overlap": True},
            {"top_k": 5, "per_document": 2, "overlap": True},
            {"top_k": 6, "scorer": "max-cosine", "approximate": True},
        ):
            assert _key(on_ray.search(QUERIES, **options)) == _key(
                sharded.search(QUERIES, **options)
            ), options
    with pytest.raises(SpanInputError, match="closed"):
        on_ray.search("dog")


@pytest.fixture(scope="module")
def compressed(local_ray, model, corpus, tmp_path_factory):
    """The corpus built on Ray with a compressed tier (float16 exact tier, pq8 of d=32)."""
    output = tmp_path_factory.mktemp("ray_pq") / "index"
    options = dict(engine="ray", output=str(output), max_span=6, shard_bytes=1500)
    result = SpanIndex.from_files(corpus[0], model, **options, concurrency=2, compression="pq8")
    return output, result, options


def test_ray_build_compresses_every_shard_with_one_set_of_codebooks(compressed, model):
    output, result, _ = compressed
    assert result.compression == "pq8,norms4" and result.shards_coded == len(result.shards) > 4
    shards = ShardedSpanIndex.load(str(output), model)
    digests = {shard._compressed.codebook_digest() for shard in shards.shards}
    assert len(digests) == 1 and {shard.dtype for shard in shards.shards} == {"float16"}
    assert {shard.compression for shard in shards.shards} == {"pq8,norms4"}
    stored = json.loads((output / BUILD_STATE / CODEBOOKS_FILE).read_text())
    assert stored["codebooks"] in digests and stored["spec"] == "pq8,norms4"
    listed = json.loads((output / SHARD_LIST).read_text())
    assert listed["complete"] and listed["compression"] == "pq8,norms4"
    # trained on the sample the one index of the shards would draw (memory-bounded: read shard by shard)
    merged = SpanIndex.merge(shards.shards)
    spec = CompressionSpec.parse("pq8", 32)
    assert CompressedTier.train(merged.arrays, spec).codebook_digest() in digests
    # the shards' codes are those of the one index coded with those codebooks
    assert merged.compression == "pq8,norms4"
    recoded = SpanIndex.merge(shards.shards)
    recoded.compress(codebooks=shards.shards[0])
    np.testing.assert_array_equal(recoded._compressed.codes, merged._compressed.codes)
    for options in (
        {"top_k": 6, "candidates": 4},
        {"top_k": 5, "per_document": 1, "candidates": 9},
    ):
        _assert_same_matches(shards.search(QUERIES, **options), merged.search(QUERIES, **options))


def test_ray_search_of_compressed_shards_equals_sharded_search(compressed, model):
    output, result, _ = compressed
    sharded = ShardedSpanIndex.load(str(output), model)
    vectors = sharded.embed_queries(QUERIES)
    with RayShardedSpanIndex.load(str(output), model, workers=2) as on_ray:
        assert on_ray.workers == 2
        # the compressed scans run on the actors: the same candidates as scanned here
        for count in (1, 5, 40):
            np.testing.assert_array_equal(
                on_ray._best_document_scores(vectors, 1, 6, count)[1],
                sharded._best_document_scores(vectors, 1, 6, count)[1],
            )
        for options in (
            {"top_k": 8, "candidates": 5},
            {"top_k": 5, "per_document": 1, "candidates": 12},
            {"top_k": 7, "min_span": 2, "max_span": 4, "threshold": 0.2, "candidates": 3},
            {"top_k": 8, "scorer": "max-cosine", "overlap": True, "candidates": 20},
            {"top_k": 6},  # the default candidates: every document, the exhaustive scan
        ):
            assert _key(on_ray.search(QUERIES, **options)) == _key(
                sharded.search(QUERIES, **options)
            ), options
    with pytest.raises(SpanInputError, match="closed"):
        on_ray._best_document_scores(vectors, 1, 6, 3)


def test_resumed_compressed_build_codes_every_shard_alike(compressed, model, corpus, tmp_path):
    """A build stopped in its compression stage leaves shards coded and not; the rerun codes the others with the
    stored codebooks (those coded are not rewritten); another compression is refused; lost codebooks are retrained
    the same (the same sample)."""
    source, result, options = compressed
    output = tmp_path / "ix"
    shutil.copytree(source, output)
    options = options | {"output": str(output), "concurrency": 1}
    stored = json.loads((output / BUILD_STATE / CODEBOOKS_FILE).read_text())["codebooks"]
    plain, other = result.shards[0], result.shards[2]
    with SpanIndex.open_for_update(output / plain, model) as shard:
        shard._compressed = None  # not coded yet
    with SpanIndex.open_for_update(output / other, model) as shard:
        shard.compress("pq8", seed=5)  # coded with other codebooks
    shard_list = json.loads((output / SHARD_LIST).read_text())
    (output / SHARD_LIST).write_text(json.dumps(shard_list | {"complete": False}))
    kept = [name for name in result.shards if name not in (plain, other)]
    before = {name: os.stat(output / name / MANIFEST).st_mtime_ns for name in kept}
    with pytest.raises(SpanInputError, match="another compression"):
        SpanIndex.from_files(corpus[0], model, **options, compression="pq4")
    again = SpanIndex.from_files(corpus[0], model, **options, compression="pq8")
    assert again.shards_built == 0 and again.groups_built == 0 and again.shards_coded == 2
    assert {name: os.stat(output / name / MANIFEST).st_mtime_ns for name in kept} == before
    shards = ShardedSpanIndex.load(str(output), model)
    assert {shard._compressed.codebook_digest() for shard in shards.shards} == {stored}
    (output / BUILD_STATE / CODEBOOKS_FILE).unlink()
    third = SpanIndex.from_files(corpus[0], model, **options, compression="pq8")
    assert third.shards_coded == 0
    assert json.loads((output / BUILD_STATE / CODEBOOKS_FILE).read_text())["codebooks"] == stored
    # codebooks stored by a build of other shards: kept by a rerun, retrained by --force (which rebuilds the shards)
    with SpanIndex.open_for_update(output / other, model) as shard:
        shard.compress("pq8", seed=5)
    _store_codebooks(str(output), shard._compressed)
    planted = shard._compressed.codebook_digest()
    fourth = SpanIndex.from_files(corpus[0], model, **options, compression="pq8")
    assert fourth.shards_coded == len(result.shards) - 1
    forced = SpanIndex.from_files(corpus[0], model, **options, compression="pq8", force=True)
    assert forced.shards_built == forced.shards_coded == len(result.shards)
    retrained = json.loads((output / BUILD_STATE / CODEBOOKS_FILE).read_text())["codebooks"]
    digests = {s._compressed.codebook_digest() for s in ShardedSpanIndex.load(output, model).shards}
    assert digests == {retrained} != {planted}


@pytest.mark.slow  # a Ray build killed and run again: the fast suite keeps one Ray build and search
def test_killed_build_resumes(model, corpus, single, built, tmp_path):
    output = tmp_path / "ix"
    # The build is stopped at a fixed point, never raced against the actors: the actor fails in the first group of
    # several
    # shards after group 0, right after saving that group's first shard (other groups may or may not be done by then).
    by_group = {}
    for name in built[1].shards:
        by_group.setdefault(int(name.split("-")[1]), []).append(name)
    target = next(
        number for number in sorted(by_group) if number >= 1 and len(by_group[number]) >= 2
    )
    prefix = f"part-{target:05d}-"
    finished = []

    def fail_in_target_group(name):
        if name.startswith(prefix):  # every shard of that group, should Ray ever retry it
            raise ValueError(f"injected fault after {name}")

    with pytest.raises(SpanInputError, match="injected fault after"):
        SpanIndex.from_files(
            corpus[0],
            model,
            engine="ray",
            output=str(output),
            max_span=6,
            concurrency=1,
            shard_bytes=1500,
            progress=finished.append,
            on_shard=fail_in_target_group,
        )
    assert not json.loads((output / SHARD_LIST).read_text())["complete"]
    with pytest.raises(SpanInputError, match="has not finished"):
        ShardedSpanIndex.load(str(output), model)
    done = sorted(name for name in os.listdir(output) if os.path.exists(output / name / MANIFEST))
    assert all(set(group["shards"]) <= set(done) for group in finished)
    assert by_group[target][0] in done  # the shard saved before the fault
    states = sorted(os.listdir(output / BUILD_STATE))
    assert f"group-{target:05d}.json" not in states
    # a shard killed in the middle of its save: a data folder, no manifest
    killed = by_group[target][1]
    assert killed not in done
    leftover = output / killed / "data-000001-deadbeef"
    leftover.mkdir(parents=True, exist_ok=True)
    (leftover / DATA_MARKER).write_text("")  # what a save writes first
    before = {name: os.stat(output / name / MANIFEST).st_mtime_ns for name in done}
    with pytest.raises(
        SpanInputError, match="another span settings"
    ):  # not the same build: refused, nothing written
        SpanIndex.from_files(
            corpus[0], model, engine="ray", output=str(output), max_span=5, shard_bytes=1500
        )
    result = SpanIndex.from_files(
        corpus[0],
        model,
        engine="ray",
        output=str(output),
        max_span=6,
        concurrency=1,
        shard_bytes=1500,
    )
    assert (
        result.shards_reused >= len(done)
        and result.shards_built == len(result.shards) - result.shards_reused
    )
    assert result.groups_built == result.groups - len(
        states
    )  # the finished groups are not run again
    assert {
        name: os.stat(output / name / MANIFEST).st_mtime_ns for name in done
    } == before  # not rewritten
    assert (
        len(os.listdir(output / killed)) == 3
    )  # manifest, lock, one data folder (the leftover removed)
    _assert_same_index(ShardedSpanIndex.load(str(output), model), single)
    again = SpanIndex.from_files(
        corpus[0], model, engine="ray", output=str(output), max_span=6, shard_bytes=1500
    )
    assert again.shards_built == 0 and again.groups_built == 0 and again.shards == result.shards
    assert sorted(os.listdir(output / BUILD_STATE)) == [
        f"group-{n:05d}.json" for n in range(result.groups)
    ]


def test_bad_inputs_are_clear_errors(local_ray, model, tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus path not found"):
        SpanIndex.from_files(
            [str(tmp_path / "missing.txt")], model, engine="ray", output=str(tmp_path / "ix")
        )
    with pytest.raises(SpanInputError, match="give output="):
        SpanIndex.build(["a b c"], model, engine="ray")
    with pytest.raises(SpanInputError, match="engine must be"):
        SpanIndex.build(["a b c"], model, engine="spark", output=str(tmp_path / "ix"))
    with pytest.raises(SpanInputError, match="concurrency"):
        SpanIndex.build(["a b c"], model, engine="ray", output=str(tmp_path / "ix"), concurrency=0)
    with pytest.raises(SpanInputError, match="do not fit"):
        SpanIndex.build(
            ["a b c"] * 6,
            model,
            ids=list("abcdef"),
            engine="ray",
            output=str(tmp_path / "ix"),
            concurrency=5,
            shard_bytes=1,
        )
    with pytest.raises(SpanInputError, match="not a Ray address"):
        check_address("corpus.txt")
    bad = tmp_path / "dirty.txt"
    bad.write_text("the dog barks\n" + "." * 400 + " tail\n")
    with pytest.raises(
        SpanInputError, match="longer than the model window"
    ):  # raised in an actor, said on the driver
        SpanIndex.from_files(
            [str(bad)],
            model,
            engine="ray",
            output=str(tmp_path / "dirty"),
            max_span=6,
            concurrency=1,
        )


def run_cli(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr()


@pytest.mark.slow  # a third Ray build, through the CLI: the fast suite keeps one Ray build and search
def test_cli_build_and_mine_on_ray(local_ray, tiny_model_dir, corpus, tmp_path, capsys):
    output = tmp_path / "cli-index"
    code, out = run_cli(
        capsys,
        "index",
        "build",
        *corpus[0],
        "-o",
        output,
        "--model",
        tiny_model_dir,
        "--max-span",
        "5",
        "--no-progress",
        "--ray",
        "--workers",
        "2",
    )
    assert code == 0 and "on Ray" in out.out and "indexed 80 documents" in out.out, out.err
    common = [
        "mine",
        "--index",
        output,
        "--model",
        tiny_model_dir,
        "-q",
        "my bag was lost",
        "-q",
        "dog",
        "--spans",
        "4",
        "--format",
        "jsonl",
    ]
    code, plain = run_cli(capsys, *common)
    assert code == 0 and plain.out.count("\n") == 8
    code, on_ray = run_cli(capsys, *common, "--ray", "--workers", "2")
    assert code == 0 and on_ray.out == plain.out
    code, out = run_cli(
        capsys, "index", "build", *corpus[0], "-o", output, "--model", tiny_model_dir, "--ray"
    )
    assert code == 2 and "already holds an index" in out.err


@pytest.mark.slow  # a compressed Ray build through the CLI: the fast suite keeps the one of the API
def test_cli_build_compressed_on_ray(local_ray, tiny_model_dir, corpus, tmp_path, capsys):
    folder, output = os.path.dirname(corpus[0][0]), tmp_path / "pq-index"
    ray_options = ("--max-span", "5", "--ray", "--workers", "2")
    line = cli_fails(
        capsys,
        "index",
        "build",
        folder,
        "-o",
        output,
        "-m",
        tiny_model_dir,
        *ray_options,
        "--compress",
        "pq7",
    )
    assert "must divide the dimension 32" in line and not os.path.exists(output / SHARD_LIST)
    code, out = build_index_cli(
        capsys, folder, output, tiny_model_dir, *ray_options, "--compress", "pq8"
    )
    assert code == 0 and "indexed 80 documents" in out.out, out.err
    assert (
        "compressed pq8,norms4 (" in out.out
        and "shards coded with the build's codebooks" in out.out
    )
    shards = ShardedSpanIndex.load(str(output))
    assert len({shard._compressed.codebook_digest() for shard in shards.shards}) == 1
    common = ["mine", "--index", output, "--model", tiny_model_dir, "-q", "my bag was lost"]
    common += ["-q", "dog", "--spans", "4", "--candidates", "6", "--format", "jsonl"]
    code, plain = run_cli(capsys, *common)
    assert code == 0 and plain.out.count("\n") == 8
    code, on_ray = run_cli(capsys, *common, "--ray", "--workers", "2")
    assert code == 0 and on_ray.out == plain.out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["mine", "--ray", "-q", "dog", "{corpus}"], "--ray and --workers search a saved index"),
        (
            ["index", "build", "{corpus}", "-o", "{out}", "--workers", "2"],
            "--workers is an option of --ray",
        ),
        (["index", "build", "{parquet}", "-o", "{out}"], "Parquet corpora are read with --ray"),
        (["index", "build", "{corpus}", "-o", "{out}", "--ray", "no-port"], "is not a Ray address"),
        (
            ["index", "build", "{corpus}", "-o", "{out}", "--ray", "--processes", "2"],
            "--devices/--processes are for a one-machine build",
        ),
    ],
)
def test_cli_errors(corpus, tmp_path, capsys, argv, message):
    values = {"corpus": corpus[0][0], "parquet": corpus[0][4], "out": tmp_path / "ix"}
    code, out = run_cli(capsys, *[part.format(**values) for part in argv])
    assert code == 2 and message in out.err and "Traceback" not in out.err


def test_missing_extra_names_it(model, corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if slice-st[ray] were not installed
    code, out = run_cli(capsys, "index", "build", corpus[0][0], "-o", tmp_path / "ix", "--ray")
    assert code == 2 and "pip install 'slice-st[ray]'" in out.err
    with pytest.raises(MissingExtraError, match=r"slice-st\[ray\]"):
        SpanIndex.build(["a b"], model, engine="ray", output=str(tmp_path / "ix"))


def test_ray_takes_an_optional_address(corpus, tmp_path):
    """What follows ``--ray`` is its address (no guessing from the disk): alone at the end, or ``--ray=local``, Ray
    starts here."""
    from slice_st.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        ["index", "build", "--ray=local", str(corpus[0][0]), "-o", str(tmp_path / "ix")]
    )
    assert args.ray == "local" and [str(path) for path in args.corpus] == [str(corpus[0][0])]
    assert (
        parser.parse_args(["index", "build", str(corpus[0][0]), "-o", "ix", "--ray"]).ray == "local"
    )
    assert parser.parse_args(["mine", "--ray", "auto", "--index", "ix"]).ray == "auto"


def test_closed_ray_port_is_a_clear_error_not_a_hang(tmp_path, tiny_model_dir):
    import os
    import socket
    import sys

    from slice_st import SpanInputError
    from slice_st.index.ray_cluster import probe_address

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(
        SpanInputError,
        match=f"cannot connect to the Ray cluster at 127.0.0.1:{port}: Connection refused",
    ):
        probe_address(f"127.0.0.1:{port}")
    with pytest.raises(
        SpanInputError, match="cannot connect to the Ray cluster at ray://127.0.0.1"
    ):
        probe_address(f"ray://127.0.0.1:{port}")
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.getcwd())
    command = [
        sys.executable,
        "-m",
        "slice_st.cli",
        "index",
        "build",
        str(corpus),
        "-o",
        str(tmp_path / "ix"),
        "-m",
        tiny_model_dir,
        "--ray",
        f"127.0.0.1:{port}",
        "--no-progress",
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=300
    )  # ray.init used to wait for ever
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(f"slice-st: error: cannot connect to the Ray cluster at 127.0.0.1:{port}")
    )


def test_a_corpus_named_by_uri_reads_as_the_same_local_files(tmp_path):
    """``file://`` stands for any ``pyarrow.fs`` URI (S3, GCS, HDFS): the files are listed the same (hidden ones left
    out, in order) and read the same, with ids and sources naming the URI."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from slice_st.index.ray_engine import corpus_files, read_file_documents

    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("the dog barks\na man plays the guitar\n")
    (folder / "sub" / "b.jsonl").write_text('{"id": "x", "text": "rain falls"}\n')
    (folder / ".hidden.txt").write_text("never read\n")
    (folder / "z.txt").write_text("after the subfolder in path order, before it in a folder walk\n")
    pq.write_table(pa.table({"id": ["p"], "text": ["a parquet row"]}), folder / "c.parquet")
    local, remote = corpus_files(str(folder)), corpus_files(folder.as_uri())
    assert [f["path"] for f in remote] == [
        folder.as_uri() + f["path"][len(str(folder)) :] for f in local
    ]
    assert [(f["format"], f["bytes"]) for f in remote] == [(f["format"], f["bytes"]) for f in local]
    for here, there in zip(local, remote):
        near = read_file_documents(here, "line", "id", "text")
        far = read_file_documents(there, "line", "id", "text")
        assert [d.text for d in far] == [d.text for d in near] and {d.source for d in far} == {
            there["path"]
        }
    assert [d.id for d in read_file_documents(remote[0], "line", "id", "text")] == [
        f"{remote[0]['path']}:1",
        f"{remote[0]['path']}:2",
    ]
    with pytest.raises(FileNotFoundError, match="corpus path not found"):
        corpus_files((tmp_path / "nothing").as_uri())


def test_quiet_ray_build_prints_no_ray_info_or_warning_lines(tmp_path, tiny_model_dir):
    """``index build --ray --quiet`` in a new process (its own local Ray, stderr a file, as a user's redirect): none of
    Ray Data's INFO lines ("Starting execution of Dataset …", "Total Progress …") and no Ray WARNING. Ray's C++ line
    about actor restarts is printed by its core worker, not by a Python logger: it stays (docs/bad-input.md)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(
        "".join(f"document {number} says the dog barks at the mailman\n" for number in range(20))
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.getcwd())
    command = [
        sys.executable,
        "-m",
        "slice_st.cli",
        "index",
        "build",
        str(corpus),
        "-o",
        str(tmp_path / "ix"),
    ]
    done = subprocess.run(
        [*command, "-m", tiny_model_dir, "--ray", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    logged = [line for line in done.stderr.splitlines() if re.search(r"\b(INFO|WARNING)\b", line)]
    assert not logged, done.stderr
