"""Hostile input, second probe (issue 24): terminal escapes, adapters, duplicate inputs, devices, pickles, cards.

A CLI error is one line ``slice-st: error: …`` with exit 2, never a traceback.
"""

from __future__ import annotations

import json

import pytest

from slice_st.cli import main


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr()


def _fails(capsys, *argv) -> str:
    """Run the CLI expecting exit 2 and one error line ``slice-st: error: …`` (no traceback); returns that line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    assert "Traceback" not in error, error
    last = error.rstrip("\n").split("\n")[-1].rpartition("\r")[2]
    assert last.startswith("slice-st: error: ") and error.count("slice-st: error: ") == 1, error
    return last


# ------------------------------------------------------------------------------------------ terminal escapes
HOSTILE_ID = "doc\x1b]0;owned\x07\x1b[2J\x9b31m"
HOSTILE_TEXT = "the dog \x1b[31mbarks\x1b[0m at the \x07 mailman\r"


def test_control_characters_are_escaped_in_table_output(tmp_path, tiny_model_dir, capsys):
    text_file = tmp_path / "calls\x1b]0;owned\x07.txt"  # mine reads text files: the file name is the id
    text_file.write_text(HOSTILE_TEXT.replace("\r", "") + "\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": HOSTILE_ID, "text": HOSTILE_TEXT}) + "\n")
    _run(capsys, "index", "build", corpus, "-o", tmp_path / "ix", "-m", tiny_model_dir, "--no-progress", "--quiet")
    common = ("-m", tiny_model_dir, "--no-progress", "--max-span", "3")
    for where, seen in (((text_file,), "calls\\x1b]0;owned\\x07.txt:1"), (("--index", tmp_path / "ix"), "doc\\x1b]0;owned\\x07")):
        code, out = _run(capsys, "mine", "-q", "dog\x1b[5m", *where, *common, "--color", "never")
        assert code == 0 and seen in out.out and "dog\\x1b[5m" in out.out and "\\x1b[31mbarks" in out.out, out.out
        assert not any(ch in out.out for ch in "\x1b\x07\x9b\r"), out.out
        code, out = _run(capsys, "mine", "-q", "dog", *where, *common, "-f", "jsonl")
        row = json.loads(out.out.splitlines()[0])  # JSON keeps the text exact (JSON escapes it itself)
        if where[0] == text_file:
            assert code == 0 and row["file"] == str(text_file) and row["span"] in HOSTILE_TEXT, row
        else:
            assert code == 0 and row["doc_id"] == HOSTILE_ID and row["span"] in HOSTILE_TEXT, row


def test_control_characters_are_escaped_in_error_lines(tmp_path, capsys):
    assert "\\x1b]0;x\\x07" in _fails(capsys, "mine", "-q", "dog", tmp_path / "missing\x1b]0;x\x07.txt")
