"""What the commands share: the options (declared once, here), value types, output switches, strict JSON, the
match writers."""

from __future__ import annotations

import argparse
import csv
import difflib
import html
import json
import logging
import math
import os
import sys
import warnings

from slice_st.errors import FileAccessError
from slice_st.scoring import SPAN_SCORERS  # no numpy: --help stays fast
from slice_st.text import SPLITS, check_creatable, csv_safe, read_file, split_lines

#: Texts (documents) shown per query when ``--texts`` is not given.
DEFAULT_TEXTS = 10
#: Control characters (C0 but tab, DEL, C1) and how they are shown.
_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0A, 0x20), *range(0x7F, 0xA0))}
#: Environment switches that turn progress bars off (tqdm, huggingface_hub, datasets).
_PROGRESS_ENV = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")
_LOGGERS = ("transformers", "sentence_transformers", "huggingface_hub", "datasets", "mteb", "accelerate", "slice_st")


class UsageError(ValueError):
    """Options that do not go together, found by the command line before any work: one line, exit status 2."""


def suggestion(word: str, known) -> str:
    """``"; did you mean X?"`` for the closest of ``known`` to a mistyped ``word``, or ``""``.

    >>> suggestion("--texs", ["--texts", "--spans"])
    '; did you mean --texts?'
    """
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6) if word else []
    return f"; did you mean {close[0]}?" if close else ""


def terminal_safe(text: str) -> str:
    """``text`` with every control character but tab shown as ``\\xNN`` (untrusted text cannot drive the terminal).

    >>> print(terminal_safe("id\\x1b]0;title\\x07"))
    id\\x1b]0;title\\x07
    """
    return text.translate(_CONTROL)


def refuse(*rules) -> None:
    """Raise :class:`UsageError` with the message of the first ``(condition, message)`` rule that holds."""
    for condition, message in rules:
        if condition:
            raise UsageError(message)


def at_least(minimum: float, maximum: float | None = None, cast: type = int):
    """An ``argparse`` type: a finite number (an integer when ``cast`` is ``int``; ``2e8`` too) in
    ``[minimum, maximum]``, checked while parsing."""

    def parse(value: str):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if cast is int and not (math.isfinite(number) and number.is_integer()):
            raise argparse.ArgumentTypeError(f"not an integer: {value!r}")
        if not math.isfinite(number):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {value}")
        if number < minimum or (maximum is not None and number > maximum):
            bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return cast(number)

    parse.__name__ = f"number >= {minimum}"
    return parse


positive_int = at_least(1)
count = at_least(0)
finite_float = at_least(-math.inf, cast=float)


def _table(*rows: tuple) -> dict[str, tuple[list[str], dict]]:
    return {flags.split()[-1]: (flags.split(), kwargs) for flags, kwargs in rows}


#: Every option two commands share, by its long flag: (flags, ``add_argument`` keyword arguments).
OPTIONS = _table(
    ("-q --query", dict(action="append", help="an origin phrase (repeatable)")),
    ("--queries", dict(action="append", metavar="FILE", help="a file with one query per line")),
    ("--texts", dict(type=count, metavar="N", help=f"the N best texts per query (default {DEFAULT_TEXTS}; 0: all)")),
    ("--per-text", dict(type=count, default=1, metavar="M", help="spans of each text (default 1; 0: no limit)")),
    ("--spans", dict(type=positive_int, metavar="N", help="at most N spans per query in all")),
    ("-t --threshold", dict(type=finite_float, metavar="T", help="keep matches whose score is >= T")),
    ("--scorer", dict(choices=tuple(SPAN_SCORERS), help="which span wins (default: reranked)")),
    ("--overlap", dict(action="store_true", help="also show spans overlapping a better one")),
    ("-f --format", dict(choices=("text", "json", "jsonl", "html", "csv"), default="text", help="output format")),
    ("--color", dict(choices=("auto", "always", "never"), default="auto", help="highlight spans")),
    ("--approximate", dict(action="store_true", help="with an index: use its FAISS candidate stage")),
    ("-m --model", dict(help="model id or path (default: the index's, else slice-minilm; base: all-MiniLM-L6-v2)")),
    ("--min-span", dict(type=positive_int, help="shortest span (default: the model's, 1)")),
    ("--max-span", dict(type=positive_int, help="longest span (default: the model's, 20)")),
    ("--unit", dict(choices=("word", "token"), help="span unit (default: the model's, word)")),
    ("--batch-size", dict(type=positive_int, default=32)),
    ("--device", dict(help="torch device, e.g. cpu or cuda:0")),
    ("--split", dict(choices=SPLITS, default="auto", help="a text is a line, a paragraph, or auto (by the file)")),
    ("--follow-links", dict(action="store_true", help="also read file links leading out of a folder named")),
    ("--skip-bad", dict(action="store_true", help="leave out (and list) texts the model cannot window")),
    ("--ray", dict(nargs="?", const="local", metavar="ADDRESS", help="run on Ray: here, or auto/HOST:PORT")),
    ("--workers", dict(type=positive_int, metavar="N", help="with --ray: Ray actors (default: all)")),
    ("--force", dict(action="store_true", help="replace an index already in DIR")),
    ("--backend", dict(choices=("torch", "onnx", "openvino"), default="torch", help="where the forward pass runs")),
    ("--model-file", dict(metavar="FILE", help="exported file in the model folder, e.g. onnx/model.onnx")),
    ("--quantized", dict(action="store_true", help="with --backend onnx: the int8 file")),
    ("--model-dtype", dict(choices=("float32", "float16", "bfloat16"), help="weights' precision")),
    ("--threads", dict(type=positive_int, help="intra-op threads (default: SLICE_ST_THREADS, else torch's)")),
    ("--export-dir", dict(metavar="DIR", help="with --backend onnx/openvino: export into DIR first if needed")),
)
BACKEND = ("--backend", "--model-file", "--quantized", "--model-dtype", "--threads", "--export-dir")
QUERY = (
    *("--query", "--queries", "--texts", "--per-text", "--spans", "--threshold", "--scorer", "--overlap", "--format"),
    *("--color", "--approximate", "--model", "--min-span", "--max-span", "--unit", "--batch-size", "--device"),
    *("--ray", "--workers"),
)


def add_command(commands, name: str, help: str, handler=None, description: str | None = None, **defaults):
    """The (sub-)command ``name``: ``help`` is its line in the list (and its description unless one is given)."""
    parser = commands.add_parser(name, help=help, description=description or f"{help[0].upper()}{help[1:]}.")
    parser.set_defaults(**defaults, **({"handler": handler} if handler else {}))
    return parser


def add_options(parser, *names: str, **defaults) -> None:
    """Attach the shared options ``names`` (long flags of :data:`OPTIONS`) to ``parser``; ``defaults`` override."""
    for name in names:
        flags, kwargs = OPTIONS[name]
        parser.add_argument(*flags, **kwargs)
    parser.set_defaults(**defaults)


def add_query_options(parser) -> None:
    """The query, result-count, span and model options of ``mine`` and ``index search`` (files and indexes alike)."""
    add_options(parser, *QUERY)
    add_options(parser.add_argument_group("inference backend"), *BACKEND)


def pick(args, *names: str) -> dict:
    """``{name: args.name}`` for ``names``: keyword arguments of a library call."""
    return {name: getattr(args, name) for name in names}


def model_options(args) -> dict:
    """``load_model`` keyword arguments from the backend options given; sets torch's intra-op threads."""
    from slice_st.backends import set_torch_threads

    set_torch_threads(getattr(args, "threads", None))
    options = pick(args, "backend", "model_file", "quantized", "threads", "export_dir") if "backend" in args else {}
    options["dtype"] = getattr(args, "model_dtype", None)
    return {key: value for key, value in options.items() if value not in (None, False, "torch")}


def apply_output_options(args):
    """Act on ``--quiet`` (implies ``--no-progress``; no warnings or library logs) and ``--no-progress``; returns a
    function that puts the environment and loggers back."""
    saved_env = {name: os.environ.get(name) for name in _PROGRESS_ENV}
    saved_levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    filters = warnings.catch_warnings()
    filters.__enter__()
    if getattr(args, "quiet", False):
        args.no_progress = True
        warnings.simplefilter("ignore")
        for name in _LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
    if getattr(args, "no_progress", False):
        os.environ.update(dict.fromkeys(_PROGRESS_ENV, "1"))  # transformers reads it when imported
        if "transformers" in sys.modules:  # imported already (main() called in-process)
            sys.modules["transformers"].utils.logging.disable_progress_bar()

    def restore() -> None:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
        filters.__exit__(None, None, None)

    return restore


def report(args, message: str, out=None) -> None:
    """A status line (not a result): to ``out`` (standard output by default) unless ``--quiet``."""
    if not getattr(args, "quiet", False):
        (out or sys.stdout).write(message.rstrip("\n") + "\n")


def paragraph_note(args):
    """``read_texts``' ``report``: say on standard error which files ``--split auto`` reads as paragraphs."""

    def note(path: str, mode: str) -> None:
        if mode == "paragraph":
            report(args, f"{path}: --split auto reads one text per paragraph (its lines are wrapped)", sys.stderr)

    return note


def report_skipped(skipped, what: str) -> None:
    """Name each ``(where, why)`` left out by ``--skip-bad`` on standard error, then their count."""
    for where, reason in skipped:
        sys.stderr.write(f"slice-st: skipped {terminal_safe(where)}: {terminal_safe(reason)}\n")
    if skipped:
        sys.stderr.write(f"slice-st: {len(skipped)} {what} skipped\n")


def check_output(path: str, kind: str = "file") -> str:
    """Check before any work that ``path`` can be written as a ``"file"`` or a ``"folder"`` (nothing is created)."""
    if not os.path.exists(path):
        check_creatable(path)
    elif (kind == "file") == os.path.isdir(path):
        raise FileAccessError(f"output {path} is a {'folder' if kind == 'file' else 'file'}, not a {kind}.")
    elif not os.access(path, os.W_OK):
        raise FileAccessError(f"output {path} is not writable (permission denied).")
    return path


def read_queries(args) -> list[str]:
    queries = list(args.query or [])
    for path in args.queries or []:
        queries += [line.strip() for line in split_lines(read_file(path)) if line.strip()]
    if not queries:
        raise UsageError("no query given: use --query TEXT (repeatable) or --queries FILE.")
    return queries


def result_counts(args) -> tuple[int | None, int | None, int | None]:
    """``(texts, per_text, spans)`` of the result-count options; ``None``: no limit."""
    texts = args.texts if args.texts is not None else (None if args.spans is not None else DEFAULT_TEXTS)
    return (texts or None), (args.per_text or None), args.spans


def json_ready(value):
    """``value`` with NaN/inf floats as ``None`` and numpy scalars/arrays as Python values (strict JSON).

    >>> json_ready({"a": float("nan"), "b": [1.5, float("inf")]})
    {'a': None, 'b': [1.5, None]}
    """
    if isinstance(value, dict):
        return {str(key): json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar or array, torch tensor
        return json_ready(value.tolist())
    return None if isinstance(value, float) and not math.isfinite(value) else value


def dumps_json(value, **kwargs) -> str:
    """Strict JSON (``null`` for NaN/inf; never the bare ``NaN`` that JSON parsers reject)."""
    return json.dumps(json_ready(value), allow_nan=False, ensure_ascii=False, **kwargs)


def write_rows(rows: list[dict], fields: list[str], args, out) -> int:
    """Match rows as json/jsonl/csv (``fields``), one HTML page, or aligned text columns (the span highlighted)."""
    records = [{key: row[key] for key in fields} for row in rows]
    if args.format == "json":
        out.write(dumps_json(records, indent=1) + "\n")
    elif args.format == "jsonl":
        for record in records:
            out.write(dumps_json(record) + "\n")
    elif args.format == "csv":
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()  # a cell a spreadsheet would run as a formula gets a leading '
        writer.writerows({key: csv_safe(value) for key, value in record.items()} for record in records)
    elif args.format == "html":
        out.write(_html_page(rows, args.threshold))
    else:
        _write_table(rows, args, out)
    return len(rows)


def _write_table(rows: list[dict], args, out) -> None:
    color = args.color == "always" or (args.color == "auto" and out.isatty() and not os.environ.get("NO_COLOR"))
    calibrated = any(row.get("calibrated") is not None for row in rows)  # an index with a calibration: 0-5 column
    where_width = max([24] + [len(terminal_safe(row["where"])) for row in rows])  # the columns stay aligned
    chars_width = max([11] + [len(f"{row['start']}-{row['end']}") for row in rows])
    current = None
    for row in rows:
        if row["query"] != current:
            current = row["query"]
            sts = f"  {'0-5':>4}" if calibrated else ""
            out.write(
                f"\n== {terminal_safe(current)}\n{'rank':>4}  {'score':>6}{sts}  "
                f"{'where':<{where_width}} {'chars':<{chars_width}} match in context\n"
            )
        sts = ""
        if calibrated:
            sts = f"  {row['calibrated']:4.2f}" if row.get("calibrated") is not None else " " * 6
        chars = f"{row['start']}-{row['end']}"
        snippet = _snippet(row["text"], row["start"], row["end"], 90, color)
        out.write(
            f"{row['rank']:>4}  {row['score']:6.3f}{sts}  "
            f"{terminal_safe(row['where']):<{where_width}} {chars:<{chars_width}} {snippet}\n"
        )
    if not rows:
        out.write(f"no match{_at_threshold(args.threshold)}\n")


def _at_threshold(threshold) -> str:
    return f" at or above threshold {threshold}" if threshold is not None else ""


def _snippet(text: str, start: int, end: int, width: int, color: bool) -> str:
    """The text around ``text[start:end]`` on one line, the span highlighted."""
    flat = text.replace("\n", " ").replace("\t", " ")
    room = max(width - (end - start), 10) // 2
    left_start, right_end = max(0, start - room), min(len(flat), end + room)
    left = ("…" if left_start > 0 else "") + flat[left_start:start]
    right = flat[end:right_end] + ("…" if right_end < len(flat) else "")
    on, off = ("\x1b[1;33m", "\x1b[0m") if color else ("«", "»")
    return f"{terminal_safe(left)}{on}{terminal_safe(flat[start:end])}{off}{terminal_safe(right)}"


_HTML_HEAD = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>slice-st matches</title><style>'
    "body{font:15px/1.5 system-ui,sans-serif;margin:24px;color:#1d2330}h2{font-size:16px;margin-top:28px}"
    "table{border-collapse:collapse;width:100%}td,th{padding:3px 8px;border-bottom:1px solid #e3e6ea;text-align:left;"
    "vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "mark{background:#ffe27a}.where{color:#52607a;white-space:nowrap}</style></head><body>"
)


def _html_page(rows: list[dict], threshold) -> str:
    """One self-contained page (inline style, no script, nothing fetched): a table per query, every text escaped."""
    parts, current = [_HTML_HEAD], None
    for row in rows:
        if row["query"] != current:
            parts.append("</table>" if current is not None else "")
            current = row["query"]
            parts.append(f"<h2>{html.escape(current)}</h2><table><tr><th>rank</th><th>score</th><th>where</th>")
            parts.append("<th>match in context</th></tr>")
        text, start, end = row["text"], row["start"], row["end"]
        context = f"{html.escape(text[:start])}<mark>{html.escape(text[start:end])}</mark>{html.escape(text[end:])}"
        parts.append(
            f'<tr><td class="n">{row["rank"]}</td><td class="n">{row["score"]:.3f}</td>'
            f'<td class="where">{html.escape(str(row["where"]))}</td><td>{context}</td></tr>'
        )
    parts.append("</table>" if rows else f"<p>no match{html.escape(_at_threshold(threshold))}</p>")
    return "".join(parts) + "</body></html>\n"
