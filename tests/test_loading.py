"""slice_st.loading: save_slice_model and export_model write only the folder named: a user's files, links,
read-only parents and full disks give one clear error and leave nothing half-written."""

from __future__ import annotations

import json
import os

import pytest
from helpers import cli_error, cli_fails, deny_writes

import slice_st
from slice_st.errors import SpanInputError


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
        deny_writes(monkeypatch, tmp_path / "ro")
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
        raise OSError(
            errno.ENOSPC, "No space left on device", os.path.join(path, "model.safetensors")
        )

    monkeypatch.setattr(SentenceTransformer, "save", full_disk)
    with pytest.raises(FileAccessError, match="No space left on device.*model.safetensors"):
        save_slice_model(tiny_model, str(tmp_path / "model"))


def _partial_save_then(error):
    def save(self, path, *args, **kwargs):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "model.safetensors"), "wb") as handle:
            handle.write(b"half")
        raise error

    return save


def test_full_disk_in_export_leaves_no_partial_folder(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
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
    error = cli_error(["export", tiny_model_dir, "-o", str(out)], capsys)
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
    error = cli_error(["export", tiny_model_dir, "-o", str(out)], capsys)
    assert f"cannot export the model to {out}: No space left on device" in error
    assert (out / "notes.txt").read_text() == "mine" and not (out / "onnx" / "model.onnx").exists()
    assert not (out / "modules.json").exists()  # a half export is never reused as the cache


@pytest.mark.parametrize("kind", ["symlink", "symlink_to_nothing"])
def test_save_slice_model_to_a_link_is_refused(tiny_model, tmp_path, kind):
    """``save_slice_model`` to a link (to an empty folder, or dangling): refused, nothing written
    through it. (Before: a link to a folder was saved through, a dangling one called 'a file'.)"""
    from slice_st import FileAccessError, save_slice_model

    target, link = tmp_path / "target", tmp_path / "model"
    if kind == "symlink":
        target.mkdir()
    link.symlink_to(target)
    for path in (str(link), str(link) + "/"):
        with pytest.raises(
            FileAccessError, match=f"output {link} is a symbolic link: name the real folder"
        ):
            save_slice_model(tiny_model, path)
        with pytest.raises(FileAccessError, match="symbolic link"):
            save_slice_model(tiny_model, path, overwrite=True)
    assert (os.listdir(target) == []) if kind == "symlink" else not target.exists()
    assert sorted(os.listdir(tmp_path)) == (["model", "target"] if kind == "symlink" else ["model"])


def _model_copy(tiny_model_dir, tmp_path, name="model"):
    """A sentence-transformers folder of the tiny model (weights, config, tokenizer) to break on purpose."""
    folder = tmp_path / name
    slice_st.load_model(tiny_model_dir).save(str(folder))
    return folder


def test_b06_model_without_vocabulary_is_refused(tiny_model_dir, tmp_path, capsys):
    folder = _model_copy(tiny_model_dir, tmp_path)
    for name in ("tokenizer.json", "vocab.txt"):
        if (folder / name).exists():
            os.remove(folder / name)
    with pytest.raises(
        slice_st.ModelLoadError, match="tokens but the model has 30522 token embeddings"
    ):
        slice_st.load_model(str(folder))
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    assert "vocabulary files" in cli_fails(capsys, "mine", "-q", "guitar", corpus, "-m", folder)


@pytest.mark.parametrize(
    "breakage", ["a_file", "no_weights", "truncated_weights", "bad_config", "offline_hub_id"]
)
def test_b14_unloadable_models_are_one_clean_error(
    tiny_model_dir, tmp_path, capsys, breakage, monkeypatch
):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    if breakage == "a_file":
        model, expected = corpus, "is a file, not a model folder"
    elif breakage == "offline_hub_id":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        model, expected = "nobody-here/no-such-model", "HF_HUB_OFFLINE is set"
    else:
        model = _model_copy(tiny_model_dir, tmp_path)
        weights = model / "model.safetensors"
        if breakage == "no_weights":
            os.remove(weights)
        elif breakage == "truncated_weights":
            weights.write_bytes(weights.read_bytes()[:1000])
        else:
            (model / "config.json").write_text("{oops")
        expected = f"Cannot load the model in {model}"
    with pytest.raises(slice_st.ModelLoadError):
        slice_st.load_model(str(model))
    assert expected in cli_fails(capsys, "mine", "-q", "guitar", corpus, "-m", model)


@pytest.mark.parametrize(
    "device, expected",
    [("banana", "Unknown device 'banana'"), ("cuda:7", "cuda:7"), ("", "A device is a name")],
)
def test_b15_bad_devices_are_refused_before_loading(
    tmp_path, capsys, monkeypatch, device, expected
):
    import torch

    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    import sentence_transformers

    monkeypatch.setattr(
        sentence_transformers,
        "SentenceTransformer",
        lambda *a, **k: pytest.fail("the model loaded"),
    )
    assert expected in cli_fails(capsys, "mine", "-q", "guitar", corpus, "--device", device)
    assert expected in cli_fails(
        capsys, "index", "build", corpus, "-o", tmp_path / "ix", "--device", device
    )


def test_saved_weights_have_the_permissions_of_the_other_files(tiny_model, tmp_path):
    import os

    import slice_st

    slice_st.save_slice_model(tiny_model, str(tmp_path / "saved"))
    modes = {
        name: os.stat(tmp_path / "saved" / name).st_mode & 0o777
        for name in ("model.safetensors", "config.json", "modules.json")
    }
    assert len(set(modes.values())) == 1, (
        modes
    )  # model.safetensors was 0600 while the rest was 0644


@pytest.mark.parametrize(
    "revision", ["../../../escape", "/tmp/escape", "refs/../../x", "a\\..\\b", "", "main\x00"]
)
def test_a_revision_that_is_a_path_is_refused_before_anything_loads(
    tmp_path, monkeypatch, revision
):
    """The Hub client keeps ``refs/REVISION`` in its cache: a revision with ``../`` or an absolute path would be
    written outside it, so it is refused before any request (a hostile Hub would answer any revision)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for backend in ("torch", "onnx"):
        with pytest.raises(SpanInputError, match="not a branch, tag or commit name"):
            slice_st.load_model("org/model", revision=revision, backend=backend)
    assert os.listdir(tmp_path) == []  # nothing written


def test_export_to_a_file_is_refused_before_the_model_loads(tmp_path):
    """``slice-st export MODEL -o FILE`` loaded and exported the model, then failed with "File exists"."""
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    with pytest.raises(
        slice_st.errors.FileAccessError, match="output .*notes.txt is a file, not a folder"
    ):
        slice_st.export_model("no-such-model-anywhere", str(file))
    with pytest.raises(slice_st.errors.FileAccessError, match="notes.txt is a file, not a folder"):
        slice_st.export_model("no-such-model-anywhere", str(file / "sub"))
    assert file.read_text() == "mine"
