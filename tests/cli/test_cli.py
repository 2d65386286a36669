"""The command line's conventions: one-line errors with exit 2, --quiet / --no-progress everywhere,
strict JSON, option values checked at parse time, a fast --help / --version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slice_st.cli import build_parser, main
from slice_st.cli.common import dumps_json

FIXTURES = Path(__file__).parents[1] / "fixtures"
DATA = str(FIXTURES / "stsb_context_sample.tsv")


def _leaf_commands(parser, prefix=()):
    if not parser.command_groups:
        yield prefix, parser
    for group in parser.command_groups:
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
    assert len(commands) >= 12  # mine, index ×7, train, make-passages, make-context, mteb
    for name, parser in commands:
        options = {option for action in parser._actions for option in action.option_strings}
        assert {"--quiet", "--no-progress"} <= options, " ".join(name)


def test_missing_hub_model_offline_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = tmp_path / "t.txt"
    text.write_text("a man plays the guitar\n")
    line = _error_line(capsys, ["mine", "-m", "nosuch/model", "-q", "guitar", str(text)])
    assert line.startswith("slice-st: error: ") and "'nosuch/model'" in line and "HF_HUB_OFFLINE" in line


def test_missing_local_model_is_one_line(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("a man plays the guitar\n")
    line = _error_line(capsys, ["mine", "-m", str(tmp_path / "runs" / "final"), "-q", "guitar", str(text)])
    assert line.startswith("slice-st: error: No model found at")


def test_bad_option_values_are_rejected_while_parsing(capsys):
    assert "must be >= 1" in _error_line(capsys, ["mine", "-q", "x", "--top-k", "0", "f.txt"])
    assert "invalid choice" in _error_line(capsys, ["mine", "-q", "x", "--unit", "char", "f.txt"])
    assert _error_line(capsys, ["index", "build"]).startswith("slice-st: error: the following arguments are required")


def test_library_errors_are_one_line(capsys, tmp_path):
    line = _error_line(capsys, ["mine", "-q", "x", str(tmp_path / "missing.txt")])
    assert line == f"slice-st: error: input file not found: {tmp_path / 'missing.txt'}"


def test_missing_extra_is_one_line(capsys, monkeypatch, tmp_path):
    import slice_st.cli.mine as mine_module
    from slice_st.errors import MissingExtraError

    def missing(args):
        raise MissingExtraError("the index needs faiss, which is not installed: pip install 'slice-st[faiss]'")

    monkeypatch.setattr(mine_module, "read_queries", missing)
    (tmp_path / "t.txt").write_text("x\n")
    line = _error_line(capsys, ["mine", "-q", "x", str(tmp_path / "t.txt")])
    assert line == "slice-st: error: the index needs faiss, which is not installed: pip install 'slice-st[faiss]'"


def test_keyboard_interrupt_is_exit_130(capsys, monkeypatch, tmp_path):
    import slice_st.cli.mine as mine_module

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(mine_module, "read_queries", interrupted)
    (tmp_path / "t.txt").write_text("x\n")
    assert _error_line(capsys, ["mine", "-q", "x", str(tmp_path / "t.txt")], code=130) == "slice-st: interrupted"


def test_a_bug_keeps_its_traceback(monkeypatch, tmp_path):
    import slice_st.cli.mine as mine_module

    monkeypatch.setattr(mine_module, "read_queries", lambda args: 1 / 0)
    (tmp_path / "t.txt").write_text("x\n")
    with pytest.raises(ZeroDivisionError):
        main(["mine", "-q", "x", str(tmp_path / "t.txt")])


def test_strict_json():
    assert dumps_json({"p": float("nan"), "q": [float("-inf"), 0.5]}) == '{"p": null, "q": [null, 0.5]}'
    import numpy as np

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
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("HEAVY:"), done.stdout[-300:]


def test_train_help_groups_the_advanced_options():
    from slice_st.cli import build_parser

    train = next(
        action for action in build_parser()._subparsers._group_actions[0].choices.items() if action[0] == "train"
    )[1]
    titles = [group.title for group in train._action_groups]
    assert {"spans (advanced)", "distillation (advanced)", "Hub and model card (advanced)"} <= set(titles)
    main_options = {option for action in train._action_groups[1]._group_actions for option in action.option_strings}
    assert "--output-dir" in main_options and "--distill-text-weight" not in main_options
