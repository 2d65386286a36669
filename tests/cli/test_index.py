"""`slice-st index build/add/remove/info/calibrate/candidates` and `slice-st mine --index`, through ``main``."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers import STS_ROWS

from slice_st.cli import main
from slice_st.cli.mine import FIELDS

STS_LINES = "".join(
    f"main-captions\tMSRvid\t2012\t{i:04d}\t{score:.3f}\t{a}\t{b}\n"
    for i, (a, b, score) in enumerate(STS_ROWS)
)


@pytest.fixture()
def corpus(tmp_path):
    calls = tmp_path / "calls.txt"
    calls.write_text(
        "Customer: my bag was lost on the way to Denver.\n\nAgent: the flight was delayed by the storm.\n"
    )
    tickets = tmp_path / "tickets.jsonl"
    tickets.write_text(
        '{"key": "T1", "body": "A man plays the guitar at the gate."}\n{"key": "T2", "body": "Refund the ticket '
        'please."}\n'
    )
    return calls, tickets


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr()


def test_build_info_mine_add_remove(tiny_model_dir, corpus, tmp_path, capsys):
    calls, tickets = corpus
    out_dir = tmp_path / "ix"
    code, out = _run(
        capsys,
        "index",
        "build",
        calls,
        "-o",
        out_dir,
        "--model",
        tiny_model_dir,
        "--max-span",
        "6",
        "--no-progress",
    )
    assert code == 0
    assert "indexed 2 documents" in out.out and "documents/s" in out.out
    code, out = _run(capsys, "index", "info", out_dir)
    info = json.loads(out.out)
    assert (
        info["documents"] == 2 and info["max_span"] == 6 and info["smaller_than_materialised"] > 1
    )
    # building again into the same folder is refused
    with pytest.raises(SystemExit) as exit_info:
        main(["index", "build", str(calls), "-o", str(out_dir), "--model", tiny_model_dir])
    assert exit_info.value.code == 2 and "already holds an index" in capsys.readouterr().err

    code, out = _run(
        capsys,
        "index",
        "add",
        out_dir,
        tickets,
        "--id-field",
        "key",
        "--text-field",
        "body",
        "--no-progress",
    )
    assert "added 2 documents" in out.out and "holds 4 documents" in out.out

    code, out = _run(
        capsys,
        "mine",
        "--index",
        out_dir,
        "-q",
        "a man plays the guitar",
        "-q",
        "my bag",
        "--spans",
        "3",
        "--color",
        "never",
    )
    assert code == 0
    lines = out.out.splitlines()
    assert "== a man plays the guitar" in lines and "== my bag" in lines
    assert sum(1 for line in lines if "«" in line and "»" in line) == 6  # highlighted spans
    assert "score   0-5" not in out.out  # no calibration yet: no 0-5 column

    code, out = _run(
        capsys, "mine", "--index", out_dir, "-q", "refund", "--spans", "2", "-f", "jsonl"
    )
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert (
        len(rows) == 2 and list(rows[0]) == FIELDS
    )  # the fields of mine with files: what an index lacks is null
    assert rows[0]["file"] is None and rows[0]["calibrated"] is None
    code, out = _run(
        capsys,
        "mine",
        "--index",
        out_dir,
        "-q",
        "refund",
        "--spans",
        "2",
        "-f",
        "csv",
        "--threshold",
        "-1",
    )
    table = list(csv.DictReader(io.StringIO(out.out)))
    assert [row["rank"] for row in table] == ["1", "2"]
    code, out = _run(capsys, "mine", "--index", out_dir, "-q", "refund", "--threshold", "1.01")
    assert "no match at or above threshold 1.01" in out.out

    code, out = _run(capsys, "index", "remove", out_dir, "T2")
    assert "removed 1 documents" in out.out
    code, out = _run(capsys, "index", "info", out_dir)
    assert json.loads(out.out)["documents"] == 3


def test_calibrate_candidates_and_approximate_mine(tiny_model_dir, corpus, tmp_path, capsys):
    calls, _ = corpus
    out_dir = tmp_path / "ix"
    _run(
        capsys,
        "index",
        "build",
        calls,
        "-o",
        out_dir,
        "--model",
        tiny_model_dir,
        "--max-span",
        "5",
        "--no-progress",
    )
    sts = tmp_path / "sts.csv"
    sts.write_text(STS_LINES)
    code, out = _run(
        capsys, "index", "calibrate", out_dir, "--sts", sts, "--save-json", tmp_path / "cal.json"
    )
    assert code == 0 and "calibrated on 8 pairs of sts.csv" in out.out
    assert json.loads((tmp_path / "cal.json").read_text())["kind"] == "isotonic"
    code, out = _run(
        capsys,
        "mine",
        "--index",
        out_dir,
        "-q",
        "the flight was late",
        "--spans",
        "2",
        "--color",
        "never",
    )
    assert "0-5" in out.out
    code, out = _run(
        capsys,
        "mine",
        "--index",
        out_dir,
        "-q",
        "the flight was late",
        "--spans",
        "2",
        "-f",
        "jsonl",
    )
    assert all(0 <= json.loads(line)["calibrated"] <= 5 for line in out.out.splitlines())

    code, out = _run(capsys, "index", "candidates", out_dir, "--kind", "flat")
    assert "candidate stage built" in out.out
    exact = _run(
        capsys,
        "mine",
        "--index",
        out_dir,
        "-q",
        "the flight was late",
        "--spans",
        "3",
        "-f",
        "jsonl",
    )[1].out
    approximate = _run(
        capsys,
        "mine",
        "--index",
        out_dir,
        "-q",
        "the flight was late",
        "--spans",
        "3",
        "-f",
        "jsonl",
        "--approximate",
    )[1].out
    assert [json.loads(x)["span"] for x in exact.splitlines()] == [
        json.loads(x)["span"] for x in approximate.splitlines()
    ]

    # a build can carry a calibration JSON
    code, out = _run(
        capsys,
        "index",
        "build",
        calls,
        "-o",
        tmp_path / "ix2",
        "--model",
        tiny_model_dir,
        "--max-span",
        "5",
        "--calibration",
        tmp_path / "cal.json",
        "--no-progress",
    )
    assert (
        json.loads(_run(capsys, "index", "info", tmp_path / "ix2")[1].out)["calibration"]["pairs"]
        == 8
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mine", "-q", "x"], "no input: give FILEs"),
        (["mine", "--index", "{missing}", "-q", "x"], "No index"),
        (["mine", "--index", "{ix}", "{calls}", "-q", "x"], "either FILEs or --index"),
        (["mine", "--index", "{ix}"], "no query given"),
        (["index", "info", "{tmp}"], "not a SpanIndex"),
        (["index", "build", "{empty}", "-o", "{tmp}/new"], "no documents"),
        (
            ["index", "build", "{bad_jsonl}", "-o", "{tmp}/new"],
            "bad.jsonl, line 1: missing id field 'id'",
        ),
        (["index", "remove", "{ix}", "nope"], "Unknown document ids"),
    ],
)
def test_cli_errors(tiny_model_dir, corpus, tmp_path, capsys, argv, message):
    calls, _ = corpus
    ix = tmp_path / "ix"
    main(
        [
            "index",
            "build",
            str(calls),
            "-o",
            str(ix),
            "--model",
            tiny_model_dir,
            "--max-span",
            "3",
            "--no-progress",
        ]
    )
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "bad.jsonl").write_text('{"text": "no id"}\n')
    capsys.readouterr()
    values = {
        "missing": tmp_path / "missing",
        "ix": ix,
        "calls": calls,
        "tmp": tmp_path,
        "empty": tmp_path / "empty.txt",
        "bad_jsonl": tmp_path / "bad.jsonl",
    }
    with pytest.raises(SystemExit) as exit_info:
        main([part.format(**values) for part in argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_merge_shards(tiny_model_dir, corpus, tmp_path, capsys):
    calls, tickets = corpus
    common = ["--model", tiny_model_dir, "--max-span", "4", "--no-progress"]
    _run(capsys, "index", "build", calls, "-o", tmp_path / "a", *common)
    _run(
        capsys,
        "index",
        "build",
        tickets,
        "-o",
        tmp_path / "b",
        "--id-field",
        "key",
        "--text-field",
        "body",
        *common,
    )
    code, out = _run(
        capsys, "index", "merge", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "all"
    )
    assert code == 0 and "merged 2 shards: 4 documents" in out.out
    rows = _run(
        capsys, "mine", "--index", tmp_path / "all", "-q", "refund", "--spans", "50", "-f", "jsonl"
    )[1].out.splitlines()
    assert {json.loads(r)["doc_id"] for r in rows} >= {"T1", "T2"}
    with pytest.raises(SystemExit):
        main(
            [
                "index",
                "merge",
                str(tmp_path / "a"),
                str(tmp_path / "a"),
                "-o",
                str(tmp_path / "dup"),
            ]
        )
    assert "Duplicate document id" in capsys.readouterr().err


def test_skip_bad_documents(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "dirty.txt"
    corpus.write_text("the dog barks\n" + "." * 400 + " tail\n" + "a man plays the guitar\n")
    with pytest.raises(SystemExit):
        main(
            [
                "index",
                "build",
                str(corpus),
                "-o",
                str(tmp_path / "ix"),
                "--model",
                tiny_model_dir,
                "--no-progress",
            ]
        )
    assert "longer than the model window" in capsys.readouterr().err
    code, out = _run(
        capsys,
        "index",
        "build",
        corpus,
        "-o",
        tmp_path / "ix",
        "--model",
        tiny_model_dir,
        "--no-progress",
        "--skip-bad",
    )
    assert code == 0 and "indexed 2 documents" in out.out
    assert f"skipped {corpus}:2" in out.err and "1 documents skipped" in out.err
    assert json.loads(_run(capsys, "index", "info", tmp_path / "ix")[1].out)["documents"] == 2


@pytest.fixture()
def two_folders(tmp_path):
    """``a/x.txt`` and ``b/x.txt`` (the same name in two folders), hard-wrapped, and ``y.txt``."""
    for folder, words in (("a", "a man plays the guitar"), ("b", "the flight was late")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.txt").write_text(
            f"First   line  of {words}\n  and its wrapped\n   end.\n\nSecond.\n"
        )
    (tmp_path / "y.txt").write_text("Refund the ticket please.\n")
    return tmp_path


def _build(capsys, tiny_model_dir, folder, *files):
    code, _ = _run(
        capsys,
        "index",
        "build",
        *files,
        "-o",
        folder / "ix",
        "--model",
        tiny_model_dir,
        "--split",
        "paragraph",
        "--no-progress",
    )
    assert code == 0
    return folder / "ix"


def test_list_remove_file_add_replace(tiny_model_dir, two_folders, capsys):
    a, b, y = (str(two_folders / name) for name in ("a/x.txt", "b/x.txt", "y.txt"))
    ix = _build(capsys, tiny_model_dir, two_folders, a, b, y)
    code, out = _run(capsys, "index", "list", ix, "-f", "json")
    rows = json.loads(out.out)
    assert [(row["id"], row["file"]) for row in rows] == [
        (f"{a}:1", a),
        (f"{a}:5", a),
        (f"{b}:1", b),
        (f"{b}:5", b),
        (f"{y}:1", y),
    ]
    assert rows[-1]["characters"] == len("Refund the ticket please.") and rows[-1]["units"] == 4
    code, out = _run(capsys, "index", "list", ix)
    lines = out.out.splitlines()
    assert (
        lines[0].split() == ["id", "file", "characters", "units"]
        and lines[-1] == "5 documents, 3 files"
    )
    assert lines[5].split() == [f"{y}:1", y, "25", "4"]
    code, out = _run(capsys, "index", "list", ix, "-f", "csv")
    first = "First   line  of a man plays the guitar\n  and its wrapped\n   end."
    expected = {"id": f"{a}:1", "file": a, "characters": str(len(first)), "units": "12"}
    assert list(csv.DictReader(io.StringIO(out.out)))[0] == expected

    code, out = _run(capsys, "index", "remove", ix, "--file", a)
    assert code == 0 and "removed 2 documents; the index holds 3 documents" in out.out
    code, out = _run(capsys, "index", "list", ix, "-f", "jsonl")
    assert [json.loads(line)["file"] for line in out.out.splitlines()] == [b, b, y]

    (two_folders / "b" / "x.txt").write_text("Rewritten: the flight left on time.\n")
    code, out = _run(capsys, "index", "add", ix, b, "--replace", "--no-progress")
    assert (
        code == 0
        and "added 1 documents (replacing 2)" in out.out
        and "holds 2 documents" in out.out
    )
    code, out = _run(capsys, "index", "add", ix, y, "--replace", "--no-progress", "-f", "json")
    assert json.loads(out.out)["replaced"] == 1 and json.loads(out.out)["index_documents"] == 2
    code, out = _run(capsys, "index", "list", ix, "-f", "json")
    assert [row["id"] for row in json.loads(out.out)] == [f"{b}:1", f"{y}:1"]


def test_remove_file_errors(tiny_model_dir, two_folders, capsys):
    ix = _build(capsys, tiny_model_dir, two_folders, two_folders / "y.txt")
    for argv, said in (
        (
            ["--file", two_folders / "a" / "x.txt"],
            f"No document of {two_folders / 'a' / 'x.txt'} in the index",
        ),
        ([], "give document IDs or --file PATH"),
        (["some-id", "--file", two_folders / "y.txt"], "give document IDs or --file PATH"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["index", "remove", str(ix), *map(str, argv)])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and said in err and len(err.strip().splitlines()) == 1
    code, out = _run(capsys, "index", "list", ix, "-f", "jsonl")
    assert len(out.out.splitlines()) == 1  # nothing removed
    # a folder of indexes (shards) lists every shard's documents
    (two_folders / "shards").mkdir()
    ix.rename(two_folders / "shards" / "s1")
    _build(capsys, tiny_model_dir, two_folders, two_folders / "a").rename(
        two_folders / "shards" / "s2"
    )
    code, out = _run(capsys, "index", "list", two_folders / "shards")
    assert out.out.splitlines()[-1] == "3 documents, 2 files"
    with pytest.raises(SystemExit) as exit_info:
        main(["index", "list", str(two_folders / "nowhere")])
    assert exit_info.value.code == 2 and "nowhere" in capsys.readouterr().err


def test_same_named_files_are_told_apart_and_whitespace_shown_once(
    tiny_model_dir, two_folders, capsys
):
    """``a/x.txt`` and ``b/x.txt`` show as such (``y.txt`` stays short), in mine over files and over the index; a
    wrapped text's runs of spaces and newlines show as one space, while json keeps the text and offsets exact."""
    files = [str(two_folders / name) for name in ("a", "b", "y.txt")]
    ix = _build(capsys, tiny_model_dir, two_folders, *files)
    common = [
        "-q",
        "wrapped end",
        "--spans",
        "20",
        "--color",
        "never",
        "--model",
        tiny_model_dir,
        "--no-progress",
    ]
    for source in ([*files, "--split", "paragraph"], ["--index", ix]):
        code, out = _run(capsys, "mine", *source, *common)
        places = {line.split()[2] for line in out.out.splitlines()[3:] if line.strip()}
        assert places == {"a/x.txt:1", "a/x.txt:5", "b/x.txt:1", "b/x.txt:5", "y.txt:1"}, places
        shown = out.out.replace("«", "").replace("»", "")
        assert "First line of the flight was late and its wrap" in shown and "First  " not in shown
        code, out = _run(capsys, "mine", *source, *common, "-f", "jsonl")
        for row in map(json.loads, out.out.splitlines()):
            assert row["span"] == row["text"][row["start"] : row["end"]]
        assert any(
            "\n  and its wrapped\n   end." in json.loads(line)["text"]
            for line in out.out.splitlines()
        )


def test_build_without_exact_tier(tiny_model_dir, tmp_path, capsys):
    """``--no-exact-tier``: info says so, mine and add work (re-encoding candidates), what needs the vectors fails in
    one line."""
    from helpers import build_index_cli, cli_fails, make_docs

    corpus, out = tmp_path / "a.txt", tmp_path / "ix"
    corpus.write_text("\n".join(make_docs(40)) + "\n")
    lean = ("--compress", "pq8", "--no-exact-tier", "--max-span", 4)
    assert build_index_cli(capsys, corpus, out, tiny_model_dir, *lean)[0] == 0
    info = json.loads(_run(capsys, "index", "info", out)[1].out)
    assert info["exact_tier"] is False and info["format_version"] == 4
    assert not (
        set(json.loads((out / "manifest.json").read_text())["files"]) & {"unit_vectors.npy"}
    )
    query = " ".join(make_docs(40)[7].split()[:4])
    code, printed = _run(
        capsys, "mine", "--index", out, "-q", query, "--candidates", 5, "-f", "jsonl"
    )
    rows = [json.loads(line) for line in printed.out.splitlines()]
    assert code == 0 and rows[0]["doc_id"] == f"{corpus}:8"
    more = tmp_path / "b.txt"
    more.write_text("the man plays the loud guitar\n")
    assert _run(capsys, "index", "add", out, more, "--no-progress")[0] == 0
    sts = tmp_path / "sts.csv"
    sts.write_text(STS_LINES)
    assert _run(capsys, "index", "calibrate", out, "--sts", sts)[0] == 0
    code, printed = _run(
        capsys, "mine", "--index", out, "-q", "plays the loud guitar", "-f", "jsonl"
    )
    best = json.loads(printed.out.splitlines()[0])
    assert code == 0 and best["doc_id"] == f"{more}:1" and best["calibrated"] is not None
    assert "exact tier" in cli_fails(capsys, "index", "compress", out, "--spec", "pq16")
    assert "exact tier" in cli_fails(capsys, "index", "candidates", out)
    assert "exact tier" in cli_fails(capsys, "mine", "--index", out, "-q", query, "--approximate")
    assert "compress" in cli_fails(
        capsys,
        "index",
        "build",
        corpus,
        "-o",
        tmp_path / "c",
        "-m",
        tiny_model_dir,
        "--no-exact-tier",
    )
    # an index built with its exact tier drops it when compressed with --no-exact-tier
    full = tmp_path / "full"
    assert build_index_cli(capsys, corpus, full, tiny_model_dir, "--max-span", 4)[0] == 0
    code, _ = _run(capsys, "index", "compress", full, "--spec", "pq8", "--no-exact-tier")
    info = json.loads(_run(capsys, "index", "info", full)[1].out)
    assert code == 0 and info["exact_tier"] is False and info["compression"]["spec"] == "pq8,norms4"
