"""STS-B-Context / STS-B readers (slice_st.data), on fixtures in the public formats."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from slice_st.data import read_stsb, read_stsb_context
from slice_st.errors import DataFormatError

FIXTURES = Path(__file__).parents[1] / "fixtures"
CONTEXT = FIXTURES / "stsb_context_sample.tsv"
STS = FIXTURES / "sts_sample.csv"
HEADER = b"\tline\tparaphrase\tpassage\tgoldsim\r\n"


def write(tmp_path, body: bytes, header: bytes = HEADER) -> Path:
    path = tmp_path / "data.tsv"
    path.write_bytes(header + body)
    return path


def test_fixture_is_in_the_public_format():
    raw = CONTEXT.read_bytes()
    assert raw.startswith(b"\tline\tparaphrase\tpassage\tgoldsim")
    assert b"\r\n" in raw and b"\n" in raw.replace(b"\r\n", b"")  # mixed line endings
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")  # cp1252 bytes (é, —, “ ”, €)


def test_read_fixture():
    data = read_stsb_context(CONTEXT)
    assert len(data) == 8
    assert data["index"] == list(range(8))
    assert data["goldsim"][0] == 4.8 and data["goldsim"][5] == 0.2
    assert "café" in data["passage"][0]
    assert (
        "\u2014" in data["passage"][1]
        and "\u201cclosed\u201d" in data["passage"][2]
        and "5\u20ac" in data["passage"][5]
    )
    assert data["passage"][3].startswith(
        '"Analysts were nervous," one trader said.'
    )  # pandas quoting undone
    assert all(data["paraphrase_in_passage"])
    assert all("\r" not in p for p in data["passage"])
    assert data["file_line"][:3] == [2, 3, 4]


def test_read_without_index_column_and_utf8(tmp_path):
    path = write(
        tmp_path, "a\tb\tx b y é\t2\n".encode(), header=b"line\tparaphrase\tpassage\tgoldsim\n"
    )
    data = read_stsb_context(path)
    assert data["passage"] == ["x b y é"] and data["index"] == [0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"0\ta\tb\tx b y\t1\n1\ta\tb\n", "line 3: expected 5 tab-separated fields, got 3"),
        (b"0\ta\tb\t  \t1.0\n", "line 2: empty passage"),
        (b"0\t\tb\tx b\t1.0\n", "line 2: empty line"),
        (b"0\ta\tb\tx b\tfour\n", "line 2: goldsim 'four' is not a number"),
        (b"0\ta\tb\tx b\t5.5\n", "line 2: goldsim '5.5' is outside 0..5"),
        (b"0\ta\tb\tx b\tnan\n", "is outside 0..5"),
        (b"x\ta\tb\tx b\t1\n", "line 2: index 'x' is not an integer"),
        (b"0\ta\tb\tx b\t1\n\n1\ta\tb\tx b\t1\n", "line 3: empty line inside the data"),
        (b"0\ta\tb\tx \x81 b\t1\n", "line 2: byte 0x81"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(DataFormatError, match=message) as info:
        read_stsb_context(path)
    assert str(path) in str(info.value)


def test_bad_header_and_empty_file(tmp_path):
    with pytest.raises(DataFormatError, match=r"line 1: wrong columns"):
        read_stsb_context(write(tmp_path, b"", header=b"a\tb\tc\n"))
    with pytest.raises(DataFormatError, match="empty"):
        read_stsb_context(write(tmp_path, b"", header=b""))
    with pytest.raises(DataFormatError, match="no data rows"):
        read_stsb_context(write(tmp_path, b""))


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no/such/file.tsv"):
        read_stsb_context("no/such/file.tsv")


def test_paraphrase_missing_is_reported_not_silently_dropped(tmp_path):
    path = write(tmp_path, b"0\ta\tbee\tx b y\t1\n1\ta\tb\tx b y\t2\n")
    with pytest.warns(
        UserWarning,
        match=r"1 row\(s\) whose passage does not contain the paraphrase, even up to case and punctuation \(kept\); "
        r"lines 2",
    ):
        data = read_stsb_context(path)
    assert len(data) == 2 and data["paraphrase_in_passage"] == [False, True]
    with pytest.warns(UserWarning, match=r"\(dropped\); lines 2"):
        assert len(read_stsb_context(path, missing_paraphrase="drop")) == 1
    with pytest.raises(
        DataFormatError, match="line 2: the passage does not contain the paraphrase 'bee'"
    ):
        read_stsb_context(path, missing_paraphrase="error")


def test_paraphrase_written_mid_sentence_counts_as_inside(tmp_path):
    # the real STS-B-Context lower-cases the paraphrase and drops its full stop inside a longer sentence
    path = write(
        tmp_path,
        b"0\tA man cuts a bun.\tA man is slicing a bun.\tHolding a patty, a man is slicing a bun with the other "
        b"hand.\t2\n",
    )

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = read_stsb_context(path)
    assert data["paraphrase_in_passage"] == [True]


def test_read_stsb():
    data = read_stsb(STS)
    assert len(data) == 8
    assert (
        data["score"][1] == 3.8 and data["sentence2"][1] == "A man is cutting a tomato."
    )  # extra columns ignored
    assert (
        data["sentence1"][2] == 'Obama signs "historic" budget deal'
    )  # bare quotes kept (QUOTE_NONE)


def test_read_stsb_bad_rows(tmp_path):
    path = tmp_path / "sts.csv"
    path.write_text("g\tf\ty\t1\t6.0\ta\tb\n")
    with pytest.raises(DataFormatError, match=r"sts.csv, line 1: score '6.0' is outside"):
        read_stsb(path)
    path.write_text("g\tf\ty\t1\t2.0\ta\n")
    with pytest.raises(DataFormatError, match="line 1: expected at least 7"):
        read_stsb(path)
