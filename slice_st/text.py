"""Text helpers shared by the library and the command line: reading UTF-8 files, cutting them into texts, tidying whitespace.

The lowest layer with :mod:`slice_st.spans` and :mod:`slice_st.tokens`: it imports nothing of ``slice_st``.

A **line** ends at ``\\n`` (``\\r\\n`` too); other characters Python's ``str.splitlines`` splits on
(``\\f``, ``\\v``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028, U+2029, a lone ``\\r``) stay inside the line, so line numbers
are those of ``grep -n`` and editors. A UTF-8 byte-order mark at the start of a file is not text: it is
never part of a line, though it counts as the file's first character in file offsets.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["FileAccessError", "TextRecord", "read_file", "read_texts", "file_lines", "split_lines", "one_line", "detokenize"]

BOM = "\ufeff"


@dataclass(frozen=True)
class TextRecord:
    """One text cut from an input file: where it starts (1-based line, character offset) and its content."""

    source: str
    line: int
    file_offset: int
    text: str


class FileAccessError(OSError, ValueError):
    """A file or folder that exists but cannot be read or written (permissions, a file where a folder is needed…).

    An ``OSError`` (what the operating system said) and a ``ValueError`` (bad input), like ``io.UnsupportedOperation``.
    """


def split_lines(content: str) -> list[str]:
    """``content`` cut after each ``\\n``, line ends kept (unlike ``str.splitlines``, no other separator).

    >>> split_lines("a\\r\\nb\\u2028still b\\x85\\fb\\nc")
    ['a\\r\\n', 'b\\u2028still b\\x85\\x0cb\\n', 'c']
    """
    lines = content.split("\n")
    last = lines.pop()
    return [line + "\n" for line in lines] + ([last] if last else [])


def _read_raw(path: str) -> str:
    """The whole file decoded as UTF-8 (``"-"``: standard input's bytes), byte-order mark included."""
    if path == "-":
        name, data = "standard input", getattr(sys.stdin, "buffer", None)
        raw = data.read() if data is not None else sys.stdin.read()
        if isinstance(raw, str):  # a text stream without bytes (e.g. replaced in tests): re-check its characters
            raw = raw.encode("utf-8", "surrogateescape")
    else:
        name = path
        if not os.path.exists(path):
            raise FileNotFoundError(f"input file not found: {path}")
        if os.path.isdir(path):
            raise IsADirectoryError(f"input is a directory, not a file: {path}")
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except OSError as error:
            raise FileAccessError(f"cannot read {path}: {error.strerror or error}.") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ValueError(f"{name} is not UTF-8 text ({error.reason} at byte {error.start}, line {line}).") from None


def read_file(path: str) -> str:
    """The content of a UTF-8 text file (``"-"``: standard input), without a leading byte-order mark.

    Clear errors for a missing file, a directory, a file that cannot be read (:class:`FileAccessError`)
    and bytes that are not UTF-8 (``ValueError``, also for standard input).
    """
    return _read_raw(path).removeprefix(BOM)


def file_lines(path: str) -> list[tuple[int, int, str]]:
    """``(line number, file offset, line)`` for each line of a UTF-8 file (see the module notes), line ends kept.

    Offsets are character offsets in the file as decoded, a leading byte-order mark included.
    """
    content = _read_raw(path)
    offset = 1 if content.startswith(BOM) else 0
    lines = []
    for number, raw in enumerate(split_lines(content[offset:]), start=1):
        lines.append((number, offset, raw))
        offset += len(raw)
    return lines


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
        block: list[str] = []
        block_start, block_line = 0, 0
        for number, offset, raw in file_lines(path):
            text = raw.rstrip("\r\n")
            if split == "line":
                if text.strip():
                    records.append(TextRecord(path, number, offset, text))
            elif text.strip():
                if not block:
                    block_start, block_line = offset, number
                block.append(raw)
            elif block:
                records.append(_paragraph(path, block_line, block_start, block))
                block = []
        if block:
            records.append(_paragraph(path, block_line, block_start, block))
    return records


def _paragraph(path: str, line: int, offset: int, lines: list[str]) -> TextRecord:
    """A paragraph is the file's own characters (inner ``\\r\\n`` kept), so offsets inside it are file offsets."""
    return TextRecord(path, line, offset, "".join(lines).rstrip("\r\n"))


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
