"""``python -m research.ship_adapter``: a LoRA run into the package's shipped model, and nothing outside the folder
named (a careless or hostile user's files, links and staging folders are left as they were)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from research.ship_adapter import main, ship_adapter
from slice_st.pretrained import shipped_model

SHIPPED = shipped_model("slice-minilm")


def _cli_error(argv, capsys) -> str:
    """Run the script, expect exit 2 with one ``error:`` line; return that line."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    last = error.strip().splitlines()[-1]
    assert (
        last.startswith("python -m research.ship_adapter: error:") and "Traceback" not in error
    ), error
    return last


def _tree(path) -> dict[str, bytes]:
    """Every file under ``path`` (links not followed) and its bytes: what must not change."""
    found = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            found[os.path.relpath(full, path)] = b"LINK" if os.path.islink(full) else _bytes(full)
    return found


def _bytes(path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _fake_run(tmp_path):
    """A LoRA run folder as ``slice-st train --lora-r`` leaves it: adapter, final config, a checkpoint's trainer
    state."""
    run = tmp_path / "run"
    shutil.copytree(
        SHIPPED.adapter_dir, run / "adapter", ignore=shutil.ignore_patterns("provenance.json")
    )
    (run / "final").mkdir()
    (run / "final" / "slice_train_config.json").write_text(
        json.dumps({"output_dir": "/secret/run", "lora_r": 16, "distill_data": ["offline"]})
    )
    for step in (100, 200):
        (run / f"checkpoint-{step}").mkdir()
        history = [{"step": 10, "loss": 0.4}] + [
            {"step": s, "eval_dev_single_spearman": 0.7 + s / 10000}
            for s in range(100, step + 1, 100)
        ]
        (run / f"checkpoint-{step}" / "trainer_state.json").write_text(
            json.dumps({"log_history": history})
        )
    return run


def test_ship_adapter_writes_adapter_provenance_curve_and_figures(tmp_path):
    fixtures = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
    destination = tmp_path / "shipped"
    provenance = ship_adapter(
        str(_fake_run(tmp_path)),
        str(destination),
        dev_path=os.path.join(fixtures, "stsb_context_sample.tsv"),
        sts_dev_path=os.path.join(fixtures, "sts_sample.csv"),
    )
    assert sorted(os.listdir(destination)) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "provenance.json",
    ]
    assert json.loads((destination / "provenance.json").read_text()) == provenance
    assert provenance["curve"] == [
        {"step": 100, "dev_single_spearman": 71.0},
        {"step": 200, "dev_single_spearman": 72.0},
    ]  # newest checkpoint
    assert "output_dir" not in provenance["recipe"]  # no local paths
    base, shipped = provenance["dev_metrics"]["base"], provenance["dev_metrics"]["shipped"]
    assert set(base) == set(shipped) >= {"single_all", "full_all", "sts_dev"}
    assert base["sts_dev"] != shipped["sts_dev"]  # the adapter was merged before the second scoring


def test_ship_adapter_without_adapter_leaves_the_destination(tmp_path):
    run = _fake_run(tmp_path)
    shutil.rmtree(run / "adapter")
    destination = tmp_path / "shipped"
    destination.mkdir()
    (destination / "keep.txt").write_text("old")
    with pytest.raises(FileNotFoundError, match="adapter"):
        ship_adapter(str(run), str(destination))
    assert os.listdir(destination) == ["keep.txt"]


def _run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(
        SHIPPED.adapter_dir, run / "adapter", ignore=shutil.ignore_patterns("provenance.json")
    )
    return run


def _user_folder(path):
    (path / "src").mkdir(parents=True)
    (path / "thesis.tex").write_text("\\chapter{mine}")
    (path / "src" / "main.py").write_text("print('mine')")
    return _tree(path)


def test_ship_adapter_refuses_a_folder_with_user_files(tmp_path, capsys):
    run, out = _run(tmp_path), tmp_path / "out"
    before = _user_folder(out)
    error = _cli_error([str(run), "-o", str(out)], capsys)
    assert "not empty" in error and "--overwrite" in error
    assert _tree(out) == before


def test_ship_adapter_dot_never_deletes_the_working_directory(tmp_path, capsys, monkeypatch):
    run, work = _run(tmp_path), tmp_path / "work"
    before = _user_folder(work)
    monkeypatch.chdir(work)
    _cli_error([str(run), "-o", "."], capsys)
    assert _tree(work) == before


def test_ship_adapter_overwrite_replaces_only_its_own_files(tmp_path, capsys):
    run, out = _run(tmp_path), tmp_path / "out"
    before = _user_folder(out)
    (out / "provenance.json").write_text("{}")
    staging = tmp_path / "out.staging"
    staging.mkdir()
    (staging / "notes.txt").write_text("a user's folder that happens to have this name")
    assert main([str(run), "-o", str(out), "--overwrite"]) == 0
    after = _tree(out)
    assert {name: after[name] for name in before} == before  # thesis.tex and src/ untouched
    assert set(after) - set(before) == {
        "adapter_config.json",
        "adapter_model.safetensors",
        "provenance.json",
    }
    assert json.loads(after["provenance.json"])["name"] == "slice-minilm"
    assert (staging / "notes.txt").exists()  # never deleted: it is not ours
    assert sorted(os.listdir(tmp_path)) == ["out", "out.staging", "run"]  # no temporary folder left
    capsys.readouterr()


def test_ship_adapter_into_a_new_folder_keeps_a_users_staging_folder(tmp_path, capsys):
    run, out = _run(tmp_path), tmp_path / "out"
    (tmp_path / "out.staging").mkdir()
    (tmp_path / "out.staging" / "keep.txt").write_text("mine")
    assert main([str(run), "-o", str(out)]) == 0
    assert sorted(os.listdir(out)) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "provenance.json",
    ]
    assert (tmp_path / "out.staging" / "keep.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["out", "out.staging", "run"]
    capsys.readouterr()


def test_ship_adapter_needs_an_explicit_output(tmp_path, capsys):
    installed = _tree(SHIPPED.adapter_dir)
    error = _cli_error([str(_run(tmp_path))], capsys)
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
    for output in (str(out), str(out) + "/"):
        error = _cli_error([str(run), "-o", output], capsys)
        assert ("symbolic link" if kind != "file" else "is a file") in error and str(out) in error
    assert not target.exists() or os.listdir(target) == []
    assert not [name for name in os.listdir(tmp_path) if "staging" in name or name.startswith(".")]


def test_ship_adapter_failure_leaves_no_staging_folder(tmp_path, capsys):
    run, out = _run(tmp_path), tmp_path / "out"
    weights = run / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated: the test merge refuses it
    with pytest.raises(SystemExit) as exit_info:
        main([str(run), "-o", str(out)])
    assert exit_info.value.code == 2, capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["run"]  # neither out nor a staging folder
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(SystemExit):
        main([str(run), "-o", str(out), "--overwrite"])
    assert sorted(os.listdir(out)) == ["keep.txt"] and sorted(os.listdir(tmp_path)) == [
        "out",
        "run",
    ]
    capsys.readouterr()


def test_a_bad_training_config_is_named(tmp_path):
    run = _fake_run(tmp_path)
    (run / "final" / "slice_train_config.json").write_text("{not json")
    with pytest.raises(
        ValueError,
        match="final/slice_train_config.json: not a training config written by slice-st train",
    ):
        ship_adapter(str(run), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
