"""Text helpers shared by the library and the command line: reading UTF-8 files, cutting them into texts, tidying whitespace.

The lowest layer with :mod:`slice_st.spans` and :mod:`slice_st.tokens`: it imports nothing of ``slice_st``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TextRecord", "read_file", "read_texts", "one_line", "detokenize"]


@dataclass(frozen=True)
class TextRecord:
    """One text cut from an input file: where it starts (1-based line, character offset) and its content."""

    source: str
    line: int
    file_offset: int
    text: str


def read_file(path: str) -> str:
    """The content of a UTF-8 text file (``"-"``: standard input), with clear errors for a missing file, a directory or bad bytes."""
    if path == "-":
        return sys.stdin.read()
    if not os.path.exists(path):
        raise FileNotFoundError(f"input file not found: {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"input is a directory, not a file: {path}")
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start}).") from None


def read_texts(paths: Sequence[str], split: str = "line") -> list[TextRecord]:
    """Cut files into texts, one per line or per paragraph (blank-line separated); blank ones are skipped.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = path.write_text("first line\\n\\nsecond\\nstill second\\n")
    >>> [(r.line, r.text) for r in read_texts([str(path)], "paragraph")]
    [(1, 'first line'), (3, 'second\\nstill second')]
    """
    if split not in ("line", "paragraph"):
        raise ValueError(f"split must be 'line' or 'paragraph', got {split!r}.")
    records: list[TextRecord] = []
    for path in paths:
        content = read_file(path)
        lines = content.splitlines(keepends=True)
        offset, block, block_start, block_line = 0, [], 0, 0
        for number, raw in enumerate(lines, start=1):
            text = raw.rstrip("\r\n")
            if split == "line":
                if text.strip():
                    records.append(TextRecord(path, number, offset, text))
            elif text.strip():
                if not block:
                    block_start, block_line = offset, number
                block.append(text)
            elif block:
                records.append(TextRecord(path, block_line, block_start, "\n".join(block)))
                block = []
            offset += len(raw)
        if block:
            records.append(TextRecord(path, block_line, block_start, "\n".join(block)))
    return records


def one_line(value: str) -> str:
    """``value`` with every run of whitespace (newlines included) turned into one space, stripped.

    >>> one_line("  two\tspaced   words ")
    'two spaced words'
    """
    return " ".join(value.split())


def detokenize(text: str) -> str:
    """Undo SNLI's spaces before punctuation (``"packages ."`` → ``"packages."``)."""
    text = one_line(text)
    for mark in (" .", " ,", " !", " ?", " ;", " :", " 's", " n't", " '"):
        text = text.replace(mark, mark[1:])
    return text
