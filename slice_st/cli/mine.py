"""``slice-st mine``: the best-matching span of each text (or of a saved index) for each query.

    slice-st mine --query "a man plays the guitar" notes.txt calls/*.txt
    slice-st mine --queries phrases.txt --split paragraph --threshold 0.6 --format jsonl docs.txt
"""

from __future__ import annotations

import os
import sys

from slice_st.cli.common import add_backend_arguments, add_ray_argument, finite_float, model_options, positive_int, quiet_progress, read_queries, write_rows
from slice_st.text import TextRecord, read_texts

__all__ = ["add_mine_command", "read_texts", "TextRecord"]


def add_mine_command(commands) -> None:
    """Register ``slice-st mine`` on the top-level subparsers."""
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
    mine.add_argument("-m", "--model", default=None, help="model id or path (default: the shipped slice-minilm; \"base\" for plain all-MiniLM-L6-v2)")
    mine.add_argument("--split", choices=("line", "paragraph"), default="line", help="what a text is (default: line)")
    mine.add_argument("-k", "--top-k", type=positive_int, default=None, help="keep the N best texts per query")
    mine.add_argument("-t", "--threshold", type=finite_float, default=None, help="keep matches with cosine >= T")
    mine.add_argument("-f", "--format", choices=("table", "jsonl", "csv"), default="table")
    mine.add_argument("--min-span", type=positive_int, default=None, help="shortest span (default: the model's, 1)")
    mine.add_argument("--max-span", type=positive_int, default=None, help="longest span (default: the model's, 20)")
    mine.add_argument("--unit", choices=("word", "token"), default=None, help="span unit (default: the model's, word)")
    mine.add_argument("--batch-size", type=positive_int, default=32)
    mine.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda:0")
    mine.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="highlight spans in table output")
    mine.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    mine.add_argument("--skip-bad", action="store_true",
                      help="leave out (and list) texts the model cannot window instead of failing (as index build --skip-bad)")
    add_ray_argument(mine, "with --index: scan the shards")
    add_backend_arguments(mine)
    mine.set_defaults(handler=_mine)


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


def _mine(args) -> int:
    import slice_st

    if args.index:
        from slice_st.cli.index import mine_index

        if args.skip_bad:
            raise ValueError("--skip-bad is for FILEs; an index holds only documents it could window.")
        return mine_index(args)
    if not args.files:
        raise ValueError("no input: give FILEs to search, or --index DIR.")
    if args.ray is not None or args.workers is not None:
        raise ValueError("--ray and --workers search a saved index: give --index DIR.")
    if args.approximate:
        raise ValueError("--approximate needs --index DIR (a saved index with a candidate stage).")
    queries = read_queries(args)
    records = read_texts(args.files, args.split)
    quiet_progress(args)
    model = slice_st.load_model(args.model, device=args.device, **model_options(args))
    from slice_st.encode import SpanInputError

    try:  # windows are planned once, inside best_spans; a text that cannot be windowed is named by its file and line
        result = slice_st.best_spans(
            model,
            queries,
            [record.text for record in records],
            min_span=args.min_span,
            max_span=args.max_span,
            unit=args.unit,
            batch_size=args.batch_size,
            show_progress_bar=not args.no_progress,
            on_error="skip" if args.skip_bad else "raise",
        )
    except SpanInputError as error:
        if getattr(error, "text_index", None) is None:
            raise
        record, more = records[error.text_index], len(error.errors) - 1
        raise ValueError(f"{record.source}:{record.line}: {error.reason.rstrip('.')}{f' (and {more} more)' if more else ''}. "
                         "Use --skip-bad to leave such texts out.") from None
    for position, reason in result.skipped:
        sys.stderr.write(f"slice-st: skipped {records[position].source}:{records[position].line}: {reason}\n")
    if result.skipped:
        sys.stderr.write(f"slice-st: {len(result.skipped)} texts skipped\n")
    _write(result, records, args, sys.stdout)
    return 0
