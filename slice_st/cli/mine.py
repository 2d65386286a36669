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
    add_command,
    add_options,
    add_query_options,
    model_options,
    paragraph_note,
    pick,
    read_queries,
    refuse,
    report_skipped,
    result_counts,
    terminal_safe,
    write_rows,
)
from slice_st.text import expand_paths, read_texts

#: The fields of a match (json, jsonl, csv), the same for FILEs and an index; what one of them lacks is null.
FIELDS = "query rank score cosine scorer calibrated doc_id start end span text file line file_start file_end".split()


def add_commands(commands) -> None:
    mine = add_command(commands, "mine", "find the best-matching span of each text for each query", _mine)
    mine.add_argument("files", nargs="*", metavar="FILE", help="text/JSONL files, folders or globs ('-': stdin)")
    mine.add_argument("--index", metavar="DIR", action="append", help="search a saved index (or shards) instead")
    add_options(mine, "--split", "--follow-links", "--skip-bad")
    add_query_options(mine)


def add_search_command(actions) -> None:
    search = add_command(actions, "search", "search a saved index (as mine --index)", _mine, files=[], skip_bad=False)
    search.add_argument("index", nargs="+", metavar="DIR", help="an index folder (several, or a folder of shards)")
    add_query_options(search)


def _mine(args) -> int:
    refuse(
        (args.index and args.files, "give either FILEs or --index DIR, not both."),
        (args.index and args.skip_bad, "--skip-bad is for FILEs; an index holds only documents it could window."),
        (not args.index and not args.files, "no input: give FILEs to search, or --index DIR."),
    )
    if not args.index:
        ray = args.ray is not None or args.workers is not None
        refuse(
            (ray, "--ray and --workers search a saved index: give --index DIR."),
            (args.approximate, "--approximate needs --index DIR (a saved index with a candidate stage)."),
            (args.per_text == 0, "--per-text 0 (no limit) is for an index: with FILEs give a number of spans."),
        )
    queries = read_queries(args)
    rows = _search_index(args, queries) if args.index else _search_files(args, queries)
    write_rows(rows, FIELDS, args, sys.stdout)
    return 0


def _search_files(args, queries: list[str]) -> list[dict]:
    import slice_st

    paths = _distinct_files(expand_paths(args.files, follow_links=args.follow_links))
    records = read_texts(paths, args.split, report=paragraph_note(args))
    model = slice_st.load_model(args.model, device=args.device, **model_options(args))
    texts, per_text, spans = result_counts(args)
    try:
        result = slice_st.best_spans(
            model,
            queries,
            [record.text for record in records],
            **pick(args, "min_span", "max_span", "unit", "batch_size", "scorer", "overlap"),
            show_progress_bar=not args.no_progress,
            top_k=per_text,
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
        for rank, match in enumerate(kept, start=1):
            record, offset = records[match.text_index], records[match.text_index].file_offset
            cosine = match.similarity if match.similarity is not None else match.score
            where = {"file": record.source, "line": record.line, "doc_id": f"{record.source}:{record.line}"}
            where.update(file_start=offset + match.start, file_end=offset + match.end)
            rows.append(_row(query, rank, match, cosine, result.scorer, record.text, **where))
    return rows


def _search_index(args, queries: list[str]) -> list[dict]:
    from slice_st.index import open_index
    from slice_st.index.search import search_documents, search_scorer

    options = model_options(args)
    index = open_index(args.index, args.model, device=args.device, ray=args.ray, workers=args.workers, **options)
    try:
        if args.unit not in (None, index.span_config.unit):
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
            **pick(args, "threshold", "min_span", "max_span", "batch_size", "approximate", "scorer", "overlap"),
        )
        scorer = search_scorer(args.scorer).name  # what the index ranked by: its own default when none is named
        rows = []
        for query, matches in zip(queries, found):
            for rank, match in enumerate(matches, start=1):
                text, where = index.texts[match.doc_index], {"doc_id": match.doc_id, "calibrated": match.calibrated}
                rows.append(_row(query, rank, match, match.cosine, scorer, text, **where))
        return rows
    finally:
        if hasattr(index, "close"):
            index.close()


def _row(query: str, rank: int, match, cosine: float, scorer: str, text: str, **fields) -> dict:
    """One match with every field of :data:`FIELDS` (null where its source has none), and ``where`` for the table."""
    row = dict.fromkeys(FIELDS) | {"query": query, "rank": rank, "score": round(match.score, 6), "scorer": scorer}
    row.update(cosine=round(cosine, 6), start=match.start, end=match.end, span=match.span, text=text, **fields)
    return row | {"where": os.path.basename(row["doc_id"])}


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
