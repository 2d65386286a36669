"""Helpers shared by the command groups: argument types, progress switches, query files, match output."""

from __future__ import annotations

import argparse
import csv
import json
import os

from slice_st.text import FileAccessError, read_file, split_lines

__all__ = ["positive_int", "finite_float", "check_output", "quiet_progress", "read_queries", "write_rows"]

HIGHLIGHT_ON, HIGHLIGHT_OFF = "\x1b[1;33m", "\x1b[0m"
PLAIN_OPEN, PLAIN_CLOSE = "«", "»"


def positive_int(value: str) -> int:
    """An ``argparse`` type: an integer >= 1."""
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def finite_float(value: str) -> float:
    """An ``argparse`` type: a finite number (``nan`` and ``inf`` are refused)."""
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {value}")
    return number


def check_output(path: str, kind: str = "file") -> str:
    """Check before any work that ``path`` can be written as a ``"file"`` or a ``"folder"`` (nothing is created).

    A folder where a file is wanted (or the reverse), or a parent that is a file or not writable, is a
    :class:`slice_st.text.FileAccessError` naming the path, so a long run never ends in a failed write.
    """
    if os.path.exists(path):
        if kind == "file" and os.path.isdir(path):
            raise FileAccessError(f"output {path} is a folder, not a file.")
        if kind == "folder" and not os.path.isdir(path):
            raise FileAccessError(f"output {path} is a file, not a folder.")
        if not os.access(path, os.W_OK):
            raise FileAccessError(f"output {path} is not writable (permission denied).")
        return path
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise FileAccessError(f"cannot create {path}: {parent} is a file, not a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FileAccessError(f"cannot create {path}: {parent} is not writable (permission denied).")
    return path


def quiet_progress(args) -> None:
    """With ``--no-progress``, silence the Hugging Face progress bars too."""
    if getattr(args, "no_progress", False):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def read_queries(args) -> list[str]:
    queries = list(args.query or [])
    for path in args.queries or []:
        queries.extend(line.strip() for line in split_lines(read_file(path)) if line.strip())
    if not queries:
        raise ValueError("no query given: use --query TEXT (repeatable) or --queries FILE.")
    return queries


def _snippet(text: str, start: int, end: int, width: int, color: bool) -> str:
    """The text around ``text[start:end]`` on one line, the span highlighted."""
    flat = text.replace("\n", " ").replace("\t", " ")
    room = max(width - (end - start), 10) // 2
    left_start, right_end = max(0, start - room), min(len(flat), end + room)
    left = ("…" if left_start > 0 else "") + flat[left_start:start]
    right = flat[end:right_end] + ("…" if right_end < len(flat) else "")
    on, off = (HIGHLIGHT_ON, HIGHLIGHT_OFF) if color else (PLAIN_OPEN, PLAIN_CLOSE)
    return f"{left}{on}{flat[start:end]}{off}{right}"


def write_rows(rows: list[dict], fields: list[str], args, out) -> int:
    """Write match rows as jsonl/csv (``fields``) or a table (``where``, span highlighted in ``text``; ``calibrated`` if present)."""
    if args.format == "jsonl":
        for row in rows:
            out.write(json.dumps({key: row[key] for key in fields}, ensure_ascii=False) + "\n")
    elif args.format == "csv":
        writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
    else:
        color = args.color == "always" or (args.color == "auto" and out.isatty() and not os.environ.get("NO_COLOR"))
        calibrated = "calibrated" in fields
        current = None
        for row in rows:
            if row["query"] != current:
                sts = f"  {'0-5':>4}" if calibrated else ""
                out.write(f"\n== {row['query']}\n{'rank':>4}  {'score':>6}{sts}  {'where':<24} {'chars':<11} match in context\n")
                current = row["query"]
            sts = ""
            if calibrated:
                sts = f"  {row['calibrated']:4.2f}" if row.get("calibrated") is not None else " " * 6
            chars = f"{row['start']}-{row['end']}"
            snippet = _snippet(row["text"], row["start"], row["end"], 90, color)
            out.write(f"{row['rank']:>4}  {row['score']:6.3f}{sts}  {row['where']:<24} {chars:<11} {snippet}\n")
        if not rows:
            out.write("no match" + (f" at or above threshold {args.threshold}" if args.threshold is not None else "") + "\n")
    return len(rows)
