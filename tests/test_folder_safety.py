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


# ------------------------------------------------------------------------------------------ 1. ship-adapter
def _run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SHIPPED.adapter_dir, run / "adapter", ignore=shutil.ignore_patterns("provenance.json"))
    return run


def _user_folder(path):
    (path / "src").mkdir(parents=True)
    (path / "thesis.tex").write_text("\\chapter{mine}")
    (path / "src" / "main.py").write_text("print('mine')")
    return _tree(path)


def test_ship_adapter_refuses_a_folder_with_user_files(tmp_path, capsys):
    run, out = _run(tmp_path), tmp_path / "out"
    before = _user_folder(out)
    error = _cli_error(["ship-adapter", str(run), "-o", str(out)], capsys)
    assert "not empty" in error and "--overwrite" in error
    assert _tree(out) == before


def test_ship_adapter_dot_never_deletes_the_working_directory(tmp_path, capsys, monkeypatch):
    run, work = _run(tmp_path), tmp_path / "work"
    before = _user_folder(work)
    monkeypatch.chdir(work)
    _cli_error(["ship-adapter", str(run), "-o", "."], capsys)
    assert _tree(work) == before


def test_ship_adapter_overwrite_replaces_only_its_own_files(tmp_path, capsys):
    run, out = _run(tmp_path), tmp_path / "out"
    before = _user_folder(out)
    (out / "provenance.json").write_text("{}")
    staging = tmp_path / "out.staging"
    staging.mkdir()
    (staging / "notes.txt").write_text("a user's folder that happens to have this name")
    assert main(["ship-adapter", str(run), "-o", str(out), "--overwrite", "--quiet"]) == 0
    after = _tree(out)
    assert {name: after[name] for name in before} == before  # thesis.tex and src/ untouched
    assert set(after) - set(before) == {"adapter_config.json", "adapter_model.safetensors", "provenance.json"}
    assert json.loads(after["provenance.json"])["name"] == "slice-minilm"
    assert (staging / "notes.txt").exists()  # never deleted: it is not ours
    assert sorted(os.listdir(tmp_path)) == ["out", "out.staging", "run"]  # no temporary folder left
    capsys.readouterr()


def test_ship_adapter_into_a_new_folder_keeps_a_users_staging_folder(tmp_path, capsys):
    run, out = _run(tmp_path), tmp_path / "out"
    (tmp_path / "out.staging").mkdir()
    (tmp_path / "out.staging" / "keep.txt").write_text("mine")
    assert main(["ship-adapter", str(run), "-o", str(out), "--quiet"]) == 0
    assert sorted(os.listdir(out)) == ["adapter_config.json", "adapter_model.safetensors", "provenance.json"]
    assert (tmp_path / "out.staging" / "keep.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["out", "out.staging", "run"]
    capsys.readouterr()


def test_ship_adapter_needs_an_explicit_output(tmp_path, capsys):
    installed = _tree(SHIPPED.adapter_dir)
    error = _cli_error(["ship-adapter", str(_run(tmp_path))], capsys)
    assert "-o/--output" in error
    assert _tree(SHIPPED.adapter_dir) == installed


@pytest.mark.parametrize("kind", ["symlink", "file", "symlink_to_nothing"])
def test_ship_adapter_to_a_link_or_a_file_is_one_clear_error(tmp_path, capsys, kind):
    run, out, target = _run(tmp_path), tmp_path / "out", tmp_path / "target"
    if kind == "file":
        out.write_text("not a folder")
    else:
        if kind == "symlink":
            target.mkdir()
        out.symlink_to(target)
    error = _cli_error(["ship-adapter", str(run), "-o", str(out)], capsys)
    assert ("symbolic link" if kind != "file" else "is a file") in error and str(out) in error
    assert not target.exists() or os.listdir(target) == []
    assert not [name for name in os.listdir(tmp_path) if "staging" in name or name.startswith(".")]


def test_ship_adapter_failure_leaves_no_staging_folder(tmp_path, capsys):
    run, out = _run(tmp_path), tmp_path / "out"
    weights = run / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated: the test merge refuses it
    with pytest.raises(SystemExit) as exit_info:
        main(["ship-adapter", str(run), "-o", str(out)])
    assert exit_info.value.code == 2, capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["run"]  # neither out nor a staging folder
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(SystemExit):
        main(["ship-adapter", str(run), "-o", str(out), "--overwrite"])
    assert sorted(os.listdir(out)) == ["keep.txt"] and sorted(os.listdir(tmp_path)) == ["out", "run"]
    capsys.readouterr()


# ------------------------------------------------------------------------------------------ 2. save_slice_model
def test_save_slice_model_refuses_a_folder_with_user_files(tiny_model, tmp_path):
    from slice_st import FileAccessError, save_slice_model

    target = tmp_path / "model"
    target.mkdir()
    (target / "README.md").write_text("my notes")
    (target / "config.json").write_text('{"mine": true}')
    with pytest.raises(FileAccessError, match="not empty.*overwrite=True"):
        save_slice_model(tiny_model, str(target))
    assert (target / "README.md").read_text() == "my notes" and sorted(os.listdir(target)) == ["README.md", "config.json"]
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
    target = {"file": tmp_path / "notes.txt", "under_file": tmp_path / "notes.txt" / "model", "read_only_parent": tmp_path / "ro" / "model"}[where]
    try:
        with pytest.raises(FileAccessError, match=f"cannot save a model.*{'is a file' if where != 'read_only_parent' else 'not writable'}"):
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
        error = _cli_error(["train", "-o", str(output), "-m", tiny_model_dir, "--train-data", str(tmp_path / "x")], capsys)
        assert "is a file" in error
    assert target.read_text() == "x"
