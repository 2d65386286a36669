"""Build the real-text corpus of bench_index_compression.py from installed files (nothing downloaded or committed).

    python benchmarks/compression_corpus.py -o ../pqindex-cache/corpus.jsonl

Source: the docstrings of scikit-learn and SciPy as installed in the venv (both BSD-3-Clause, see their
``*.dist-info/licenses``): every module, class and function docstring, cut into paragraphs at blank lines, keeping
prose paragraphs (at least 8 words, mostly alphabetic words, no doctest or parameter-table lines). Deterministic: files
in sorted order, paragraphs de-duplicated, stopped after ``--words`` words.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re

PACKAGES = ("sklearn", "scipy")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[.,;:]?$")


def prose(paragraph: str) -> str | None:
    lines = [line.strip() for line in paragraph.splitlines()]
    if any(line.startswith((">>>", "...", "--", "==", ".. ", ":")) for line in lines):
        return None
    text = " ".join(line for line in lines if line)
    words = text.split()
    if len(words) < 8 or sum(bool(_WORD.match(w)) for w in words) < 0.8 * len(words):
        return None
    return text


def paragraphs(package: str):
    root = os.path.dirname(importlib.util.find_spec(package).origin)
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("tests", "__pycache__"))
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            try:
                tree = ast.parse(open(path, encoding="utf-8").read())
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in ast.walk(tree):
                if isinstance(
                    node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
                ):
                    doc = ast.get_docstring(node)
                    for part in re.split(r"\n\s*\n", doc or ""):
                        if (text := prose(part)) is not None:
                            yield os.path.relpath(path, os.path.dirname(root)), text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--words", type=int, default=260_000)
    args = parser.parse_args()
    seen, words, rows = set(), 0, []
    for package in PACKAGES:
        for source, text in paragraphs(package):
            if text in seen or words >= args.words:
                continue
            seen.add(text)
            rows.append({"id": f"{source}#{len(rows)}", "text": text})
            words += len(text.split())
    with open(args.output, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    print(f"{len(rows)} paragraphs, {words} words -> {args.output}")


if __name__ == "__main__":
    main()
