"""slice_st.index.storage: index folders read and written only where the user pointed (links, planted temporary
files, hand-edited manifests, full disks), and an index refuses a model whose weights changed."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil

import numpy as np
import pytest
from helpers import build_index_cli, cli_error, file_tree

import slice_st
from slice_st import SpanIndex, SpanInputError
from slice_st.cli import main

DOCS = [
    "the dog barks at the mailman",
    "a man plays the guitar on stage",
    "my bag was lost at the airport",
    "the flight was delayed",
]


@pytest.fixture()
def index_dir(tiny_model_dir, tmp_path, capsys):
    """An index of 4 documents built through the CLI."""
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(DOCS) + "\n")
    out = tmp_path / "ix"
    code, _ = build_index_cli(capsys, corpus, out, tiny_model_dir, "--max-span", 4)
    assert code == 0
    return out


def _manifest(index_dir) -> dict:
    from slice_st.index.storage import MANIFEST

    return json.loads((index_dir / MANIFEST).read_text())


def _write_manifest(index_dir, manifest) -> None:
    from slice_st.index.storage import MANIFEST

    (index_dir / MANIFEST).write_text(json.dumps(manifest))


def test_ray_force_build_never_follows_a_linked_build_state(tiny_model_dir, tmp_path, capsys):
    """A ``.slice-st-build`` that is a link to a user's folder: refused, and that folder keeps every file."""
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(DOCS) + "\n")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "group-00000.json").write_text("mine")
    (precious / "thesis.tex").write_text("mine")
    out = tmp_path / "ix"
    out.mkdir()
    (out / ".slice-st-build").symlink_to(precious)
    before = file_tree(precious)
    error = cli_error(
        [
            "index",
            "build",
            str(corpus),
            "-o",
            str(out),
            "--model",
            tiny_model_dir,
            "--ray",
            "--force",
            "--no-progress",
        ],
        capsys,
    )
    assert ".slice-st-build is a symbolic link" in error
    assert file_tree(precious) == before


def test_a_planted_manifest_temp_link_is_never_written_through(
    index_dir, tiny_model_dir, tmp_path, capsys
):
    """``index add`` with ``.manifest.json.tmp`` a link to a file outside: that file is unchanged, manifest.json
    stays a file."""
    from slice_st.index.storage import MANIFEST

    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    (index_dir / f".{MANIFEST}.tmp").symlink_to(outside)
    more = tmp_path / "b.txt"
    more.write_text("a cat sleeps on the sofa\n")
    assert main(["index", "add", str(index_dir), str(more), "--no-progress"]) == 0
    capsys.readouterr()
    assert outside.read_text() == "precious"
    assert not os.path.islink(index_dir / MANIFEST) and _manifest(index_dir)["documents"] == 5
    assert not [
        name
        for name in os.listdir(index_dir)
        if name.endswith(".tmp") and not os.path.islink(index_dir / name)
    ]


def test_a_linked_manifest_or_lock_is_refused(index_dir, tiny_model_dir, tmp_path, capsys):
    """``manifest.json`` or ``.lock`` a link to outside: one clear error, the outside file neither read nor
    truncated."""
    from slice_st.index.storage import MANIFEST

    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(_manifest(index_dir)))
    before = outside.read_text()
    os.remove(index_dir / ".lock")
    (index_dir / ".lock").symlink_to(outside)
    more = tmp_path / "b.txt"
    more.write_text("a cat sleeps on the sofa\n")
    error = cli_error(["index", "add", str(index_dir), str(more), "--no-progress"], capsys)
    assert ".lock is not a regular file" in error and outside.read_text() == before
    os.remove(index_dir / ".lock")
    os.replace(index_dir / MANIFEST, tmp_path / "kept.json")
    (index_dir / MANIFEST).symlink_to(outside)
    error = cli_error(["index", "info", str(index_dir)], capsys)
    assert "manifest.json is a symbolic link" in error and outside.read_text() == before


@pytest.mark.parametrize(
    "name", ["../../outside.txt", "/etc/passwd", "..", ".", "sub/file", ".hidden"]
)
def test_manifest_file_names_must_be_plain_names_in_the_folder(
    index_dir, tiny_model, tmp_path, capsys, monkeypatch, name
):
    """A ``files`` entry naming something outside: refused before anything is stat'ed or opened."""

    manifest = _manifest(index_dir)
    manifest["files"][name] = {"bytes": 10, "sha256": "0" * 64}
    _write_manifest(index_dir, manifest)
    touched = []
    real_lstat, real_stat = os.lstat, os.stat
    monkeypatch.setattr(
        os, "lstat", lambda p, *a, **k: (touched.append(os.fspath(p)), real_lstat(p, *a, **k))[1]
    )
    monkeypatch.setattr(
        os, "stat", lambda p, *a, **k: (touched.append(os.fspath(p)), real_stat(p, *a, **k))[1]
    )
    with pytest.raises(SpanInputError, match="unreadable index manifest .files entry"):
        SpanIndex.load(index_dir, tiny_model)
    assert not [p for p in touched if "outside" in p or p.startswith("/etc")]
    monkeypatch.undo()
    assert "unreadable index manifest" in cli_error(
        ["index", "info", str(index_dir), "--verify"], capsys
    )


def test_verify_reads_only_regular_files_of_the_recorded_size(index_dir, tiny_model, capsys):
    """A data file replaced by a link to ``/dev/zero`` (or to a file outside): an error at once, never read."""

    data = index_dir / _manifest(index_dir)["data"]
    os.remove(data / "texts.bin")
    (data / "texts.bin").symlink_to("/dev/zero")
    with pytest.raises(SpanInputError, match="texts.bin is not a regular file"):
        SpanIndex.load(index_dir, tiny_model, verify=True)
    assert "texts.bin is not a regular file" in cli_error(
        ["index", "info", str(index_dir), "--verify"], capsys
    )


def test_file_digest_stops_at_the_recorded_size(tmp_path):
    from slice_st.errors import FileAccessError
    from slice_st.index.storage import file_digest

    path = tmp_path / "grown.bin"
    path.write_bytes(b"x" * 10)
    assert file_digest(str(path), 10) == file_digest(str(path))
    path.write_bytes(b"x" * (3 << 20))
    assert file_digest(str(path), 10) != file_digest(
        str(path)
    )  # read 11 bytes, not 3 MiB: cannot match
    with pytest.raises(FileAccessError, match="not a regular file"):
        file_digest("/dev/zero", 10)


@pytest.mark.parametrize("shard", ["..", "."])
def test_shard_names_must_be_folders_inside_the_index(
    index_dir, tiny_model_dir, tmp_path, capsys, shard
):
    """``shards.json`` naming ``..`` (the parent's index) or a path elsewhere: refused, the parent never searched."""
    child = index_dir / "child"
    child.mkdir()
    (child / "shards.json").write_text(json.dumps({"complete": True, "shards": [shard]}))
    error = cli_error(
        ["mine", "--index", str(child), "--model", tiny_model_dir, "-q", "dog"], capsys
    )
    assert "unreadable shards.json" in error


def test_shard_links_to_outside_are_refused(index_dir, tiny_model_dir, tmp_path, capsys):
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "part-00000-0000").symlink_to(index_dir)
    (sharded / "shards.json").write_text(
        json.dumps({"complete": True, "shards": ["part-00000-0000"]})
    )
    assert "unreadable shards.json" in cli_error(
        ["mine", "--index", str(sharded), "--model", tiny_model_dir, "-q", "dog"], capsys
    )


@pytest.mark.parametrize("drop", ["samples", "files", "both"])
def test_a_manifest_without_its_checksums_is_refused(index_dir, tiny_model, capsys, drop):
    """Without ``samples``/``files`` every integrity check was off (a reversed array scored 1.258): now an error."""

    manifest = _manifest(index_dir)
    for key in ("samples", "files") if drop == "both" else (drop,):
        del manifest[key]
    _write_manifest(index_dir, manifest)
    with pytest.raises(SpanInputError, match="unreadable index manifest"):
        SpanIndex.load(index_dir, tiny_model)
    assert "unreadable index manifest" in cli_error(
        ["index", "info", str(index_dir), "--verify"], capsys
    )


@pytest.mark.parametrize(
    "edit", [{"min_span": 3}, {"max_span": 2}, {"unit": "token"}, {"min_span": 2, "max_span": 5}]
)
def test_edited_span_settings_are_a_clear_error(
    index_dir, tiny_model, tiny_model_dir, capsys, edit
):
    """A hand-edited ``span_config`` (min_span 1 → 3 scored 2.93, a cosine above 1; unit word → token was
    accepted)."""

    manifest = _manifest(index_dir)
    manifest["span_config"] |= edit
    _write_manifest(index_dir, manifest)
    with pytest.raises(
        SpanInputError, match="span_config .* do not match what the index data was written with"
    ):
        SpanIndex.load(index_dir, tiny_model)
    assert "the manifest was edited" in cli_error(
        ["mine", "--index", str(index_dir), "--model", tiny_model_dir, "-q", "dog"], capsys
    )


def test_a_format_1_index_asks_for_a_rebuild(index_dir, tiny_model, capsys):
    """An index from before the whole-weights fingerprint: a clear message to rebuild, never a silent accept."""

    _write_manifest(index_dir, _manifest(index_dir) | {"format_version": 1})
    with pytest.raises(SpanInputError, match="older slice-st .index format 1.*rebuild it"):
        SpanIndex.load(index_dir, tiny_model)
    assert "rebuild it" in cli_error(["index", "info", str(index_dir)], capsys)


@pytest.mark.parametrize("version", [True, 1.0, "2", None])
def test_a_format_version_that_is_not_an_integer_is_refused_as_such(
    index_dir, tiny_model, capsys, version
):
    """``format_version: true`` (equal to 1 in Python) is not "index format 1": an unsupported format, as given."""
    _write_manifest(index_dir, _manifest(index_dir) | {"format_version": version})
    with pytest.raises(
        SpanInputError, match=f"index format {version!r} is not supported"
    ) as refused:
        SpanIndex.load(index_dir, tiny_model)
    assert "older slice-st" not in str(refused.value)
    assert "is not supported" in cli_error(["index", "info", str(index_dir)], capsys)


def test_fingerprint_covers_every_weight(make_tiny_model, tiny_model, index_dir):
    """One embedding row replaced ("cat" by "dog"), or one value between the old sample points: another fingerprint,
    and the index built with the original model refuses the changed one."""
    import torch

    from slice_st.loading import model_fingerprint

    original = model_fingerprint(tiny_model)
    assert (
        model_fingerprint(make_tiny_model(128)) == original
    )  # stable: same weights, same fingerprint

    def embeddings(model):
        return model[0].auto_model.embeddings.word_embeddings.weight

    changed = make_tiny_model(128)
    cat, dog = changed.tokenizer.convert_tokens_to_ids(["cat", "dog"])
    with torch.no_grad():
        embeddings(changed)[cat] = embeddings(changed)[dog]
    assert model_fingerprint(changed) != original
    nudged = make_tiny_model(128)
    with torch.no_grad():
        embeddings(nudged).view(-1)[1] += 0.25  # the old stride sampled elements 0, 7, 14, …
    assert model_fingerprint(nudged) != original
    with pytest.raises(SpanInputError, match="built with another model"):
        SpanIndex.load(index_dir, changed)


def _no_leftovers(index_dir, data_before) -> None:
    names = os.listdir(index_dir)
    assert not [name for name in names if name.endswith(".tmp")], names
    assert sorted(name for name in names if name.startswith("data-")) == data_before, names


def _numpy_full_disk(path, values):
    raise OSError("4096 requested and 1024 written")  # what numpy says on a full disk: no errno


@pytest.mark.parametrize("action", ["add", "remove"])
def test_full_disk_in_add_or_remove_is_one_line_and_keeps_the_index(
    index_dir, tiny_model, tmp_path, capsys, monkeypatch, action
):
    from slice_st.index import storage

    data_before = sorted(name for name in os.listdir(index_dir) if name.startswith("data-"))
    more = tmp_path / "b.txt"
    more.write_text("a cat sleeps on the sofa\n")
    monkeypatch.setattr(storage, "save_array", _numpy_full_disk)
    argv = (
        ["index", "add", str(index_dir), str(more)]
        if action == "add"
        else ["index", "remove", str(index_dir), f"{tmp_path / 'a.txt'}:1"]
    )
    error = cli_error(argv + ["--no-progress"], capsys)
    assert (
        f"cannot save the index to {index_dir}" in error and "requested and 1024 written" in error
    )
    _no_leftovers(index_dir, data_before)
    monkeypatch.undo()
    assert len(SpanIndex.load(index_dir, tiny_model)) == 4


def test_full_disk_while_writing_the_manifest_leaves_no_temp_file(
    index_dir, tmp_path, capsys, monkeypatch
):
    import errno

    data_before = sorted(name for name in os.listdir(index_dir) if name.startswith("data-"))
    real_fsync = os.fsync

    def fsync(descriptor):
        if ".manifest.json." in os.readlink(f"/proc/self/fd/{descriptor}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    more = tmp_path / "b.txt"
    more.write_text("a cat sleeps on the sofa\n")
    error = cli_error(["index", "add", str(index_dir), str(more), "--no-progress"], capsys)
    assert f"cannot save the index to {index_dir}: No space left on device" in error
    _no_leftovers(index_dir, data_before)
    assert _manifest(index_dir)["documents"] == 4


def test_full_disk_in_build_leaves_no_half_index(tiny_model_dir, tmp_path, capsys, monkeypatch):
    from slice_st.index import storage

    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(DOCS) + "\n")
    monkeypatch.setattr(storage, "save_array", _numpy_full_disk)
    out = tmp_path / "ix"
    error = cli_error(
        ["index", "build", str(corpus), "-o", str(out), "--model", tiny_model_dir, "--no-progress"],
        capsys,
    )
    assert f"cannot save the index to {out}" in error
    assert not out.exists()  # the folder the build created, empty but for its lock, is removed too


class _FullDisk(io.StringIO):
    """A standard output on a full disk (``mine -f jsonl > full/out``): every way of writing goes through ``write``."""

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_full_disk_on_standard_output_is_one_line(index_dir, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdout", _FullDisk())
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "mine",
                "--index",
                str(index_dir),
                "--model",
                tiny_model_dir,
                "-q",
                "dog",
                "-f",
                "jsonl",
                "--quiet",
            ]
        )
    error = capsys.readouterr().err
    assert (
        exit_info.value.code == 2
        and error == "slice-st: error: cannot write standard output: No space left on device.\n"
    ), error


def _second_index(tmp_path, tiny_model_dir, capsys, name="other"):
    """Another index of other documents (ids ``b.txt:N``), so shards cannot clash on ids."""
    corpus = tmp_path / "b.txt"
    corpus.write_text("a cat sleeps on the sofa\nthe train leaves at noon\n")
    out = tmp_path / name
    argv = [
        "index",
        "build",
        str(corpus),
        "-o",
        str(out),
        "--model",
        tiny_model_dir,
        "--max-span",
        "4",
    ]
    assert main([*argv, "--no-progress"]) == 0
    capsys.readouterr()
    return out


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_a_directory_of_indexes_never_follows_a_linked_index(
    index_dir, tiny_model_dir, tmp_path, capsys, where
):
    """A directory of indexes (no shards.json) holding a link to an index: refused, as a linked shard of shards.json
    is; the linked index is never searched. (Before: a link to an index outside was searched with the real one.)"""
    from slice_st.index import ShardedSpanIndex
    from slice_st.index.storage import shard_directories

    shards = tmp_path / "shards"
    shards.mkdir()
    shutil.copytree(index_dir, shards / "a-real")
    linked = (
        _second_index(tmp_path, tiny_model_dir, capsys) if where == "outside" else shards / "a-real"
    )
    (shards / "b-link").symlink_to(linked)
    with pytest.raises(SpanInputError, match="shard 'b-link' is a symbolic link"):
        shard_directories(shards)
    with pytest.raises(SpanInputError, match="shard 'b-link' is a symbolic link"):
        ShardedSpanIndex.load(shards)
    for argv in (
        ["mine", "--index", str(shards), "--model", tiny_model_dir, "-q", "dog"],
        ["index", "search", str(shards), "-q", "dog"],
    ):
        error = cli_error(argv, capsys)
        assert (
            f"{shards}: a directory of indexes holds a link (shard 'b-link' is a symbolic link"
            in error
        )
    os.remove(shards / "b-link")
    assert shard_directories(shards) == [
        str(shards / "a-real")
    ]  # without the link: the real index alone


def _swap_for_a_link_after_lstat(monkeypatch, target, outside):
    """Right after the first ``lstat`` of ``target`` (the check; ``os.path.islink`` calls it too), replace ``target``
    by a link to ``outside``: the check saw a regular file, the read that follows finds the link."""
    real_lstat = os.lstat
    swapped = []

    def lstat(path, *args, **kwargs):
        found = real_lstat(path, *args, **kwargs)
        if not swapped and os.fspath(path) == str(target):
            swapped.append(True)
            os.replace(target, str(target) + ".kept")
            os.symlink(outside, target)
        return found

    monkeypatch.setattr(os, "lstat", lstat)
    return swapped


@pytest.mark.parametrize(
    ("name", "mmap"),
    [
        ("manifest.json", True),
        ("settings.json", True),
        ("unit_vectors.npy", True),
        ("unit_vectors.npy", False),
        ("span_norms.npy", True),
        ("texts.bin", True),
        ("doc_ids.json", False),
    ],
)
def test_a_link_swapped_in_after_the_check_is_never_read(
    index_dir, tiny_model, tmp_path, monkeypatch, name, mmap
):
    """Check-then-open race: the file passes the ``lstat`` check, then a link to a valid copy outside takes its place.
    The read opens ``O_NOFOLLOW`` and ``fstat``s what it opened, so it refuses the link. (Before: the copy outside
    was read, and the index loaded from it.)"""

    folder = index_dir if name == "manifest.json" else index_dir / _manifest(index_dir)["data"]
    outside = tmp_path / f"outside-{name}"
    shutil.copy(folder / name, outside)  # a valid copy: reading it would load the index
    swapped = _swap_for_a_link_after_lstat(monkeypatch, folder / name, outside)
    with pytest.raises(SpanInputError, match=f"{name} is a symbolic link"):
        SpanIndex.load(index_dir, tiny_model, mmap=mmap)
    assert swapped and os.path.islink(folder / name)
    monkeypatch.undo()
    os.replace(str(folder / name) + ".kept", folder / name)
    assert len(SpanIndex.load(index_dir, tiny_model, mmap=mmap)) == len(
        DOCS
    )  # the real file: it loads


@pytest.mark.parametrize("mmap", [True, False])
def test_a_data_folder_swapped_for_a_link_after_the_check_is_never_read(
    index_dir, tiny_model, tmp_path, monkeypatch, mmap
):
    """The race one level up: the data folder passes its link check, then a link to a valid copy outside takes its
    place. The folder is opened ``O_DIRECTORY|O_NOFOLLOW`` and every file is opened inside that descriptor, so the copy
    outside is never read. (Before: O_NOFOLLOW guards only a path's last part, and the files were read through the
    linked folder.)"""

    data = index_dir / _manifest(index_dir)["data"]
    outside = tmp_path / "outside-data"
    shutil.copytree(data, outside)  # a valid copy: reading it would load the index
    swapped = _swap_for_a_link_after_lstat(monkeypatch, data, outside)
    with pytest.raises(SpanInputError, match="is a symbolic link"):
        SpanIndex.load(index_dir, tiny_model, mmap=mmap)
    assert swapped and os.path.islink(data)
    monkeypatch.undo()
    os.unlink(data)
    os.replace(str(data) + ".kept", data)
    assert len(SpanIndex.load(index_dir, tiny_model, mmap=mmap)) == len(DOCS)


def test_a_shard_list_swapped_for_a_link_after_the_check_is_never_read(
    index_dir, tiny_model, tmp_path, monkeypatch
):
    """The same race on ``shards.json``: checked as a regular file, then a link; refused, the copy outside unread."""
    from slice_st.index import ShardedSpanIndex

    sharded = tmp_path / "sharded"
    sharded.mkdir()
    shutil.copytree(index_dir, sharded / "part-00000-0000")
    (sharded / "shards.json").write_text(
        json.dumps({"complete": True, "shards": ["part-00000-0000"]})
    )
    outside = tmp_path / "outside-shards.json"
    shutil.copy(sharded / "shards.json", outside)
    swapped = _swap_for_a_link_after_lstat(monkeypatch, sharded / "shards.json", outside)
    with pytest.raises(
        SpanInputError, match="unreadable shards.json .*shards.json is a symbolic link"
    ):
        ShardedSpanIndex.load(sharded, tiny_model)
    assert swapped
    monkeypatch.undo()
    os.replace(str(sharded / "shards.json") + ".kept", sharded / "shards.json")
    assert len(ShardedSpanIndex.load(sharded, tiny_model)) == len(DOCS)


def test_a_planted_array_link_is_refused(index_dir, tiny_model, tmp_path, capsys):
    """A link planted at an array's path (to a valid copy outside): refused with the index's error, never followed."""

    data = index_dir / _manifest(index_dir)["data"]
    os.replace(data / "unit_vectors.npy", tmp_path / "outside.npy")
    (data / "unit_vectors.npy").symlink_to(tmp_path / "outside.npy")
    with pytest.raises(
        SpanInputError, match="missing or corrupt .unit_vectors.npy is not a regular file"
    ):
        SpanIndex.load(index_dir, tiny_model)
    assert "unit_vectors.npy is not a regular file" in cli_error(
        ["index", "info", str(index_dir), "--verify"], capsys
    )


def test_a_slice_minilm_folder_in_the_cwd_is_not_the_model_of_an_index(
    tmp_path, monkeypatch, tiny_model_dir
):
    from slice_st import SpanIndex
    from slice_st.index.span_index import model_source

    index = SpanIndex.build(["the dog barks"], slice_st.load_model(), max_span=2)
    index.save(str(tmp_path / "ix"))
    monkeypatch.chdir(tmp_path)
    slice_st.load_model(tiny_model_dir).save(
        str(tmp_path / "slice-minilm")
    )  # an unrelated folder of that name
    assert (
        model_source(str(tmp_path / "ix"), {"model_name": "slice-minilm"})
        == "slice-st/slice-minilm"
    )
    loaded = SpanIndex.load(str(tmp_path / "ix"))
    assert loaded.search("dog", top_k=1)[0][
        0
    ].span  # the shipped model (the tiny one would be refused: another fingerprint)
    assert (
        slice_st.load_model("slice-minilm").get_embedding_dimension() == 32
    )  # a bare name still means the folder here


def test_saved_format_is_pinned(index_dir):
    """The files, manifest fields and array types an index writes: indexes saved by earlier versions load only while
    these stay the same (change them only with a new INDEX_FORMAT_VERSION)."""
    import numpy as np

    from slice_st.index.storage import MANIFEST

    manifest = json.loads((index_dir / MANIFEST).read_text())
    assert manifest["format_version"] == 2
    assert set(manifest) >= {
        "data",
        "generation",
        "model_fingerprint",
        "span_config",
        "dtype",
        "units",
        "documents",
    }
    assert set(manifest) >= {
        "files",
        "samples",
        "model_name",
        "model_path",
        "array_bytes",
        "calibration",
        "candidates",
    }
    data = index_dir / manifest["data"]
    arrays = [
        "unit_vectors",
        "unit_chars",
        "span_norms",
        "segment_units",
        "segment_docs",
        "segment_first_unit",
    ]
    arrays.append("text_offsets")
    expected = {f"{name}.npy" for name in arrays} | {"texts.bin", "doc_ids.json", "settings.json"}
    assert set(manifest["files"]) == expected and set(manifest["samples"]) == set(arrays)
    assert set(os.listdir(data)) == expected | {".slice-st-data"}
    dtypes = {name: np.load(data / f"{name}.npy").dtype.str for name in arrays}
    assert dtypes == {
        "unit_vectors": "<f4",
        "unit_chars": "<i4",
        "span_norms": "<f4",
    } | dict.fromkeys(
        ("segment_units", "segment_docs", "segment_first_unit", "text_offsets"), "<i8"
    )
    assert set(json.loads((data / "settings.json").read_text())) == {
        "span_config",
        "dtype",
        "model_fingerprint",
    }
    assert json.loads((data / "doc_ids.json").read_text())[0].endswith("a.txt:1")


def test_file_rows_read_the_rows_a_map_shows(tmp_path):
    from slice_st.index.storage import array_digest, map_array

    values = np.arange(70, dtype=np.float16).reshape(35, 2)
    np.save(tmp_path / "a.npy", values)
    mapped, rows = map_array(str(tmp_path / "a.npy"))
    picks = np.array([0, 1, 2, 7, 9, 10, 34])
    assert np.array_equal(rows.take(picks), values[picks])
    assert np.array_equal(rows.take([5, 3]), values[[5, 3]])
    assert rows.take(np.zeros(0, np.int64)).shape == (0, 2)
    assert np.array_equal(rows.runs([3, 30], [6, 35]), values[np.r_[3:6, 30:35]])
    assert array_digest(mapped, rows) == array_digest(values)
    for bad in ([35], [-1]):
        with pytest.raises(IndexError):
            rows.take(bad)


def test_scratch_keeps_arrays_for_one_search_at_a_time():
    """A search borrows the kept arrays (the same memory next time, sized to each request); a search at the same
    time gets new ones; an array over the size kept is made afresh."""
    from slice_st.index.storage import SCRATCH_BYTES, Scratch

    scratch = Scratch()
    with scratch.borrowed() as array:
        first = array("rows", (4, 3), np.float32)
        with scratch.borrowed() as other:  # in use: new arrays
            assert not np.shares_memory(other("rows", (4, 3), np.float32), first)
        assert array("other", (2,), np.int32).dtype == np.int32
    with scratch.borrowed() as array:
        smaller = array("rows", (2, 3), np.float32)
        assert smaller.shape == (2, 3) and np.shares_memory(smaller, first)
        assert array("rows", (2, 3), np.float16).dtype == np.float16  # another dtype: remade
        large = (SCRATCH_BYTES // 4 + 1,)
        assert not np.shares_memory(
            array("big", large, np.float32), array("big", large, np.float32)
        )
