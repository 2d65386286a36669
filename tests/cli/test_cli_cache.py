"""``slice-st mine``'s cache of encoded files: on by default (``$SLICE_ST_CACHE``, ``--cache-dir``), off with
``--no-cache``; a second run prints the same; two runs at once both finish; bad settings are one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import cli_fails, run_cli

ROOT = Path(__file__).resolve().parents[2]


def corpus(tmp_path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("A man is playing the guitar.\nThe flight was delayed.\n")
    (folder / "b.txt").write_text(
        "My checked bag never arrived.\nThe agent found the lost baggage claim.\n"
    )
    return folder


def entries(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".npz"))


def test_mine_keeps_encoded_files_and_prints_the_same_again(
    tiny_model_dir, tmp_path, capsys, mine_cache_folder
):
    folder, args = (
        corpus(tmp_path),
        ("-q", "plays the guitar", "--model", tiny_model_dir, "-f", "jsonl"),
    )
    code, first = run_cli(capsys, "mine", folder, *args)
    assert code == 0 and len(entries(mine_cache_folder)) == 2  # $SLICE_ST_CACHE (tests/conftest.py)
    code, second = run_cli(capsys, "mine", folder, *args)
    assert code == 0 and second.out == first.out
    assert "not both" in cli_fails(
        capsys, "mine", folder, *args, "--no-cache", "--cache-dir", tmp_path / "x"
    )
    os.environ.pop("SLICE_ST_CACHE")  # the folder given, else nothing: --no-cache writes nowhere
    code, plain = run_cli(capsys, "mine", folder, *args, "--no-cache")
    assert code == 0 and plain.out == first.out and not (tmp_path / "x").exists()
    code, other = run_cli(capsys, "mine", folder, *args, "--cache-dir", tmp_path / "x")
    assert code == 0 and other.out == first.out and len(entries(tmp_path / "x")) == 2


def test_a_damaged_entry_is_noted_and_encoded_again(
    tiny_model_dir, tmp_path, capsys, mine_cache_folder
):
    folder, args = corpus(tmp_path), ("-q", "lost bag", "--model", tiny_model_dir, "-f", "jsonl")
    code, first = run_cli(capsys, "mine", folder, *args)
    damaged = Path(mine_cache_folder) / entries(mine_cache_folder)[0]
    damaged.write_bytes(damaged.read_bytes()[:-10])
    code, second = run_cli(capsys, "mine", folder, *args)
    assert (
        code == 0
        and second.out == first.out
        and "1 damaged cache entry encoded again" in second.err
    )
    code, quiet = run_cli(capsys, "mine", folder, *args, "--quiet")
    assert code == 0 and quiet.out == first.out and quiet.err == ""


def test_cache_settings_that_cannot_work_are_one_line(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    folder = corpus(tmp_path)
    (tmp_path / "file").write_text("x")
    args = ("mine", folder, "-q", "guitar", "--model", tiny_model_dir)
    assert "is a file, not a folder" in cli_fails(capsys, *args, "--cache-dir", tmp_path / "file")
    assert "are for FILEs" in cli_fails(
        capsys, "mine", "-q", "x", "--index", tmp_path, "--cache-dir", tmp_path
    )
    monkeypatch.setenv("SLICE_ST_CACHE_SIZE", "lots")
    assert "SLICE_ST_CACHE_SIZE='lots': not a size" in cli_fails(capsys, *args)


def test_two_runs_at_once_both_finish_with_the_same_matches(
    tiny_model_dir, tmp_path, mine_cache_folder
):
    folder = corpus(tmp_path)
    command = [
        sys.executable,
        "-m",
        "slice_st.cli",
        "mine",
        str(folder),
        "-q",
        "lost bag",
        "--model",
        tiny_model_dir,
    ]
    environment = os.environ | {"PYTHONPATH": str(ROOT)}
    runs = [
        subprocess.Popen(
            [*command, "-f", "jsonl", "--quiet"], stdout=subprocess.PIPE, env=environment, text=True
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0] and outputs[0] == outputs[1] and outputs[0]
    assert len(entries(mine_cache_folder)) == 2
    assert not [name for name in os.listdir(mine_cache_folder) if name.endswith(".tmp")]


def test_a_cache_folder_that_cannot_be_written_is_a_note(tiny_model_dir, tmp_path, capsys):
    folder, blocked = corpus(tmp_path), tmp_path / "file"
    blocked.write_text("x")
    args = ("mine", folder, "-q", "lost bag", "--model", tiny_model_dir, "-f", "jsonl")
    code, out = run_cli(capsys, *args, "--cache-dir", blocked / "inner")
    assert (
        code == 0
        and out.out
        and f"slice-st: note: cannot write the cache in {blocked / 'inner'}" in out.err
    )
    assert run_cli(capsys, *args, "--no-cache")[1].out == out.out
