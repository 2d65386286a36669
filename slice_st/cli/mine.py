"""``slice-st mine`` and ``slice-st index search``: the best-matching spans of texts (FILEs) or of a saved index.

slice-st mine --query "a man plays the guitar" notes.txt calls/*.txt
slice-st mine --queries phrases.txt --split paragraph --threshold 0.6 --format jsonl docs.txt
slice-st mine --index runs/corpus-index --query "my bag was lost" --spans 5
"""

from __future__ import annotations

import os
import sys

from slice_st.cli.common import (
    UsageError,
    add_query_arguments,
    expand_inputs,
    model_options,
    quiet_progress,
    read_queries,
    report,
    report_skipped,
    result_counts,
    terminal_safe,
    write_rows,
)
from slice_st.text import SPLITS, read_texts

#: The fields of a match (json, jsonl, csv), the same for FILEs and an index; what one of them lacks is null.
FIELDS = [
    "query", "rank", "score", "cosine", "scorer", "calibrated", "doc_id", "start", "end", "span", "text",
    "file", "line", "file_start", "file_end",
]  # fmt: skip


def add_mine_command(commands) -> None:
    mine = commands.add_parser(
        "mine",
        help="find the best-matching span of each text for each query",
        description="For each query, print the texts' best-matching spans, best first.",
    )
    mine.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="UTF-8 text files, folders (their .txt/.md/.rst/.jsonl files) or glob patterns ('-': standard input)",
    )
    mine.add_argument(
        "--follow-links", action="store_true", help="also read file links leading out of a folder or pattern named"
    )
    mine.add_argument(
        "--index",
        metavar="DIR",
        action="append",
        help="search a saved index instead of FILEs (repeat it, or name a folder of indexes: shards searched together)",
    )
    mine.add_argument(
        "--split",
        choices=SPLITS,
        default="auto",
        help="what a text is: a line, a paragraph, or auto (paragraphs when a file's lines are hard-wrapped)",
    )
    mine.add_argument("--skip-bad", action="store_true", help="leave out (and list) texts the model cannot window")
    add_query_arguments(mine)
    mine.set_defaults(handler=_mine)


def add_search_command(actions) -> None:
    search = actions.add_parser(
        "search",
        help="search a saved index (the same options and output as mine --index)",
        description="For each query, the index's best-matching spans, best first (as slice-st mine --index).",
    )
    search.add_argument("index", nargs="+", metavar="DIR", help="an index folder (several, or a folder of shards)")
    add_query_arguments(search)
    search.set_defaults(handler=_mine, files=[], skip_bad=False)


def _mine(args) -> int:
    if args.index and args.files:
        raise UsageError("give either FILEs or --index DIR, not both.")
    if args.index:
        if args.skip_bad:
            raise UsageError("--skip-bad is for FILEs; an index holds only documents it could window.")
        rows = _search_index(args, read_queries(args))
    elif not args.files:
        raise UsageError("no input: give FILEs to search, or --index DIR.")
    elif args.ray is not None or args.workers is not None:
        raise UsageError("--ray and --workers search a saved index: give --index DIR.")
    elif args.approximate:
        raise UsageError("--approximate needs --index DIR (a saved index with a candidate stage).")
    elif args.per_text == 0:
        raise UsageError("--per-text 0 (no limit) is for an index; with FILEs give a number of spans per text.")
    else:
        rows = _search_files(args, read_queries(args))
    write_rows(rows, FIELDS, args, sys.stdout)
    return 0


def _search_files(args, queries: list[str]) -> list[dict]:
    import slice_st

    records = read_texts(
        _distinct_files(expand_inputs(args.files, follow_links=args.follow_links)),
        args.split,
        report=lambda path, mode: _say_paragraphs(args, path) if mode == "paragraph" else None,
    )
    quiet_progress(args)
    model = slice_st.load_model(args.model, device=args.device, **model_options(args))
    texts, per_text, spans = result_counts(args)
    try:
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
    except slice_st.SpanInputError as error:  # a text that cannot be windowed: named by its file and line
        if getattr(error, "text_index", None) is None:
            raise
        record, more = records[error.text_index], len(error.errors) - 1
        raise UsageError(
            f"{record.source}:{record.line}: {error.reason.rstrip('.')}{f' (and {more} more)' if more else ''}. "
            "Use --skip-bad to leave such texts out."
        ) from None
    report_skipped([(f"{records[i].source}:{records[i].line}", why) for i, why in result.skipped], "texts")
    rows = []
    for query_index, query in enumerate(result.queries):
        kept = [
            match
            for best in result.ranked(query_index, top_k=texts, threshold=args.threshold)
            for match in result.matches(query_index, best.text_index)[:per_text]
            if args.threshold is None or match.score >= args.threshold
        ][:spans]
        rows += [_file_row(query, rank, match, result, records) for rank, match in enumerate(kept, start=1)]
    return rows


def _file_row(query: str, rank: int, match, result, records) -> dict:
    record = records[match.text_index]
    return {
        "query": query,
        "rank": rank,
        "score": round(match.score, 6),
        "cosine": round(match.similarity if match.similarity is not None else match.score, 6),
        "scorer": result.scorer,
        "calibrated": None,
        "doc_id": f"{record.source}:{record.line}",
        "start": match.start,
        "end": match.end,
        "span": match.span,
        "text": record.text,
        "file": record.source,
        "line": record.line,
        "file_start": record.file_offset + match.start,
        "file_end": record.file_offset + match.end,
        "where": f"{os.path.basename(record.source)}:{record.line}",
    }


def _search_index(args, queries: list[str]) -> list[dict]:
    from slice_st.index import open_index
    from slice_st.index.search import search_documents

    quiet_progress(args)
    index = open_index(
        args.index, args.model, device=args.device, ray=args.ray, workers=args.workers, **model_options(args)
    )
    try:
        if args.unit is not None and args.unit != index.span_config.unit:
            raise UsageError(
                f"--unit {args.unit}: this index holds {index.span_config.unit} spans (the unit is fixed when the "
                f"index is built: `slice-st index build --unit {args.unit}`)."
            )
        texts, per_text, spans = result_counts(args)
        found = search_documents(
            index,
            queries,
            documents=texts,
            per_document=per_text,
            top_k=spans,
            threshold=args.threshold,
            min_span=args.min_span,
            max_span=args.max_span,
            batch_size=args.batch_size,
            approximate=args.approximate,
            scorer=args.scorer,
            overlap=args.overlap,
        )
        from slice_st.index.search import search_scorer

        scorer = search_scorer(args.scorer).name  # what the index ranked by: its own default when none is named
        return [
            _index_row(query, rank, match, index, scorer)
            for query, matches in zip(queries, found)
            for rank, match in enumerate(matches, start=1)
        ]
    finally:
        if hasattr(index, "close"):
            index.close()


def _index_row(query: str, rank: int, match, index, scorer: str) -> dict:
    return {
        "query": query,
        "rank": rank,
        "score": round(match.score, 6),
        "cosine": round(match.cosine, 6),
        "scorer": scorer,
        "calibrated": match.calibrated,
        "doc_id": match.doc_id,
        "start": match.start,
        "end": match.end,
        "span": match.span,
        "text": index.texts[match.doc_index],
        **dict.fromkeys(("file", "line", "file_start", "file_end")),
        "where": os.path.basename(match.doc_id),
    }


def _distinct_files(files: list[str]) -> list[str]:
    """``files`` with each file once (``a.txt ./a.txt``, or a link to it): later spellings dropped, with a note."""
    seen: dict[str, str] = {}
    for name in files:
        real = os.path.realpath(name) if name != "-" else name
        if real in seen:
            sys.stderr.write(
                f"slice-st: note: {terminal_safe(name)} is the same file as {terminal_safe(seen[real])}: read once\n"
            )
        seen.setdefault(real, name)
    return list(seen.values())


def _say_paragraphs(args, path: str) -> None:
    """``--split auto`` read ``path`` as wrapped text: say so (one text per line is what a plain file gives)."""
    report(args, f"{path}: --split auto reads one text per paragraph (its lines are wrapped)", sys.stderr)
