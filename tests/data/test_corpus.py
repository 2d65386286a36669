"""slice_st.data.corpus: index corpora read from text, JSONL and folders; hostile lines, ids and files."""

from __future__ import annotations

import json
import os
import re

import pytest
from helpers import QUERIES, build_index_cli, cli_fails, run_cli

from slice_st import SpanIndex, SpanInputError
from slice_st.data.corpus import (
    CorpusError,
    Document,
    documents_from_dataset,
    read_corpus,
    read_jsonl,
)
from slice_st.text import read_texts


def test_b09_jsonl_strings_may_hold_line_separators(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(
        '{"id": "a", "text": "one\u2028two\x85three"}\n{"id": "b", "text": "plain"}\n'.encode(
            "utf-8"
        )
    )
    assert [(d.id, d.text, d.line) for d in read_jsonl(str(path))] == [
        ("a", "one\u2028two\x85three", 1),
        ("b", "plain", 2),
    ]


@pytest.mark.parametrize(
    "line, expected",
    [
        ({"id": 5, "text": "the dog"}, "id field 'id' must be a string, got int 5"),
        ({"id": 5.0, "text": "the dog"}, "id field .id. must be a string, got float"),
        ({"id": "", "text": "the dog"}, "empty id"),
        ({"text": "the dog"}, "missing id field 'id'"),
    ],
)
def test_jsonl_ids_are_non_empty_strings(tmp_path, capsys, line, expected):
    from slice_st.data.corpus import CorpusError, read_jsonl

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "a cat"}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(CorpusError, match=f"c.jsonl, line 2: {expected}"):
        read_jsonl(str(corpus))
    assert re.search(expected, cli_fails(capsys, "index", "build", corpus, "-o", tmp_path / "ix"))


def test_only_regular_files_are_read_as_corpora(tmp_path, tiny_model_dir, capsys):
    import os
    from collections.abc import Iterator

    from slice_st.errors import FileAccessError
    from slice_st.files import file_lines

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it for reading would block: it is refused unopened
    for device in ("/dev/zero", "/dev/urandom", str(fifo)):
        with pytest.raises(FileAccessError, match="not a regular file"):
            read_texts([device])
    assert "not a regular file" in cli_fails(
        capsys, "mine", "-q", "cat", "/dev/zero", "-m", tiny_model_dir
    )
    assert "not a regular file" in cli_fails(
        capsys, "index", "build", "/dev/urandom", "-o", tmp_path / "ix", "-m", tiny_model_dir
    )
    assert "not a regular file" in cli_fails(
        capsys, "mine", "--queries", "/dev/zero", tmp_path / "pipe", "-m", tiny_model_dir
    )
    text = tmp_path / "a.txt"
    text.write_bytes("\ufeffone\r\ntwo caf\u00e9\n\nthree".encode())
    lines = file_lines(str(text))
    assert isinstance(lines, Iterator)  # streamed, line by line
    assert list(lines) == [
        (1, 1, "one\r\n"),
        (2, 6, "two caf\u00e9\n"),
        (3, 15, "\n"),
        (4, 16, "three"),
    ]
    text.write_bytes(b"ok\nbad \xff here\n")
    with pytest.raises(
        ValueError, match="is not UTF-8 text \\(invalid start byte at byte 7, line 2\\)"
    ):
        list(file_lines(str(text)))


def test_b22_one_file_under_two_spellings_is_indexed_once(
    tmp_path, tiny_model_dir, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("a man plays the guitar\nthe dog barks\n")
    assert [d.id for d in read_corpus(["./a.txt"])] == ["a.txt:1", "a.txt:2"]  # normalised ids
    with pytest.raises(CorpusError, match="are the same file"):
        read_corpus(["a.txt", "./a.txt"])
    os.symlink(tmp_path / "a.txt", tmp_path / "link.txt")
    assert "are the same file" in cli_fails(
        capsys, "index", "build", "a.txt", "link.txt", "-o", "ix", "-m", tiny_model_dir
    )
    run_cli(capsys, "index", "build", "a.txt", "-o", "ix", "-m", tiny_model_dir, "--no-progress")
    assert "Duplicate document id 'a.txt:1'" in cli_fails(capsys, "index", "add", "ix", "./a.txt")
    assert "already in the index as a.txt" in cli_fails(
        capsys, "index", "add", "ix", str(tmp_path / "a.txt")
    )
    assert "already in the index as a.txt" in cli_fails(capsys, "index", "add", "ix", "link.txt")
    assert len(SpanIndex.load("ix")) == 2


def test_mine_reads_a_file_named_twice_once(tmp_path, tiny_model_dir, capsys, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("a man plays the guitar\nthe dog barks\n")
    os.symlink(tmp_path / "a.txt", tmp_path / "link.txt")
    code, out = run_cli(
        capsys,
        "mine",
        "-q",
        "dog",
        "a.txt",
        "./a.txt",
        "link.txt",
        "-m",
        tiny_model_dir,
        "-f",
        "jsonl",
        "--no-progress",
    )
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert code == 0 and [(row["file"], row["line"]) for row in rows] == [
        ("a.txt", 2),
        ("a.txt", 1),
    ]
    assert (
        "./a.txt is the same file as a.txt: read once" in out.err
        and "link.txt is the same file as a.txt" in out.err
    )


def test_lone_surrogates_are_span_input_errors_and_skippable(
    tiny_model, tiny_model_dir, tmp_path, capsys
):
    from slice_st import SpanIndex

    bad = "the dog \ud800 barks"
    for call in (
        lambda: tiny_model.best_spans("dog", ["fine", bad]),
        lambda: tiny_model.best_spans(bad, "the dog"),
        lambda: tiny_model.encode_spans(bad),
        lambda: SpanIndex.build(["fine", bad], tiny_model),
    ):
        with pytest.raises(SpanInputError, match="lone surrogate"):
            call()
    index = SpanIndex.build(["the cat", bad], tiny_model, on_error="skip")
    assert index.doc_ids == ["0"] and "lone surrogate" in index.skipped[0][1]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps({"id": "ok", "text": "the cat sat"})
        + "\n"
        + json.dumps({"id": "bad", "text": bad})
        + "\n"
    )
    assert "lone surrogate" in cli_fails(
        capsys, "index", "build", corpus, "-o", tmp_path / "ix", "-m", tiny_model_dir
    )
    code, out = build_index_cli(capsys, corpus, tmp_path / "ix", tiny_model_dir, "--skip-bad")
    assert (
        code == 0
        and "skipped bad" in out.err
        and SpanIndex.load(str(tmp_path / "ix")).doc_ids == ["ok"]
    )


# ------------------------------------------------------------------------------------ loaders and SpanIndex
def test_text_file_lines_and_paragraphs(tmp_path):
    path = tmp_path / "calls.txt"
    path.write_text("first call\n\nsecond call\nstill second\n")
    lines = read_corpus([str(path)])
    assert [(d.id, d.text, d.line) for d in lines] == [
        (f"{path}:1", "first call", 1),
        (f"{path}:3", "second call", 3),
        (f"{path}:4", "still second", 4),
    ]
    paragraphs = read_corpus([str(path)], split="paragraph")
    assert [d.text for d in paragraphs] == ["first call", "second call\nstill second"]


def test_jsonl_fields_and_errors(tmp_path):
    path = tmp_path / "tickets.jsonl"
    path.write_text(
        '{"ticket": "T1", "body": "refund please"}\n\n{"ticket": "2", "body": "lost bag"}\n'
    )
    documents = read_corpus([str(path)], id_field="ticket", text_field="body")
    assert [(d.id, d.text, d.line) for d in documents] == [
        ("T1", "refund please", 1),
        ("2", "lost bag", 3),
    ]
    numeric = tmp_path / "numeric.jsonl"
    numeric.write_text(
        '{"ticket": 2, "body": "lost bag"}\n'
    )  # ids are strings (README): not silently "2"
    with pytest.raises(CorpusError, match=r"line 1: id field 'ticket' must be a string, got int 2"):
        read_corpus([str(numeric)], id_field="ticket", text_field="body")
    with pytest.raises(CorpusError, match=r"tickets.jsonl, line 1: missing id field 'id'"):
        read_jsonl(str(path))
    with pytest.raises(CorpusError, match=r"line 1: missing text field 'text'"):
        read_jsonl(str(path), id_field="ticket")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "ok"}\n{"id": "b", "text": 5}\n[1]\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl, line 2: text field 'text' must be a string"):
        read_jsonl(str(bad))
    bad.write_text('{"id": "a", "text": "ok"}\nnot json\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl, line 2: not valid JSON"):
        read_jsonl(str(bad))
    duplicate = tmp_path / "dup.jsonl"
    duplicate.write_text('{"id": "a", "text": "one"}\n{"id": "a", "text": "two"}\n')
    with pytest.raises(
        CorpusError,
        match=r"duplicate document id 'a': .*dup.jsonl, line 2 \(first seen in .*line 1\)",
    ):
        read_corpus([str(duplicate)])
    with pytest.raises(FileNotFoundError):
        read_corpus([str(tmp_path / "missing.jsonl")])


def test_build_from_files_documents_and_dataset(tiny_model, tmp_path):
    import datasets

    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"id": "a", "text": "the dog barks"}\n{"id": "b", "text": "a man plays the guitar"}\n'
    )
    from_files = SpanIndex.from_files(str(path), tiny_model, max_span=3)
    assert from_files.doc_ids == ["a", "b"]
    rows = datasets.Dataset.from_dict(
        {"key": ["a", "b"], "content": ["the dog barks", "a man plays the guitar"]}
    )
    from_dataset = SpanIndex.build(
        rows, tiny_model, text_field="content", id_field="key", max_span=3
    )
    assert from_dataset.doc_ids == ["a", "b"]
    numbered = SpanIndex.build(rows, tiny_model, text_field="content", id_field=None, max_span=3)
    assert numbered.doc_ids == ["0", "1"]
    from_documents = SpanIndex.build(
        [Document("x", "the dog barks"), Document("y", "a cat")], tiny_model, max_span=3
    )
    assert from_documents.doc_ids == ["x", "y"]
    a, b = from_files.search(QUERIES, top_k=5), from_dataset.search(QUERIES, top_k=5)
    assert [[(m.doc_id, m.span, m.score) for m in x] for x in a] == [
        [(m.doc_id, m.span, m.score) for m in x] for x in b
    ]
    with pytest.raises(CorpusError, match="no column 'body'"):
        documents_from_dataset(rows, text_field="body")


def test_short_ids_tell_same_named_files_apart():
    from slice_st.data.corpus import file_of_id, short_ids
    from slice_st.files import short_names

    # one folder: the file name alone, as before
    assert short_ids(["corpus/a.txt:1", "corpus/b.txt:3"]) == {
        "corpus/a.txt:1": "a.txt:1",
        "corpus/b.txt:3": "b.txt:3",
    }
    # the same name in two folders: as much path as tells them apart, for every line of each file
    shown = short_ids(["c/2024/x.txt:1", "c/2025/x.txt:4", "c/y.txt:2"])
    assert shown == {
        "c/2024/x.txt:1": "2024/x.txt:1",
        "c/2025/x.txt:4": "2025/x.txt:4",
        "c/y.txt:2": "y.txt:2",
    }
    # a file among those read but not shown still counts: x.txt alone would be ambiguous
    assert short_ids(["c/2024/x.txt:1"], ["c/2024/x.txt", "c/2025/x.txt"]) == {
        "c/2024/x.txt:1": "2024/x.txt:1"
    }
    # deeper, absolute, a path that ends another, ids that name no file
    assert short_names(["/r/a/b/x.txt", "/r/c/b/x.txt", "b/x.txt", "x.txt"]) == {
        "/r/a/b/x.txt": "a/b/x.txt",
        "/r/c/b/x.txt": "c/b/x.txt",
        "b/x.txt": "b/x.txt",
        "x.txt": "x.txt",
    }
    assert short_ids(["T1", "-:3", "7"]) == {"T1": "T1", "-:3": "-:3", "7": "7"}
    assert [file_of_id(i) for i in ("a:b.txt:12", "a.txt:", "a.txt:x", ":3")] == [
        "a:b.txt",
        None,
        None,
        None,
    ]
