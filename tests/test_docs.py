"""Every code example in README.md and docs/ runs here, and the output it shows is asserted.

Conventions (docs/contributing-docs.md has the reader's version):

* ```` ```python ```` blocks run in order, one namespace per Markdown file, in a scratch folder holding a copy of
  ``examples/``. Lines ``# → TEXT`` right after a statement are what it prints; after a bare expression, its
  ``repr`` (as in a notebook). ``...`` in an expected line matches anything on that line; a line that is only
  ``...`` matches any number of lines. A decimal number matches at the precision it is shown (one unit of its
  last digit either way: the last digits depend on the CPU and thread count); other text matches exactly.
* ```` ```console ```` blocks hold ``$ slice-st …`` commands (run in-process) each followed by its standard output
  (and its standard error when it exits non-zero), with the same ``...`` rule.
* An HTML comment on the line before a block marks it: ``<!-- docs-test: slow -->`` runs only under ``-m slow``;
  ``<!-- docs-test: not-run (reason) -->`` is never run (installs, Hub pushes, shared data sets). Shell blocks
  (``bash``, ``sh``) must carry ``not-run``; every other language (``text``, ``toml``, …) is not code.

A stale figure fails with a diff. ``pytest tests/test_docs.py --update-docs`` (or ``SLICE_ST_UPDATE_DOCS=1``) runs the
same blocks and rewrites the shown outputs in place instead; review the change with ``git diff``.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import io
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!--\s*docs-test:\s*(slow|not-run)\b.*-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
OUTPUT = "# → "
RUN_LANGUAGES = {"python", "console"}
SHELL_LANGUAGES = {"bash", "sh", "shell", "zsh"}


@dataclass
class Block:
    path: Path
    language: str
    marker: str | None  # "slow", "not-run" or None
    first: int  # index of the first content line (0-based) in the file
    lines: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.first}"


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def parse_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the docs-test marker of the line before each."""
    lines, blocks, index = path.read_text(encoding="utf-8").split("\n"), [], 0
    while index < len(lines):
        match = FENCE.match(lines[index].strip())
        if not match:
            index += 1
            continue
        fence, language = match.group(1), match.group(2).lower()
        previous = next((line.strip() for line in reversed(lines[:index]) if line.strip()), "")
        marker = MARKER.match(previous)
        block = Block(path, language, marker.group(1) if marker else None, index + 1)
        index += 1
        while index < len(lines) and not re.fullmatch(
            re.escape(fence[0]) + f"{{{len(fence)},}}", lines[index].strip()
        ):
            block.lines.append(lines[index])
            index += 1
        blocks.append(block)
        index += 1
    return blocks


# A decimal number standing alone (not part of a version such as 0.1.0 or of a name such as v2.5b), or a wildcard.
DECIMAL = r"(?<![\w.])-?\d+\.\d+(?![\w]|\.\d)"
NUMBER_OR_WILDCARD = re.compile(f"({DECIMAL}|\\.\\.\\.)")


@functools.cache
def _line_pattern(line: str) -> tuple[re.Pattern, tuple[str, ...]]:
    """One expected line as a regex (``...`` a wildcard, each decimal number a group, the rest literal) and its
    decimal numbers as shown."""
    parts = NUMBER_OR_WILDCARD.split(line)
    pattern = "".join(
        "[^\n]*?" if part == "..." else r"(-?\d+\.\d+)" if i % 2 else re.escape(part)
        for i, part in enumerate(parts)
    )
    return re.compile(pattern), tuple(
        part for i, part in enumerate(parts) if i % 2 and part != "..."
    )


def _close(shown: str, actual: str) -> bool:
    """``actual`` is ``shown`` at the precision shown: at most one unit apart in the last digit shown."""
    unit = 10.0 ** -len(shown.split(".")[1])
    return abs(float(shown) - float(actual)) <= unit * (1 + 1e-9)


def line_matches(shown: str, actual: str) -> bool:
    """One expected line against one actual line: text exactly, decimal numbers at the precision they are shown."""
    pattern, expected = _line_pattern(shown.rstrip())
    match = pattern.fullmatch(actual.rstrip())
    return match is not None and all(
        _close(e, a) for e, a in zip(expected, match.groups(), strict=True)
    )


def output_matches(expected: list[str], actual: str) -> bool:
    """``actual`` equals ``expected`` line by line (trailing spaces and blank lines ignored), ``...`` as wildcard.

    A decimal number matches when it differs by at most one unit in the last digit shown (the sixth decimal of a
    cosine depends on the CPU's kernels and thread count); text, spans, ranks, ids and offsets match exactly.
    """
    shown = [line.rstrip() for line in "\n".join(expected).rstrip().split("\n")] if expected else []
    lines = [line.rstrip() for line in actual.rstrip().splitlines()]

    @functools.cache
    def fits(i: int, j: int) -> bool:  # shown[i:] matches lines[j:]
        if i == len(shown):
            return j == len(lines)
        if shown[i].strip() == "...":
            return any(fits(i + 1, k) for k in range(j, len(lines) + 1))
        return j < len(lines) and line_matches(shown[i], lines[j]) and fits(i + 1, j + 1)

    return fits(0, 0)


def python_segments(lines: list[str]) -> list[tuple[list[str], list[str]]]:
    """Cut a python block into (code lines, expected ``# →`` lines) pairs, in order."""
    segments, code, shown = [], [], []
    for line in lines:
        if line.lstrip().startswith(OUTPUT.rstrip()):
            shown.append(line.lstrip()[len(OUTPUT) :] if len(line.lstrip()) > 2 else "")
            continue
        if shown:
            segments.append((code, shown))
            code, shown = [], []
        code.append(line)
    segments.append((code, shown))
    return segments


def run_python(code: list[str], namespace: dict, show_last: bool) -> str:
    """Execute ``code`` in ``namespace``; return what it printed (and the last expression's repr if asked)."""
    tree = ast.parse("\n".join(code))
    last = (
        tree.body.pop() if show_last and tree.body and isinstance(tree.body[-1], ast.Expr) else None
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tree, "<docs>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<docs>", "eval"), namespace)
            if value is not None:
                print(repr(value))
    return out.getvalue()


def console_commands(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) pairs of a console block; ``\\`` continues a command."""
    commands: list[tuple[str, list[str]]] = []
    pending = None
    for line in lines:
        if pending is not None:
            pending += " " + line.strip()
        elif line.startswith("$ "):
            pending = line[2:]
        else:
            if not commands:
                raise ValueError(f"console block starts with output, not a `$ ` command: {line!r}")
            commands[-1][1].append(line)
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
        else:
            commands.append((pending, []))
            pending = None
    return commands


def run_command(command: str) -> str:
    """Run one ``slice-st …`` command in-process: its stdout, plus stderr when it exits non-zero."""
    from slice_st.cli import main

    argv = shlex.split(command, comments=True)
    if not argv or argv[0] != "slice-st":
        raise ValueError(
            f"only `slice-st` commands run in console blocks (mark others not-run): {command!r}"
        )
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv[1:])
        except SystemExit as exit_:
            status = exit_.code
    return out.getvalue() + (err.getvalue() if status else "")


def _keep_shown(shown: list[str], actual: str) -> list[str]:
    """The actual output's lines, except that a line a shown line matches keeps the shown form.

    So ``--update-docs`` keeps ``...`` wildcards, and leaves a number that differs only in float noise as shown
    (a run on another machine does not churn the docs).
    """
    wild = [line.rstrip() for line in shown if "..." in line and line.strip() != "..."]
    kept, next_shown = [], 0
    for line in actual.rstrip("\n").split("\n"):
        candidates = (i for i in range(next_shown, len(shown)) if shown[i].strip() != "...")
        ahead = next((i for i in candidates if line_matches(shown[i], line)), None)
        if ahead is not None:
            kept.append(shown[ahead].rstrip())
            next_shown = ahead + 1
        else:
            kept.append(next((w for w in wild if line_matches(w, line)), line.rstrip()))
    return kept


class Session:
    """Runs the blocks of one Markdown file in order in a scratch folder; collects rewrites for --update-docs."""

    def __init__(self, path: Path, folder: Path):
        self.path, self.folder, self.namespace, self.done = (
            path,
            folder,
            {"__name__": "__docs__"},
            0,
        )
        shutil.copytree(ROOT / "examples", folder / "examples")
        self.rewrites: dict[int, list[str]] = {}  # block's first line → its new lines
        self.ran: set[int] = set()  # first lines of the blocks run so far

    def check(self, block: Block) -> list[tuple[list[str], str]]:
        """(expected, actual) of every shown output of ``block``, mismatching or not.

        Earlier blocks of the file that have not run yet (deselected, e.g. under ``-m slow``) run first, so a block
        sees the names and files the page built before it; a fast block never depends on a slow one.
        """
        for earlier in parse_blocks(self.path):
            if earlier.first >= block.first:
                break
            if (
                earlier.language in RUN_LANGUAGES
                and earlier.marker != "not-run"
                and earlier.first not in self.ran
                and (earlier.marker != "slow" or block.marker == "slow")
            ):
                self._run(earlier)
        return self._run(block)

    def _run(self, block: Block) -> list[tuple[list[str], str]]:
        self.ran.add(block.first)
        previous = os.getcwd()
        os.chdir(self.folder)
        try:
            if block.language == "python":
                return [
                    (shown, run_python(code, self.namespace, bool(shown)))
                    for code, shown in python_segments(block.lines)
                ]
            return [
                (shown, run_command(command)) for command, shown in console_commands(block.lines)
            ]
        finally:
            os.chdir(previous)

    def rewrite(self, block: Block, results: list[tuple[list[str], str]]) -> None:
        """New lines for ``block`` with every shown output replaced by the actual one."""
        new: list[str] = []
        if block.language == "python":
            for (code, shown), (_, actual) in zip(
                python_segments(block.lines), results, strict=True
            ):
                new += code + (
                    [(OUTPUT + line).rstrip() for line in _keep_shown(shown, actual)]
                    if shown
                    else []
                )
        else:
            for (command, shown), (_, actual) in zip(
                console_commands(block.lines), results, strict=True
            ):
                new += ["$ " + command] + (_keep_shown(shown, actual) if actual.strip() else [])
        self.rewrites[block.first] = new

    def save(self) -> None:
        if not self.rewrites:
            return
        lines = self.path.read_text(encoding="utf-8").split("\n")
        for block in sorted(
            (b for b in parse_blocks(self.path) if b.first in self.rewrites), key=lambda b: -b.first
        ):
            lines[block.first : block.first + len(block.lines)] = self.rewrites[block.first]
        self.path.write_text("\n".join(lines), encoding="utf-8")


def runnable_blocks() -> list:
    params = []
    for path in markdown_files():
        for block in parse_blocks(path):
            if block.language in RUN_LANGUAGES and block.marker != "not-run":
                marks = [pytest.mark.slow] if block.marker == "slow" else []
                params.append(pytest.param(block, id=block.id, marks=marks))
    return params


@pytest.fixture(scope="module")
def sessions(tmp_path_factory, request):
    opened: dict[Path, Session] = {}

    def get(path: Path) -> Session:
        if path not in opened:
            opened[path] = Session(path, tmp_path_factory.mktemp(path.stem))
        return opened[path]

    yield get
    if _updating(request.config):
        for session in opened.values():
            session.save()


def _updating(config) -> bool:
    return (
        bool(config.getoption("--update-docs", default=False))
        or os.environ.get("SLICE_ST_UPDATE_DOCS") == "1"
    )


@pytest.mark.parametrize("block", runnable_blocks())
def test_example(block: Block, sessions, request):
    session = sessions(block.path)
    results = session.check(block)
    # A python statement may print without showing it; a command shows all it prints (nothing shown: nothing printed).
    stale = [
        (shown, actual)
        for shown, actual in results
        if (shown or block.language == "console") and not output_matches(shown, actual)
    ]
    if not stale:
        return
    if _updating(request.config):
        session.rewrite(block, results)
        return
    diff = "\n".join(
        "\n".join(
            difflib.unified_diff(
                [s.rstrip() for s in shown],
                actual.rstrip("\n").split("\n"),
                "shown",
                "actual",
                lineterm="",
            )
        )
        for shown, actual in stale
    )
    pytest.fail(
        f"{block.id}: the output shown is stale:\n{diff}\n(update: pytest tests/test_docs.py --update-docs)",
        pytrace=False,
    )


def test_every_code_block_is_run_or_marked():
    """A shell block is marked not-run (or written as a `console` session that runs); a run block shows output."""
    unmarked = [
        b.id
        for p in markdown_files()
        for b in parse_blocks(p)
        if b.language in SHELL_LANGUAGES and b.marker != "not-run"
    ]
    assert not unmarked, f"shell blocks without <!-- docs-test: not-run (reason) -->: {unmarked}"
    for path in markdown_files():
        for block in parse_blocks(path):
            if block.language == "console" and block.marker != "not-run":
                console_commands(block.lines)  # raises on a block that starts with output


def _update_page(folder: Path, text: str) -> tuple[list[bool], str]:
    """Run a one-block page as ``--update-docs`` does: which shown outputs matched, and the page rewritten."""
    page = folder / "page.md"
    page.write_text(text, encoding="utf-8")
    (folder / "examples").mkdir()
    block = parse_blocks(page)[0]
    session = Session(page, folder / "run")
    results = session.check(block)
    session.rewrite(block, results)
    session.save()
    return [output_matches(shown, actual) for shown, actual in results], page.read_text(
        encoding="utf-8"
    )


def test_checker_catches_stale_output_and_rewrites_it(tmp_path):
    """The harness itself: a wrong number fails, ``...`` is a wildcard, and an update writes the real output."""
    assert output_matches(["score 0.81"], "score 0.81\n")
    assert not output_matches(["score 0.80"], "score 0.82\n")
    assert output_matches(["indexed 3 in ... s", "..."], "indexed 3 in 1.2 s\nmore\nlines\n")
    assert output_matches(["a", "...", "z"], "a\nz\n") and not output_matches(
        ["a", "...", "z"], "a\nb\n"
    )
    assert not output_matches(["a", "b"], "a\n")
    assert _keep_shown(["took ... s", "x"], "took 1.5 s\ny\n") == ["took ... s", "y"]
    text = "x\n```python\nprint(round(2 / 3, 2))\n# → 0.64\nprint('ok')\n# → ok\n```\n"
    assert _update_page(tmp_path, text) == ([False, True], text.replace("# → 0.64", "# → 0.67"))


JSON_SHOWN = '{"query": "a man plays", "rank": 1, "score": 0.733257, "start": 10, "end": 33, "span": "My son"}'
TABLE_SHOWN = "   1   0.733  sample_corpus.txt:12     10-33       Customer: «My son plays the guitar» and wants…"


@pytest.mark.parametrize(
    ("shown", "actual", "matches"),
    [
        ("0.733257", "0.733256", True),  # one unit in the last digit shown: float noise
        ("0.733257", "0.733258", True),
        ("0.733", "0.7335", True),  # compared at the precision shown
        ("0.733", "0.735", False),  # two units: a real change
        ("0.733257", "0.733255", False),
        ("-0.001", "0.000", True),
        ("1.5", "1.50", True),
        ("0.733", "1", False),  # a number that lost its decimals is a different output
        ("version 0.1.0", "version 0.1.1", False),  # versions and names are text, not decimals
        ("all-MiniLM-L6-v2.0", "all-MiniLM-L6-v2.1", False),
        (JSON_SHOWN, JSON_SHOWN.replace("0.733257", "0.733256"), True),
        (JSON_SHOWN, JSON_SHOWN.replace("0.733257", "0.733259"), False),
        (JSON_SHOWN, JSON_SHOWN.replace('"start": 10', '"start": 11'), False),  # offsets exact
        (JSON_SHOWN, JSON_SHOWN.replace('"rank": 1', '"rank": 2'), False),  # ranks exact
        (JSON_SHOWN, JSON_SHOWN.replace("My son", "my son"), False),  # spans exact
        (TABLE_SHOWN, TABLE_SHOWN.replace("0.733", "0.734"), True),
        (TABLE_SHOWN, TABLE_SHOWN.replace("0.733", "0.735"), False),
        (TABLE_SHOWN, TABLE_SHOWN.replace("10-33", "10-34"), False),
        (TABLE_SHOWN, TABLE_SHOWN.replace("   1   0.733", "   2   0.733"), False),
        (TABLE_SHOWN, TABLE_SHOWN.replace("«My son plays", "My «son plays"), False),
        ("score ... (0.733)", "score 0.9 (0.732)", True),
    ],
)
def test_shown_numbers_match_at_the_precision_shown(shown, actual, matches):
    """A decimal matches within one unit of its last shown digit; text, spans, ranks, ids and offsets exactly."""
    assert output_matches([shown], actual + "\n") is matches


def test_an_update_keeps_numbers_that_differ_only_in_float_noise(tmp_path):
    """``--update-docs`` leaves a matching block alone and keeps noise-only numbers when another line changed."""
    text = "```python\nprint(0.733256)\n# → 0.733257\nprint(0.5)\n# → 0.7\n```\n"
    assert _update_page(tmp_path, text) == ([True, False], text.replace("# → 0.7\n", "# → 0.5\n"))
    assert _keep_shown(["a 0.733257", "b 1"], "a 0.733256\nb 2\n") == ["a 0.733257", "b 2"]


def test_citation_and_licence_match_the_package():
    """CITATION.cff names the package's version and licence; LICENSE is the Apache-2.0 text pyproject.toml declares."""
    import tomllib

    import yaml

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert (citation["version"], citation["license"]) == (project["version"], project["license"])
    assert citation["references"][0]["url"] == "https://arxiv.org/abs/2405.07263"
    licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert (
        project["license"] == "Apache-2.0"
        and "Apache License" in licence
        and "END OF TERMS AND CONDITIONS" in licence
    )


def test_api_reference_fences_doctests():
    """docs/griffe_doctests.py: doctest output such as ``x[0][1]`` is fenced, so it cannot read as a Markdown link."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "griffe_doctests", ROOT / "docs" / "griffe_doctests.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Scores.\n\n>>> best[0][1]\n[0][1]\n\nMore text.\n```python\n>>> kept\n```"
    assert module.fence_doctests(text) == (
        "Scores.\n\n```pycon\n>>> best[0][1]\n[0][1]\n```\n\nMore text.\n```python\n>>> kept\n```"
    )


def test_readme_links_point_at_files():
    """README.md is not part of the site build, so its relative links are checked here."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [
        t.split("#")[0]
        for t in re.findall(r"\]\(([^)\s]+)\)", readme)
        if not t.startswith(("http", "#"))
    ]
    assert targets and not [t for t in targets if not (ROOT / t).exists()]
