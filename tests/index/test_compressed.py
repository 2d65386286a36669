"""slice_st.index.compressed: the compressed tier (PQ codes, norm codes) and the two-tier search of a SpanIndex."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import QUERIES, make_docs

from slice_st import SpanIndex, SpanInputError
from slice_st.index.compressed import CompressionSpec
from slice_st.index.storage import MANIFEST


@pytest.fixture(scope="module")
def docs():
    return make_docs(300)


@pytest.fixture(scope="module")
def exact(tiny_model, docs):
    return SpanIndex.build(docs, tiny_model, max_span=8, dtype="float16")


@pytest.fixture(scope="module")
def packed(tiny_model, docs):
    return SpanIndex.build(docs, tiny_model, max_span=8, compression="pq16")


def _keys(results):
    return [[(m.doc_id, m.start, m.end) for m in matches] for matches in results]


def _same(a, b, atol=1e-6):
    assert _keys(a) == _keys(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose([m.score for m in x], [m.score for m in y], atol=atol)


def test_build_keeps_float16_exact_tier_and_small_codes(packed, exact):
    assert packed.dtype == "float16" and packed.compression == "pq16,norms4"
    info = packed.info()
    assert info["format_version"] == 3 and info["compression"]["subquantizers"] == 16
    codes = packed._compressed
    assert codes.codes.shape == (packed.num_units, 16) and codes.norm_codes.shape == (
        packed.num_units,
        4,
    )
    per_unit = (
        codes.codes.nbytes + codes.coarse.nbytes + codes.norm_codes.nbytes
    ) / packed.num_units
    assert per_unit == 16 + 2 + 4
    assert info["resident_bytes"] < exact.info()["resident_bytes"] / 2


@pytest.mark.parametrize("scorer", [None, "phrase", "max-cosine"])
def test_all_documents_as_candidates_is_exact_search(packed, exact, scorer):
    _same(
        packed.search(QUERIES, top_k=10, scorer=scorer),
        exact.search(QUERIES, top_k=10, scorer=scorer),
    )


@pytest.mark.parametrize("per_document", [None, 1])
def test_candidates_are_searched_exactly(packed, per_document):
    """With 20 candidate documents: exact search over exactly those documents (found by the compressed scan)."""
    vectors = packed.embed_queries(QUERIES)
    config = packed.span_config
    docs = packed._compressed.best_documents(
        vectors, packed.arrays, len(packed), 20, 1, 8, config.min_span
    )
    got = packed.search(QUERIES, top_k=5, candidates=20, per_document=per_document)
    for query, found in enumerate(docs):
        chosen = np.sort(found[found >= 0])
        assert len(chosen) == 20
        sub = SpanIndex.build(
            [packed.texts[d] for d in chosen],
            packed.model,
            ids=[packed.doc_ids[d] for d in chosen],
            max_span=8,
            dtype="float16",
        )
        expected = sub.search(QUERIES[query], top_k=5, per_document=per_document)
        _same([got[query]], expected, atol=2e-3)
        assert all(
            packed.doc_ids[m.text_index] == m.doc_id and m.query_index == query for m in got[query]
        )


def test_compressed_scan_finds_the_best_documents(packed, exact):
    """The approximate dot products track the exact ones; the exact top document is among 30 candidates of 300."""
    vectors = packed.embed_queries(QUERIES)
    tier = packed._compressed
    approx = tier.unit_dots(tier.lookup_tables(vectors), 0, packed.num_units).numpy()
    true = vectors.numpy() @ np.asarray(packed.arrays["unit_vectors"], dtype=np.float32).T
    assert np.corrcoef(approx.ravel(), true.ravel())[0, 1] > 0.95
    docs = tier.best_documents(vectors, packed.arrays, len(packed), 30, 1, 8, 1)
    best = [
        matches[0].text_index for matches in exact.search(QUERIES, top_k=1, scorer="max-cosine")
    ]
    assert sum(b in found for b, found in zip(best, docs)) >= len(QUERIES) - 1


def test_norm_codes_decode_within_a_step(packed):
    tier = packed._compressed
    stored = np.asarray(packed.arrays["span_norms"], dtype=np.float32)
    inverse = tier.inverse_norms(0, packed.num_units, slice(None)).numpy().T
    with np.errstate(divide="ignore"):
        decoded = np.where(inverse > 0, 1 / inverse, np.nan)
    assert np.array_equal(np.isnan(stored), np.isnan(decoded))
    ratio = decoded[~np.isnan(stored)] / stored[~np.isnan(stored)]
    assert np.quantile(np.abs(np.log(ratio)), 0.99) < 0.25


def test_save_load_add_remove_merge(tiny_model, packed, docs, tmp_path):
    packed.save(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / MANIFEST).read_text())
    assert manifest["format_version"] == 3 and manifest["compression"]["spec"] == "pq16,norms4"
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    assert isinstance(loaded.arrays["unit_vectors"], np.memmap)
    assert not isinstance(loaded._compressed.codes, np.memmap)
    _same(
        loaded.search(QUERIES, top_k=8, candidates=25),
        packed.search(QUERIES, top_k=8, candidates=25),
    )
    # add codes the new units with the same codebooks; remove drops their rows: back to the same codes
    loaded.add(["the man plays the loud guitar"], ["new"])
    assert loaded._compressed.codes.shape[0] == loaded.num_units
    assert (
        loaded.search("the man plays the loud guitar", top_k=1, candidates=5)[0][0].doc_id == "new"
    )
    loaded.remove(["new"])
    assert np.array_equal(loaded._compressed.codes, packed._compressed.codes)
    loaded.save(tmp_path / "ix")
    again = SpanIndex.load(tmp_path / "ix", tiny_model)
    _same(
        again.search(QUERIES, top_k=8, candidates=25),
        packed.search(QUERIES, top_k=8, candidates=25),
    )
    # merge: parts coded with the same codebooks are concatenated; an uncompressed part is coded with them
    halves = [again._documents(np.arange(0, 150)), again._documents(np.arange(150, 300))]
    halves[0]._compressed = again._compressed.subset(np.arange(halves[0].num_units))
    merged = SpanIndex.merge(halves)
    assert np.array_equal(merged._compressed.codes, packed._compressed.codes)
    _same(
        merged.search(QUERIES, top_k=8, candidates=25),
        packed.search(QUERIES, top_k=8, candidates=25),
    )


def test_format_errors_are_one_line(packed, tmp_path):
    packed.save(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / MANIFEST).read_text())
    for version, compression in (
        (4, manifest["compression"]),
        (3, None),
        (2, manifest["compression"]),
    ):
        (tmp_path / "ix" / MANIFEST).write_text(
            json.dumps(manifest | {"format_version": version, "compression": compression})
        )
        with pytest.raises(SpanInputError) as error:
            SpanIndex.load(tmp_path / "ix", packed.model)
        assert "\n" not in str(error.value) and ("format" in str(error.value))


@pytest.mark.parametrize("spec", ["pq7", "opq16", "pq16,ivf0", "pq16,norms5", "", 16])
def test_bad_compression_is_one_clear_error(tiny_model, spec):
    with pytest.raises(SpanInputError, match="pq|compression"):
        SpanIndex.build(["a man plays the guitar"], tiny_model, compression=spec)


def test_spec_parsing():
    assert str(CompressionSpec.parse("PQ48,ivf256,norms8", 384)) == "pq48,ivf256,norms8"
    assert CompressionSpec.parse("pq48", 384) == CompressionSpec(48, None, 4)


def test_tiny_index_compresses(tiny_model):
    index = SpanIndex.build(
        ["a man plays the guitar", "the flight was late"], tiny_model, compression="pq8"
    )
    assert index.search("plays the guitar", top_k=1, candidates=1)[0][0].doc_id == "0"
    assert index._compressed.inverse_norms(0, 2, slice(1, 3)).shape == (2, 2)


def test_cli_build_compress_info_and_mine(tiny_model_dir, docs, tmp_path, capsys):
    from helpers import cli_fails, run_cli

    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(docs[:60]) + "\n")
    out, common = tmp_path / "ix", ("--model", tiny_model_dir, "--max-span", 4, "--no-progress")
    code, _ = run_cli(capsys, "index", "build", corpus, "-o", out, "--compress", "pq8", *common)
    assert code == 0
    code, printed = run_cli(capsys, "index", "info", out)
    info = json.loads(printed.out)
    assert (
        info["format_version"] == 3
        and info["dtype"] == "float16"
        and info["compression"]["spec"] == "pq8,norms4"
    )
    query = docs[7].split()[:3]
    code, printed = run_cli(
        capsys, "mine", "--index", out, "-q", " ".join(query), "--candidates", 5, "-f", "jsonl"
    )
    rows = [json.loads(line) for line in printed.out.splitlines()]
    assert code == 0 and rows and all(row["doc_id"] for row in rows)
    code, printed = run_cli(capsys, "index", "compress", out, "--spec", "pq16,norms8")
    assert (
        code == 0
        and json.loads((out / MANIFEST).read_text())["compression"]["spec"] == "pq16,norms8"
    )
    assert "compression" in cli_fails(
        capsys, "index", "build", corpus, "-o", tmp_path / "b", "--compress", "pq5", *common
    )


def _mapped_resident_kib(suffix: str, folder) -> int:
    """Resident KiB of this process's mappings of files in ``folder`` ending in ``suffix`` (Linux's /proc/self/smaps;
    only this test's files: other tests of the process may still map indexes of their own)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
                inside = len(fields) >= 6 and fields[-1].endswith(suffix)
                inside = inside and fields[-1].startswith(str(folder))
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
def test_load_and_search_read_the_exact_tier_from_the_file_not_the_map(
    packed, tiny_model, tmp_path
):
    """Load's sample checksums and the candidates' rows are read with pread: no page of the memory-mapped exact
    tier becomes resident in the process (a map keeps every page it touched)."""
    packed.save(tmp_path / "ix")
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    names = ("unit_vectors.npy", "span_norms.npy", "unit_chars.npy")
    assert all(isinstance(loaded.arrays[name[:-4]], np.memmap) for name in names)
    assert [_mapped_resident_kib(name, tmp_path) for name in names] == [0, 0, 0]
    _same(
        loaded.search(QUERIES, top_k=8, candidates=25),
        packed.search(QUERIES, top_k=8, candidates=25),
    )
    assert [_mapped_resident_kib(name, tmp_path) for name in names] == [0, 0, 0]
    np.asarray(
        loaded.arrays["unit_vectors"][:10]
    ).sum()  # the probe sees pages read through the map
    assert _mapped_resident_kib("unit_vectors.npy", tmp_path) > 0


def test_saved_index_holds_unit_flags_read_for_its_candidates(packed, tiny_model, tmp_path):
    """The scorer's flags are saved with a compressed index; a candidate sub-index reads its rows of them (a unit's
    flags depend on its own document only), equal to computing them from its texts."""
    from slice_st.index.search import index_unit_flags

    packed.save(tmp_path / "ix")
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    stored = loaded._unit_rows("unit_flags", np.arange(loaded.num_units))
    assert np.array_equal(stored, index_unit_flags(packed.texts, packed.arrays))
    sub = loaded._documents(np.array([3, 40, 41, 299]))
    assert np.array_equal(sub.unit_flags()[0], index_unit_flags(sub.texts, sub.arrays))
    loaded.add(
        ["the man plays the loud guitar"], ["new"]
    )  # new rows: the stored flags no longer apply
    assert loaded._unit_rows("unit_flags", np.arange(3)) is None
    assert len(loaded.unit_flags()[0]) == loaded.num_units


def test_sharded_compressed_search_picks_candidates_across_shards(packed, tiny_model, tmp_path):
    """Shards coded with the same codebooks: each query's candidates chosen over all shards by the compressed scans,
    then searched exactly in their shards: the single index's results."""
    from slice_st.index import ShardedSpanIndex

    for name, docs in (("a", np.arange(0, 120)), ("b", np.arange(120, 300))):
        half = packed._documents(docs)
        rows = np.concatenate([np.arange(lo, hi) for lo, hi in _unit_ranges(packed, docs)])
        half._compressed = packed._compressed.subset(rows)
        half.save(tmp_path / name)
    sharded = ShardedSpanIndex.load([tmp_path / "a", tmp_path / "b"], tiny_model)
    for options in ({"top_k": 8}, {"top_k": 5, "per_document": 1}):
        _same(
            sharded.search(QUERIES, candidates=25, **options),
            packed.search(QUERIES, candidates=25, **options),
            atol=1e-5,
        )
    # with the compressed scan bypassed (candidates >= documents): the exhaustive search, unchanged
    _same(sharded.search(QUERIES, top_k=8, candidates=300), packed.search(QUERIES, top_k=8))


def _unit_ranges(index, docs):
    bounds, owners = np.asarray(index.arrays["segment_units"]), index.arrays["segment_docs"]
    segments = np.flatnonzero(np.isin(owners, docs))
    return zip(bounds[segments], bounds[segments + 1])


def test_loaded_index_searches_alike_in_any_order_and_thread(packed, tiny_model, tmp_path):
    """The candidates' rows are read into arrays kept between queries (and between searches): every query's results
    are those it gets alone, in any order, and from two threads at once."""
    from concurrent.futures import ThreadPoolExecutor

    packed.save(tmp_path / "ix")
    loaded = SpanIndex.load(tmp_path / "ix", tiny_model)
    alone = [loaded.search(query, top_k=5, candidates=20)[0] for query in QUERIES]
    _same(loaded.search(QUERIES[::-1], top_k=5, candidates=20), alone[::-1])
    together = loaded.search(QUERIES, top_k=5, candidates=20)
    _same(together, alone)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: loaded.search(QUERIES, top_k=5, candidates=20), range(4)))
    for found in runs:
        _same(found, together, atol=0)


# ---------------------------------------------------------------------- without the exact tier


@pytest.fixture(scope="module")
def lean(packed):
    """``packed`` without its exact tier: its units coded with its codebooks (the same codes), vectors dropped."""
    index = packed._documents(np.arange(len(packed)))
    index.compress(codebooks=packed, exact_tier=False)
    return index


def test_without_exact_tier_keeps_codes_and_offsets_only(lean, packed):
    assert not lean.exact_tier and packed.exact_tier
    assert "unit_vectors" not in lean.arrays and "span_norms" not in lean.arrays
    assert np.array_equal(lean._compressed.codes, packed._compressed.codes)
    assert lean.num_units == packed.num_units and "exact_tier=False" in repr(lean)
    info, full = lean.info(), packed.info()
    assert info["format_version"] == 4 and info["exact_tier"] is False and full["exact_tier"]
    assert info["spans"] == full["spans"] and info["array_bytes"] < full["array_bytes"] / 5


@pytest.mark.parametrize("candidates", [25, None])  # None: 500 >= 300 documents, all re-encoded
@pytest.mark.parametrize("scorer", [None, "max-cosine"])
def test_search_re_encodes_candidates_as_the_exact_tier_holds_them(
    lean, packed, candidates, scorer
):
    options = dict(top_k=8, candidates=candidates, scorer=scorer)
    _same(lean.search(QUERIES, **options), packed.search(QUERIES, **options), atol=1e-5)


def test_search_groups_of_queries_re_encode_together(lean, packed, monkeypatch):
    """Queries whose candidates exceed the group's documents are re-encoded in several groups: the same results."""
    import slice_st.index.span_index as module

    monkeypatch.setattr(module, "REENCODED_DOCUMENTS", 30)
    options = dict(top_k=5, candidates=20, per_document=1)
    _same(lean.search(QUERIES, **options), packed.search(QUERIES, **options), atol=1e-5)
    assert [list(g) for g in [range(3)]] and [
        (s.start, s.stop) for s in module._query_groups(np.array([[0, 1], [2, -1], [1, 3]]), 3)
    ] == [(0, 2), (2, 3)]


def test_unit_profile_without_exact_tier(lean, packed):
    doc_id = packed.doc_ids[17]
    chars, scores = lean.unit_profile(QUERIES[0], doc_id)
    expected_chars, expected = packed.unit_profile(QUERIES[0], doc_id)
    assert np.array_equal(chars, expected_chars)
    np.testing.assert_allclose(scores, expected, atol=1e-5)


def test_save_load_add_remove_without_exact_tier(lean, packed, tiny_model, tmp_path):
    lean.save(tmp_path / "lean")
    packed.save(tmp_path / "full")
    manifest = json.loads((tmp_path / "lean" / MANIFEST).read_text())
    assert manifest["format_version"] == 4 and manifest["exact_tier"] is False
    assert not {"unit_vectors.npy", "span_norms.npy"} & set(manifest["files"])
    sizes = [SpanIndex.describe(tmp_path / name)["array_bytes"] for name in ("lean", "full")]
    assert sizes[0] < sizes[1] / 5
    loaded = SpanIndex.load(tmp_path / "lean", tiny_model)
    assert not loaded.exact_tier and "unit_vectors" not in loaded.arrays
    _same(
        loaded.search(QUERIES, top_k=8, candidates=25),
        packed.search(QUERIES, top_k=8, candidates=25),
        1e-5,
    )
    # add codes the new units with the codebooks (their vectors not kept); remove: back to the same codes
    loaded.add(["the man plays the loud guitar"], ["new"])
    assert loaded._compressed.codes.shape[0] == loaded.num_units and not loaded.exact_tier
    found = loaded.search("the man plays the loud guitar", top_k=1, candidates=5)[0][0]
    assert found.doc_id == "new" and found.span == "the man plays the loud guitar"
    loaded.save(tmp_path / "lean")
    again = SpanIndex.load(tmp_path / "lean", tiny_model)
    assert (
        again.search("the man plays the loud guitar", top_k=1, candidates=5)[0][0].doc_id == "new"
    )
    again.remove(["new"])
    assert np.array_equal(again._compressed.codes, packed._compressed.codes)
    # merge: indexes without the exact tier coded alike
    halves = [again._documents(np.arange(0, 150)), again._documents(np.arange(150, 300))]
    for half, docs in zip(halves, (np.arange(0, 150), np.arange(150, 300))):
        rows = np.concatenate([np.arange(lo, hi) for lo, hi in _unit_ranges(packed, docs)])
        half.compress(codebooks=packed, exact_tier=False)  # the re-encoded rows, coded again
        assert np.array_equal(half._compressed.codes, packed._compressed.codes[rows])
    merged = SpanIndex.merge(halves)
    assert not merged.exact_tier
    _same(
        merged.search(QUERIES, top_k=8, candidates=25),
        packed.search(QUERIES, top_k=8, candidates=25),
        1e-5,
    )


def test_manifest_exact_tier_must_match_its_format(lean, packed, tmp_path):
    for index, name in ((lean, "lean"), (packed, "full")):
        index.save(tmp_path / name)
    for name, changes in (("lean", {"format_version": 3}), ("full", {"exact_tier": False})):
        manifest = json.loads((tmp_path / name / MANIFEST).read_text())
        (tmp_path / name / MANIFEST).write_text(json.dumps(manifest | changes))
        with pytest.raises(SpanInputError, match="exact_tier") as error:
            SpanIndex.load(tmp_path / name, packed.model)
        assert "\n" not in str(error.value)
    # an index saved before format 4 recorded no exact_tier: it keeps it
    manifest = json.loads((tmp_path / "full" / MANIFEST).read_text())
    del manifest["exact_tier"]
    (tmp_path / "full" / MANIFEST).write_text(json.dumps(manifest))
    assert SpanIndex.describe(tmp_path / "full")["exact_tier"] is True
    assert SpanIndex.load(tmp_path / "full", packed.model).exact_tier


def _one_line_exact_tier_error(call):
    from slice_st.errors import ExactTierError

    with pytest.raises(ExactTierError) as error:
        call()
    assert "\n" not in str(error.value) and "exact tier" in str(error.value)
    assert isinstance(error.value, ValueError) and isinstance(error.value, SpanInputError)


def test_what_needs_the_exact_tier_raises_one_clear_error(lean, packed, tiny_model):
    _one_line_exact_tier_error(lambda: lean.compress("pq8"))
    _one_line_exact_tier_error(lambda: lean.compress(codebooks=packed))
    _one_line_exact_tier_error(lambda: lean.build_candidates())
    _one_line_exact_tier_error(lambda: lean.search(QUERIES[0], approximate=True))
    ids = [f"y{i}" for i in range(20)]
    other = SpanIndex.build(make_docs(20), tiny_model, ids, max_span=8, compression="pq8")
    _one_line_exact_tier_error(lambda: SpanIndex.merge([lean, other]))
    _one_line_exact_tier_error(lambda: SpanIndex.merge([other, lean]))
    other.compress("pq16", exact_tier=False)  # other codebooks
    _one_line_exact_tier_error(lambda: SpanIndex.merge([lean, other]))
    with pytest.raises(SpanInputError, match="compress"):
        SpanIndex.build(["a man plays"], tiny_model, exact_tier=False)
    with pytest.raises(SpanInputError, match="ray"):
        SpanIndex.build(
            ["a man plays"], tiny_model, compression="pq8", exact_tier=False, engine="ray"
        )


def test_texts_that_no_longer_encode_to_the_stored_units_are_refused(lean):
    import copy

    from slice_st.errors import IndexFileError

    broken = copy.copy(lean)
    broken.texts = list(lean.texts)
    broken.texts[0] = broken.texts[0] + " and one more clause at the end"
    with pytest.raises(IndexFileError, match="rebuild"):
        broken._documents(np.array([0, 1]))


def test_build_without_exact_tier(tiny_model, docs):
    index = SpanIndex.build(docs[:40], tiny_model, max_span=8, compression="pq8", exact_tier=False)
    assert not index.exact_tier and index.dtype == "float16"
    assert index.search(docs[3], top_k=1, candidates=5)[0][0].doc_id == "3"


def test_sharded_search_without_exact_tier(packed, tiny_model, tmp_path):
    from slice_st.index import ShardedSpanIndex

    for name, docs in (("a", np.arange(0, 120)), ("b", np.arange(120, 300))):
        half = packed._documents(docs)
        half.compress(codebooks=packed, exact_tier=False)
        half.save(tmp_path / name)
    sharded = ShardedSpanIndex.load([tmp_path / "a", tmp_path / "b"], tiny_model)
    assert not sharded.exact_tier
    for candidates in (25, 300):
        _same(
            sharded.search(QUERIES, top_k=8, candidates=candidates),
            packed.search(QUERIES, top_k=8, candidates=candidates),
            atol=1e-5,
        )
    _one_line_exact_tier_error(lambda: sharded.search(QUERIES[0], approximate=True))
