"""The command line's conventions: one-line errors with exit 2, --quiet / --no-progress everywhere,
strict JSON, option values checked at parse time, a fast --help / --version."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import build_index_cli, cli_fails, run_cli

import slice_st
import slice_st.errors
from slice_st import SpanIndex, SpanInputError
from slice_st.cli import build_parser, main
from slice_st.cli.common import dumps_json


def _leaf_commands(parser, prefix=()):
    groups = [
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    ]
    if not groups:
        yield prefix, parser
    for group in groups:
        for name, child in group.choices.items():
            yield from _leaf_commands(child, prefix + (name,))


def _error_line(capsys, argv, code=2) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1]


def test_every_command_has_quiet_and_no_progress():
    commands = list(_leaf_commands(build_parser()))
    assert len(commands) >= 14  # mine, index ×8, serve, train, make-passages, mteb run, export
    for name, parser in commands:
        options = {option for action in parser._actions for option in action.option_strings}
        assert {"--quiet", "--no-progress"} <= options, " ".join(name)


def test_missing_hub_model_offline_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = tmp_path / "t.txt"
    text.write_text("a man plays the guitar\n")
    line = _error_line(capsys, ["mine", "-m", "nosuch/model", "-q", "guitar", str(text)])
    assert (
        line.startswith("slice-st: error: ")
        and "'nosuch/model'" in line
        and "HF_HUB_OFFLINE" in line
    )


def test_missing_local_model_is_one_line(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("a man plays the guitar\n")
    line = _error_line(
        capsys, ["mine", "-m", str(tmp_path / "runs" / "final"), "-q", "guitar", str(text)]
    )
    assert line.startswith("slice-st: error: No model found at")


def test_bad_option_values_are_rejected_while_parsing(capsys):
    assert "must be >= 0" in _error_line(capsys, ["mine", "-q", "x", "--texts", "-1", "f.txt"])
    assert "invalid choice" in _error_line(capsys, ["mine", "-q", "x", "--unit", "char", "f.txt"])
    assert _error_line(capsys, ["index", "build"]).startswith(
        "slice-st: error: the following arguments are required"
    )


def test_an_argument_error_is_one_line_with_a_did_you_mean(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["mine", "-q", "x", "--texs", "3", "f.txt"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    assert (
        err.startswith("slice-st: error: unrecognized arguments: --texs")
        and "did you mean --texts?" in err
    )
    misspelt = "serch"  # spellchecker:disable-line
    assert "did you mean search?" in _error_line(capsys, ["index", misspelt, "ix"])
    for old in (["-k", "3"], ["--top-k", "3"], ["--per-doc", "2"]):  # the old aliases are gone
        assert "unrecognized arguments" in _error_line(capsys, ["mine", "-q", "x", *old, "f.txt"])


def test_library_errors_are_one_line(capsys, tmp_path):
    line = _error_line(capsys, ["mine", "-q", "x", str(tmp_path / "missing.txt")])
    assert line == f"slice-st: error: input file not found: {tmp_path / 'missing.txt'}"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{broken\n')
    assert _error_line(capsys, ["make-passages", str(bad), "-o", str(tmp_path / "out")]).startswith(
        "slice-st: error: "
    )


def test_missing_extra_is_one_line(capsys, monkeypatch):
    import slice_st
    from slice_st.errors import MissingExtraError

    def missing(*args, **kwargs):
        raise MissingExtraError(
            "ONNX export needs optimum, which is not installed: pip install 'slice-st[onnx]'"
        )

    monkeypatch.setattr(slice_st, "export_model", missing)
    line = _error_line(capsys, ["export", "-o", "out"])
    assert (
        line
        == "slice-st: error: ONNX export needs optimum, which is not installed: pip install 'slice-st[onnx]'"
    )


def test_keyboard_interrupt_is_exit_130(capsys, monkeypatch, tmp_path):
    import slice_st.cli.mine as mine_module

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(mine_module, "read_queries", interrupted)
    (tmp_path / "t.txt").write_text("x\n")
    assert (
        _error_line(capsys, ["mine", "-q", "x", str(tmp_path / "t.txt")], code=130)
        == "slice-st: interrupted"
    )


@pytest.mark.parametrize("bug", [ZeroDivisionError, ValueError])
def test_a_bug_keeps_its_traceback(monkeypatch, tmp_path, capsys, bug):
    """Anything but the library's own errors (even a plain ValueError) is a bug: its traceback, under an issue hint."""
    import slice_st.cli.mine as mine_module

    def broken(args):
        raise bug("broken")

    monkeypatch.setattr(mine_module, "read_queries", broken)
    (tmp_path / "t.txt").write_text("x\n")
    with pytest.raises(bug):
        main(["mine", "-q", "x", str(tmp_path / "t.txt")])
    assert "please open an issue" in capsys.readouterr().err


def test_strict_json():
    assert (
        dumps_json({"p": float("nan"), "q": [float("-inf"), 0.5]})
        == '{"p": null, "q": [null, 0.5]}'
    )

    assert json.loads(dumps_json({"x": np.float32(0.25), "y": np.array([1.0, np.nan])})) == {
        "x": 0.25,
        "y": [1.0, None],
    }


def test_quiet_index_build_prints_nothing(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays the guitar.\nThe flight was late.\n")
    assert (
        main(
            [
                "index",
                "build",
                str(corpus),
                "-o",
                str(tmp_path / "ix"),
                "-m",
                tiny_model_dir,
                "--max-span",
                "3",
                "--quiet",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert main(["index", "info", str(tmp_path / "ix"), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 2  # results still print


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["mine", "--help"]])
def test_help_and_version_load_nothing_heavy(argv):
    """--help / --version stay instant because they import no torch, transformers or sentence-transformers
    (checked by module list, not by wall time: timings on a shared machine are noise; benchmarks measure time)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['slice-st', *{argv!r}]\n"
        "try:\n    runpy.run_module('slice_st.cli', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'datasets', 'mteb') if m in "
        "sys.modules)\n"
        "print('HEAVY:' + ','.join(heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("HEAVY:"), done.stdout[-300:]


def test_train_takes_the_trainers_own_arguments(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for option in (
        "--per-device-train-batch-size",
        "--hub-model-id",
        "--distill-data",
        "--lora-r",
        "--preset",
        "-o",
    ):
        assert option in help_text
    line = _error_line(capsys, ["train", "-o", "runs/x", "--max-stepz", "3"])
    assert (
        line.startswith("slice-st: error: unrecognized arguments: --max-stepz")
        and "did you mean --max-steps?" in line
    )
    assert "give -o/--output-dir DIR" in _error_line(
        capsys, ["train", "--train-data", "x"]
    )  # never "trainer_output"
    config = tmp_path / "run.json"
    config.write_text('{"distill_spanz": 4}')
    assert "did you mean distill_spans?" in _error_line(capsys, ["train", "--config", str(config)])


def test_train_help_lists_the_slice_settings_first(capsys):
    """``train --help``: the SLICE settings first, then the command's own options, then the common training arguments
    in a group of their own; ``--help-all`` lists every training argument under the same heading."""
    help_text = _help(capsys, "--help")
    first_screen = "\n".join(help_text.splitlines()[:40])
    assert all(option in first_screen for option in ("--train-data", "--distill-data", "--dev DEV"))
    headings = [
        line
        for line in help_text.splitlines()
        if line and not line.startswith(" ") and line.endswith(":")
    ]
    assert (
        headings[0] == "SLICE settings (slice_st.training.SliceArguments):"
        and headings[1] == "slice-st train:"
    )
    assert headings[2].startswith(
        "sentence-transformers training arguments (SentenceTransformerTrainingArguments)"
    )
    assert "--help-all: all " in headings[2] and len(headings) == 3
    assert (
        len(help_text.splitlines()) < 250
        and "--adam-beta1" not in help_text
        and "(default: None)" not in help_text
    )
    everything = _help(capsys, "--help-all")
    assert (
        "--adam-beta1" in everything
        and "--torch-compile" in everything
        and "--train-data" in everything
    )
    assert (
        "\nsentence-transformers training arguments (SentenceTransformerTrainingArguments):\n"
        in everything
    )
    assert len(everything.splitlines()) > 2 * len(help_text.splitlines())


def _help(capsys, flag: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", flag])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_b19_mine_names_the_bad_line_and_can_skip_it(
    tmp_path, capsys, make_tiny_model, tiny_model_dir, monkeypatch
):
    short = make_tiny_model(24)
    monkeypatch.setattr(slice_st, "load_model", lambda *a, **k: short)
    first, second = tmp_path / "one.txt", tmp_path / "two.txt"
    first.write_text("the dog barks\n")
    second.write_text("a man plays the guitar\n" + "." * 80 + " tail\nmy bag was lost\n")
    error = cli_fails(capsys, "mine", "-q", "guitar", first, second, "--max-span", "3")
    assert f"{second}:2: a word of" in error and "--skip-bad" in error
    error = cli_fails(
        capsys, "index", "build", first, second, "-o", tmp_path / "ix", "--max-span", "3"
    )
    assert f"Document '{second}:2': a word of" in error and "--skip-bad" in error
    code, out = run_cli(
        capsys,
        "mine",
        "-q",
        "guitar",
        first,
        second,
        "--max-span",
        "3",
        "--skip-bad",
        "-f",
        "jsonl",
    )
    assert code == 0 and f"skipped {second}:2" in out.err and "1 texts skipped" in out.err
    assert {(row["file"], row["line"]) for row in map(json.loads, out.out.splitlines())} == {
        (str(first), 1),
        (str(second), 1),
        (str(second), 3),
    }


@pytest.mark.parametrize("command", ["mine", "index build"])
def test_skip_bad_leaves_out_a_binary_file_and_goes_on(
    tmp_path, capsys, tiny_model, monkeypatch, command
):
    """``--skip-bad`` with a binary file among the inputs: that file is listed and left out, the run goes on (without
    ``--skip-bad``: one error line naming it)."""
    monkeypatch.setattr(slice_st, "load_model", lambda *a, **k: tiny_model)
    good, binary = tmp_path / "good.txt", tmp_path / "blob.bin"
    good.write_text("a man plays the guitar\nmy bag was lost\n")
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    tail = (
        ["-q", "guitar", "-f", "jsonl"]
        if command == "mine"
        else ["-o", tmp_path / "ix", "--no-progress"]
    )
    argv = [*command.split(), good, binary, *tail]
    assert "is not UTF-8 text" in cli_fails(capsys, *argv)
    code, out = run_cli(capsys, *argv, "--skip-bad")
    assert (
        code == 0
        and f"skipped {binary}: is not UTF-8 text" in out.err
        and "1 files skipped" in out.err
    )
    if command == "mine":
        assert {json.loads(line)["file"] for line in out.out.splitlines()} == {str(good)}
    else:
        assert len(SpanIndex.load(tmp_path / "ix", tiny_model)) == 2


def test_same_named_files_in_two_folders_are_told_apart_in_the_table(
    tmp_path, capsys, tiny_model, monkeypatch
):
    """``mine x/a.txt y/a.txt``: the table shows ``x/a.txt:1`` and ``y/a.txt:1``, never ``a.txt:1`` twice."""
    monkeypatch.setattr(slice_st, "load_model", lambda *a, **k: tiny_model)
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.txt").write_text("a man plays the guitar\n")
    code, out = run_cli(
        capsys, "mine", "-q", "guitar", tmp_path / "x" / "a.txt", tmp_path / "y" / "a.txt"
    )
    assert (
        code == 0
        and "x/a.txt:1" in out.out
        and "y/a.txt:1" in out.out
        and " a.txt:1" not in out.out
    )


def test_b24_make_passages_from_nothing_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "no passages from" in cli_fails(capsys, "make-passages", empty, "-o", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert "is a file, not a folder" in cli_fails(capsys, "make-passages", empty, "-o", empty)
    words = (
        "--min-words",
        "30",
        "--max-words",
        "20",
    )  # the library's check (data.cut_passages), not random's
    assert "need 1 <= min_words <= max_words" in cli_fails(
        capsys, "make-passages", empty, "-o", tmp_path / "o", *words
    )
    assert not (tmp_path / "o").exists()


def test_b25_ctrl_c_is_one_line_not_a_traceback(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays the guitar\n")
    code = (
        "import sys, slice_st.cli.mine as mine\n"
        "def interrupted(*args, **kwargs):\n"
        "    raise KeyboardInterrupt\n"
        "mine.read_texts = interrupted\n"
        "from slice_st.cli import main\n"
        f"sys.exit(main(['mine', '-q', 'guitar', {str(corpus)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 130 and done.stderr == "slice-st: interrupted\n", done.stderr[-2000:]


def test_mine_plans_windows_once_and_best_spans_can_skip(
    tmp_path, capsys, make_tiny_model, monkeypatch
):
    """``slice-st mine`` plans each text's windows once (inside best_spans), and names every unwindowable text."""
    import slice_st.encode
    import slice_st.tokens
    from slice_st.errors import SpanInputError

    short = make_tiny_model(24)
    monkeypatch.setattr(slice_st, "load_model", lambda *a, **k: short)
    calls = []
    for module in (slice_st.tokens, slice_st.encode):
        original = module.plan_windows
        monkeypatch.setattr(
            module,
            "plan_windows",
            lambda *a, _original=original, **k: calls.append(list(a[1])) or _original(*a, **k),
        )
    corpus = tmp_path / "c.txt"
    corpus.write_text(
        "a man plays the guitar\n" + "." * 80 + " tail\n" + "," * 80 + "\nmy bag was lost\n"
    )
    error = cli_fails(capsys, "mine", "-q", "guitar", corpus, "--max-span", "3")
    assert f"{corpus}:2: a word of" in error and "(and 1 more)" in error
    calls.clear()
    code, out = run_cli(
        capsys, "mine", "-q", "guitar", corpus, "--max-span", "3", "--skip-bad", "-f", "jsonl"
    )
    assert code == 0 and "2 texts skipped" in out.err
    assert (
        sum("my bag was lost" in texts for texts in calls) == 1
    )  # the corpus: once (the query is planned on its own)
    texts = ["a man plays the guitar", "." * 80 + " tail"]
    result = slice_st.search.best_spans(short, "guitar", texts, max_span=3, on_error="skip")
    assert [index for index, _ in result.skipped] == [1] and result[0][1] == [] and result[0][0]
    with pytest.raises(SpanInputError, match="Text 1: a word of") as raised:
        slice_st.search.best_spans(short, "guitar", texts, max_span=3)
    assert raised.value.text_index == 1
    with pytest.raises(SpanInputError, match="on_error"):
        slice_st.search.best_spans(short, "guitar", texts, on_error="ignore")


HOSTILE_ID = "doc\x1b]0;owned\x07\x1b[2J\x9b31m"


HOSTILE_TEXT = "the dog \x1b[31mbarks\x1b[0m at the \x07 mailman\r"


def test_control_characters_are_escaped_in_table_output(tmp_path, tiny_model_dir, capsys):
    text_file = (
        tmp_path / "calls\x1b]0;owned\x07.txt"
    )  # mine reads text files: the file name is the id
    text_file.write_text(HOSTILE_TEXT.replace("\r", "") + "\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": HOSTILE_ID, "text": HOSTILE_TEXT}) + "\n")
    build_index_cli(capsys, corpus, tmp_path / "ix", tiny_model_dir, "--quiet")
    common = ("-m", tiny_model_dir, "--no-progress", "--max-span", "3")
    for where, seen in (
        ((text_file,), "calls\\x1b]0;owned\\x07.txt:1"),
        (("--index", tmp_path / "ix"), "doc\\x1b]0;owned\\x07"),
    ):
        code, out = run_cli(capsys, "mine", "-q", "dog\x1b[5m", *where, *common, "--color", "never")
        assert (
            code == 0
            and seen in out.out
            and "dog\\x1b[5m" in out.out
            and "\\x1b[31mbarks" in out.out
        ), out.out
        assert not any(ch in out.out for ch in "\x1b\x07\x9b\r"), out.out
        code, out = run_cli(capsys, "mine", "-q", "dog", *where, *common, "-f", "jsonl")
        row = json.loads(
            out.out.splitlines()[0]
        )  # JSON keeps the text exact (JSON escapes it itself)
        if where[0] == text_file:
            assert code == 0 and row["file"] == str(text_file) and row["span"] in HOSTILE_TEXT, row
        else:
            assert code == 0 and row["doc_id"] == HOSTILE_ID and row["span"] in HOSTILE_TEXT, row


def test_control_characters_are_escaped_in_error_lines(tmp_path, capsys):
    assert "\\x1b]0;x\\x07" in cli_fails(
        capsys, "mine", "-q", "dog", tmp_path / "missing\x1b]0;x\x07.txt"
    )


def test_threads_and_processes_are_bounded(tiny_model, tiny_model_dir, tmp_path, capsys):
    import slice_st
    from slice_st.backends import parallelism_limit

    limit = parallelism_limit()
    with pytest.raises(
        SpanInputError,
        match=f"processes={limit + 1} is more than this machine can use: at most {limit}",
    ):
        SpanIndex.build(["the dog"], tiny_model, processes=limit + 1)
    with pytest.raises(SpanInputError, match="processes=100000 is more than"):
        SpanIndex.build(["the dog"], tiny_model, devices=["cpu"] * 100000)
    with pytest.raises(ValueError, match="threads=1000000 is more than this machine can use"):
        slice_st.load_model(tiny_model_dir, threads=1_000_000)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    assert "threads=1000000 is more than" in cli_fails(
        capsys, "mine", "-q", "dog", corpus, "-m", tiny_model_dir, "--threads", "1000000"
    )
    assert "processes=100000 is more than" in cli_fails(
        capsys,
        "index",
        "build",
        corpus,
        "-o",
        tmp_path / "ix",
        "-m",
        tiny_model_dir,
        "--processes",
        "100000",
    )


def test_huge_threshold_is_no_warning(tiny_model_dir, tmp_path, capsys):
    import warnings

    corpus = tmp_path / "c.txt"
    corpus.write_text("the dog barks\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        code, out = run_cli(
            capsys,
            "mine",
            "-q",
            "dog",
            corpus,
            "-m",
            tiny_model_dir,
            "-t",
            "1e308",
            "--no-progress",
        )
    assert code == 0 and out.out.strip() == "no match at or above threshold 1e+308"


@pytest.mark.parametrize(
    "error, one_line",
    [
        (
            slice_st.errors.RayClusterError(
                "cannot connect to the Ray cluster at h:1: Connection refused."
            ),
            True,
        ),
        (
            slice_st.errors.IndexFileError(
                "IDX: unreadable index manifest (a JSON list, not an object)."
            ),
            True,
        ),
        (KeyError("a bug"), False),
    ],
    ids=["ray", "index-file", "bug"],
)
def test_slice_errors_are_one_line_and_bugs_keep_their_traceback(
    monkeypatch, capsys, error, one_line
):
    import slice_st.cli as cli

    build = cli.build_parser

    def parser_with_failing_handler():
        parser = build()
        parse = parser.parse_known_args

        def parse_known_args(argv=None, namespace=None):
            args, rest = parse(argv, namespace)
            args.handler = lambda _: (_ for _ in ()).throw(error)
            return args, rest

        parser.parse_known_args = parse_known_args
        return parser

    monkeypatch.setattr(cli, "build_parser", parser_with_failing_handler)
    if one_line:
        with pytest.raises(SystemExit) as exited:
            cli.main(["export", "-o", "out"])
        assert exited.value.code == 2
        assert capsys.readouterr().err == f"slice-st: error: {error}\n"
    else:
        with pytest.raises(KeyError):
            cli.main(["export", "-o", "out"])
        assert "most likely a bug" in capsys.readouterr().err


def test_mine_merge_identical_lists_every_place(tiny_model_dir, tmp_path, capsys):
    """The clause of three texts: one row with its three places (FILEs and an index); --texts counts distinct spans;
    without the option the rows keep their fields."""
    from helpers import make_docs

    clause = [
        "The software is provided as is.",
        "the software  is provided AS IS.",
        "THE SOFTWARE IS PROVIDED AS IS.",
    ]
    lines = [*make_docs(6, seed=5), *clause, *make_docs(6, seed=6)]
    (tmp_path / "licenses.txt").write_text("\n".join(lines) + "\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"d{n}", "text": text}) + "\n" for n, text in enumerate(lines))
    )
    build_index_cli(capsys, corpus, tmp_path / "ix", tiny_model_dir, "--quiet")
    common = (
        "-q",
        "the software is provided as is",
        "--texts",
        "3",
        "-m",
        tiny_model_dir,
        "--no-progress",
    )
    files = tmp_path / "licenses.txt"
    for where, ids in (
        ((files, "--split", "line"), [f"{files}:{n}" for n in (7, 8, 9)]),
        (("--index", tmp_path / "ix"), ["d6", "d7", "d8"]),
    ):
        args = [*common, *where, "--max-span", "8"]
        code, out = run_cli(capsys, "mine", *args, "-f", "jsonl")
        plain = [json.loads(line) for line in out.out.splitlines()]
        assert code == 0 and [row["doc_id"] for row in plain] == ids and "places" not in plain[0]
        code, out = run_cli(capsys, "mine", *args, "-f", "jsonl", "--merge-identical")
        rows = [json.loads(line) for line in out.out.splitlines()]
        assert code == 0 and len(rows) == 3 and len({row["span"].lower() for row in rows}) == 3
        assert rows[0]["count"] == 3 and [place["doc_id"] for place in rows[0]["places"]] == ids
        assert {key: rows[0][key] for key in plain[0]} == plain[
            0
        ]  # the first one's fields, unchanged
        assert all(row["count"] == len(row["places"]) == 1 for row in rows[1:])
        code, out = run_cli(capsys, "mine", *args, "-f", "csv", "--merge-identical")
        table = list(csv.DictReader(io.StringIO(out.out)))
        assert table[0]["count"] == "3" and json.loads(table[0]["places"]) == rows[0]["places"]
        code, out = run_cli(capsys, "mine", *args, "--merge-identical", "--color", "never")
        assert "+2 " in out.out


def test_mine_min_confidence(tmp_path, capsys):
    """The default model's matches carry their confidence; --min-confidence keeps those at or above it (no value:
    the model's documented cut); a scorer without a confidence is one line."""
    texts = tmp_path / "licence.txt"
    texts.write_text(
        "In no event will the authors be held liable for any damages arising from the use of this software.\n"
        "The cat sat on the mat and purred all afternoon.\n"
    )
    query = ("--query", "the authors are not liable for any damages", "--query", "a dog barked")
    code, out = run_cli(capsys, "mine", *query, texts, "--format", "jsonl", "--no-progress")
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert code == 0 and len(rows) == 4 and all(0 <= row["confidence"] <= 1 for row in rows)
    for flag in (("--min-confidence", "0.5"), ("--min-confidence",)):
        code, out = run_cli(capsys, "mine", *query, texts, "-f", "jsonl", "--no-progress", *flag)
        kept = [json.loads(line) for line in out.out.splitlines()]
        assert kept == [row for row in rows if row["confidence"] >= 0.5] and len(kept) == 1
    code, out = run_cli(capsys, "mine", "--query", "a dog barked", texts, "--min-confidence")
    assert out.out.strip() == "no match at or above confidence the model's cut"
    line = cli_fails(capsys, "mine", *query, texts, "--scorer", "phrase", "--min-confidence", "0.5")
    assert "min_confidence needs a calibrated confidence" in line
    with pytest.raises(SystemExit):
        main(["mine", *query, str(texts), "--min-confidence", "1.5"])
    assert "must be from 0 to 1" in capsys.readouterr().err
