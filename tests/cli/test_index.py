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
    f"main-captions\tMSRvid\t2012\t{i:04d}\t{score:.3f}\t{a}\t{b}\n" for i, (a, b, score) in enumerate(STS_ROWS)
)


@pytest.fixture()
def corpus(tmp_path):
    calls = tmp_path / "calls.txt"
    calls.write_text("Customer: my bag was lost on the way to Denver.\n\nAgent: the flight was delayed by the storm.\n")
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
        capsys, "index", "build", calls, "-o", out_dir, "--model", tiny_model_dir, "--max-span", "6", "--no-progress"
    )
    assert code == 0
    assert "indexed 2 documents" in out.out and "documents/s" in out.out
    code, out = _run(capsys, "index", "info", out_dir)
    info = json.loads(out.out)
    assert info["documents"] == 2 and info["max_span"] == 6 and info["smaller_than_materialised"] > 1
    # building again into the same folder is refused
    with pytest.raises(SystemExit) as exit_info:
        main(["index", "build", str(calls), "-o", str(out_dir), "--model", tiny_model_dir])
    assert exit_info.value.code == 2 and "already holds an index" in capsys.readouterr().err

    code, out = _run(
        capsys, "index", "add", out_dir, tickets, "--id-field", "key", "--text-field", "body", "--no-progress"
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

    code, out = _run(capsys, "mine", "--index", out_dir, "-q", "refund", "--spans", "2", "-f", "jsonl")
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert len(rows) == 2 and list(rows[0]) == FIELDS  # the fields of mine with files: what an index lacks is null
    assert rows[0]["file"] is None and rows[0]["calibrated"] is None
    code, out = _run(
        capsys, "mine", "--index", out_dir, "-q", "refund", "--spans", "2", "-f", "csv", "--threshold", "-1"
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
    _run(capsys, "index", "build", calls, "-o", out_dir, "--model", tiny_model_dir, "--max-span", "5", "--no-progress")
    sts = tmp_path / "sts.csv"
    sts.write_text(STS_LINES)
    code, out = _run(capsys, "index", "calibrate", out_dir, "--sts", sts, "--save-json", tmp_path / "cal.json")
    assert code == 0 and "calibrated on 8 pairs of sts.csv" in out.out
    assert json.loads((tmp_path / "cal.json").read_text())["kind"] == "isotonic"
    code, out = _run(
        capsys, "mine", "--index", out_dir, "-q", "the flight was late", "--spans", "2", "--color", "never"
    )
    assert "0-5" in out.out
    code, out = _run(capsys, "mine", "--index", out_dir, "-q", "the flight was late", "--spans", "2", "-f", "jsonl")
    assert all(0 <= json.loads(line)["calibrated"] <= 5 for line in out.out.splitlines())

    code, out = _run(capsys, "index", "candidates", out_dir, "--kind", "flat")
    assert "candidate stage built" in out.out
    exact = _run(capsys, "mine", "--index", out_dir, "-q", "the flight was late", "--spans", "3", "-f", "jsonl")[1].out
    approximate = _run(
        capsys, "mine", "--index", out_dir, "-q", "the flight was late", "--spans", "3", "-f", "jsonl", "--approximate"
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
    assert json.loads(_run(capsys, "index", "info", tmp_path / "ix2")[1].out)["calibration"]["pairs"] == 8


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mine", "-q", "x"], "no input: give FILEs"),
        (["mine", "--index", "{missing}", "-q", "x"], "No index"),
        (["mine", "--index", "{ix}", "{calls}", "-q", "x"], "either FILEs or --index"),
        (["mine", "--index", "{ix}"], "no query given"),
        (["index", "info", "{tmp}"], "not a SpanIndex"),
        (["index", "build", "{empty}", "-o", "{tmp}/new"], "no documents"),
        (["index", "build", "{bad_jsonl}", "-o", "{tmp}/new"], "bad.jsonl, line 1: missing id field 'id'"),
        (["index", "remove", "{ix}", "nope"], "Unknown document ids"),
    ],
)
def test_cli_errors(tiny_model_dir, corpus, tmp_path, capsys, argv, message):
    calls, _ = corpus
    ix = tmp_path / "ix"
    main(["index", "build", str(calls), "-o", str(ix), "--model", tiny_model_dir, "--max-span", "3", "--no-progress"])
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
    _run(capsys, "index", "build", tickets, "-o", tmp_path / "b", "--id-field", "key", "--text-field", "body", *common)
    code, out = _run(capsys, "index", "merge", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "all")
    assert code == 0 and "merged 2 shards: 4 documents" in out.out
    rows = _run(capsys, "mine", "--index", tmp_path / "all", "-q", "refund", "--spans", "50", "-f", "jsonl")[
        1
    ].out.splitlines()
    assert {json.loads(r)["doc_id"] for r in rows} >= {"T1", "T2"}
    with pytest.raises(SystemExit):
        main(["index", "merge", str(tmp_path / "a"), str(tmp_path / "a"), "-o", str(tmp_path / "dup")])
    assert "Duplicate document id" in capsys.readouterr().err


def test_skip_bad_documents(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "dirty.txt"
    corpus.write_text("the dog barks\n" + "." * 400 + " tail\n" + "a man plays the guitar\n")
    with pytest.raises(SystemExit):
        main(["index", "build", str(corpus), "-o", str(tmp_path / "ix"), "--model", tiny_model_dir, "--no-progress"])
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
