"""The ``slice-st`` command line: a thin layer over the library.

    slice-st mine --query "a man plays the guitar" notes.txt calls/*.txt
    slice-st mine --queries phrases.txt --split paragraph --threshold 0.6 --format jsonl docs.txt
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from slice_st.index_cli import add_index_command
from slice_st.train import add_train_command

__all__ = ["main", "read_texts", "TextRecord"]

HIGHLIGHT_ON, HIGHLIGHT_OFF = "\x1b[1;33m", "\x1b[0m"
PLAIN_OPEN, PLAIN_CLOSE = "«", "»"


@dataclass(frozen=True)
class TextRecord:
    """One text cut from an input file: where it starts (1-based line, character offset) and its content."""

    source: str
    line: int
    file_offset: int
    text: str


def _read_file(path: str) -> str:
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
        content = _read_file(path)
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


def _read_queries(args) -> list[str]:
    queries = list(args.query or [])
    for path in args.queries or []:
        queries.extend(line.strip() for line in _read_file(path).splitlines() if line.strip())
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


def _rows(result, records: list[TextRecord], top_k: int | None, threshold: float | None):
    for query_index, query in enumerate(result.queries):
        for rank, match in enumerate(result.ranked(query_index, top_k=top_k, threshold=threshold), start=1):
            record = records[match.text_index]
            yield query, rank, match, record


def _write(result, records, args, out) -> int:
    fields = ["query", "rank", "score", "file", "line", "start", "end", "file_start", "file_end", "span", "text"]
    rows = [
        {
            "query": query, "rank": rank, "score": round(match.score, 6), "file": record.source, "line": record.line,
            "start": match.start, "end": match.end, "file_start": record.file_offset + match.start,
            "file_end": record.file_offset + match.end, "span": match.span, "text": record.text,
            "where": f"{os.path.basename(record.source)}:{record.line}",
        }
        for query, rank, match, record in _rows(result, records, args.top_k, args.threshold)
    ]
    return write_rows(rows, fields, args, out)


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


def _mine(args) -> int:
    import slice_st

    if args.index:
        from slice_st.index_cli import mine_index

        return mine_index(args)
    if not args.files:
        raise ValueError("no input: give FILEs to search, or --index DIR.")
    queries = _read_queries(args)
    records = read_texts(args.files, args.split)
    if args.no_progress:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    model = slice_st.load_model(args.model, device=args.device)
    result = slice_st.best_spans(
        model,
        queries,
        [record.text for record in records],
        min_span=args.min_span,
        max_span=args.max_span,
        unit=args.unit,
        batch_size=args.batch_size,
        show_progress_bar=not args.no_progress,
    )
    _write(result, records, args, sys.stdout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slice-st", description="Phrase mining with SLICE span embeddings.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    mine = commands.add_parser(
        "mine",
        help="find the best-matching span of each text for each query",
        description="For each query, print the texts' best-matching spans, best first.",
    )
    mine.add_argument("files", nargs="*", metavar="FILE", help="UTF-8 text files to search ('-' for standard input)")
    mine.add_argument("--index", metavar="DIR", action="append", default=None,
                      help="search a saved corpus index instead of FILEs (slice-st index build); repeat it, or name a directory of indexes, to search shards together")
    mine.add_argument("--approximate", action="store_true", help="with --index: use its FAISS candidate stage")
    mine.add_argument("--per-doc", type=int, default=1, metavar="N", help="with --index: at most N spans per document (0: no limit; default 1)")
    mine.add_argument("-q", "--query", action="append", help="an origin phrase (repeatable)")
    mine.add_argument("--queries", action="append", metavar="FILE", help="a file with one query per line")
    mine.add_argument("-m", "--model", default=None, help="model id or path (default: embedded all-MiniLM-L6-v2)")
    mine.add_argument("--split", choices=("line", "paragraph"), default="line", help="what a text is (default: line)")
    mine.add_argument("-k", "--top-k", type=_positive_int, default=None, help="keep the N best texts per query")
    mine.add_argument("-t", "--threshold", type=float, default=None, help="keep matches with cosine >= T")
    mine.add_argument("-f", "--format", choices=("table", "jsonl", "csv"), default="table")
    mine.add_argument("--min-span", type=_positive_int, default=None, help="shortest span (default: the model's, 1)")
    mine.add_argument("--max-span", type=_positive_int, default=None, help="longest span (default: the model's, 20)")
    mine.add_argument("--unit", choices=("word", "token"), default=None, help="span unit (default: the model's, word)")
    mine.add_argument("--batch-size", type=_positive_int, default=32)
    mine.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda:0")
    mine.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="highlight spans in table output")
    mine.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    mine.set_defaults(handler=_mine)
    add_index_command(commands)
    add_train_command(commands)
    __import__("slice_st.passages", fromlist=["add_passages_command"]).add_passages_command(commands)
    __import__("slice_st.table", fromlist=["add_commands"]).add_commands(commands)  # make-context, table, mteb
    return parser


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slice-st")
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``slice-st``; returns the exit code (2 for bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, FileNotFoundError, IsADirectoryError) as error:
        parser.exit(2, f"slice-st: error: {error}\n")
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
