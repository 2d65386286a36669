"""``slice-st mine`` and ``slice-st index search``: the best-matching spans of texts (FILEs) or of a saved index, as
text columns, json, jsonl, csv or one HTML page."""

from __future__ import annotations

import csv
import html
import itertools
import os
import re
import sys

from slice_st.cli.common import (
    BACKEND,
    DEFAULT_TEXTS,
    UsageError,
    add_command,
    dumps_json,
    load_cli_model,
    model_options,
    paragraph_note,
    pick,
    refuse,
    report,
    report_skipped,
    terminal_safe,
    text_files,
)
from slice_st.data.corpus import file_of_id, short_ids
from slice_st.errors import WindowError
from slice_st.files import csv_safe, expand_paths, read_file
from slice_st.text import read_texts, split_lines

#: The fields of a match (json, jsonl, csv), the same for FILEs and an index; what one of them lacks is null.
FIELDS = "query rank score confidence cosine scorer calibrated doc_id start end span text file line".split()
FIELDS += ["file_start", "file_end"]
#: The fields ``--merge-identical`` adds: how many places hold the span, and each one.
MERGED_FIELDS = ["count", "places"]
#: The options of ``mine`` and ``index search``: queries, result counts, spans, the model.
QUERY = (
    *"--query --queries --texts --per-text --spans --threshold --min-confidence --scorer".split(),
    *"--overlap --format".split(),
    *"--merge-identical --color --approximate --model --min-span --max-span --unit".split(),
    *"--batch-size --device --candidates --ray --workers".split(),
    *BACKEND,
)


def add_commands(commands) -> None:
    about = "find the best-matching span of each text for each query"
    mine = add_command(
        commands, "mine", about, _mine, "--split", "--follow-links", "--skip-bad", *QUERY
    )
    mine.add_argument(
        "files", nargs="*", metavar="FILE", help="text/JSONL files, folders or globs ('-': stdin)"
    )
    mine.add_argument(
        "--index", metavar="DIR", action="append", help="search a saved index (or shards) instead"
    )
    cache = mine.add_argument_group(
        "cache of encoded files (a second search of unchanged files runs no forward pass)"
    )
    cache.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="where encoded files are kept (default: $SLICE_ST_CACHE, else ~/.cache/slice-st/mine)",
    )
    cache.add_argument(
        "--no-cache", action="store_true", help="encode every file again; read and write no cache"
    )


def add_search_command(actions) -> None:
    about = "search a saved index (as mine --index)"
    defaults = dict(files=[], skip_bad=False, cache_dir=None, no_cache=False)  # mine's FILE options
    search = add_command(actions, "search", about, _mine, *QUERY, **defaults)
    search.add_argument(
        "index", nargs="+", metavar="DIR", help="an index folder (several, or a folder of shards)"
    )


def _mine(args) -> int:
    files, ray = not args.index, args.ray is not None or args.workers is not None
    refuse(
        (args.index and args.files, "give either FILEs or --index DIR, not both."),
        (
            args.index and args.skip_bad,
            "--skip-bad is for FILEs; an index holds only documents it could window.",
        ),
        (files and not args.files, "no input: give FILEs to search, or --index DIR."),
        (files and ray, "--ray and --workers search a saved index: give --index DIR."),
        (
            files and args.approximate,
            "--approximate needs --index DIR (a saved index with a candidate stage).",
        ),
        (
            files and args.per_text == 0,
            "--per-text 0 (no limit) is for an index: with FILEs give a number of spans.",
        ),
        (
            args.index and (args.cache_dir or args.no_cache),
            "--cache-dir and --no-cache are for FILEs: an index is encoded.",
        ),
        (args.cache_dir and args.no_cache, "give --cache-dir DIR or --no-cache, not both."),
    )
    queries = read_queries(args)
    rows, corpus = _search_index(args, queries) if args.index else _search_files(args, queries)
    # a/x.txt:1 and b/x.txt:1 told apart
    places = short_ids([row["doc_id"] for row in rows], corpus)
    # other places (merged)
    more = [f" +{row['count'] - 1}" if (row["count"] or 1) > 1 else "" for row in rows]
    rows = [row | {"where": places[row["doc_id"]] + others} for row, others in zip(rows, more)]
    write_rows(rows, FIELDS + MERGED_FIELDS if args.merge_identical else FIELDS, args, sys.stdout)
    return 0


def read_queries(args) -> list[str]:
    queries = list(args.query or [])
    for path in args.queries or []:
        queries += [line.strip() for line in split_lines(read_file(path)) if line.strip()]
    if not queries:
        raise UsageError("no query given: use --query TEXT (repeatable) or --queries FILE.")
    return queries


def _counts(args) -> tuple[int | None, int | None, int | None]:
    """``(texts, per_text, spans)`` of the result-count options; ``None``: no limit."""
    texts = args.texts
    if texts is None and args.spans is None:
        texts = DEFAULT_TEXTS
    return (texts or None), (args.per_text or None), args.spans


def _search_files(args, queries: list[str]) -> tuple[list[dict], list[str]]:
    from slice_st.cache import EncodingCache, best_spans_of_files
    from slice_st.encode import is_multi_vector

    paths = _distinct_files(expand_paths(args.files, follow_links=args.follow_links))
    paths = text_files(paths, lambda one: read_texts(one, args.split), args.skip_bad)
    records = read_texts(paths, args.split, report=paragraph_note(args))
    model = load_cli_model(args, **model_options(args))
    # a MultiVectorEncoder's windows are scored through its own masks, which the cache does not keep: searched afresh
    cache = None if args.no_cache or is_multi_vector(model) else EncodingCache(args.cache_dir)
    texts, per_text, spans = _counts(args)
    options = pick(args, "min_span", "max_span", "unit", "batch_size", "scorer", "overlap")
    options.update(top_k=per_text, min_confidence=args.min_confidence)
    options.update(
        show_progress_bar=not args.no_progress, on_error="skip" if args.skip_bad else "raise"
    )
    files = [
        [record.text for record in group]
        for _, group in itertools.groupby(records, key=lambda r: r.source)
    ]
    try:
        result = best_spans_of_files(model, queries, files, cache, **options)
    except WindowError as error:  # a text that cannot be windowed: named by its file and line
        record, more = records[error.text_index], len(error.errors) - 1
        raise UsageError(
            f"{record.source}:{record.line}: {error.reason.rstrip('.')}{f' (and {more} more)' if more else ''}. "
            "Use --skip-bad to leave such texts out."
        ) from None
    report_skipped(
        [(f"{records[i].source}:{records[i].line}", why) for i, why in result.skipped], "texts"
    )
    _report_cache(args, cache)
    rows = []
    for query_index, query in enumerate(result.queries):
        kept = _file_matches(
            result, query_index, texts, per_text, spans, args.threshold, args.merge_identical
        )
        for rank, match in enumerate(kept, start=1):
            record, offset = records[match.text_index], records[match.text_index].file_offset
            cosine = match.similarity if match.similarity is not None else match.score
            places = [_file_place(records[place.text_index], place) for place in match.places]
            where = {"file": record.source, "line": record.line, "file_start": offset + match.start}
            where |= {"doc_id": f"{record.source}:{record.line}", "file_end": offset + match.end}
            where |= _merged(places)
            rows.append(_row(query, rank, match, cosine, result.scorer, record.text, **where))
    return rows, paths


def _file_matches(result, query: int, texts, per_text, spans, threshold, merge: bool) -> list:
    """A query's matches: the ``per_text`` best of each of the ``texts`` best texts, ``spans`` in all; ``merge``:
    identical spans as one (the first), ``texts`` and ``spans`` counting distinct spans."""
    from slice_st.search import identity_key, merged_matches

    ranked = result.ranked(query, top_k=None if merge else texts, threshold=threshold)
    matches = (
        match
        for best in ranked
        for match in result.matches(query, best.text_index)[:per_text]
        if threshold is None or match.score >= threshold
    )
    if not merge:
        return list(matches)[:spans]
    seen: set[str] = set()
    opened: set[int] = set()  # the texts that gave a distinct span

    def within_texts():
        for match in matches:
            key = identity_key(match.span)
            if key not in seen:
                if texts is not None and match.text_index not in opened and len(opened) >= texts:
                    return
                seen.add(key)
                opened.add(match.text_index)
            yield match

    return merged_matches(within_texts(), spans)


def _file_place(record, place) -> dict:
    where = {"doc_id": f"{record.source}:{record.line}", "start": place.start, "end": place.end}
    offsets = dict(
        file_start=record.file_offset + place.start, file_end=record.file_offset + place.end
    )
    return where | offsets | {"score": round(place.score, 6)}


def _index_place(place) -> dict:
    where = dict(
        doc_id=place.doc_id, start=place.start, end=place.end, file_start=None, file_end=None
    )
    return where | {"score": round(place.score, 6)}


def _merged(places: list[dict]) -> dict:
    """The fields of :data:`MERGED_FIELDS` of a match's ``places`` (none: a search without ``--merge-identical``)."""
    return {"count": len(places), "places": places} if places else {}


def _report_cache(args, cache) -> None:
    """Say on standard error (unless ``--quiet``) what went wrong with the cache; the search ran all the same."""
    if cache is None:
        return
    if cache.rebuilt:
        entries = "entry" if len(cache.rebuilt) == 1 else "entries"
        note = f"slice-st: note: {len(cache.rebuilt)} damaged cache {entries} encoded again"
        report(args, note, sys.stderr)
    if cache.problem:
        report(
            args, f"slice-st: note: {terminal_safe(cache.problem)}; searched without it", sys.stderr
        )


def _search_index(args, queries: list[str]) -> tuple[list[dict], list[str]]:
    from slice_st.index import open_index
    from slice_st.index.search import search_documents
    from slice_st.search import search_scorer

    options = model_options(args)
    index = open_index(
        args.index, args.model, device=args.device, ray=args.ray, workers=args.workers, **options
    )
    try:
        unit = index.span_config.unit
        if args.unit not in (None, unit):
            raise UsageError(
                f"--unit {args.unit}: this index holds {unit} spans (the unit is fixed when the index "
                f"is built: `slice-st index build --unit {args.unit}`)."
            )
        texts, per_text, spans = _counts(args)
        options = pick(args, "threshold", "min_confidence", "min_span", "max_span", "batch_size")
        options |= pick(args, "approximate", "scorer", "overlap", "candidates", "merge_identical")
        found = search_documents(
            index, queries, documents=texts, per_document=per_text, top_k=spans, **options
        )
        # what the index ranked by: its own default when none is named
        scorer = search_scorer(args.scorer).name
        rows = []
        for query, matches in zip(queries, found):
            for rank, match in enumerate(matches, start=1):
                places = _merged([_index_place(place) for place in match.places])
                where = {"doc_id": match.doc_id, "calibrated": match.calibrated, **places}
                text = index.texts[match.text_index]
                rows.append(_row(query, rank, match, match.similarity, scorer, text, **where))
        return rows, [path for path in map(file_of_id, index.doc_ids) if path is not None]
    finally:
        if hasattr(index, "close"):
            index.close()


def _row(query: str, rank: int, match, cosine: float, scorer: str, text: str, **fields) -> dict:
    """One match with every field of :data:`FIELDS` (null where its source has none), and ``where`` for the table."""
    row = dict.fromkeys(FIELDS + MERGED_FIELDS)
    row.update(query=query, rank=rank, score=round(match.score, 6), cosine=round(cosine, 6))
    row["confidence"] = None if match.confidence is None else round(match.confidence, 6)
    row.update(
        scorer=scorer, start=match.start, end=match.end, span=match.span, text=text, **fields
    )
    return row


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


def write_rows(rows: list[dict], fields: list[str], args, out) -> None:
    """Match rows as json/jsonl/csv (``fields``), one HTML page, or aligned text columns (the span highlighted)."""
    records = [{key: row[key] for key in fields} for row in rows]
    cuts = [f"threshold {args.threshold}" if args.threshold is not None else ""]
    cut = "the model's cut" if args.min_confidence == "default" else args.min_confidence
    cuts.append(f"confidence {cut}" if args.min_confidence is not None else "")
    none = "no match" + (f" at or above {' and '.join(filter(None, cuts))}" if any(cuts) else "")
    if args.format == "json":
        out.write(dumps_json(records, indent=1) + "\n")
    elif args.format == "jsonl":
        out.writelines(dumps_json(record) + "\n" for record in records)
    elif args.format == "csv":
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()  # a cell a spreadsheet would run as a formula gets a leading '
        records = [
            record | {"places": dumps_json(record["places"])} if "places" in record else record
            for record in records
        ]
        writer.writerows(
            {key: csv_safe(value) for key, value in record.items()} for record in records
        )
    elif args.format == "html":
        out.write(_html_page(rows, none))
    else:
        _write_table(rows, args.color, out, none)


def _write_table(rows: list[dict], color: str, out, none: str) -> None:
    color = color == "always" or (
        color == "auto" and out.isatty() and not os.environ.get("NO_COLOR")
    )
    # an index with a calibration: 0-5 column
    calibrated = any(row.get("calibrated") is not None for row in rows)
    confident = any(row.get("confidence") is not None for row in rows)
    # the columns stay aligned
    wide = max([24] + [len(terminal_safe(row["where"])) for row in rows])
    narrow = max([11] + [len(f"{row['start']}-{row['end']}") for row in rows])
    for query, group in itertools.groupby(rows, key=lambda row: row["query"]):
        sts = f"  {'0-5':>4}" if calibrated else ""
        sts += f"  {'conf':>4}" if confident else ""
        header = f"{'rank':>4}  {'score':>6}{sts}  {'where':<{wide}} {'chars':<{narrow}}"
        out.write(f"\n== {terminal_safe(query)}\n{header} match in context\n")
        for row in group:
            sts = _column(row.get("calibrated")) if calibrated else ""
            sts += _column(row["confidence"]) if confident else ""
            where, chars = terminal_safe(row["where"]), f"{row['start']}-{row['end']}"
            snippet = _snippet(row["text"], row["start"], row["end"], 90, color)
            out.write(
                f"{row['rank']:>4}  {row['score']:6.3f}{sts}  {where:<{wide}} {chars:<{narrow}} {snippet}\n"
            )
    if not rows:
        out.write(none + "\n")


def _column(value: float | None) -> str:
    """A 0-5 or confidence cell of the table (blank: none)."""
    return " " * 6 if value is None else f"  {value:4.2f}"


def _snippet(text: str, start: int, end: int, width: int, color: bool) -> str:
    """The text around ``text[start:end]`` on one line, the span highlighted; each run of whitespace (a wrapped
    line's end and indent) shown as one space."""
    room = max(width - (end - start), 10) // 2
    left_start, right_end = max(0, start - room), min(len(text), end + room)
    left, span, right = (
        _WHITESPACE.sub(" ", text[a:b])
        for a, b in ((left_start, start), (start, end), (end, right_end))
    )
    left = ("…" if left_start > 0 else "") + left
    right += "…" if right_end < len(text) else ""
    on, off = ("\x1b[1;33m", "\x1b[0m") if color else ("«", "»")
    return f"{terminal_safe(left)}{on}{terminal_safe(span)}{off}{terminal_safe(right)}"


_WHITESPACE = re.compile(r"\s+")


_HTML_HEAD = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>slice-st matches</title><style>'
    "body{font:15px/1.5 system-ui,sans-serif;margin:24px;color:#1d2330}h2{font-size:16px;margin-top:28px}"
    "table{border-collapse:collapse;width:100%}td,th{padding:3px 8px;border-bottom:1px solid #e3e6ea;text-align:left;"
    "vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "mark{background:#ffe27a}.where{color:#52607a;white-space:nowrap}</style></head><body>"
)
_HTML_TABLE = "<table><tr><th>rank</th><th>score</th>{}<th>where</th><th>match in context</th></tr>"


def _html_confidence(value: float | None) -> str:
    return f'<td class="n">{"" if value is None else f"{value:.2f}"}</td>'


def _html_page(rows: list[dict], none: str) -> str:
    """One self-contained page (inline style, no script, nothing fetched): a table per query, every text escaped."""
    parts = [_HTML_HEAD]
    confident = any(row.get("confidence") is not None for row in rows)
    for query, group in itertools.groupby(rows, key=lambda row: row["query"]):
        parts.append(f"<h2>{html.escape(query)}</h2>")
        parts.append(_HTML_TABLE.format("<th>confidence</th>" if confident else ""))
        for row in group:
            text, start, end = row["text"], row["start"], row["end"]
            context = f"{html.escape(text[:start])}<mark>{html.escape(text[start:end])}</mark>{html.escape(text[end:])}"
            parts.append(
                f'<tr><td class="n">{row["rank"]}</td><td class="n">{row["score"]:.3f}</td>'
                + (_html_confidence(row["confidence"]) if confident else "")
                + f'<td class="where">{html.escape(str(row["where"]))}</td><td>{context}</td></tr>'
            )
        parts.append("</table>")
    return "".join(parts) + ("" if rows else f"<p>{html.escape(none)}</p>") + "</body></html>\n"
