"""The command line as people use it (issue 23): index search, result counts with their own names, folders and globs,
--split auto, one --format everywhere (html escaped), plain grouped --help, --quiet silencing warnings, aligned
columns."""

from __future__ import annotations

import argparse
import io
import json
import re
import warnings

import pytest

from slice_st.cli import COMMAND_GROUPS, build_parser, main
from slice_st.cli.mine import write_rows
from slice_st.text import guess_split, read_texts

WRAPPED = (
    "The installer copies the files into the folder that you chose in the first\n"
    "step, then asks whether the service should start when the computer boots\n"
    "and which port it should listen on for incoming connections from clients.\n"
    "\n"
    "To remove the program, open the control panel and select the entry named\n"
    "after the product, then press the button labelled uninstall and confirm\n"
    "that the settings stored in your home folder may be deleted as well.\n"
)
SENTENCES = [
    f"line {n}: the {word} was lost at the airport."
    for n, word in enumerate(
        [
            "bag",
            "suitcase",
            "ticket",
            "passport",
            "phone",
            "wallet",
            "laptop",
            "jacket",
            "camera",
            "umbrella",
            "guitar",
            "book",
            "charger",
            "watch",
            "scarf",
        ]
    )
]


def _command_groups(parser) -> list:
    return [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]


def _leaf_commands(parser, prefix=()):
    if not _command_groups(parser):
        yield prefix, parser
    for group in _command_groups(parser):
        for name, child in dict.fromkeys(group.choices.items()):
            yield from _leaf_commands(child, prefix + (name,))


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr()


def _jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "lost.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    return path


@pytest.fixture()
def built(tiny_model_dir, corpus, tmp_path, capsys):
    out = tmp_path / "ix"
    assert (
        _run(
            capsys,
            "index",
            "build",
            corpus,
            "-o",
            out,
            "--model",
            tiny_model_dir,
            "--max-span",
            "4",
            "--quiet",
        )[0]
        == 0
    )
    return out


# ---------------------------------------------------------------- --split auto
@pytest.mark.parametrize(
    "lines, expected",
    [
        (WRAPPED.splitlines(keepends=True), "paragraph"),
        ([s + "\n" for s in SENTENCES], "line"),  # one text per line, ending sentences
        (
            ["guitar\n", "flight delay\n", "lost bag\n", "refund\n"],
            "line",
        ),  # a phrase list: short lines
        (
            [
                "Agent: how can I help you today\n",
                "Customer: my flight to Denver was pushed back by three hours\n",
            ],
            "line",
        ),
        ([], "line"),
        (["one single line without an end but long enough to look like it was wrapped\n"], "line"),
    ],
)
def test_guess_split(lines, expected):
    assert guess_split(lines) == expected


def test_split_auto_is_the_default_and_decides_per_file(tiny_model_dir, corpus, tmp_path, capsys):
    manual = tmp_path / "manual.txt"
    manual.write_text(WRAPPED)
    assert [r.line for r in read_texts([str(manual), str(corpus)], "auto")] == [1, 5] + list(
        range(1, 16)
    )
    rows = _jsonl(
        _run(
            capsys,
            "mine",
            manual,
            "-q",
            "remove the program",
            "--model",
            tiny_model_dir,
            "-f",
            "jsonl",
            "--quiet",
        )[1].out
    )
    assert sorted(row["line"] for row in rows) == [1, 5]  # two paragraphs, not seven lines
    rows = _jsonl(
        _run(
            capsys,
            "mine",
            manual,
            "-q",
            "remove",
            "--split",
            "line",
            "--model",
            tiny_model_dir,
            "-f",
            "jsonl",
            "--quiet",
            "--texts",
            "0",
        )[1].out
    )
    assert len(rows) == 6


# ---------------------------------------------------------------- result counts
def test_mine_default_count_and_named_counts(tiny_model_dir, corpus, capsys):
    base = [
        "mine",
        corpus,
        "-q",
        "my bag was lost",
        "--model",
        tiny_model_dir,
        "-f",
        "jsonl",
        "--quiet",
        "--max-span",
        "4",
    ]
    assert len(_jsonl(_run(capsys, *base)[1].out)) == 10  # not every text
    assert len(_jsonl(_run(capsys, *base, "--texts", "0")[1].out)) == 15
    assert len(_jsonl(_run(capsys, *base, "--texts", "3")[1].out)) == 3
    rows = _jsonl(_run(capsys, *base, "--texts", "3", "--per-text", "2")[1].out)
    assert (
        len(rows) == 6
        and len({row["line"] for row in rows}) == 3
        and [row["rank"] for row in rows] == list(range(1, 7))
    )
    assert (
        len(_jsonl(_run(capsys, *base, "--texts", "3", "--per-text", "2", "--spans", "4")[1].out))
        == 4
    )
    with pytest.raises(SystemExit):
        main([str(a) for a in base] + ["--per-text", "0"])
    assert "--per-text 0" in capsys.readouterr().err


def test_index_search_equals_mine_index_and_counts(built, capsys):
    query = ["-q", "my bag was lost", "-f", "jsonl", "--quiet"]
    searched = _run(capsys, "index", "search", built, *query)[1].out
    mined = _run(capsys, "mine", "--index", built, *query)[1].out
    assert searched == mined and len(_jsonl(searched)) == 10
    assert (
        _run(capsys, "index", "search", built, "-q", "my bag was lost", "--quiet")[1].out
        == _run(capsys, "mine", "--index", built, "-q", "my bag was lost", "--quiet")[1].out
    )  # text output too
    rows = _jsonl(
        _run(capsys, "index", "search", built, *query, "--texts", "2", "--per-text", "3")[1].out
    )
    assert len({row["doc_id"] for row in rows}) == 2 and len(rows) == 6
    assert len(_jsonl(_run(capsys, "index", "search", built, *query, "--spans", "3")[1].out)) == 3
    from slice_st.index import SpanIndex

    rows = _jsonl(
        _run(capsys, "index", "search", built, *query, "--spans", "5", "--per-text", "0")[1].out
    )
    expected = SpanIndex.load(built).search("my bag was lost", top_k=5)[0]  # no per-document limit
    assert [(row["doc_id"], row["start"], row["end"]) for row in rows] == [
        (m.doc_id, m.start, m.end) for m in expected
    ]


# ---------------------------------------------------------------- folders and globs
def test_folders_and_globs_for_mine_and_index_build(tiny_model_dir, tmp_path, capsys):
    root = tmp_path / "docs"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "a.txt").write_text("the flight was late.\n")
    (root / "sub" / "b.md").write_text("my bag was lost.\n")
    (root / "sub" / "deeper" / "c.jsonl").write_text('{"id": "c1", "text": "refund the ticket."}\n')
    (root / "sub" / "image.png").write_bytes(b"\x89PNG")
    (root / ".hidden" / "secret.txt").write_text("not indexed.\n")
    code, out = _run(
        capsys,
        "index",
        "build",
        root,
        "-o",
        tmp_path / "ix",
        "--model",
        tiny_model_dir,
        "--max-span",
        "3",
        "-f",
        "json",
    )
    summary = json.loads(out.out)
    assert code == 0 and summary["documents"] == 3 and summary["index_documents"] == 3
    rows = _jsonl(
        _run(
            capsys, "mine", root, "-q", "late", "--model", tiny_model_dir, "-f", "jsonl", "--quiet"
        )[1].out
    )
    assert {row["span"] for row in rows} and len(rows) == 3
    rows = _jsonl(
        _run(
            capsys,
            "mine",
            str(root / "**" / "*.md"),
            "-q",
            "bag",
            "--model",
            tiny_model_dir,
            "-f",
            "jsonl",
            "--quiet",
        )[1].out
    )
    assert [row["file"].endswith("b.md") for row in rows] == [True]
    for argv in (
        ["mine", str(root / "*.nothing"), "-q", "x"],
        ["index", "build", str(tmp_path / "empty*"), "-o", str(tmp_path / "i2")],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv + ["--model", tiny_model_dir, "--quiet"])
        assert exit_info.value.code == 2 and "no file matches" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        main(["mine", str(tmp_path / "empty"), "-q", "x", "--model", tiny_model_dir])
    assert "no .txt" in capsys.readouterr().err


# ---------------------------------------------------------------- --format
def test_every_command_that_prints_results_has_one_format_option():
    parser = build_parser()
    commands = dict(_leaf_commands(parser))
    for name in [("mine",), ("index", "search")]:
        formats = next(a for a in commands[name]._actions if "--format" in a.option_strings)
        assert {"text", "json", "jsonl", "html", "csv"} <= set(formats.choices), name
    for name in [("index", "build"), ("index", "add")]:
        formats = next(a for a in commands[name]._actions if "--format" in a.option_strings)
        assert {"text", "json", "jsonl"} <= set(formats.choices), name


def test_file_and_index_rows_carry_the_same_fields(built, corpus, tiny_model_dir, capsys):
    query = ["-q", "my bag was lost", "-f", "jsonl", "--quiet", "--texts", "2"]
    from_files = _jsonl(
        _run(capsys, "mine", corpus, "--model", tiny_model_dir, "--max-span", "4", *query)[1].out
    )
    from_index = _jsonl(_run(capsys, "mine", "--index", built, *query)[1].out)
    assert from_files and from_index and list(from_files[0]) == list(from_index[0])
    assert from_files[0]["doc_id"] == f"{from_files[0]['file']}:{from_files[0]['line']}"
    assert from_index[0]["file"] is None and from_files[0]["calibrated"] is None
    assert (
        {row["scorer"] for row in from_files}
        == {row["scorer"] for row in from_index}
        == {"reranked"}
    )


def test_json_and_html_output(tiny_model_dir, tmp_path, capsys):
    path = tmp_path / "markup.txt"
    path.write_text('the <b>flight</b> & "bag" were lost.\nrefund the ticket.\n')
    base = ["mine", path, "-q", "flight", "--model", tiny_model_dir, "--quiet", "--texts", "0"]
    rows = json.loads(_run(capsys, *base, "-f", "json")[1].out)
    assert (
        isinstance(rows, list)
        and len(rows) == 2
        and {"query", "rank", "score", "span"} <= set(rows[0])
    )
    page = _run(capsys, *base, "-f", "html")[1].out
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "<b>flight</b>" not in page and "&lt;b&gt;" in page and "&amp;" in page
    assert (
        page.count("<mark>") == 2 and "<script" not in page and "http" not in page
    )  # self-contained, nothing fetched
    top = rows[0]
    escaped = (
        top["span"]
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace(chr(34), "&quot;")
    )
    assert f"<mark>{escaped}</mark>" in page


# ---------------------------------------------------------------- help
def test_help_is_plain_text_and_grouped(capsys):
    parser = build_parser()
    markup = re.compile(r"``|:(class|func|meth|attr|mod):`")
    for name, command in _leaf_commands(parser):
        assert not markup.search(command.format_help()), " ".join(name)
        assert command.format_usage().startswith(f"usage: slice-st {' '.join(name)} "), " ".join(
            name
        )  # not "slice-st [-h] … mine"
    for group in _command_groups(parser):
        for child in group.choices.values():
            assert not markup.search(child.format_help())
    top = parser.format_help()
    assert not markup.search(top)
    for title in ("mining:", "index:", "evaluation:", "training:", "export:"):
        assert title in top
    assert "other:" not in top  # every command is in a group
    listed = [name for names in COMMAND_GROUPS.values() for name in names]
    assert sorted(listed) == sorted(_command_groups(parser)[0].choices)
    assert top.index("mining:") < top.index("    mine ") < top.index("index:")


# ---------------------------------------------------------------- --quiet
def test_quiet_silences_library_warnings(monkeypatch, capsys):
    import logging

    from slice_st.cli import export

    def noisy(args):
        warnings.warn("a library warning", UserWarning, stacklevel=1)
        logging.getLogger("sentence_transformers").warning("a library log line")
        return 0

    monkeypatch.setattr(export, "_export", noisy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["export", "model-folder", "-o", "out", "--quiet"])
        assert not caught
        assert "a library log line" not in capsys.readouterr().err
        main(["export", "model-folder", "-o", "out"])
        assert [str(w.message) for w in caught] == [
            "a library warning"
        ]  # without --quiet it is shown, and the filters are back


# ---------------------------------------------------------------- aligned columns
def test_columns_stay_aligned_with_long_paths():
    rows = [
        {
            "query": "q",
            "rank": rank,
            "score": 0.5,
            "where": where,
            "start": 0,
            "end": 4,
            "text": "text of the row",
            "span": "text",
        }
        for rank, where in enumerate(
            [
                "a.txt:1",
                "a/very/long/folder/name/with/many/levels/and/a_long_file_name.txt:12345",
                "b:2",
            ],
            1,
        )
    ]
    out = io.StringIO()
    write_rows(
        rows,
        ["query", "rank", "score", "where", "start", "end", "span"],
        argparse.Namespace(format="text", color="never", threshold=None, min_confidence=None),
        out,
    )
    lines = [line for line in out.getvalue().splitlines() if line and not line.startswith("==")]
    header, body = lines[0], lines[1:]
    column = header.index("chars")
    assert all(line[column:].startswith("0-4 ") for line in body), out.getvalue()
    context = header.index("match in context")
    assert all(line[context:].startswith("«text»") for line in body)


def test_guess_split_keeps_unpunctuated_lines_of_any_length():
    import random

    rng = random.Random(9)
    words = "the dog barks late today house green river city plays guitar flight".split()
    lines = [
        " ".join(rng.choice(words) for _ in range(rng.randint(4, 20))) + "\n" for _ in range(12)
    ]
    assert guess_split(lines) == "line"


def test_guess_split_needs_lines_filled_to_a_width():
    """Unpunctuated lines whose lengths happen to cluster, but past a wrapping width (or spread out): lines."""
    from helpers import make_docs

    texts = make_docs(
        12, seed=9, low=4, high=20
    )  # tests/index/test_sharded.py's corpus: one document per line
    for part in (texts, texts[:6], texts[6:]):
        assert guess_split([text + "\n" for text in part]) == "line"
    assert (
        guess_split(
            ["x" * 70 + " end\n", "y" * 66 + " more\n", "z" * 72 + " tail\n", "last line.\n"]
        )
        == "paragraph"
    )
