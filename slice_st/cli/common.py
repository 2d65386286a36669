"""Helpers shared by the command groups: argument types, output switches (--quiet, --no-progress),
strict JSON, query files, match output."""

from __future__ import annotations

import argparse
import csv
import html
import importlib
import json
import logging
import math
import os
import sys
import warnings
from collections.abc import Sequence

from slice_st.errors import FileAccessError
from slice_st.text import (
    CORPUS_SUFFIXES,
    check_creatable,
    csv_safe,
    expand_paths,
    is_ray_address,
    read_file,
    split_lines,
)

#: Texts (documents) shown per query when ``--texts`` is not given.
DEFAULT_TEXTS = 10

#: ``--format`` of every command that prints results: text (aligned columns), one JSON document, JSON lines, one HTML
#: page.
FORMATS = ("text", "json", "jsonl", "html")

HIGHLIGHT_ON, HIGHLIGHT_OFF = "\x1b[1;33m", "\x1b[0m"
PLAIN_OPEN, PLAIN_CLOSE = "«", "»"

#: Control characters (C0 but tab and newline, DEL, C1): untrusted text printed as is could drive the terminal
#: (ESC sequences, OSC titles and hyperlinks, BEL).
_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}
_CONTROL_AND_NEWLINE = _CONTROL | {0x0A: "\\x0a"}


def terminal_safe(text: str, keep_newlines: bool = False) -> str:
    """``text`` with every control character but tab (and, with ``keep_newlines``, newline) shown as ``\\xNN``.

    Args:
        text: untrusted text (a document id, a document's text, a query) about to be printed for a person.
        keep_newlines: leave newlines as line breaks.

    Returns:
        The text with ESC, BEL, CR, the other C0 and C1 controls and DEL escaped (JSON and CSV output keep the text
        exact).

    Example:
        >>> print(terminal_safe("id\\x1b]0;title\\x07"))
        id\\x1b]0;title\\x07
    """
    return text.translate(_CONTROL if keep_newlines else _CONTROL_AND_NEWLINE)


def int_at_least(minimum: int, why: str = ""):
    """An ``argparse`` type: an integer >= ``minimum`` (checked while parsing, before any work)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}{why}, got {number}")
        return number

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = int_at_least(1)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--quiet`` and ``--no-progress`` (every command has both; a command that already has one keeps it)."""
    for flags, help_text in (
        (("--no-progress",), "hide progress bars"),
        (("--quiet",), "print only results and errors: no progress bars, status lines or library logs"),
    ):
        try:
            parser.add_argument(*flags, action="store_true", help=help_text)
        except argparse.ArgumentError:  # the command defines it itself
            pass


def apply_output_options(args):
    """Act on ``--quiet`` / ``--no-progress`` before a command runs (``--quiet`` implies ``--no-progress``).

    Returns a function that puts the environment variables and logger levels back.
    """
    saved_env = {name: os.environ.get(name) for name in _PROGRESS_ENV + ("TRANSFORMERS_VERBOSITY",)}
    saved_levels = {}
    saved_filters = warnings.catch_warnings()  # restores the warning filters on exit
    saved_filters.__enter__()
    if getattr(args, "quiet", False):
        args.no_progress = True
        warnings.simplefilter("ignore")  # library warnings (torch, transformers, sentence-transformers, slice_st) too
        for name in (
            "transformers",
            "sentence_transformers",
            "huggingface_hub",
            "datasets",
            "mteb",
            "accelerate",
            "slice_st",
            "py.warnings",
        ):
            saved_levels[name] = logging.getLogger(name).level
            logging.getLogger(name).setLevel(logging.ERROR)
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if getattr(args, "no_progress", False):
        for name in _PROGRESS_ENV:  # tqdm >= 4.66 reads TQDM_DISABLE for bars made without an explicit ``disable``
            os.environ[name] = "1"
        for module, function in (
            ("transformers.utils.logging", "disable_progress_bar"),
            ("huggingface_hub.utils", "disable_progress_bars"),
            ("datasets.utils.logging", "disable_progress_bar"),
        ):
            if module.split(".")[0] in sys.modules:  # already imported: switch it off there too
                getattr(importlib.import_module(module), function)()

    def restore() -> None:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
        saved_filters.__exit__(None, None, None)

    return restore


#: Environment switches that turn progress bars off (tqdm, huggingface_hub, datasets).
_PROGRESS_ENV = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def expand_inputs(
    paths: Sequence[str], suffixes: Sequence[str] = CORPUS_SUFFIXES, follow_links: bool = False
) -> list[str]:
    """Input files named by ``paths`` (:func:`slice_st.text.expand_paths`: folders, globs, ``-``).

    >>> expand_inputs(["-"])
    ['-']
    """
    return expand_paths(paths, suffixes, follow_links=follow_links)


def add_format_argument(
    parser: argparse.ArgumentParser, formats: Sequence[str] = FORMATS, extra: Sequence[str] = ()
) -> None:
    """``-f/--format`` with the shared choices (``table`` is still accepted for ``text``)."""
    choices = tuple(formats) + tuple(extra)

    def parse(value: str) -> str:
        value = "text" if value == "table" else value
        if value not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {', '.join(choices)})")
        return value

    parse.__name__ = "format"
    parser.add_argument(
        "-f",
        "--format",
        type=parse,
        default="text",
        metavar="{" + ",".join(choices) + "}",
        help="text: aligned columns (default); json: one JSON document; jsonl: one JSON object per line; "
        "html: one self-contained page"
        if "html" in choices
        else "output format (default: text)",
    )


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    """The query, result-count and output options shared by ``mine`` and ``index search``.

    Three counts, each with its own name: ``--texts`` (texts or documents per query), ``--per-text``
    (spans of one text or document), ``--spans`` (spans per query in all); ``-k/--top-k`` is the old name
    (``--texts`` with FILEs, ``--spans`` with an index).
    """
    parser.add_argument("-q", "--query", action="append", help="an origin phrase (repeatable)")
    parser.add_argument("--queries", action="append", metavar="FILE", help="a file with one query per line")
    counts = parser.add_argument_group("how many results")
    counts.add_argument(
        "--texts",
        type=int_at_least(0),
        default=None,
        metavar="N",
        help=f"show the N best texts (documents of an index) per query (default {DEFAULT_TEXTS}; 0: all)",
    )
    counts.add_argument(
        "--per-text",
        "--per-doc",
        dest="per_text",
        type=int_at_least(0),
        default=1,
        metavar="M",
        help="spans shown of each text or document (default 1; 0 with an index: no limit). --per-doc is the old name",
    )
    counts.add_argument(
        "--spans",
        type=positive_int,
        default=None,
        metavar="N",
        help="at most N spans per query in all (default: texts x per-text)",
    )
    counts.add_argument(
        "-k",
        "--top-k",
        type=positive_int,
        default=None,
        metavar="N",
        help="old name: --texts N with FILEs, --spans N with an index",
    )
    parser.add_argument("-t", "--threshold", type=finite_float, default=None, help="keep matches whose score is >= T")
    which = parser.add_argument_group("which spans")
    from slice_st.scoring import DEFAULT_SCORER, SPAN_SCORERS  # numpy only: --help stays fast

    which.add_argument(
        "--scorer",
        choices=tuple(SPAN_SCORERS),
        default=DEFAULT_SCORER,
        help=f"how the best span is chosen: 'phrase' (the cosine less small costs for clipped phrases) or "
        f"'max-cosine' (the paper's protocol) (default {DEFAULT_SCORER})",
    )
    which.add_argument(
        "--overlap", action="store_true", help="also show spans overlapping a better one of the same text"
    )
    add_format_argument(parser, extra=("csv",))
    parser.add_argument("--min-span", type=positive_int, default=None, help="shortest span (default: the model's, 1)")
    parser.add_argument("--max-span", type=positive_int, default=None, help="longest span (default: the model's, 20)")
    parser.add_argument(
        "--unit", choices=("word", "token"), default=None, help="span unit (default: the model's, word)"
    )
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda:0")
    parser.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto", help="highlight spans in text output"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def result_counts(args, index: bool) -> tuple[int | None, int | None, int | None]:
    """``(texts, per_text, spans)`` from :func:`add_query_arguments`' options; ``None``: no limit.

    ``-k/--top-k`` is ``--texts`` with FILEs and ``--spans`` with an index (its old meanings); it cannot be
    given with the option it stands for.
    """
    texts, spans, per_text = args.texts, args.spans, args.per_text
    if args.top_k is not None:
        if (spans if index else texts) is not None:
            raise ValueError(f"-k/--top-k is the old name of {'--spans' if index else '--texts'}: give one of them.")
        if index:
            spans = args.top_k
        else:
            texts = args.top_k
    if not index and per_text == 0:
        raise ValueError("--per-text 0 (no limit) is for an index; with FILEs give a number of spans per text.")
    if texts is None:
        texts = None if spans is not None else DEFAULT_TEXTS
    return (texts or None), (per_text or None), spans


def finite_float(value: str) -> float:
    """An ``argparse`` type: a finite number (``nan`` and ``inf`` are refused)."""
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {value}")
    return number


def check_output(path: str, kind: str = "file") -> str:
    """Check before any work that ``path`` can be written as a ``"file"`` or a ``"folder"`` (nothing is created).

    A folder where a file is wanted (or the reverse), or a parent that is a file or not writable, is a
    :class:`slice_st.errors.FileAccessError` naming the path, so a long run never ends in a failed write.
    """
    if os.path.exists(path):
        if kind == "file" and os.path.isdir(path):
            raise FileAccessError(f"output {path} is a folder, not a file.")
        if kind == "folder" and not os.path.isdir(path):
            raise FileAccessError(f"output {path} is a file, not a folder.")
        if not os.access(path, os.W_OK):
            raise FileAccessError(f"output {path} is not writable (permission denied).")
        return path
    check_creatable(path)
    return path


def bare_ray_option(argv: Sequence[str]) -> list[str]:
    """``--ray`` followed by an input rather than a Ray address (an existing file or folder, a URI) means Ray started
    here.

    argparse would take the input for the optional ADDRESS; this spells it ``--ray=local`` first.
    Anything else after ``--ray`` stays the ADDRESS (and a malformed one is a clear error later).

    >>> bare_ray_option(["index", "build", "--ray", "s3://bucket/calls/", "-o", "idx"])
    ['index', 'build', '--ray=local', 's3://bucket/calls/', '-o', 'idx']
    >>> bare_ray_option(["mine", "--ray", "head:6379", "--index", "idx"])[1:3]
    ['--ray', 'head:6379']
    """
    argv = list(argv)
    for position, value in enumerate(argv[:-1]):
        if value == "--":
            break
        following = argv[position + 1]
        is_input = os.path.exists(following) or ("://" in following and not following.startswith("ray://"))
        if value == "--ray" and not is_ray_address(following) and is_input:
            argv[position] = "--ray=local"
    return argv


def add_ray_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--ray [ADDRESS]`` (no address: Ray started on this machine) and ``--workers N`` (needs ``slice-st[ray]``)."""
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help=f"{what} on Ray (pip install 'slice-st[ray]'): no ADDRESS starts Ray here; auto, HOST:PORT or "
        "ray://HOST:PORT joins a cluster",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --ray: Ray actors (default: as many as the cluster has room for)",
    )


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the forward pass runs: ``--backend``, ``--model-file``/``--quantized``, ``--model-dtype``, ``--threads``,
    ``--export-dir``."""
    group = parser.add_argument_group("inference backend")
    group.add_argument(
        "--backend",
        choices=("torch", "onnx", "openvino"),
        default="torch",
        help="run the model on torch (default), ONNX Runtime or OpenVINO (needs slice-st[onnx] / [openvino] and an "
        "export, see slice-st export)",
    )
    group.add_argument(
        "--model-file",
        metavar="FILE",
        default=None,
        help="exported file inside the model folder, e.g. onnx/model_qint8_avx512_vnni.onnx",
    )
    group.add_argument(
        "--quantized", action="store_true", help="with --backend onnx: the int8 file (onnx/model_qint8_*.onnx)"
    )
    group.add_argument(
        "--model-dtype",
        choices=("float32", "float16", "bfloat16"),
        default=None,
        help="torch weights in half precision (GPUs; bfloat16 also on recent CPUs), or OpenVINO's inference precision",
    )
    group.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="intra-op threads of the forward pass "
        "(default: SLICE_ST_THREADS, else torch's own setting; "
        "on a small shared machine, 1)",
    )
    group.add_argument(
        "--export-dir",
        metavar="DIR",
        default=None,
        help="with --backend onnx/openvino: export the model into DIR first if it has no such file (offline, once)",
    )


def model_options(args) -> dict:
    """``load_model`` keyword arguments from :func:`add_backend_arguments`' options (only those given).

    Also sets torch's intra-op threads when ``--threads`` (or ``SLICE_ST_THREADS``) is given; else torch keeps
    its own setting (:func:`slice_st.backends.set_torch_threads`).
    """
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
    defaults = {
        "backend": "torch",
        "model_file": None,
        "quantized": False,
        "dtype": None,
        "threads": None,
        "export_dir": None,
    }
    return {key: value for key, value in options.items() if value != defaults[key]}


def quiet_progress(args) -> None:
    """With ``--no-progress`` (or ``--quiet``), silence the Hugging Face progress bars too."""
    if getattr(args, "no_progress", False) or getattr(args, "quiet", False):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def report(args, message: str, out=None) -> None:
    """A status line (not a result): to ``out`` (standard output by default) unless ``--quiet``."""
    if not getattr(args, "quiet", False):
        (out or sys.stdout).write(message.rstrip("\n") + "\n")


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
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps_json(value, **kwargs) -> str:
    """Strict JSON (``null`` for NaN/inf; never the bare ``NaN`` that JSON parsers reject)."""
    return json.dumps(json_ready(value), allow_nan=False, **kwargs)


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
    return f"{terminal_safe(left)}{on}{terminal_safe(flat[start:end])}{off}{terminal_safe(right)}"


def write_rows(rows: list[dict], fields: list[str], args, out) -> int:
    """Write match rows as json/jsonl/csv (``fields``), an HTML page, or aligned text columns (``where``, span
    highlighted in ``text``)."""
    if args.format in ("json", "jsonl", "csv"):
        return write_records([{key: row[key] for key in fields} for row in rows], fields, args.format, out)
    if args.format == "html":
        out.write(_html_page(rows, getattr(args, "threshold", None)))
        return len(rows)
    color = args.color == "always" or (args.color == "auto" and out.isatty() and not os.environ.get("NO_COLOR"))
    calibrated = "calibrated" in fields
    where_width = max(
        [24] + [len(terminal_safe(row["where"])) for row in rows]
    )  # every row's "where" fits: the columns stay aligned
    chars_width = max([11] + [len(f"{row['start']}-{row['end']}") for row in rows])
    current = None
    for row in rows:
        if row["query"] != current:
            sts = f"  {'0-5':>4}" if calibrated else ""
            out.write(
                f"\n== {terminal_safe(row['query'])}\n{'rank':>4}  {'score':>6}{sts}  "
                f"{'where':<{where_width}} {'chars':<{chars_width}} match in context\n"
            )
            current = row["query"]
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


def write_records(records: list[dict], fields: Sequence[str], fmt: str, out) -> int:
    """``records`` as one JSON array (``json``), JSON lines (``jsonl``) or CSV with a header (``csv``); strict JSON.

    CSV cells that a spreadsheet would run as a formula get a leading ``'`` (:func:`slice_st.text.csv_safe`).
    """
    if fmt == "json":
        out.write(dumps_json(list(records), ensure_ascii=False, indent=1) + "\n")
    elif fmt == "jsonl":
        for record in records:
            out.write(dumps_json(record, ensure_ascii=False) + "\n")
    elif fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=list(fields), extrasaction="ignore")
        writer.writeheader()
        for record in records:
            writer.writerow({key: csv_safe(value) for key, value in record.items()})
    else:
        raise ValueError(f"format {fmt!r} is not a record format.")
    return len(records)


_HTML_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;margin:24px;color:#1d2330}h2{font-size:16px;margin-top:28px}"
    "table{border-collapse:collapse;width:100%}td,th{padding:3px 8px;border-bottom:1px solid #e3e6ea;text-align:left;"
    "vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "mark{background:#ffe27a}.where{color:#52607a;white-space:nowrap}"
)


def html_document(title: str, blocks: Sequence[tuple[str, str]]) -> str:
    """One self-contained HTML page: ``blocks`` are ``(tag, text)`` pairs (e.g. ``("pre", table)``), every text escaped.

    >>> html_document("t", [("pre", "a < b")]).count("a &lt; b")
    1
    """
    body = "".join(f"<{tag}>{html.escape(text)}</{tag}>" for tag, text in blocks)
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_HTML_STYLE}</style></head><body>{body}</body></html>\n"
    )


def _html_page(rows: list[dict], threshold) -> str:
    """One self-contained HTML page (inline style, no script, nothing fetched): a table per query, spans marked in
    context.

    Every piece of input text is escaped (``html.escape``), so a corpus holding markup shows it as text.
    """
    parts = [
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>slice-st matches</title>',
        f"<style>{_HTML_STYLE}</style></head><body>",
    ]
    current = None
    for row in rows:
        if row["query"] != current:
            if current is not None:
                parts.append("</table>")
            current = row["query"]
            parts.append(
                f"<h2>{html.escape(row['query'])}</h2><table><tr><th>rank</th><th>score</th><th>where</th><th>match "
                f"in context</th></tr>"
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
        parts.append(
            "<p>no match"
            + (f" at or above threshold {html.escape(str(threshold))}" if threshold is not None else "")
            + "</p>"
        )
    parts.append("</body></html>\n")
    return "".join(parts)
