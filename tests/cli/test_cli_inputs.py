"""What the CLI reads and writes on hostile input: ``mine`` parses ``.jsonl`` as ``index build`` does, and ``-f csv``
cells that a spreadsheet would run as a formula are written as text."""

from __future__ import annotations

import csv
import io
import json

from slice_st.cli import main

FORMULAS = ['=HYPERLINK("http://evil.example","click")', "=cmd|' /C calc'!A0", "@SUM(1+1)", "+1+cmd"]


def test_mine_reads_jsonl_texts_not_json_syntax(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "tickets.jsonl"
    corpus.write_text(
        "\n".join(json.dumps({"id": f"t{n}", "text": text}) for n, text in enumerate(["my bag was lost", "a cat"]))
        + "\n"
    )
    code = main(["mine", str(corpus), "-q", "lost bag", "--model", tiny_model_dir, "-f", "jsonl", "--quiet"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert code == 0 and rows
    assert all('"' not in row["span"] and "text" not in row["span"] for row in rows), rows
    assert {row["line"] for row in rows} <= {1, 2}


def test_mine_csv_cells_never_start_a_formula(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "cells.txt"
    corpus.write_text("\n".join(FORMULAS) + "\n")
    code = main(
        ["mine", str(corpus), "-q", FORMULAS[0], "--model", tiny_model_dir, "-f", "csv", "--texts", "0", "--quiet"]
    )
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert code == 0 and len(rows) > 1
    for row in rows[1:]:
        assert not any(cell[:1] in ("=", "+", "-", "@", "\t", "\r") for cell in row), row
    assert any(cell.startswith("'=") or cell.startswith("'@") or cell.startswith("'+") for row in rows for cell in row)


def test_split_auto_says_when_it_reads_paragraphs(tiny_model_dir, tmp_path, capsys):
    wrapped = tmp_path / "manual.txt"
    wrapped.write_text(
        "The installer copies the files into the folder that you chose in the\n"
        "first step, then asks whether the service should start when the computer\n"
        "boots. Choose yes unless another program already uses the same port.\n"
    )
    lines = tmp_path / "chat.txt"
    lines.write_text("Agent: how can I help you today?\nCustomer: my bag was lost on the way to Denver.\n")
    assert main(["mine", str(wrapped), str(lines), "-q", "lost bag", "--model", tiny_model_dir, "-f", "jsonl"]) == 0
    error = capsys.readouterr().err
    assert f"{wrapped}: --split auto reads one text per paragraph" in error and str(lines) not in error
    assert main(["mine", str(wrapped), "-q", "lost bag", "--model", tiny_model_dir, "--no-progress"]) == 0
    assert "--split auto" not in capsys.readouterr().err  # --no-progress: no line per file
