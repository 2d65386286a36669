"""The cache of encoded files (slice_st/cache.py): a second search of unchanged files runs no forward pass and finds
the same spans; a changed file, model or setting is a miss; damaged entries are encoded again; concurrent writers and
readers never see half an entry; the folder stays under its size limit, removing only what it wrote."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import torch

import slice_st
from slice_st.cache import EncodingCache, best_spans_of_files, parse_size, window_digest
from slice_st.errors import FileAccessError, SpanInputError, WindowError

FILES = [
    [
        "A man is playing the guitar on a small stage.",
        "The flight to Denver was delayed by three hours.",
    ],
    [
        "My checked bag never arrived.",
        "The agent found a note about the lost baggage claim from March.",
    ],
    ["Nobody answered the phone at the hotel desk."],
]
QUERIES = ["plays the guitar", "my bag was lost"]
ARRAYS = ("scores", "starts", "ends", "unit_starts", "unit_ends", "similarities")


class Counting:
    """``model.encode`` counting the texts it is given (each window once per forward pass)."""

    def __init__(self, model, monkeypatch):
        self.texts: list[str] = []
        original = model.encode

        def encode(inputs, **kwargs):
            self.texts += [inputs] if isinstance(inputs, str) else list(inputs)
            return original(inputs, **kwargs)

        monkeypatch.setattr(model, "encode", encode)

    def documents(self) -> list[str]:
        return [text for text in self.texts if text not in QUERIES]


def search(model, cache, files=FILES, **options):
    return best_spans_of_files(
        model, QUERIES, files, cache, top_k=2, show_progress_bar=False, **options
    )


def same(first, second) -> bool:
    return all(np.array_equal(getattr(first, name), getattr(second, name)) for name in ARRAYS)


def test_a_second_search_runs_no_forward_pass_and_finds_the_same_spans(
    tiny_model, tmp_path, monkeypatch
):
    counting = Counting(tiny_model, monkeypatch)
    cache = EncodingCache(tmp_path / "cache")
    first = search(tiny_model, cache)
    assert (cache.hits, cache.misses) == (0, 3) and len(counting.documents()) == 5
    assert len(os.listdir(tmp_path / "cache")) == 4  # three entries and the pruning lock
    counting.texts.clear()
    again = EncodingCache(tmp_path / "cache")
    second = search(tiny_model, again)
    assert (again.hits, again.misses) == (3, 0) and counting.documents() == []
    assert same(first, second) and second.texts == [text for file in FILES for text in file]
    plain = slice_st.best_spans(tiny_model, QUERIES, second.texts, top_k=2, show_progress_bar=False)
    assert same(first, plain)  # what best_spans finds over all the texts at once


def test_a_changed_file_model_or_setting_misses(tiny_model, make_tiny_model, tmp_path, monkeypatch):
    cache = EncodingCache(tmp_path / "cache")
    search(tiny_model, cache)
    counting = Counting(tiny_model, monkeypatch)
    changed = [
        FILES[0],
        [*FILES[1][:1], "The agent found a note about the lost suitcase."],
        FILES[2],
    ]
    cache = EncodingCache(tmp_path / "cache")
    search(tiny_model, cache, changed)
    assert (cache.hits, cache.misses) == (2, 1) and counting.documents() == changed[1]
    for options in ({"max_span": 3}, {"unit": "token"}):  # the windows and units change
        cache = EncodingCache(tmp_path / "cache")
        search(tiny_model, cache, **options)
        assert (cache.hits, cache.misses) == (0, 3), options
    cache = EncodingCache(tmp_path / "cache")
    search(tiny_model, cache, min_span=2)  # the same windows: the entries serve any shortest span
    assert (cache.hits, cache.misses) == (3, 0)
    other = make_tiny_model()
    with torch.no_grad():
        other[0].auto_model.embeddings.word_embeddings.weight[5] += (
            1.0  # one weight: another fingerprint
        )
    cache = EncodingCache(tmp_path / "cache")
    search(other, cache)
    assert (cache.hits, cache.misses) == (0, 3)


def test_a_damaged_entry_is_encoded_again_and_replaced(tiny_model, tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    first = search(tiny_model, EncodingCache(folder))
    entries = sorted(path for path in folder.iterdir() if path.suffix == ".npz")
    data = bytearray(entries[0].read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit inside the token vectors
    entries[0].write_bytes(bytes(data))
    entries[1].write_bytes(entries[1].read_bytes()[:100])  # truncated
    os.replace(entries[2], folder / "moved")
    os.symlink(entries[0], entries[2])  # a link is never followed
    counting = Counting(tiny_model, monkeypatch)
    cache = EncodingCache(folder)
    second = search(tiny_model, cache)
    assert same(first, second) and cache.hits == 0 and len(cache.rebuilt) == 3
    assert sorted(counting.documents()) == sorted(text for file in FILES for text in file)
    cache = EncodingCache(folder)
    search(tiny_model, cache)
    assert (cache.hits, cache.rebuilt) == (3, []) and not entries[
        2
    ].is_symlink()  # replaced, the link's target kept
    (folder / "moved").rename(
        entries[1]
    )  # another file's entry under this name: its key says it is not this one
    cache = EncodingCache(folder)
    search(tiny_model, cache)
    assert cache.hits == 2 and len(cache.rebuilt) == 1


def test_concurrent_writers_and_readers_never_see_half_an_entry(tiny_model, tmp_path):
    """Threads writing the same entries while others read them: every read is a whole entry or a miss."""
    folder = tmp_path / "cache"
    search(tiny_model, EncodingCache(folder))
    key = sorted(path.stem for path in folder.iterdir() if path.suffix == ".npz")[0]
    entry = EncodingCache(folder).load(key)
    windows = list(entry.items())
    found, stop = [], threading.Event()

    def write():
        while not stop.is_set():
            EncodingCache(folder).save(key, windows)

    def read():
        while not stop.is_set():
            cache = EncodingCache(folder)
            loaded = cache.load(key)
            found.append((loaded is not None and loaded.keys() == entry.keys(), cache.rebuilt))

    threads = [threading.Thread(target=work) for work in (write, write, read, read)]
    for thread in threads:
        thread.start()
    time.sleep(2)
    stop.set()
    for thread in threads:
        thread.join()
    assert found and all(whole and not rebuilt for whole, rebuilt in found)
    assert not [name for name in os.listdir(folder) if name.endswith(".tmp")]


def test_the_folder_keeps_under_its_limit_and_removes_only_its_own_files(tiny_model, tmp_path):
    folder = tmp_path / "cache"
    search(tiny_model, EncodingCache(folder))
    entries = sorted(
        (path.stat().st_size, path) for path in folder.iterdir() if path.suffix == ".npz"
    )
    for age, (_, path) in enumerate(entries):
        os.utime(path, (1000 + age, 1000 + age))  # the smallest entry used longest ago
    own_temporary = folder / f".{'a' * 64}.npz.{'b' * 16}.tmp"
    for name in ("notes.txt", "keep.npz", own_temporary.name, f"{'c' * 64}.npz.bak"):
        (folder / name).write_text("x")
    os.utime(own_temporary, (1000, 1000))  # left by a run that died a day ago
    limit = sum(size for size, _ in entries) - 1
    EncodingCache(folder, max_bytes=limit).prune()
    assert not entries[0][1].exists() and all(path.exists() for _, path in entries[1:])
    left = sorted(os.listdir(folder))
    assert {"notes.txt", "keep.npz", f"{'c' * 64}.npz.bak"} <= set(
        left
    ) and own_temporary.name not in left
    EncodingCache(folder, max_bytes=0).prune()
    assert not [name for name in os.listdir(folder) if name.endswith(".npz") and len(name) == 68]
    cache = EncodingCache(tmp_path / "none", max_bytes=0)
    search(tiny_model, cache)
    assert not (tmp_path / "none").exists()  # a limit of 0 writes nothing


def test_no_cache_reads_and_writes_nothing_and_finds_the_same(tiny_model, tmp_path):
    cached = search(tiny_model, EncodingCache(tmp_path / "cache"))
    assert same(search(tiny_model, None), cached) and same(search(tiny_model, None), cached)


def test_a_folder_that_cannot_be_written_is_read_only(tiny_model, tmp_path):
    (tmp_path / "file").write_text("x")
    cache = EncodingCache(
        tmp_path / "file" / "inner"
    )  # under a file: never writable, also for root
    result = search(tiny_model, cache)
    assert (
        cache.problem.startswith(f"cannot write the cache in {tmp_path / 'file' / 'inner'}")
        and result.texts
    )
    assert same(result, search(tiny_model, None)) and (tmp_path / "file").read_text() == "x"
    with pytest.raises(FileAccessError, match="is a file, not a folder"):
        EncodingCache(tmp_path / "file")


def test_window_errors_name_the_text_among_all_files(tiny_model_short, tmp_path):
    bad = "." * 80 + " tail"  # one word longer than the short model's window
    files = [["a fine text"], ["another fine one", bad]]
    options = {"max_span": 3, "show_progress_bar": False}
    with pytest.raises(WindowError) as error:
        best_spans_of_files(
            tiny_model_short, ["fine"], files, EncodingCache(tmp_path / "c"), **options
        )
    assert error.value.text_index == 2
    result = best_spans_of_files(
        tiny_model_short, ["fine"], files, EncodingCache(tmp_path / "c"), on_error="skip", **options
    )
    assert [index for index, _ in result.skipped] == [2]


def test_files_in_several_blocks_and_a_large_file_alone(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr("slice_st.cache.BLOCK_CHARS", 60)
    monkeypatch.setattr("slice_st.cache.MAX_FILE_CHARS", 100)
    files = [*FILES, ["a long text about guitars and bags " * 4]]
    cache = EncodingCache(tmp_path / "cache")
    result = search(tiny_model, cache, files)
    plain = slice_st.best_spans(tiny_model, QUERIES, result.texts, top_k=2, show_progress_bar=False)
    for name in ARRAYS:  # the widths of the blocks' results may differ: compare each text's spans
        np.testing.assert_allclose(
            getattr(result, name)[..., :1], getattr(plain, name)[..., :1], rtol=1e-5
        )
    assert cache.misses == 3  # the large file is searched without the cache


def test_sizes_and_keys():
    assert parse_size("1.5K") == 1536 and parse_size("2 GiB") == 2 << 30 and parse_size("12") == 12
    for bad in ("", "-1", "4X", "a lot"):
        with pytest.raises(SpanInputError, match="SLICE_ST_CACHE_SIZE"):
            parse_size(bad)
    assert EncodingCache.key("s", ["ab", "c"]) != EncodingCache.key("s", ["a", "bc"])
    assert window_digest("a", "bc") != window_digest("ab", "c")
