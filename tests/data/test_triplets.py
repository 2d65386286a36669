"""Training triplets: MS MARCO-style TSV (mojibake repair, bad rows)."""

from __future__ import annotations

import pytest

from slice_st.data.triplets import read_msmarco_triples
from slice_st.errors import DataFormatError


def test_msmarco_mojibake_is_repaired(tmp_path):
    path = tmp_path / "triples.tsv"
    mojibake = "We don\u00e2\u0080\u0099t know. About 1\u00c2\u00bd cups."
    path.write_text(f"is caffeine ok\t{mojibake}\tChocolate is safe.\n", encoding="utf-8")
    dataset = read_msmarco_triples(path)
    assert dataset.column_names == ["anchor", "positive", "negative"]
    assert dataset[0]["positive"] == "We don't know. About 1½ cups."


@pytest.mark.parametrize(
    "content, message",
    [
        ("only\ttwo\n", "line 1: expected 3"),
        ("q\t \tneg\n", "line 1: the positive field is empty"),
        ("\n\n", "no triples"),
    ],
)
def test_msmarco_bad_rows_name_the_line(tmp_path, content, message):
    path = tmp_path / "bad.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        read_msmarco_triples(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="input file not found: .*nope.tsv"):
        read_msmarco_triples(tmp_path / "nope.tsv")


def test_a_binary_file_or_a_folder_is_one_clear_error(tmp_path):
    """A binary file raised Python's UnicodeDecodeError (a traceback in ``slice-st train``); a folder an errno."""
    binary = tmp_path / "triples.tsv"
    binary.write_bytes(b"query\tpos\tneg\n\xd0\xff\xfe\x00 binary\n")
    with pytest.raises(
        DataFormatError, match=r"triples.tsv is not UTF-8 text \(.* at byte 14, line 2\)"
    ):
        read_msmarco_triples(binary)
    with pytest.raises(IsADirectoryError, match="is a directory, not a file"):
        read_msmarco_triples(tmp_path)
