"""What the CLI reads and writes on hostile input: ``mine`` parses ``.jsonl`` as ``index build`` does, ``-f csv``
cells that a spreadsheet would run as a formula are written as text, and a full disk under ``> out.jsonl`` names that
file."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slice_st.cli import main

FORMULAS = [
    '=HYPERLINK("http://evil.example","click")',
    "=cmd|' /C calc'!A0",
    "@SUM(1+1)",
    "+1+cmd",
]


def test_mine_reads_jsonl_texts_not_json_syntax(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "tickets.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps({"id": f"t{n}", "text": text})
            for n, text in enumerate(["my bag was lost", "a cat"])
        )
        + "\n"
    )
    code = main(
        ["mine", str(corpus), "-q", "lost bag", "--model", tiny_model_dir, "-f", "jsonl", "--quiet"]
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert code == 0 and rows
    assert all('"' not in row["span"] and "text" not in row["span"] for row in rows), rows
    assert {row["line"] for row in rows} <= {1, 2}


def test_mine_csv_cells_never_start_a_formula(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "cells.txt"
    corpus.write_text("\n".join(FORMULAS) + "\n")
    code = main(
        [
            "mine",
            str(corpus),
            "-q",
            FORMULAS[0],
            "--model",
            tiny_model_dir,
            "-f",
            "csv",
            "--texts",
            "0",
            "--quiet",
        ]
    )
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert code == 0 and len(rows) > 1
    for row in rows[1:]:
        assert not any(cell[:1] in ("=", "+", "-", "@", "\t", "\r") for cell in row), row
    assert any(
        cell.startswith("'=") or cell.startswith("'@") or cell.startswith("'+")
        for row in rows
        for cell in row
    )


def test_split_auto_says_when_it_reads_paragraphs(tiny_model_dir, tmp_path, capsys):
    wrapped = tmp_path / "manual.txt"
    wrapped.write_text(
        "The installer copies the files into the folder that you chose in the\n"
        "first step, then asks whether the service should start when the computer\n"
        "boots. Choose yes unless another program already uses the same port.\n"
    )
    lines = tmp_path / "chat.txt"
    lines.write_text(
        "Agent: how can I help you today?\nCustomer: my bag was lost on the way to Denver.\n"
    )
    assert (
        main(
            [
                "mine",
                str(wrapped),
                str(lines),
                "-q",
                "lost bag",
                "--model",
                tiny_model_dir,
                "-f",
                "jsonl",
            ]
        )
        == 0
    )
    error = capsys.readouterr().err
    assert (
        f"{wrapped}: --split auto reads one text per paragraph" in error and str(lines) not in error
    )
    assert (
        main(["mine", str(wrapped), "-q", "lost bag", "--model", tiny_model_dir, "--no-progress"])
        == 0
    )
    assert "--split auto" not in capsys.readouterr().err  # --no-progress: no line per file


class _FullDiskFile(io.StringIO):
    """Standard output redirected to a file on a full disk: ``fileno()`` is that file's, every write fails."""

    def __init__(self, handle):
        super().__init__()
        self.handle = handle

    def fileno(self):
        return self.handle.fileno()

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_names_the_file_standard_output_goes_to(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    corpus = tmp_path / "a.txt"
    corpus.write_text("the dog barks at the mailman\n")
    out = tmp_path / "out.jsonl"
    with open(out, "w") as handle:
        monkeypatch.setattr("sys.stdout", _FullDiskFile(handle))
        with pytest.raises(SystemExit) as exit_info:
            main(
                [
                    "mine",
                    str(corpus),
                    "-q",
                    "dog",
                    "--model",
                    tiny_model_dir,
                    "-f",
                    "jsonl",
                    "--quiet",
                ]
            )
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    assert (
        error
        == f"slice-st: error: cannot write the output file {out} (standard output): No space left on device.\n"
    )


def _small_file_limit():
    """In the child: files may grow to 10 bytes (a write past it fails with EFBIG, as on a full disk)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (10, 10))


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_write_that_fails_at_exit_is_one_line_naming_the_file(
    tiny_model_dir, tmp_path, unbuffered
):
    """A real failing write (the kernel's, in a new process): buffered, the 500 bytes of rows would only be written
    when Python exits, where the error was "Exception ignored …" and exit status 120."""
    corpus = tmp_path / "a.txt"
    corpus.write_text("the dog barks at the mailman\na man plays the guitar on stage\n")
    out = tmp_path / "out.jsonl"
    env = os.environ | {
        "PYTHONUNBUFFERED": unbuffered,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    argv = [
        sys.executable,
        "-m",
        "slice_st.cli",
        "mine",
        str(corpus),
        "-q",
        "dog",
        "--model",
        tiny_model_dir,
    ]
    with open(out, "w") as handle:
        done = subprocess.run(
            [*argv, "-f", "jsonl", "--quiet"],
            stdout=handle,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=_small_file_limit,
            timeout=300,
        )
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr
        == f"slice-st: error: cannot write the output file {out} (standard output): File too large.\n"
    )
