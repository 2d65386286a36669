"""Nothing outside the folder the user named (issue 24): shipping, saving, training, index temp files and manifests.

Each test plants what a careless or hostile user could leave (their own files, symbolic links, hand-edited
manifests, a full disk) and checks that slice-st refuses with one clear error and touches nothing it did not write.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from slice_st.cli import main
from slice_st.pretrained import shipped_model

SHIPPED = shipped_model("slice-minilm")


def _cli_error(argv, capsys) -> str:
    """Run the CLI, expect exit 2 with one ``slice-st: error:`` line; return that line."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    last = error.strip().splitlines()[-1]
    assert last.startswith("slice-st: error:") and "Traceback" not in error, error
    return last


def _tree(path) -> dict[str, bytes]:
    """Every file under ``path`` (links not followed) and its bytes: what must not change."""
    found = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            found[os.path.relpath(full, path)] = b"LINK" if os.path.islink(full) else _bytes(full)
    return found


def _deny_writes(monkeypatch, directory) -> None:
    """Make ``directory`` read-only; as root (who may write anyway) also make ``os.access`` say so."""
    os.chmod(directory, 0o555)
    if os.geteuid() == 0:
        real_access = os.access
        denied = os.path.realpath(directory)

        def access(path, mode, *args, **kwargs):
            if os.path.realpath(path) == denied and mode & os.W_OK:
                return False
            return real_access(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", access)


def _bytes(path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


# ------------------------------------------------------------------------------------------ 2. save_slice_model
def test_save_slice_model_refuses_a_folder_with_user_files(tiny_model, tmp_path):
    from slice_st import FileAccessError, save_slice_model

    target = tmp_path / "model"
    target.mkdir()
    (target / "README.md").write_text("my notes")
    (target / "config.json").write_text('{"mine": true}')
    with pytest.raises(FileAccessError, match="not empty.*overwrite=True"):
        save_slice_model(tiny_model, str(target))
    assert (target / "README.md").read_text() == "my notes" and sorted(os.listdir(target)) == [
        "README.md",
        "config.json",
    ]
    save_slice_model(tiny_model, str(target), overwrite=True)
    assert json.loads((target / "config.json").read_text()) != {"mine": True}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert save_slice_model(tiny_model, str(empty)) == str(empty)  # an empty folder is fine


@pytest.mark.parametrize("where", ["file", "under_file", "read_only_parent"])
def test_save_slice_model_bad_target_is_one_clear_error(tiny_model, tmp_path, where, monkeypatch):
    from slice_st import FileAccessError, save_slice_model

    (tmp_path / "notes.txt").write_text("x")
    if where == "read_only_parent":
        (tmp_path / "ro").mkdir()
        _deny_writes(monkeypatch, tmp_path / "ro")
    target = {
        "file": tmp_path / "notes.txt",
        "under_file": tmp_path / "notes.txt" / "model",
        "read_only_parent": tmp_path / "ro" / "model",
    }[where]
    try:
        with pytest.raises(
            FileAccessError,
            match=f"cannot save a model.*{'is a file' if where != 'read_only_parent' else 'not writable'}",
        ):
            save_slice_model(tiny_model, str(target))
    finally:
        os.chmod(tmp_path / "ro", 0o755) if where == "read_only_parent" else None
    assert (tmp_path / "notes.txt").read_text() == "x"


def test_save_slice_model_failed_write_is_a_file_access_error(tiny_model, tmp_path, monkeypatch):
    import errno

    from sentence_transformers import SentenceTransformer

    from slice_st import FileAccessError, save_slice_model

    def full_disk(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", os.path.join(path, "model.safetensors"))

    monkeypatch.setattr(SentenceTransformer, "save", full_disk)
    with pytest.raises(FileAccessError, match="No space left on device.*model.safetensors"):
        save_slice_model(tiny_model, str(tmp_path / "model"))


# ------------------------------------------------------------------------------------------ 3. slice-st train -o
def _earlier_run(path):
    (path / "checkpoint-1").mkdir(parents=True)
    (path / "checkpoint-1" / "trainer_state.json").write_text("{}")
    (path / "final").mkdir()
    (path / "final" / "README.md").write_text("my card")
    return _tree(path)


def test_train_refuses_a_folder_with_files_before_any_work(tmp_path, capsys, tiny_model_dir, monkeypatch):
    from slice_st import FileAccessError
    from slice_st.training import trainer

    run = tmp_path / "run"
    before = _earlier_run(run)
    monkeypatch.setattr(trainer, "build_trainer", lambda *args, **kwargs: pytest.fail("refused only after loading"))
    error = _cli_error(["train", "-o", str(run), "-m", tiny_model_dir, "--train-data", str(tmp_path / "x")], capsys)
    assert "not empty" in error and "--resume" in error and "--overwrite" in error
    assert _tree(run) == before
    with pytest.raises(FileAccessError, match="not empty"):
        trainer.train(trainer.TrainConfig(output_dir=str(run), model=tiny_model_dir, train_data=[str(tmp_path / "x")]))
    assert _tree(run) == before
    assert trainer.check_train_output(str(run), resume=True) == str(run)  # --resume continues the run there
    assert trainer.check_train_output(str(run), overwrite=True) == str(run)


def test_train_into_a_file_is_one_clear_error(tmp_path, capsys, tiny_model_dir):
    target = tmp_path / "notes.txt"
    target.write_text("x")
    for output in (target, target / "run"):
        error = _cli_error(
            ["train", "-o", str(output), "-m", tiny_model_dir, "--train-data", str(tmp_path / "x")], capsys
        )
        assert "is a file" in error
    assert target.read_text() == "x"


# ------------------------------------------------------------------------------------------ indexes (items 4-7)
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
    assert (
        main(
            [
                "index",
                "build",
                str(corpus),
                "-o",
                str(out),
                "--model",
                tiny_model_dir,
                "--max-span",
                "4",
                "--no-progress",
            ]
        )
        == 0
    )
    capsys.readouterr()
    return out


def _manifest(index_dir) -> dict:
    from slice_st.index.storage import MANIFEST

    return json.loads((index_dir / MANIFEST).read_text())


def _write_manifest(index_dir, manifest) -> None:
    from slice_st.index.storage import MANIFEST

    (index_dir / MANIFEST).write_text(json.dumps(manifest))


def test_ray_force_build_never_follows_a_linked_build_state(tiny_model_dir, tmp_path, capsys):
    """4. A ``.slice-st-build`` that is a link to a user's folder: refused, and that folder keeps every file."""
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(DOCS) + "\n")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "group-00000.json").write_text("mine")
    (precious / "thesis.tex").write_text("mine")
    out = tmp_path / "ix"
    out.mkdir()
    (out / ".slice-st-build").symlink_to(precious)
    before = _tree(precious)
    error = _cli_error(
        ["index", "build", str(corpus), "-o", str(out), "--model", tiny_model_dir, "--ray", "--force", "--no-progress"],
        capsys,
    )
    assert ".slice-st-build is a symbolic link" in error
    assert _tree(precious) == before


def test_a_planted_manifest_temp_link_is_never_written_through(index_dir, tiny_model_dir, tmp_path, capsys):
    """5. ``index add`` with ``.manifest.json.tmp`` a link to a file outside: that file is unchanged, manifest.json
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
        name for name in os.listdir(index_dir) if name.endswith(".tmp") and not os.path.islink(index_dir / name)
    ]


def test_a_linked_manifest_or_lock_is_refused(index_dir, tiny_model_dir, tmp_path, capsys):
    """5. ``manifest.json`` or ``.lock`` a link to outside: one clear error, the outside file neither read nor
    truncated."""
    from slice_st.index.storage import MANIFEST

    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(_manifest(index_dir)))
    before = outside.read_text()
    os.remove(index_dir / ".lock")
    (index_dir / ".lock").symlink_to(outside)
    more = tmp_path / "b.txt"
    more.write_text("a cat sleeps on the sofa\n")
    error = _cli_error(["index", "add", str(index_dir), str(more), "--no-progress"], capsys)
    assert ".lock is not a regular file" in error and outside.read_text() == before
    os.remove(index_dir / ".lock")
    os.replace(index_dir / MANIFEST, tmp_path / "kept.json")
    (index_dir / MANIFEST).symlink_to(outside)
    error = _cli_error(["index", "info", str(index_dir)], capsys)
    assert "manifest.json is a symbolic link" in error and outside.read_text() == before


def test_atomic_writes_never_follow_links(tmp_path):
    """5. Every temporary file is new (``O_EXCL|O_NOFOLLOW``): a link at the target is replaced, its target
    untouched."""
    from slice_st.index import Calibration
    from slice_st.index.storage import write_bytes, write_json
    from slice_st.text import atomic_file

    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    folder = tmp_path / "ix"
    folder.mkdir()
    (folder / "shards.json").symlink_to(outside)
    write_json(str(folder / "shards.json"), {"a": 1})
    assert outside.read_text() == "precious" and not os.path.islink(folder / "shards.json")
    (folder / "calibration.json.tmp").symlink_to(outside)  # the old fixed temporary name
    Calibration(x=[0.0, 1.0], y=[0.0, 5.0]).save(str(folder / "calibration.json"))
    assert outside.read_text() == "precious"
    (folder / "texts.bin").symlink_to(outside)
    with pytest.raises(FileExistsError):
        write_bytes(str(folder / "texts.bin"), b"x")
    assert outside.read_text() == "precious"
    with pytest.raises(RuntimeError), atomic_file(str(folder / "x.json")) as handle:
        handle.write(b"half")
        raise RuntimeError("interrupted")
    assert not (folder / "x.json").exists() and not [n for n in os.listdir(folder) if n.startswith(".x.json")]


@pytest.mark.parametrize("name", ["../../outside.txt", "/etc/passwd", "..", ".", "sub/file", ".hidden"])
def test_manifest_file_names_must_be_plain_names_in_the_folder(
    index_dir, tiny_model, tmp_path, capsys, monkeypatch, name
):
    """6. A ``files`` entry naming something outside: refused before anything is stat'ed or opened."""
    from slice_st import SpanIndex, SpanInputError

    manifest = _manifest(index_dir)
    manifest["files"][name] = {"bytes": 10, "sha256": "0" * 64}
    _write_manifest(index_dir, manifest)
    touched = []
    real_lstat, real_stat = os.lstat, os.stat
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: (touched.append(os.fspath(p)), real_lstat(p, *a, **k))[1])
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: (touched.append(os.fspath(p)), real_stat(p, *a, **k))[1])
    with pytest.raises(SpanInputError, match="unreadable index manifest .files entry"):
        SpanIndex.load(index_dir, tiny_model)
    assert not [p for p in touched if "outside" in p or p.startswith("/etc")]
    monkeypatch.undo()
    assert "unreadable index manifest" in _cli_error(["index", "info", str(index_dir), "--verify"], capsys)


def test_verify_reads_only_regular_files_of_the_recorded_size(index_dir, tiny_model, capsys):
    """6. A data file replaced by a link to ``/dev/zero`` (or to a file outside): an error at once, never read."""
    from slice_st import SpanIndex, SpanInputError

    data = index_dir / _manifest(index_dir)["data"]
    os.remove(data / "texts.bin")
    (data / "texts.bin").symlink_to("/dev/zero")
    with pytest.raises(SpanInputError, match="texts.bin is not a regular file"):
        SpanIndex.load(index_dir, tiny_model, verify=True)
    assert "texts.bin is not a regular file" in _cli_error(["index", "info", str(index_dir), "--verify"], capsys)


def test_file_digest_stops_at_the_recorded_size(tmp_path):
    from slice_st.index.storage import file_digest

    path = tmp_path / "grown.bin"
    path.write_bytes(b"x" * 10)
    assert file_digest(str(path), 10) == file_digest(str(path))
    path.write_bytes(b"x" * (3 << 20))
    assert file_digest(str(path), 10) != file_digest(str(path))  # read 11 bytes, not 3 MiB: cannot match
    with pytest.raises(ValueError, match="not a regular file"):
        file_digest("/dev/zero", 10)


@pytest.mark.parametrize("shard", ["..", "."])
def test_shard_names_must_be_folders_inside_the_index(index_dir, tiny_model_dir, tmp_path, capsys, shard):
    """6. ``shards.json`` naming ``..`` (the parent's index) or a path elsewhere: refused, the parent never searched."""
    child = index_dir / "child"
    child.mkdir()
    (child / "shards.json").write_text(json.dumps({"complete": True, "shards": [shard]}))
    error = _cli_error(["mine", "--index", str(child), "--model", tiny_model_dir, "-q", "dog"], capsys)
    assert "unreadable shards.json" in error


def test_shard_links_to_outside_are_refused(index_dir, tiny_model_dir, tmp_path, capsys):
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "part-00000-0000").symlink_to(index_dir)
    (sharded / "shards.json").write_text(json.dumps({"complete": True, "shards": ["part-00000-0000"]}))
    assert "unreadable shards.json" in _cli_error(
        ["mine", "--index", str(sharded), "--model", tiny_model_dir, "-q", "dog"], capsys
    )


@pytest.mark.parametrize("drop", ["samples", "files", "both"])
def test_a_manifest_without_its_checksums_is_refused(index_dir, tiny_model, capsys, drop):
    """7. Without ``samples``/``files`` every integrity check was off (a reversed array scored 1.258): now an error."""
    from slice_st import SpanIndex, SpanInputError

    manifest = _manifest(index_dir)
    for key in ("samples", "files") if drop == "both" else (drop,):
        del manifest[key]
    _write_manifest(index_dir, manifest)
    with pytest.raises(SpanInputError, match="unreadable index manifest"):
        SpanIndex.load(index_dir, tiny_model)
    assert "unreadable index manifest" in _cli_error(["index", "info", str(index_dir), "--verify"], capsys)


@pytest.mark.parametrize("edit", [{"min_span": 3}, {"max_span": 2}, {"unit": "token"}, {"min_span": 2, "max_span": 5}])
def test_edited_span_settings_are_a_clear_error(index_dir, tiny_model, tiny_model_dir, capsys, edit):
    """7. A hand-edited ``span_config`` (min_span 1 → 3 scored 2.93, a cosine above 1; unit word → token was
    accepted)."""
    from slice_st import SpanIndex, SpanInputError

    manifest = _manifest(index_dir)
    manifest["span_config"] |= edit
    _write_manifest(index_dir, manifest)
    with pytest.raises(SpanInputError, match="span_config .* do not match what the index data was written with"):
        SpanIndex.load(index_dir, tiny_model)
    assert "the manifest was edited" in _cli_error(
        ["mine", "--index", str(index_dir), "--model", tiny_model_dir, "-q", "dog"], capsys
    )


def test_a_format_1_index_asks_for_a_rebuild(index_dir, tiny_model, capsys):
    """8. An index from before the whole-weights fingerprint: a clear message to rebuild, never a silent accept."""
    from slice_st import SpanIndex, SpanInputError

    _write_manifest(index_dir, _manifest(index_dir) | {"format_version": 1})
    with pytest.raises(SpanInputError, match="older slice-st .index format 1.*rebuild it"):
        SpanIndex.load(index_dir, tiny_model)
    assert "rebuild it" in _cli_error(["index", "info", str(index_dir)], capsys)


# ------------------------------------------------------------------------------------------ 8. model fingerprint
def test_fingerprint_covers_every_weight(make_tiny_model, tiny_model, index_dir):
    """One embedding row replaced ("cat" by "dog"), or one value between the old sample points: another fingerprint,
    and the index built with the original model refuses the changed one."""
    import torch

    from slice_st import SpanIndex, SpanInputError
    from slice_st.loading import model_fingerprint

    original = model_fingerprint(tiny_model)
    assert model_fingerprint(make_tiny_model(128)) == original  # stable: same weights, same fingerprint

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


# ------------------------------------------------------------------------------------------ 9. full disks
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
    from slice_st import SpanIndex
    from slice_st.index import span_index

    data_before = sorted(name for name in os.listdir(index_dir) if name.startswith("data-"))
    more = tmp_path / "b.txt"
    more.write_text("a cat sleeps on the sofa\n")
    monkeypatch.setattr(span_index, "save_array", _numpy_full_disk)
    argv = (
        ["index", "add", str(index_dir), str(more)]
        if action == "add"
        else ["index", "remove", str(index_dir), f"{tmp_path / 'a.txt'}:1"]
    )
    error = _cli_error(argv + ["--no-progress"], capsys)
    assert f"cannot save the index to {index_dir}" in error and "requested and 1024 written" in error
    _no_leftovers(index_dir, data_before)
    monkeypatch.undo()
    assert len(SpanIndex.load(index_dir, tiny_model)) == 4


def test_full_disk_while_writing_the_manifest_leaves_no_temp_file(index_dir, tmp_path, capsys, monkeypatch):
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
    error = _cli_error(["index", "add", str(index_dir), str(more), "--no-progress"], capsys)
    assert f"cannot save the index to {index_dir}: No space left on device" in error
    _no_leftovers(index_dir, data_before)
    assert _manifest(index_dir)["documents"] == 4


def test_full_disk_in_build_leaves_no_half_index(tiny_model_dir, tmp_path, capsys, monkeypatch):
    from slice_st.index import span_index

    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(DOCS) + "\n")
    monkeypatch.setattr(span_index, "save_array", _numpy_full_disk)
    out = tmp_path / "ix"
    error = _cli_error(
        ["index", "build", str(corpus), "-o", str(out), "--model", tiny_model_dir, "--no-progress"], capsys
    )
    assert f"cannot save the index to {out}" in error
    assert not out.exists()  # the folder the build created, empty but for its lock, is removed too


def _partial_save_then(error):
    def save(self, path, *args, **kwargs):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "model.safetensors"), "wb") as handle:
            handle.write(b"half")
        raise error

    return save


def test_full_disk_in_export_leaves_no_partial_folder(tiny_model_dir, tmp_path, capsys, monkeypatch):
    pytest.importorskip("onnx")
    from safetensors import SafetensorError
    from sentence_transformers import SentenceTransformer

    monkeypatch.setattr(
        SentenceTransformer,
        "save",
        _partial_save_then(
            SafetensorError(
                'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on '
                'device" })'
            )
        ),
    )
    out = tmp_path / "export"
    error = _cli_error(["export", tiny_model_dir, "-o", str(out)], capsys)
    assert f"cannot export the model to {out}" in error and "StorageFull" in error
    assert not out.exists()


def test_full_disk_in_export_into_a_users_folder_removes_only_the_partial_files(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    pytest.importorskip("onnx")
    import errno

    from slice_st import backends

    out = tmp_path / "export"
    out.mkdir()
    (out / "notes.txt").write_text("mine")

    def export_onnx(model, path, *args, **kwargs):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(b"half an onnx file")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(backends, "export_onnx", export_onnx)
    error = _cli_error(["export", tiny_model_dir, "-o", str(out)], capsys)
    assert f"cannot export the model to {out}: No space left on device" in error
    assert (out / "notes.txt").read_text() == "mine" and not (out / "onnx" / "model.onnx").exists()
    assert not (out / "modules.json").exists()  # a half export is never reused as the cache


class _FullDisk:
    """A standard output on a full disk (``mine -f jsonl > full/out``)."""

    encoding = "utf-8"

    def write(self, text):
        import errno

        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass

    def isatty(self):
        return False


def test_full_disk_on_standard_output_is_one_line(index_dir, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdout", _FullDisk())
    with pytest.raises(SystemExit) as exit_info:
        main(["mine", "--index", str(index_dir), "--model", tiny_model_dir, "-q", "dog", "-f", "jsonl", "--quiet"])
    error = capsys.readouterr().err
    assert (
        exit_info.value.code == 2
        and error == "slice-st: error: cannot write standard output: No space left on device.\n"
    ), error


def test_train_never_writes_or_deletes_through_linked_run_folders(make_tiny_model, tmp_path, monkeypatch):
    """3. ``_final.new`` / ``_final.old`` / ``final`` links in a resumed run's folder: removed as links, their targets
    untouched."""
    from types import SimpleNamespace

    from slice_st.training import trainer

    model = make_tiny_model(128)
    fake = SimpleNamespace(
        model=model,
        train=lambda resume_from_checkpoint=None: SimpleNamespace(training_loss=0.5),
        args=SimpleNamespace(process_index=0, world_size=1),
        state=SimpleNamespace(global_step=1),
        is_world_process_zero=lambda: True,
    )
    monkeypatch.setattr(trainer, "build_trainer", lambda *args, **kwargs: fake)
    run = tmp_path / "run"
    run.mkdir()
    targets = {}
    for name in ("_final.new", "_final.old", "final"):
        target = tmp_path / f"user-{name.strip('_.')}"
        target.mkdir()
        if name != "_final.new":  # an empty folder behind _final.new: the old code saved the model into it
            (target / "keep.txt").write_text("mine")
        (run / name).symlink_to(target)
        targets[target] = _tree(target)
    trainer.train(trainer.TrainConfig(output_dir=str(run), resume=True, train_data=["unused"]))
    assert {target: _tree(target) for target in targets} == targets
    assert not os.path.islink(run / "final") and (run / "final" / "modules.json").is_file()
    assert sorted(os.listdir(run)) == ["final"]


# ------------------------------------------------------------------------------------------ links never followed
def _second_index(tmp_path, tiny_model_dir, capsys, name="other"):
    """Another index of other documents (ids ``b.txt:N``), so shards cannot clash on ids."""
    corpus = tmp_path / "b.txt"
    corpus.write_text("a cat sleeps on the sofa\nthe train leaves at noon\n")
    out = tmp_path / name
    argv = ["index", "build", str(corpus), "-o", str(out), "--model", tiny_model_dir, "--max-span", "4"]
    assert main([*argv, "--no-progress"]) == 0
    capsys.readouterr()
    return out


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_a_directory_of_indexes_never_follows_a_linked_index(index_dir, tiny_model_dir, tmp_path, capsys, where):
    """A directory of indexes (no shards.json) holding a link to an index: refused, as a linked shard of shards.json
    is; the linked index is never searched. (Before: a link to an index outside was searched with the real one.)"""
    from slice_st import SpanInputError
    from slice_st.index import ShardedSpanIndex
    from slice_st.index.storage import shard_directories

    shards = tmp_path / "shards"
    shards.mkdir()
    shutil.copytree(index_dir, shards / "a-real")
    linked = _second_index(tmp_path, tiny_model_dir, capsys) if where == "outside" else shards / "a-real"
    (shards / "b-link").symlink_to(linked)
    with pytest.raises(SpanInputError, match="shard 'b-link' is a symbolic link"):
        shard_directories(shards)
    with pytest.raises(SpanInputError, match="shard 'b-link' is a symbolic link"):
        ShardedSpanIndex.load(shards)
    for argv in (
        ["mine", "--index", str(shards), "--model", tiny_model_dir, "-q", "dog"],
        ["index", "search", str(shards), "-q", "dog"],
    ):
        error = _cli_error(argv, capsys)
        assert f"{shards}: a directory of indexes holds a link (shard 'b-link' is a symbolic link" in error
    os.remove(shards / "b-link")
    assert shard_directories(shards) == [str(shards / "a-real")]  # without the link: the real index alone


@pytest.mark.parametrize("kind", ["symlink", "symlink_to_nothing"])
def test_save_slice_model_to_a_link_is_refused(tiny_model, tmp_path, kind):
    """``save_slice_model`` to a link (to an empty folder, or dangling): ship-adapter's refusal, nothing written
    through it. (Before: a link to a folder was saved through, a dangling one called 'a file'.)"""
    from slice_st import FileAccessError, save_slice_model

    target, link = tmp_path / "target", tmp_path / "model"
    if kind == "symlink":
        target.mkdir()
    link.symlink_to(target)
    for path in (str(link), str(link) + "/"):
        with pytest.raises(FileAccessError, match=f"output {link} is a symbolic link: name the real folder"):
            save_slice_model(tiny_model, path)
        with pytest.raises(FileAccessError, match="symbolic link"):
            save_slice_model(tiny_model, path, overwrite=True)
    assert (os.listdir(target) == []) if kind == "symlink" else not target.exists()
    assert sorted(os.listdir(tmp_path)) == (["model", "target"] if kind == "symlink" else ["model"])


@pytest.mark.parametrize("kind", ["symlink", "symlink_to_nothing"])
def test_train_into_a_link_is_one_clear_error_before_any_work(tmp_path, capsys, tiny_model_dir, monkeypatch, kind):
    """``slice-st train -o LINK`` (also ``LINK/``, ``--resume``, ``--overwrite``): one error line, exit 2, before the
    model or data are loaded; nothing written through the link. (Before: a link to an empty folder was trained in.)"""
    from slice_st import FileAccessError
    from slice_st.training import trainer

    target, link = tmp_path / "target", tmp_path / "run"
    if kind == "symlink":
        target.mkdir()
    link.symlink_to(target)
    monkeypatch.setattr(trainer, "build_trainer", lambda *args, **kwargs: pytest.fail("refused only after loading"))
    train = ["train", "-m", tiny_model_dir, "--train-data", str(tmp_path / "x")]
    for extra in ([], ["--resume"], ["--overwrite"]):
        for output in (str(link), str(link) + "/"):
            error = _cli_error([*train, "-o", output, *extra], capsys)
            assert f"output {link} is a symbolic link: name the real folder for the run." in error
    with pytest.raises(FileAccessError, match="is a symbolic link"):
        trainer.check_train_output(str(link), resume=True)
    assert (os.listdir(target) == []) if kind == "symlink" else not target.exists()


def test_open_regular_file_refuses_links_fifos_and_folders(tmp_path):
    """The one helper every index read goes through: O_NOFOLLOW, then fstat of what was opened; a FIFO never blocks."""
    import signal

    from slice_st import FileAccessError
    from slice_st.text import open_regular_file

    data = tmp_path / "data.bin"
    data.write_bytes(b"0123456789")
    with open_regular_file(str(data)) as handle:
        assert handle.read() == b"0123456789"
    with open_regular_file(data, size=10) as handle:
        assert handle.read(4) == b"0123" and not handle.closed
    with pytest.raises(FileAccessError, match="has 10 bytes, not the 11 expected"):
        open_regular_file(data, size=11)
    (tmp_path / "link").symlink_to(data)
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    for name in ("link", "dangling"):
        with pytest.raises(FileAccessError, match=f"{name} is a symbolic link, not followed"):
            open_regular_file(tmp_path / name)
    with pytest.raises(FileAccessError, match="is not a regular file"):
        open_regular_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_regular_file(tmp_path / "missing")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")  # no writer: a blocking open for reading would wait for ever

        def hung(*_):
            raise AssertionError("opening a FIFO blocked")

        previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(10)
        try:
            with pytest.raises(FileAccessError, match="fifo is not a regular file"):
                open_regular_file(tmp_path / "fifo")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


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
def test_a_link_swapped_in_after_the_check_is_never_read(index_dir, tiny_model, tmp_path, monkeypatch, name, mmap):
    """Check-then-open race: the file passes the ``lstat`` check, then a link to a valid copy outside takes its place.
    The read opens ``O_NOFOLLOW`` and ``fstat``s what it opened, so it refuses the link. (Before: the copy outside
    was read, and the index loaded from it.)"""
    from slice_st import SpanIndex, SpanInputError

    folder = index_dir if name == "manifest.json" else index_dir / _manifest(index_dir)["data"]
    outside = tmp_path / f"outside-{name}"
    shutil.copy(folder / name, outside)  # a valid copy: reading it would load the index
    swapped = _swap_for_a_link_after_lstat(monkeypatch, folder / name, outside)
    with pytest.raises(SpanInputError, match=f"{name} is a symbolic link"):
        SpanIndex.load(index_dir, tiny_model, mmap=mmap)
    assert swapped and os.path.islink(folder / name)
    monkeypatch.undo()
    os.replace(str(folder / name) + ".kept", folder / name)
    assert len(SpanIndex.load(index_dir, tiny_model, mmap=mmap)) == len(DOCS)  # the real file: it loads


@pytest.mark.parametrize("mmap", [True, False])
def test_a_data_folder_swapped_for_a_link_after_the_check_is_never_read(
    index_dir, tiny_model, tmp_path, monkeypatch, mmap
):
    """The race one level up: the data folder passes its link check, then a link to a valid copy outside takes its
    place. The folder is opened ``O_DIRECTORY|O_NOFOLLOW`` and every file is opened inside that descriptor, so the copy
    outside is never read. (Before: O_NOFOLLOW guards only a path's last part, and the files were read through the
    linked folder.)"""
    from slice_st import SpanIndex, SpanInputError

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


def test_a_shard_list_swapped_for_a_link_after_the_check_is_never_read(index_dir, tiny_model, tmp_path, monkeypatch):
    """The same race on ``shards.json``: checked as a regular file, then a link; refused, the copy outside unread."""
    from slice_st import SpanInputError
    from slice_st.index import ShardedSpanIndex

    sharded = tmp_path / "sharded"
    sharded.mkdir()
    shutil.copytree(index_dir, sharded / "part-00000-0000")
    (sharded / "shards.json").write_text(json.dumps({"complete": True, "shards": ["part-00000-0000"]}))
    outside = tmp_path / "outside-shards.json"
    shutil.copy(sharded / "shards.json", outside)
    swapped = _swap_for_a_link_after_lstat(monkeypatch, sharded / "shards.json", outside)
    with pytest.raises(SpanInputError, match="unreadable shards.json .*shards.json is a symbolic link"):
        ShardedSpanIndex.load(sharded, tiny_model)
    assert swapped
    monkeypatch.undo()
    os.replace(str(sharded / "shards.json") + ".kept", sharded / "shards.json")
    assert len(ShardedSpanIndex.load(sharded, tiny_model)) == len(DOCS)


def test_a_planted_array_link_is_refused(index_dir, tiny_model, tmp_path, capsys):
    """A link planted at an array's path (to a valid copy outside): refused with the index's error, never followed."""
    from slice_st import SpanIndex, SpanInputError

    data = index_dir / _manifest(index_dir)["data"]
    os.replace(data / "unit_vectors.npy", tmp_path / "outside.npy")
    (data / "unit_vectors.npy").symlink_to(tmp_path / "outside.npy")
    with pytest.raises(SpanInputError, match="missing or corrupt .unit_vectors.npy is not a regular file"):
        SpanIndex.load(index_dir, tiny_model)
    assert "unit_vectors.npy is not a regular file" in _cli_error(["index", "info", str(index_dir), "--verify"], capsys)
