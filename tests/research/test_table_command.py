"""``python -m research.table``: options checked while parsing, one-line errors, strict JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import research.table as table_module
from research.table import main

DATA = str(Path(__file__).parents[1] / "fixtures" / "stsb_context_sample.tsv")


def _error_line(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_bad_option_values_are_rejected_while_parsing(capsys, monkeypatch):
    """--ngram-limit 2 is rejected before anything is read, not after the whole table ran."""
    monkeypatch.setattr(table_module, "run_table", lambda *a, **k: pytest.fail("ran the table"))
    line = _error_line(capsys, [DATA, "--ngram-limit", "2", "-s", "bm25"])
    assert "argument --ngram-limit: must be >= 4" in line
    assert "--setups" in _error_line(capsys, [DATA, "--setups", "full,cheap"])


def test_bad_data_and_a_missing_lab_dependency_are_one_line(capsys, tmp_path, monkeypatch):
    bad = tmp_path / "bad.tsv"
    bad.write_text("not\ta\tcontext\tfile\n")
    assert _error_line(capsys, [str(bad), "-s", "bm25"]).startswith(
        "python -m research.table: error: "
    )

    monkeypatch.setitem(
        sys.modules, "bm25s", None
    )  # as if research/requirements.txt were not installed
    line = _error_line(
        capsys, [DATA, "-s", "bm25", "--setups", "full", "--out", str(tmp_path / "o")]
    )
    assert line.endswith("error: bm25s is not installed: pip install -r research/requirements.txt")


def test_table_metrics_json_is_strict(tmp_path, capsys):
    """A single system has no Williams test against a better one: its p-values are null, never bare NaN."""
    out = tmp_path / "out"
    assert main([DATA, "-s", "bm25", "--setups", "full", "--out", str(out), "--quiet"]) == 0
    text = (out / "metrics.json").read_text()
    metrics = json.loads(
        text, parse_constant=lambda name: pytest.fail(f"bare {name} in metrics.json")
    )
    assert metrics["metrics"]["full"]["BM25"]["p_pearson"] is None
    assert capsys.readouterr().err == ""  # --quiet: no status lines
