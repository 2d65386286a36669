"""The package's size as issue 43 counts it: all lines, and code lines (not blank, not a comment, not a docstring)
with how many are over 100 characters.

    python tools/line_counts.py [FOLDER]      # default: slice_st
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def docstring_lines(tree: ast.Module) -> set[int]:
    """The line numbers of the module's, classes' and functions' docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr):
            first = node.body[0]
            if isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def line_kind(stripped: str, in_docstring: bool) -> str:
    """``"blank"``, ``"docstring"``, ``"comment"`` or ``"code"``."""
    if not stripped:
        return "blank"
    if in_docstring:
        return "docstring"
    return "comment" if stripped.startswith("#") else "code"


def main(folder: str = "slice_st") -> None:
    if not Path(folder).is_dir():
        sys.exit(f"line_counts.py: {folder} is not a folder")
    counts = {"lines": 0, "blank": 0, "comment": 0, "docstring": 0, "code": 0, "long code": 0}
    for path in sorted(Path(folder).rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        docs = docstring_lines(ast.parse(source))
        for number, line in enumerate(source.splitlines(), 1):
            counts["lines"] += 1
            kind = line_kind(line.strip(), number in docs)
            counts[kind] += 1
            counts["long code"] += kind == "code" and len(line) > 100
    share = 100 * counts["long code"] / max(counts["code"], 1)
    print(
        ", ".join(f"{key} {value:,}" for key, value in counts.items()) + f" ({share:.1f}% of code)"
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
