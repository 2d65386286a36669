"""The proxy STS-B-Context builder (research.context): verbatim, seeded, readable by the package's reader."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from research.context import main, make_context, write_stsb_context
from slice_st.data import read_stsb, read_stsb_context

STS = Path(__file__).parents[1] / "fixtures" / "sts_sample.csv"


def test_make_context_is_verbatim_seeded_and_clean():
    pairs = read_stsb(STS)
    first = make_context(pairs, seed=3, words=25)
    again = make_context(pairs, seed=3, words=25)
    other = make_context(pairs, seed=4, words=25)
    assert first.to_list() == again.to_list()
    assert first["passage"] != other["passage"]
    for row in first:
        assert row["paraphrase"] in row["passage"]
        assert len(row["passage"].split()) >= 25
        context = row["passage"].replace(row["paraphrase"], " ")
        assert row["line"] not in context  # the origin phrase never leaks into the context
    assert set(first["style"]) <= {"preceding", "following", "surrounding", "clause"}
    only = make_context(pairs, seed=0, styles=["following"], words=10)
    assert all(row["passage"].startswith(row["paraphrase"]) for row in only)
    assert len(make_context(pairs, seed=0, limit=3)) == 3
    with pytest.raises(ValueError, match="styles"):
        make_context(pairs, styles=["poem"])


def test_write_then_read_roundtrip_cp1252(tmp_path):
    rows = make_context(read_stsb(STS), seed=1, words=15)
    path = tmp_path / "ctx.tsv"
    assert write_stsb_context(rows, path, encoding="cp1252") == len(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = read_stsb_context(path, missing_paraphrase="error")
    assert back["passage"] == rows["passage"] and back["goldsim"] == rows["goldsim"]


def test_make_context_command(tmp_path, capsys):
    out = tmp_path / "dev.tsv"
    assert main([str(STS), "-o", str(out), "--limit", "5", "--words", "20", "--seed", "7"]) == 0
    assert "wrote 5 pairs" in capsys.readouterr().out
    assert len(read_stsb_context(out, missing_paraphrase="error")) == 5
    assert json.loads((tmp_path / "dev.tsv.source.json").read_text())["source"] == "make-context"
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path / "missing.csv"), "-o", str(out)])
    assert info.value.code == 2
    assert "missing.csv" in capsys.readouterr().err
