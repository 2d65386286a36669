"""What the command groups share: argument types and groups, output switches, strict JSON, match output."""

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
from collections.abc import Sequence

from slice_st.errors import FileAccessError
from slice_st.text import CORPUS_SUFFIXES, check_creatable, csv_safe, expand_paths, read_file, split_lines

#: Texts (documents) shown per query when ``--texts`` is not given.
DEFAULT_TEXTS = 10

#: Control characters (C0 but tab and newline, DEL, C1): untrusted text printed as is could drive the terminal.
_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}
_CONTROL_AND_NEWLINE = _CONTROL | {0x0A: "\\x0a"}
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


def terminal_safe(text: str, keep_newlines: bool = False) -> str:
    """``text`` with every control character but tab (and, with ``keep_newlines``, newline) shown as ``\\xNN``.

    >>> print(terminal_safe("id\\x1b]0;title\\x07"))
    id\\x1b]0;title\\x07
    """
    return text.translate(_CONTROL if keep_newlines else _CONTROL_AND_NEWLINE)


def int_at_least(minimum: int):
    """An ``argparse`` type: an integer >= ``minimum`` (checked while parsing, before any work)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {number}")
        return number

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = int_at_least(1)


def finite_float(value: str) -> float:
    """An ``argparse`` type: a finite number (``nan`` and ``inf`` are refused)."""
    number = float(value)
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {value}")
    return number


def apply_output_options(args):
    """Act on ``--quiet`` (implies ``--no-progress``: no bars, status lines, warnings or library logs) and
    ``--no-progress`` before a command runs; returns a function that puts the environment and loggers back."""
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
        os.environ.update(dict.fromkeys(_PROGRESS_ENV, "1"))  # tqdm >= 4.66 reads TQDM_DISABLE

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


def quiet_progress(args) -> None:
    """With ``--no-progress`` (or ``--quiet``), silence transformers' own progress bars too."""
    if getattr(args, "no_progress", False) or getattr(args, "quiet", False):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def report(args, message: str, out=None) -> None:
    """A status line (not a result): to ``out`` (standard output by default) unless ``--quiet``."""
    if not getattr(args, "quiet", False):
        (out or sys.stdout).write(message.rstrip("\n") + "\n")


def check_output(path: str, kind: str = "file") -> str:
    """Check before any work that ``path`` can be written as a ``"file"`` or a ``"folder"`` (nothing is created)."""
    if not os.path.exists(path):
        check_creatable(path)
    elif (kind == "file") == os.path.isdir(path):
        raise FileAccessError(f"output {path} is a {'folder' if kind == 'file' else 'file'}, not a {kind}.")
    elif not os.access(path, os.W_OK):
        raise FileAccessError(f"output {path} is not writable (permission denied).")
    return path


def expand_inputs(paths: Sequence[str], follow_links: bool = False) -> list[str]:
    """Input files named by ``paths`` (:func:`slice_st.text.expand_paths`: folders, globs, ``-``).

    >>> expand_inputs(["-"])
    ['-']
    """
    return expand_paths(paths, CORPUS_SUFFIXES, follow_links=follow_links)


def read_queries(args) -> list[str]:
    queries = list(args.query or [])
    for path in args.queries or []:
        queries += [line.strip() for line in split_lines(read_file(path)) if line.strip()]
    if not queries:
        raise UsageError("no query given: use --query TEXT (repeatable) or --queries FILE.")
    return queries


def add_format_argument(parser, formats: Sequence[str] = ("text", "json", "jsonl", "html", "csv")) -> None:
    parser.add_argument(
        "-f",
        "--format",
        choices=formats,
        default="text",
        help="text: aligned columns (default); json: one JSON document; jsonl: one JSON object per line"
        + ("; html: one self-contained page; csv" if "html" in formats else ""),
    )


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    """The query, result-count and output options of ``mine`` and ``index search`` (the same for files and indexes)."""
    from slice_st.scoring import DEFAULT_SCORER, SPAN_SCORERS  # numpy only: --help stays fast

    parser.add_argument("-q", "--query", action="append", help="an origin phrase (repeatable)")
    parser.add_argument("--queries", action="append", metavar="FILE", help="a file with one query per line")
    counts = parser.add_argument_group("how many results")
    counts.add_argument(
        "--texts",
        type=int_at_least(0),
        metavar="N",
        help=f"the N best texts (documents of an index) per query (default {DEFAULT_TEXTS}; 0: all)",
    )
    counts.add_argument(
        "--per-text", type=int_at_least(0), default=1, metavar="M", help="spans of each text (default 1; 0: no limit)"
    )
    counts.add_argument("--spans", type=positive_int, metavar="N", help="at most N spans per query in all")
    parser.add_argument("-t", "--threshold", type=finite_float, help="keep matches whose score is >= T")
    parser.add_argument(
        "--scorer",
        choices=tuple(SPAN_SCORERS),
        default=None,
        help=f"how the best span is chosen: 'reranked' (a learned re-ranker over the 'phrase' scorer's top "
        "candidates), 'phrase' (the cosine less small costs for clipped phrases) or 'max-cosine' (the paper's "
        f"protocol) (default {DEFAULT_SCORER})",
    )
    parser.add_argument("--overlap", action="store_true", help="also show spans overlapping a better one")
    add_format_argument(parser)
    parser.add_argument("--min-span", type=positive_int, help="shortest span (default: the model's, 1)")
    parser.add_argument("--max-span", type=positive_int, help="longest span (default: the model's, 20)")
    parser.add_argument("--unit", choices=("word", "token"), help="span unit (default: the model's, word)")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--device", help="torch device, e.g. cpu or cuda:0")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="highlight spans")
    parser.add_argument("-m", "--model", help="model id or path (default: the index's, else the shipped slice-minilm)")
    parser.add_argument("--approximate", action="store_true", help="with an index: use its FAISS candidate stage")
    add_ray_argument(parser, "with an index: scan its shards")
    add_backend_arguments(parser)


def result_counts(args) -> tuple[int | None, int | None, int | None]:
    """``(texts, per_text, spans)`` of :func:`add_query_arguments`; ``None``: no limit."""
    texts = args.texts if args.texts is not None else (None if args.spans is not None else DEFAULT_TEXTS)
    return (texts or None), (args.per_text or None), args.spans


def add_ray_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--ray [ADDRESS]`` (no address: Ray started on this machine) and ``--workers N`` (``slice-st[ray]``)."""
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help=f"{what} on Ray (slice-st[ray]): alone (or --ray=local), Ray starts here; auto, HOST:PORT or "
        "ray://HOST:PORT joins a cluster",
    )
    parser.add_argument("--workers", type=positive_int, metavar="N", help="with --ray: Ray actors (default: all)")


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the forward pass runs: ``--backend``, ``--model-file``/``--quantized``, ``--model-dtype``, ``--threads``,
    ``--export-dir``."""
    group = parser.add_argument_group("inference backend")
    group.add_argument(
        "--backend",
        choices=("torch", "onnx", "openvino"),
        default="torch",
        help="run the model on torch (default), ONNX Runtime or OpenVINO (slice-st[onnx] / [openvino])",
    )
    group.add_argument("--model-file", metavar="FILE", help="exported file in the model folder, e.g. onnx/model.onnx")
    group.add_argument("--quantized", action="store_true", help="with --backend onnx: the int8 file")
    group.add_argument("--model-dtype", choices=("float32", "float16", "bfloat16"), help="weights' precision")
    group.add_argument(
        "--threads", type=positive_int, help="intra-op threads (default: SLICE_ST_THREADS, else torch's)"
    )
    group.add_argument(
        "--export-dir", metavar="DIR", help="with --backend onnx/openvino: export into DIR first if needed"
    )


def model_options(args) -> dict:
    """``load_model`` keyword arguments from :func:`add_backend_arguments`' options (only those given); sets torch's
    intra-op threads when ``--threads`` (or ``SLICE_ST_THREADS``) is given."""
    from slice_st.backends import set_torch_threads

    set_torch_threads(getattr(args, "threads", None))
    options = {
        "backend": getattr(args, "backend", "torch"),
        "model_file": getattr(args, "model_file", None),
        "quantized": getattr(args, "quantized", False),
        "dtype": getattr(args, "model_dtype", None),
        "threads": getattr(args, "threads", None),
        "export_dir": getattr(args, "export_dir", None),
    }
    return {key: value for key, value in options.items() if value not in (None, False, "torch")}


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
    return json.dumps(json_ready(value), allow_nan=False, **kwargs)


def write_records(records: list[dict], fields: Sequence[str], fmt: str, out) -> int:
    """``records`` as one JSON array (``json``), JSON lines (``jsonl``) or CSV with a header (``csv``); strict JSON."""
    if fmt == "json":
        out.write(dumps_json(list(records), ensure_ascii=False, indent=1) + "\n")
    elif fmt == "jsonl":
        for record in records:
            out.write(dumps_json(record, ensure_ascii=False) + "\n")
    else:
        writer = csv.DictWriter(out, fieldnames=list(fields), extrasaction="ignore")
        writer.writeheader()  # a cell a spreadsheet would run as a formula gets a leading '
        writer.writerows({key: csv_safe(value) for key, value in record.items()} for record in records)
    return len(records)


def write_rows(rows: list[dict], fields: list[str], args, out) -> int:
    """Match rows as json/jsonl/csv (``fields``), one HTML page, or aligned text columns (the span highlighted)."""
    if args.format in ("json", "jsonl", "csv"):
        return write_records([{key: row[key] for key in fields} for row in rows], fields, args.format, out)
    if args.format == "html":
        out.write(_html_page(rows, args.threshold))
        return len(rows)
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
        out.write(
            "no match" + (f" at or above threshold {args.threshold}" if args.threshold is not None else "") + "\n"
        )
    return len(rows)


def _snippet(text: str, start: int, end: int, width: int, color: bool) -> str:
    """The text around ``text[start:end]`` on one line, the span highlighted."""
    flat = text.replace("\n", " ").replace("\t", " ")
    room = max(width - (end - start), 10) // 2
    left_start, right_end = max(0, start - room), min(len(flat), end + room)
    left = ("…" if left_start > 0 else "") + flat[left_start:start]
    right = flat[end:right_end] + ("…" if right_end < len(flat) else "")
    on, off = ("\x1b[1;33m", "\x1b[0m") if color else ("«", "»")
    return f"{terminal_safe(left)}{on}{terminal_safe(flat[start:end])}{off}{terminal_safe(right)}"


_HTML_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;margin:24px;color:#1d2330}h2{font-size:16px;margin-top:28px}"
    "table{border-collapse:collapse;width:100%}td,th{padding:3px 8px;border-bottom:1px solid #e3e6ea;text-align:left;"
    "vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "mark{background:#ffe27a}.where{color:#52607a;white-space:nowrap}"
)


def _html_page(rows: list[dict], threshold) -> str:
    """One self-contained page (inline style, no script, nothing fetched): a table per query, every text escaped."""
    parts = [
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>slice-st matches</title>'
        f"<style>{_HTML_STYLE}</style></head><body>"
    ]
    current = None
    for row in rows:
        if row["query"] != current:
            parts.append("</table>" if current is not None else "")
            current = row["query"]
            parts.append(
                f"<h2>{html.escape(current)}</h2><table><tr><th>rank</th><th>score</th><th>where</th>"
                "<th>match in context</th></tr>"
            )
        text, start, end = row["text"], row["start"], row["end"]
        context = f"{html.escape(text[:start])}<mark>{html.escape(text[start:end])}</mark>{html.escape(text[end:])}"
        parts.append(
            f'<tr><td class="n">{row["rank"]}</td><td class="n">{row["score"]:.3f}</td>'
            f'<td class="where">{html.escape(str(row["where"]))}</td><td>{context}</td></tr>'
        )
    if current is not None:
        parts.append("</table>")
    if not rows:
        where = f" at or above threshold {html.escape(str(threshold))}" if threshold is not None else ""
        parts.append(f"<p>no match{where}</p>")
    return "".join(parts) + "</body></html>\n"


def report_skipped(skipped, what: str) -> None:
    """Name each ``(where, why)`` left out by ``--skip-bad`` on standard error, then their count."""
    for where, reason in skipped:
        sys.stderr.write(f"slice-st: skipped {terminal_safe(where)}: {terminal_safe(reason)}\n")
    if skipped:
        sys.stderr.write(f"slice-st: {len(skipped)} {what} skipped\n")
