"""Index data safety under hostile use (issue 17 B1–B5, B12, B23; issue 11 item 1): real processes where it is about
concurrency.

Concurrency tests run real processes and order them with events, never with sleeps: an interleaving that loses
data on the old code is forced, not hoped for. The processes come from a fork server (``multiprocessing``
"forkserver", torch and slice_st preloaded): forking pytest itself, after torch ran on several threads, gives a child
an OpenMP pool and locks it cannot use (it crashed or stalled at its first kernel with two torch threads).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import stat
import sys
import time

import numpy as np
import pytest
from helpers import build_index_cli, deny_writes

import slice_st
from slice_st import SpanIndex, SpanInputError
from slice_st.cli import main
from slice_st.index.storage import MANIFEST

FORK = multiprocessing.get_context("forkserver")
FORK.set_forkserver_preload(["torch", "slice_st", "slice_st.cli", "slice_st.index"])


@pytest.fixture(autouse=True)
def _no_stray_children():
    """A child that never got going must fail its test, not hang pytest at exit waiting for it."""
    yield
    for child in multiprocessing.active_children():
        child.kill()
        child.join(5)


WAIT = float(
    os.environ.get("SLICE_TEST_WAIT", "120")
)  # seconds: a safety net for a hung child, never a measured time


def _docs(prefix: str, count: int) -> list[str]:
    words = "the dog barks at a man who plays the guitar while my bag was lost and the flight was delayed".split()
    return [
        " ".join(words[(i + j) % len(words)] for j in range(4 + i % 5)) + f" {prefix}{i}"
        for i in range(count)
    ]


def _write_corpus(path, prefix: str, count: int):
    path.write_text("\n".join(_docs(prefix, count)) + "\n")
    return path


def _data_folders(path) -> list[str]:
    return sorted(entry for entry in os.listdir(path) if entry.startswith("data-"))


def _index_data_folders(path) -> list[str]:
    return [
        entry
        for entry in _data_folders(path)
        if os.path.isfile(os.path.join(path, entry, ".slice-st-data"))
    ]


def _quiet_child(log_path: str) -> None:
    """In a child: stdout and stderr to a file (the parent reads it), no pytest capture."""
    handle = open(log_path, "w", buffering=1, encoding="utf-8")
    sys.stdout = sys.stderr = handle
    os.dup2(handle.fileno(), 1)
    os.dup2(handle.fileno(), 2)


@pytest.fixture()
def built(tiny_model_dir, tmp_path, capsys):
    """An index of 6 documents built through the CLI (records the tiny model's folder)."""
    corpus = _write_corpus(tmp_path / "a.txt", "a", 6)
    out = tmp_path / "ix"
    code, _ = build_index_cli(capsys, corpus, out, tiny_model_dir, "--max-span", 4)
    assert code == 0
    return out


# ------------------------------------------------------------------------------------------ B1
def test_b01_save_deletes_only_what_the_index_wrote(tiny_model_dir, tmp_path, capsys):
    project = tmp_path / "proj"
    (project / "data-raw").mkdir(parents=True)
    (project / "data-raw" / "keep.csv").write_text("x\n")
    (
        project / "data-2024-01"
    ).mkdir()  # looks like a data folder name, but the index did not write it
    (project / "data-2024-01" / "notes.txt").write_text("mine\n")
    (project / "data.csv").write_text("also mine\n")
    corpus = _write_corpus(tmp_path / "a.txt", "a", 4)
    more = _write_corpus(tmp_path / "b.txt", "b", 2)
    build = [
        "index",
        "build",
        str(corpus),
        "-o",
        str(project),
        "--model",
        tiny_model_dir,
        "--max-span",
        "3",
        "--no-progress",
    ]
    assert main(build) == 0
    assert main(build + ["--force"]) == 0
    assert main(["index", "add", str(project), str(more), "--no-progress"]) == 0
    assert main(["index", "remove", str(project), f"{more}:1"]) == 0
    capsys.readouterr()
    assert (project / "data-raw" / "keep.csv").read_text() == "x\n"
    assert (project / "data-2024-01" / "notes.txt").read_text() == "mine\n"
    assert (project / "data.csv").read_text() == "also mine\n"
    manifest = json.loads((project / MANIFEST).read_text())
    assert _index_data_folders(project) == [
        manifest["data"]
    ]  # earlier versions were removed, and only they
    assert len(SpanIndex.load(project)) == 5


def test_b01_data_folders_have_normal_permissions(tiny_model, tmp_path):
    previous = os.umask(0o022)
    try:
        SpanIndex.build(["a dog barks"], tiny_model, max_span=2).save(tmp_path / "ix")
    finally:
        os.umask(previous)
    manifest = json.loads((tmp_path / "ix" / MANIFEST).read_text())
    assert (
        stat.S_IMODE(os.stat(tmp_path / "ix" / manifest["data"]).st_mode) == 0o755
    )  # not mkdtemp's 0o700


def test_b02_manifest_replace_is_followed_by_a_directory_fsync(tiny_model, tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(source, target, *args, **kwargs):
        events.append(("replace", os.path.realpath(target)))
        return real_replace(source, target, *args, **kwargs)

    path = tmp_path / "ix"
    path.mkdir()
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    SpanIndex.build(["a dog barks"], tiny_model, max_span=2).save(path)
    monkeypatch.undo()
    commit = events.index(("replace", os.path.realpath(path / MANIFEST)))
    assert ("fsync", os.path.realpath(path)) in events[commit:]


# ------------------------------------------------------------------------------------------ B2 (issue 11 item 1)
def _add_in_child(index_dir, corpus, log_path, entered, go):
    """``slice-st index add`` in a child process; signals ``entered`` from inside ``add`` and, with ``go``, waits
    there."""
    _quiet_child(log_path)
    real_add = SpanIndex.add

    def add(self, *args, **kwargs):
        entered.set()
        if go is not None:
            go.wait(WAIT)
        return real_add(self, *args, **kwargs)

    SpanIndex.add = add
    sys.exit(main(["index", "add", str(index_dir), str(corpus), "--no-progress"]))


def test_b02_two_concurrent_adds_both_land(built, tmp_path, tiny_model):
    """Two real ``index add`` processes on one index: both exit 0 and both sets of documents are kept.

    The first is held inside ``add`` (its index loaded) until the second has either loaded the index
    too (the lost-update interleaving) or is waiting for the writer lock.
    """
    b, c = _write_corpus(tmp_path / "b.txt", "b", 3), _write_corpus(tmp_path / "c.txt", "c", 4)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    entered_first, entered_second, go = FORK.Event(), FORK.Event(), FORK.Event()
    first = FORK.Process(target=_add_in_child, args=(built, b, logs[0], entered_first, go))
    first.start()
    assert entered_first.wait(WAIT), "the first add never started"
    second = FORK.Process(target=_add_in_child, args=(built, c, logs[1], entered_second, None))
    second.start()
    deadline = time.monotonic() + WAIT
    while not entered_second.is_set() and second.is_alive() and time.monotonic() < deadline:
        if logs[1].exists() and "waiting for it to finish" in logs[1].read_text():
            break
        time.sleep(0.05)
    go.set()
    first.join(WAIT)
    second.join(WAIT)
    outputs = [log.read_text() for log in logs]
    assert (first.exitcode, second.exitcode) == (0, 0), outputs
    assert "waiting for it to finish" in outputs[1]
    ids = set(SpanIndex.load(built, tiny_model).doc_ids)
    assert {f"{b}:{i}" for i in range(1, 4)} | {f"{c}:{i}" for i in range(1, 5)} <= ids
    assert len(ids) == 6 + 3 + 4


def _add_killed_mid_save(index_dir, corpus, log_path, entered):
    _quiet_child(log_path)
    module = slice_st.index.storage
    real_save_array = module.save_array

    def save_array(path, values):
        real_save_array(path, values)
        entered.set()  # one array of the new version is on disk
        time.sleep(WAIT)

    module.save_array = save_array
    sys.exit(main(["index", "add", str(index_dir), str(corpus), "--no-progress"]))


def test_b02_sigkill_mid_add_loses_nothing(built, tmp_path, tiny_model, capsys):
    before = SpanIndex.load(built, tiny_model)
    expected = (list(before.doc_ids), before.num_units)
    corpus = _write_corpus(tmp_path / "b.txt", "b", 3)
    for attempt in range(
        3
    ):  # a child that stalls before its save is retried (it must have changed nothing)
        entered = FORK.Event()
        child = FORK.Process(
            target=_add_killed_mid_save,
            args=(built, corpus, tmp_path / f"child{attempt}.log", entered),
        )
        child.start()
        if entered.wait(WAIT):
            break
        child.kill()
        child.join(5)
        assert (
            SpanIndex.load(built, tiny_model).doc_ids == expected[0]
        )  # a stalled child changed nothing
    assert entered.is_set(), "the add never reached its save"
    os.kill(child.pid, signal.SIGKILL)
    child.join(WAIT)
    assert child.exitcode == -signal.SIGKILL
    after = SpanIndex.load(built, tiny_model)  # the old index, unchanged
    assert (after.doc_ids, after.num_units) == expected
    assert len(_index_data_folders(built)) == 2  # the killed save's partial folder is still there
    # the lock died with the process: the same add now goes through, and the leftover is cleaned up
    assert main(["index", "add", str(built), str(corpus), "--no-progress"]) == 0
    capsys.readouterr()
    assert len(SpanIndex.load(built, tiny_model)) == len(expected[0]) + 3
    assert len(_index_data_folders(built)) == 1


def test_b02_stale_save_is_refused_not_lost(tiny_model, tmp_path):
    """The library's load → change → save: a save that would overwrite another process's save is refused."""
    path = tmp_path / "ix"
    SpanIndex.build(_docs("a", 3), tiny_model, max_span=3).save(path)
    one, two = SpanIndex.load(path, tiny_model), SpanIndex.load(path, tiny_model)
    one.add(["the first update"], ["one"])
    one.save(path)
    two.add(["the second update"], ["two"])
    with pytest.raises(
        slice_st.IndexConflictError, match="saved by another process after this index was loaded"
    ):
        two.save(path)
    assert "one" in SpanIndex.load(path, tiny_model).doc_ids
    with SpanIndex.open_for_update(
        path, tiny_model
    ) as index:  # the way to do it: lock from load to save
        index.add(["the second update"], ["two"])
    assert {"one", "two"} <= set(SpanIndex.load(path, tiny_model).doc_ids)
    one.save(tmp_path / "elsewhere")  # saving a copy somewhere else is fine
    with pytest.raises(SpanInputError, match="already holds an index"):
        SpanIndex.build(["x"], tiny_model, max_span=2).save(path, overwrite=False)


# ------------------------------------------------------------------------------------------ B3, B4
def test_b03_remove_takes_a_string_as_one_id(tiny_model):
    index = SpanIndex.build(
        ["a dog", "a cat", "a bird"], tiny_model, ids=["a", "ab", "b"], max_span=2
    )
    assert index.remove("ab") == 1
    assert index.doc_ids == ["a", "b"]
    with pytest.raises(SpanInputError, match="Unknown document ids"):
        index.remove("zz")
    with pytest.raises(SpanInputError, match="strings"):
        index.remove([3])


def test_b04_shard_without_manifest_is_an_error_not_skipped(
    tiny_model, tiny_model_dir, tmp_path, capsys
):
    shards = tmp_path / "shards"
    SpanIndex.build(_docs("a", 3), tiny_model, ids=["a1", "a2", "a3"], max_span=3).save(
        shards / "a"
    )
    crashed = shards / "b"
    (crashed / "data-000001-deadbeef").mkdir(
        parents=True
    )  # a shard build that died before its manifest
    with pytest.raises(SpanInputError, match="not indexes.*shards/b"):
        slice_st.index.ShardedSpanIndex.load(shards, tiny_model)
    with pytest.raises(SystemExit) as exit_info:
        main(["mine", "--index", str(shards), "-q", "dog"])
    assert exit_info.value.code == 2 and "shards/b" in capsys.readouterr().err
    crashed.rename(tmp_path / "b-crashed")
    assert main(["mine", "--index", str(shards), "-q", "dog", "-f", "jsonl"]) == 0
    with pytest.raises(SpanInputError, match="not a SpanIndex"):  # the crashed shard itself
        slice_st.index.ShardedSpanIndex.load(tmp_path / "b-crashed", tiny_model)


# ------------------------------------------------------------------------------------------ B5
def _load_after_a_save(path, model_dir, have_manifest, saved, results):
    """A reader that has read the manifest when a writer replaces the index under it."""
    model = slice_st.load_model(str(model_dir))
    module = slice_st.index.storage
    real_read_manifest = module.read_manifest
    calls = []

    def read_manifest(*args, **kwargs):
        manifest = real_read_manifest(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            have_manifest.set()
            saved.wait(WAIT)
        return manifest

    module.read_manifest = read_manifest
    try:
        results.put(("ok", len(SpanIndex.load(path, model))))
    except Exception as error:  # noqa: BLE001 - reported to the parent
        results.put(("error", f"{type(error).__name__}: {error}"))


def _save_new_version(path, model_dir, have_manifest, saved):
    model = slice_st.load_model(str(model_dir))
    have_manifest.wait(WAIT)
    with SpanIndex.open_for_update(path, model) as index:
        index.add(["a document saved while a reader was loading"], ["new"])
    saved.set()


def test_b05_a_reader_sees_the_old_or_the_new_index_never_an_error(
    tiny_model, tiny_model_dir, tmp_path
):
    path = tmp_path / "ix"
    SpanIndex.build(_docs("a", 5), tiny_model, max_span=3).save(path)
    have_manifest, saved, results = FORK.Event(), FORK.Event(), FORK.Queue()
    reader = FORK.Process(
        target=_load_after_a_save, args=(path, tiny_model_dir, have_manifest, saved, results)
    )
    writer = FORK.Process(
        target=_save_new_version, args=(path, tiny_model_dir, have_manifest, saved)
    )
    reader.start()
    writer.start()
    outcome = results.get(timeout=WAIT)
    reader.join(WAIT)
    writer.join(WAIT)
    assert writer.exitcode == 0
    assert outcome == ("ok", 6), outcome  # the new version, loaded after the old one vanished


def _save_repeatedly(path, model_dir, count, done):
    index = SpanIndex.load(path, slice_st.load_model(str(model_dir)))
    for number in range(count):
        if number % 2:
            index.remove(["extra"])
        else:
            index.add(["an extra document"], ["extra"])
        index.save(path)
    done.set()


def test_b05_loads_during_many_saves_never_fail(tiny_model, tiny_model_dir, tmp_path):
    path = tmp_path / "ix"
    SpanIndex.build(_docs("a", 5), tiny_model, max_span=3).save(path)
    done = FORK.Event()
    writer = FORK.Process(target=_save_repeatedly, args=(path, tiny_model_dir, 30, done))
    writer.start()
    sizes, errors = set(), []
    while not done.is_set() or not sizes:
        try:
            sizes.add(len(SpanIndex.load(path, tiny_model)))
        except SpanInputError as error:
            errors.append(str(error))
    writer.join(WAIT)
    assert not errors and sizes <= {5, 6}


# ------------------------------------------------------------------------------------------ B12
def test_b12_read_only_index_is_refused_before_any_work_and_still_searchable(
    built, tmp_path, capsys, monkeypatch
):
    corpus = _write_corpus(tmp_path / "b.txt", "b", 2)
    deny_writes(monkeypatch, built)
    try:
        monkeypatch.setattr(
            slice_st.loading, "load_model", lambda *a, **k: pytest.fail("the model loaded")
        )
        for argv in (
            ["index", "add", str(built), str(corpus)],
            ["index", "remove", str(built), "x"],
            ["index", "candidates", str(built)],
        ):
            with pytest.raises(SystemExit) as exit_info:
                main(argv)
            error = capsys.readouterr().err
            assert (
                exit_info.value.code == 2 and "not writable" in error and error.count("\n") == 1
            ), error
        monkeypatch.undo()
        assert (
            main(["mine", "--index", str(built), "-q", "dog", "-f", "jsonl"]) == 0
        )  # reading needs no write access
        assert capsys.readouterr().out.count("\n") == 6
    finally:
        os.chmod(built, 0o755)


# ------------------------------------------------------------------------------------------ B13
def test_b13_unwritable_or_file_output_is_refused_before_encoding(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    corpus = _write_corpus(tmp_path / "a.txt", "a", 3)
    a_file = tmp_path / "file.txt"
    a_file.write_text("not a folder\n")
    monkeypatch.setattr(
        SpanIndex, "build", classmethod(lambda *a, **k: pytest.fail("encoding started"))
    )
    for output in (a_file, a_file / "ix"):
        with pytest.raises(SystemExit) as exit_info:
            main(["index", "build", str(corpus), "-o", str(output), "--model", tiny_model_dir])
        error = capsys.readouterr().err
        assert exit_info.value.code == 2 and "is a file, not" in error and error.count("\n") == 1, (
            error
        )
    locked = tmp_path / "locked"
    locked.mkdir()
    deny_writes(monkeypatch, locked)
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(
                ["index", "build", str(corpus), "-o", str(locked / "ix"), "--model", tiny_model_dir]
            )
        assert exit_info.value.code == 2 and "not writable" in capsys.readouterr().err
    finally:
        os.chmod(locked, 0o755)
    with pytest.raises(SystemExit) as exit_info:
        main(["index", "merge", str(tmp_path), "-o", str(a_file)])
    assert exit_info.value.code == 2 and "is a file, not" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ B14 (manifests), B23
@pytest.mark.parametrize(
    "change", ["list", "no_fingerprint", "bad_units", "bad_span_config", "data_outside"]
)
def test_b14_a_broken_manifest_is_a_clear_error(built, tiny_model, capsys, change):
    manifest = json.loads((built / MANIFEST).read_text())
    broken = {
        "list": [manifest],
        "no_fingerprint": {k: v for k, v in manifest.items() if k != "model_fingerprint"},
        "bad_units": manifest | {"units": "many"},
        "bad_span_config": manifest | {"span_config": {"min_span": 0}},
        "data_outside": manifest | {"data": "../elsewhere"},
    }[change]
    (built / MANIFEST).write_text(json.dumps(broken))
    with pytest.raises(SpanInputError, match="unreadable index manifest"):
        SpanIndex.load(built, tiny_model)
    for argv in (["index", "info", str(built)], ["mine", "--index", str(built), "-q", "dog"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        error = capsys.readouterr().err
        assert (
            exit_info.value.code == 2
            and "unreadable index manifest" in error
            and error.count("\n") == 1
        ), error


def test_b14_load_takes_a_model_path(built, tiny_model_dir):
    assert len(SpanIndex.load(built, tiny_model_dir)) == 6
    with pytest.raises(SpanInputError, match="model must be a SentenceTransformer"):
        SpanIndex.load(built, 42)


def test_b23_changed_arrays_are_caught_by_checksums(built, tiny_model, capsys):
    manifest = json.loads((built / MANIFEST).read_text())
    assert set(manifest["files"]) >= {
        "unit_vectors.npy",
        "span_norms.npy",
        "texts.bin",
        "doc_ids.json",
    }
    reference = SpanIndex.load(built, tiny_model).search("the dog barks", top_k=3)
    norms_path = built / manifest["data"] / "span_norms.npy"
    original = np.load(norms_path)
    shuffled = original[np.random.default_rng(0).permutation(len(original))]
    np.save(norms_path, shuffled)  # same shape, same size: only the content moved
    with pytest.raises(SpanInputError, match="span_norms.npy does not match its checksum"):
        SpanIndex.load(built, tiny_model)
    np.save(norms_path, original)
    assert SpanIndex.load(built, tiny_model).search("the dog barks", top_k=3) == reference
    # one flipped bit: every row of a small array is sampled; verify=True (index info --verify) hashes whole files
    vectors_path = built / manifest["data"] / "unit_vectors.npy"
    data = bytearray(vectors_path.read_bytes())
    data[-1] ^= 0x01
    vectors_path.write_bytes(bytes(data))
    with pytest.raises(SpanInputError, match="does not match its checksum"):
        SpanIndex.load(built, tiny_model)
    with pytest.raises(SpanInputError, match="does not match its checksum"):
        SpanIndex.load(built, tiny_model, verify=True)
    with pytest.raises(SystemExit) as exit_info:
        main(["index", "info", str(built), "--verify"])
    assert exit_info.value.code == 2 and "checksum" in capsys.readouterr().err
    # a manifest without its checksums never turns the checks off (issue 24): it is refused
    (built / MANIFEST).write_text(
        json.dumps({k: v for k, v in manifest.items() if k not in ("files", "samples")})
    )
    with pytest.raises(SpanInputError, match="unreadable index manifest .'files' is missing"):
        SpanIndex.load(built, tiny_model)


def _command_killed_at(index_dir, argv, point, log_path, entered):
    """In a child: ``slice-st index …`` that stops (for the parent's SIGKILL) at ``point`` of its save: ``data`` (one
    array of the new version written), ``manifest`` (the new manifest written to its temporary file, not yet renamed)
    or ``committed`` (the manifest renamed, the old data folder not yet removed)."""
    _quiet_child(log_path)
    module = slice_st.index.storage
    real_save_array, real_write_json, real_replace = (
        module.save_array,
        module.write_json,
        os.replace,
    )

    def stop() -> None:
        entered.set()
        time.sleep(WAIT)

    def save_array(path, values):
        real_save_array(path, values)
        if point == "data":
            stop()

    def write_json(path, *args, **kwargs):
        real_write_json(path, *args, **kwargs)
        if point == "committed" and os.path.basename(path) == MANIFEST:
            stop()

    def replace(source, target, *args, **kwargs):
        if point == "manifest" and os.path.basename(target) == MANIFEST:
            stop()
        return real_replace(source, target, *args, **kwargs)

    module.save_array, module.write_json, os.replace = save_array, write_json, replace
    sys.exit(main(["index", *argv, "--no-progress"]))


@pytest.mark.parametrize("point", ["data", "manifest", "committed"])
@pytest.mark.parametrize("command", ["add", "remove"])
def test_sigkill_at_each_point_of_an_add_or_remove_leaves_a_whole_index(
    built, tmp_path, tiny_model, command, point
):
    """``kill -9`` of ``index add`` / ``index remove`` at each step of its save, at a point the child reports (never a
    timing): before the commit the old index loads unchanged, after it the new one; ``index info --verify`` passes
    either way, and the same command run again lands and leaves one data folder."""
    before = SpanIndex.load(built, tiny_model)
    old_ids = list(before.doc_ids)
    corpus = _write_corpus(tmp_path / "b.txt", "b", 3)
    argv = (
        ["add", str(built), str(corpus)]
        if command == "add"
        else ["remove", str(built), old_ids[0], old_ids[1]]
    )
    new_ids = old_ids + [f"{corpus}:{i}" for i in range(1, 4)] if command == "add" else old_ids[2:]
    entered = FORK.Event()
    child = FORK.Process(
        target=_command_killed_at, args=(built, argv, point, tmp_path / "child.log", entered)
    )
    child.start()
    assert entered.wait(WAIT), (tmp_path / "child.log").read_text()
    os.kill(child.pid, signal.SIGKILL)
    child.join(WAIT)
    assert child.exitcode == -signal.SIGKILL
    after = SpanIndex.load(built, tiny_model, verify=True)
    assert list(after.doc_ids) == (new_ids if point == "committed" else old_ids)
    assert main(["index", "info", str(built), "--verify"]) == 0
    if point != "committed":
        assert main(["index", *argv, "--no-progress"]) == 0
        assert list(SpanIndex.load(built, tiny_model).doc_ids) == new_ids
    else:  # the next save clears the old data folder the killed one left
        assert (
            main(
                [
                    "index",
                    "add",
                    str(built),
                    str(_write_corpus(tmp_path / "c.txt", "c", 1)),
                    "--no-progress",
                ]
            )
            == 0
        )
    assert len(_index_data_folders(built)) == 1
    assert not [name for name in os.listdir(built) if name.startswith(".") and "manifest" in name]


def _remove_in_child(index_dir, ids, log_path):
    _quiet_child(log_path)
    sys.exit(main(["index", "remove", str(index_dir), *ids, "--no-progress"]))


def test_an_add_and_a_remove_from_two_processes_both_land(built, tmp_path, tiny_model):
    """``index add`` held inside ``add`` (its index loaded) while ``index remove`` starts: the remove waits for the
    writer lock (it says so), then removes from the index with the added documents; both exit 0, ``--verify`` passes."""
    old_ids = list(SpanIndex.load(built, tiny_model).doc_ids)
    corpus = _write_corpus(tmp_path / "b.txt", "b", 3)
    logs = [tmp_path / "add.log", tmp_path / "remove.log"]
    entered, go = FORK.Event(), FORK.Event()
    adding = FORK.Process(target=_add_in_child, args=(built, corpus, logs[0], entered, go))
    adding.start()
    assert entered.wait(WAIT), "the add never started"
    removing = FORK.Process(target=_remove_in_child, args=(built, old_ids[:2], logs[1]))
    removing.start()
    deadline = time.monotonic() + WAIT
    while removing.is_alive() and time.monotonic() < deadline:
        if logs[1].exists() and "waiting for it to finish" in logs[1].read_text():
            break
        time.sleep(0.05)
    go.set()
    adding.join(WAIT)
    removing.join(WAIT)
    outputs = [log.read_text() for log in logs]
    assert (adding.exitcode, removing.exitcode) == (0, 0), outputs
    assert "waiting for it to finish" in outputs[1]
    index = SpanIndex.load(built, tiny_model, verify=True)
    assert list(index.doc_ids) == old_ids[2:] + [f"{corpus}:{i}" for i in range(1, 4)]
