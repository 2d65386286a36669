"""slice_st.text: sentence splitting through pysbd (abbreviations kept whole, its extra named when missing), and the
input readers (--split auto on real files, JSONL, folders, globs and links, CSV cells)."""

from __future__ import annotations

import builtins
import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import cli_fails, run_cli

from slice_st.data.corpus import read_corpus, read_jsonl
from slice_st.errors import CorpusError, FileAccessError
from slice_st.files import csv_safe, expand_paths, jsonl_records
from slice_st.text import guess_split, read_texts, split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mr. Howard arrived late. Nobody minded.", ["Mr. Howard arrived late.", "Nobody minded."]),
        (
            "He served in the U.S. Military for ten years. Then he retired.",
            ["He served in the U.S. Military for ten years.", "Then he retired."],
        ),
        (
            "Bring tools, e.g. for cutting wood. We start at nine.",
            ["Bring tools, e.g. for cutting wood.", "We start at nine."],
        ),
        ("It cost 3.5 dollars. Dr. Smith paid.", ["It cost 3.5 dollars.", "Dr. Smith paid."]),
        ('She said "Go." Then she left.', ['She said "Go."', "Then she left."]),
        (
            'An unopened quote ends here." And then more.',
            ['An unopened quote ends here."', "And then more."],
        ),
        ("one line\nanother line", ["one line", "another line"]),
        ("No sentence end here", ["No sentence end here"]),
        ("   ", []),
    ],
)
def test_split_sentences_keeps_abbreviations(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_is_the_same_function_for_passages():
    from slice_st.data import passages

    assert passages.split_sentences is split_sentences


def test_missing_extra_message_in_a_fresh_process():
    """With pysbd hidden, splitting sentences says which extra to install (not a bare ModuleNotFoundError)."""
    code = (
        "import sys; sys.modules['pysbd'] = None\n"
        "from slice_st.text import split_sentences\n"
        "try:\n    split_sentences('One. Two.')\nexcept ImportError as error:\n    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install 'slice-st[train]'" in done.stdout, done.stderr


# ---------------------------------------------------------------- --split auto on real files
FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "split")
PYDOC_MODULES = ["json", "textwrap", "csv", "re", "argparse", "logging", "shutil"]


def _pydoc_lines(module: str) -> list[str]:
    import importlib
    import pydoc

    return pydoc.render_doc(importlib.import_module(module), renderer=pydoc.plaintext).splitlines(
        keepends=True
    )


@pytest.mark.parametrize("module", PYDOC_MODULES)
def test_split_auto_reads_pydoc_output_as_paragraphs(module):
    """pydoc's text output: ragged, indented, drawn with ``|``, code examples among the prose."""
    assert guess_split(_pydoc_lines(module)) == "paragraph"


@pytest.mark.parametrize("page", ["ls", "grep", "tar", "find", "cp", "sed", "ps", "sort", "gzip"])
def test_split_auto_reads_man_pages_as_paragraphs(page):
    if shutil.which("man") is None:
        pytest.skip("no man command here (the fixture test below covers the layout)")
    done = subprocess.run(
        ["man", "-P", "cat", page],
        capture_output=True,
        text=True,
        env={**os.environ, "MANWIDTH": "80"},
        check=False,
    )
    if done.returncode != 0 or len(done.stdout) < 500:
        pytest.skip(f"no man page for {page} here")
    assert guess_split(done.stdout.splitlines(keepends=True)) == "paragraph"


@pytest.mark.parametrize(
    "name, expected",
    [("manpage.txt", "paragraph"), ("service.log", "line"), ("tickets.csv", "line")],
)
def test_split_auto_on_fixture_files(name, expected):
    """A man page (justified, indented), a log of equal-width records, a CSV-like file."""
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        assert guess_split(handle.readlines()) == expected


def test_split_auto_log_records_are_one_text_each_and_the_choice_is_reported():
    heard = []
    records = read_texts(
        [os.path.join(FIXTURES, "service.log")], "auto", report=lambda *pair: heard.append(pair)
    )
    assert len(records) == 120 and [r.line for r in records[:3]] == [1, 2, 3]
    assert heard == [(os.path.join(FIXTURES, "service.log"), "line")]
    records = read_texts(
        [os.path.join(FIXTURES, "manpage.txt")], "auto", report=lambda *pair: heard.append(pair)
    )
    assert heard[-1][1] == "paragraph" and any(r.text.count("\n") >= 4 for r in records)


# ---------------------------------------------------------------- one JSONL reader
def test_read_texts_parses_jsonl_as_the_index_does(tmp_path):
    path = tmp_path / "tickets.jsonl"
    path.write_text(
        '{"id": "a", "text": "my bag was lost"}\n\n{"id": "b", "text": "the train never came"}\n'
    )
    records = read_texts([str(path)], "auto")
    assert [(r.line, r.text) for r in records] == [
        (1, "my bag was lost"),
        (3, "the train never came"),
    ]
    path.write_text('{"id": "a", "txt": "typo"}\n')
    with pytest.raises(CorpusError, match="line 1: text field 'text'"):
        read_texts([str(path)])


def test_jsonl_nested_too_deeply_is_a_corpus_error(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "\n")
    with pytest.raises(CorpusError, match="line 1: not valid JSON"):
        list(jsonl_records(str(path)))


# ---------------------------------------------------------------- folders, globs and links
def test_a_double_star_glob_with_links_to_its_folder_ends_and_reads_each_file_once(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    os.makedirs("t2/sub")
    for name in ("t2/a.txt", "t2/sub/b.txt"):
        with open(name, "w") as handle:
            handle.write("a cat\n")
    os.symlink(".", "t2/l1")
    os.symlink(".", "t2/l2")
    os.symlink("a.txt", "t2/sub/same.txt")
    assert expand_paths(["t2/**/*.txt"]) == ["t2/a.txt", "t2/sub/b.txt"]
    assert expand_paths(["t2"]) == ["t2/a.txt", "t2/sub/b.txt"]


def test_a_file_link_out_of_a_named_folder_is_not_followed_unless_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("outside")
    os.makedirs("t3")
    with open("outside/secret.txt", "w") as handle:
        handle.write("secret\n")
    with open("t3/ok.txt", "w") as handle:
        handle.write("fine\n")
    os.symlink("../outside/secret.txt", "t3/link.txt")
    for named in ("t3", "t3/*.txt", "t3/**/*.txt"):
        with pytest.raises(FileAccessError, match="leads outside t3"):
            expand_paths([named])
    assert expand_paths(["t3"], follow_links=True) == ["t3/link.txt", "t3/ok.txt"]
    assert expand_paths(["t3/link.txt"]) == ["t3/link.txt"]  # a file named itself is read


def test_an_unreadable_sub_folder_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "corpus" / "locked").mkdir(parents=True)
    (tmp_path / "corpus" / "a.txt").write_text("a cat\n")
    (tmp_path / "corpus" / "locked" / "b.txt").write_text("a dog\n")
    locked = str(tmp_path / "corpus" / "locked")
    os.chmod(locked, 0)
    if (
        os.geteuid() == 0
    ):  # root reads it anyway: make the folder's listing fail as it does for anyone else
        real_scandir = os.scandir

        def scandir(path="."):
            if os.path.realpath(path) == os.path.realpath(locked):
                raise PermissionError(13, "Permission denied", path)
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
    try:
        with pytest.raises(
            FileAccessError, match="cannot read the folder .*locked: Permission denied"
        ):
            expand_paths([str(tmp_path / "corpus")])
    finally:
        os.chmod(locked, 0o755)


# ---------------------------------------------------------------- CSV cells
@pytest.mark.parametrize(
    "cell",
    ['=HYPERLINK("http://x")', "=cmd|' /C calc'!A0", "@SUM(A1:A2)", "+1+cmd", "-2+3", "\tx", "\rx"],
)
def test_csv_cells_that_start_a_formula_are_quoted(cell):
    assert csv_safe(cell) == "'" + cell
    assert csv_safe("plain text") == "plain text" and csv_safe(-2.5) == -2.5


def test_atomic_writes_never_follow_links(tmp_path):
    """Every temporary file is new (``O_EXCL|O_NOFOLLOW``): a link at the target is replaced, its target
    untouched."""
    from slice_st.files import atomic_file
    from slice_st.index import Calibration
    from slice_st.index.storage import write_bytes, write_json

    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    folder = tmp_path / "ix"
    folder.mkdir()
    (folder / "shards.json").symlink_to(outside)
    write_json(str(folder / "shards.json"), {"a": 1})
    assert outside.read_text() == "precious" and not os.path.islink(folder / "shards.json")
    (folder / "calibration.json.tmp").symlink_to(outside)  # the old fixed temporary name
    Calibration(x=[0.0, 1.0], y=[0.0, 5.0]).save(str(folder / "calibration.json"))
    assert outside.read_text() == "precious"
    (folder / "texts.bin").symlink_to(outside)
    with pytest.raises(FileExistsError):
        write_bytes(str(folder / "texts.bin"), b"x")
    assert outside.read_text() == "precious"
    with pytest.raises(RuntimeError), atomic_file(str(folder / "x.json")) as handle:
        handle.write(b"half")
        raise RuntimeError("interrupted")
    assert not (folder / "x.json").exists() and not [
        n for n in os.listdir(folder) if n.startswith(".x.json")
    ]


def test_open_regular_file_refuses_links_fifos_and_folders(tmp_path):
    """The one helper every index read goes through: O_NOFOLLOW, then fstat of what was opened; a FIFO never blocks."""
    import signal

    from slice_st import FileAccessError
    from slice_st.files import open_regular_file

    data = tmp_path / "data.bin"
    data.write_bytes(b"0123456789")
    with open_regular_file(str(data)) as handle:
        assert handle.read() == b"0123456789"
    with open_regular_file(data, size=10) as handle:
        assert handle.read(4) == b"0123" and not handle.closed
    with pytest.raises(FileAccessError, match="has 10 bytes, not the 11 expected"):
        open_regular_file(data, size=11)
    (tmp_path / "link").symlink_to(data)
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    for name in ("link", "dangling"):
        with pytest.raises(FileAccessError, match=f"{name} is a symbolic link, not followed"):
            open_regular_file(tmp_path / name)
    with pytest.raises(FileAccessError, match="is not a regular file"):
        open_regular_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_regular_file(tmp_path / "missing")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")  # no writer: a blocking open for reading would wait for ever

        def hung(*_):
            raise AssertionError("opening a FIFO blocked")

        previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(10)
        try:
            with pytest.raises(FileAccessError, match="fifo is not a regular file"):
                open_regular_file(tmp_path / "fifo")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


SEPARATORS = ["\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]


def test_b07_lines_end_only_at_newline(tmp_path, tiny_model_dir, capsys):
    path = tmp_path / "odd.txt"
    lines = [
        f"line {n} has a{sep}separator inside" for n, sep in enumerate(SEPARATORS, start=1)
    ] + ["the last line"]
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    records = read_texts([str(path)])
    assert [(r.line, r.text) for r in records] == list(enumerate(lines, start=1))
    content = path.read_bytes().decode("utf-8")
    assert all(content[r.file_offset : r.file_offset + len(r.text)] == r.text for r in records)
    assert [d.id for d in read_corpus([str(path)])][-1] == f"{path}:{len(lines)}"
    queries = tmp_path / "queries.txt"
    queries.write_bytes("the last\u2028line\nseparator\x85inside\n".encode("utf-8"))
    code, out = run_cli(
        capsys,
        "mine",
        "--queries",
        queries,
        path,
        "-m",
        tiny_model_dir,
        "-f",
        "jsonl",
        "--texts",
        "1",
    )
    assert [json.loads(row)["query"] for row in out.out.split("\n") if row] == [
        "the last\u2028line",
        "separator\x85inside",
    ]


def test_b08_paragraph_offsets_of_crlf_files_are_file_offsets(tmp_path, tiny_model_dir, capsys):
    path = tmp_path / "crlf.txt"
    path.write_bytes(
        b"first paragraph line one\r\nline two of it\r\n\r\nsecond paragraph\r\nwith a guitar in line two\r\n"
    )
    content = path.read_bytes().decode("utf-8")
    records = read_texts([str(path)], "paragraph")
    assert [(r.line, r.text) for r in records] == [
        (1, "first paragraph line one\r\nline two of it"),
        (4, "second paragraph\r\nwith a guitar in line two"),
    ]
    code, out = run_cli(
        capsys,
        "mine",
        "-q",
        "a guitar",
        path,
        "--split",
        "paragraph",
        "-m",
        tiny_model_dir,
        "-f",
        "jsonl",
    )
    for row in map(json.loads, out.out.splitlines()):
        assert content[row["file_start"] : row["file_end"]] == row["span"]


def test_b21_byte_order_mark_is_not_text(tmp_path, tiny_model_dir, capsys):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffguitar lessons today\nsecond line\n".encode("utf-8"))
    records = read_texts([str(path)])
    assert records[0].text == "guitar lessons today" and records[0].file_offset == 1
    code, out = run_cli(
        capsys, "mine", "-q", "guitar", path, "-m", tiny_model_dir, "-f", "jsonl", "--max-span", "1"
    )
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert all("\ufeff" not in row["span"] for row in rows)
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes('\ufeff{"id": "a", "text": "with a mark"}\n'.encode("utf-8"))
    assert [d.text for d in read_jsonl(str(jsonl))] == ["with a mark"]


def test_b11_unreadable_input_file(tmp_path, capsys, monkeypatch):
    path = tmp_path / "secret.txt"
    path.write_text("a man plays the guitar\n")
    real_open = builtins.open

    def denying_open(file, *args, **kwargs):
        if os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(file, *args, **kwargs)

    real_os_open = os.open

    def denying_os_open(
        file, *args, **kwargs
    ):  # corpora are opened with os.open (only regular files are read)
        if os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_os_open(file, *args, **kwargs)

    from slice_st.errors import FileAccessError

    monkeypatch.setattr(builtins, "open", denying_open)
    monkeypatch.setattr(os, "open", denying_os_open)
    with pytest.raises(FileAccessError, match="cannot read .*secret.txt: Permission denied"):
        read_texts([str(path)])
    assert "Permission denied" in cli_fails(capsys, "mine", "-q", "guitar", path)
    assert "Permission denied" in cli_fails(capsys, "index", "build", path, "-o", tmp_path / "ix")
    assert "Permission denied" in cli_fails(capsys, "mine", "--queries", path, path)


def test_b20_non_utf8_standard_input(tmp_path, capsys, monkeypatch):
    raw = "café\n".encode("latin-1")  # not UTF-8
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", errors="surrogateescape")
    )
    assert "standard input is not UTF-8" in cli_fails(capsys, "mine", "-q", "coffee", "-")
