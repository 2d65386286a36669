"""``slice-st mine``: the best-matching span of each text (or of a saved index) for each query.

slice-st mine --query "a man plays the guitar" notes.txt calls/*.txt
slice-st mine --queries phrases.txt --split paragraph --threshold 0.6 --format jsonl docs.txt
"""

from __future__ import annotations

import os
import sys

from slice_st.cli.common import (
    add_backend_arguments,
    add_query_arguments,
    add_ray_argument,
    expand_inputs,
    model_options,
    quiet_progress,
    read_queries,
    report,
    result_counts,
    terminal_safe,
    write_rows,
)
from slice_st.text import SPLITS, TextRecord, read_texts


def add_mine_command(commands) -> None:
    """Register ``slice-st mine`` on the top-level subparsers."""
    mine = commands.add_parser(
        "mine",
        help="find the best-matching span of each text for each query",
        description="For each query, print the texts' best-matching spans, best first.",
    )
    mine.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="UTF-8 text files, folders (their .txt/.md/.rst/.jsonl files, recursively) or glob patterns ('-': "
        "standard input)",
    )
    mine.add_argument(
        "--follow-links", action="store_true", help="also read file links leading out of a folder or pattern named"
    )
    mine.add_argument(
        "--index",
        metavar="DIR",
        action="append",
        default=None,
        help="search a saved corpus index instead of FILEs (as slice-st index search); repeat it, or name a "
        "directory of indexes, to search shards together",
    )
    mine.add_argument("--approximate", action="store_true", help="with --index: use its FAISS candidate stage")
    mine.add_argument(
        "-m",
        "--model",
        default=None,
        help='model id or path (default: the shipped slice-minilm; "base" for plain all-MiniLM-L6-v2)',
    )
    mine.add_argument(
        "--split",
        choices=SPLITS,
        default="auto",
        help="what a text is: a line, a paragraph (blank-line separated), or auto (default: paragraphs when a file's "
        "lines are hard-wrapped, else lines)",
    )
    add_query_arguments(mine)
    mine.add_argument(
        "--skip-bad",
        action="store_true",
        help="leave out (and list) texts the model cannot window instead of failing (as index build --skip-bad)",
    )
    add_ray_argument(mine, "with --index: scan the shards")
    add_backend_arguments(mine)
    mine.set_defaults(handler=_mine)


def _rows(
    result, records: list[TextRecord], texts: int | None, per_text: int, spans: int | None, threshold: float | None
):
    """The best ``texts`` texts per query, each with its ``per_text`` best spans, at most ``spans`` in all."""
    for query_index, query in enumerate(result.queries):
        rank = 0
        for best in result.ranked(query_index, top_k=texts, threshold=threshold):
            for match in result.matches(query_index, best.text_index)[:per_text]:
                if (threshold is not None and match.score < threshold) or (spans is not None and rank >= spans):
                    continue
                rank += 1
                yield query, rank, match, records[match.text_index]


def _write(result, records, args, out) -> int:
    fields = ["query", "rank", "score", "file", "line", "start", "end", "file_start", "file_end", "span", "text"]
    rows = [
        {
            "query": query,
            "rank": rank,
            "score": round(match.score, 6),
            "file": record.source,
            "line": record.line,
            "start": match.start,
            "end": match.end,
            "file_start": record.file_offset + match.start,
            "file_end": record.file_offset + match.end,
            "span": match.span,
            "text": record.text,
            "where": f"{os.path.basename(record.source)}:{record.line}",
        }
        for query, rank, match, record in _rows(result, records, *result_counts(args, index=False), args.threshold)
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
    _, per_text, _ = result_counts(args, index=False)
    queries = read_queries(args)
    records = read_texts(
        _distinct_files(expand_inputs(args.files, follow_links=args.follow_links)),
        args.split,
        report=lambda path, mode: report(args, f"{path}: --split auto reads one text per {mode}", sys.stderr),
    )
    quiet_progress(args)
    model = slice_st.load_model(args.model, device=args.device, **model_options(args))
    from slice_st.errors import SpanInputError

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
            top_k=per_text,
            scorer=args.scorer,
            overlap=args.overlap,
            on_error="skip" if args.skip_bad else "raise",
        )
    except SpanInputError as error:
        if getattr(error, "text_index", None) is None:
            raise
        record, more = records[error.text_index], len(error.errors) - 1
        raise ValueError(
            f"{record.source}:{record.line}: {error.reason.rstrip('.')}{f' (and {more} more)' if more else ''}. "
            "Use --skip-bad to leave such texts out."
        ) from None
    for position, reason in result.skipped:
        sys.stderr.write(
            f"slice-st: skipped {terminal_safe(records[position].source)}:{records[position].line}: "
            f"{terminal_safe(reason)}\n"
        )
    if result.skipped:
        sys.stderr.write(f"slice-st: {len(result.skipped)} texts skipped\n")
    _write(result, records, args, sys.stdout)
    return 0


def _distinct_files(files: list[str]) -> list[str]:
    """``files`` with each file once (``a.txt ./a.txt``, or a link to it, name one file): later spellings are dropped,
    with a note on stderr, so no match is listed twice."""
    seen: dict[str, str] = {}
    kept = []
    for name in files:
        real = os.path.realpath(name) if name != "-" else name
        if real in seen:
            sys.stderr.write(
                f"slice-st: note: {terminal_safe(name)} is the same file as {terminal_safe(seen[real])}: read once\n"
            )
            continue
        seen[real] = name
        kept.append(name)
    return kept
