"""Helpers shared by the command groups: argument types, output switches (--quiet, --no-progress),
strict JSON, query files, match output."""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import logging
import math
import os
import sys
from collections.abc import Sequence

from slice_st.text import FileAccessError, check_creatable, is_ray_address, read_file, split_lines

__all__ = [
    "add_backend_arguments", "model_options", "add_ray_argument", "bare_ray_option",
    "positive_int", "int_at_least", "finite_float", "check_output", "add_output_options", "apply_output_options", "quiet_progress",
    "report", "json_ready", "dumps_json", "read_queries", "write_rows",
]

HIGHLIGHT_ON, HIGHLIGHT_OFF = "\x1b[1;33m", "\x1b[0m"
PLAIN_OPEN, PLAIN_CLOSE = "«", "»"


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
    for flags, help_text in ((("--no-progress",), "hide progress bars"),
                             (("--quiet",), "print only results and errors: no progress bars, status lines or library logs")):
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
    if getattr(args, "quiet", False):
        args.no_progress = True
        for name in ("transformers", "sentence_transformers", "huggingface_hub", "datasets", "mteb", "accelerate", "slice_st"):
            saved_levels[name] = logging.getLogger(name).level
            logging.getLogger(name).setLevel(logging.ERROR)
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if getattr(args, "no_progress", False):
        for name in _PROGRESS_ENV:  # tqdm >= 4.66 reads TQDM_DISABLE for bars made without an explicit ``disable``
            os.environ[name] = "1"
        for module, function in (("transformers.utils.logging", "disable_progress_bar"),
                                 ("huggingface_hub.utils", "disable_progress_bars"), ("datasets.utils.logging", "disable_progress_bar")):
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

    return restore


#: Environment switches that turn progress bars off (tqdm, huggingface_hub, datasets).
_PROGRESS_ENV = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


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
    check_creatable(path)
    return path


def bare_ray_option(argv: Sequence[str]) -> list[str]:
    """``--ray`` followed by an input rather than a Ray address (an existing file or folder, a URI) means Ray started here.

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
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help=f"{what} on Ray (pip install 'slice-st[ray]'): no ADDRESS starts Ray here; auto, HOST:PORT or "
                             "ray://HOST:PORT joins a cluster")
    parser.add_argument("--workers", type=positive_int, default=None, metavar="N",
                        help="with --ray: Ray actors (default: as many as the cluster has room for)")


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the forward pass runs: ``--backend``, ``--model-file``/``--quantized``, ``--model-dtype``, ``--threads``, ``--export-dir``."""
    group = parser.add_argument_group("inference backend")
    group.add_argument("--backend", choices=("torch", "onnx", "openvino"), default="torch",
                       help="run the model on torch (default), ONNX Runtime or OpenVINO (needs slice-st[onnx] / [openvino] and an export, see slice-st export)")
    group.add_argument("--model-file", metavar="FILE", default=None,
                       help="exported file inside the model folder, e.g. onnx/model_qint8_avx512_vnni.onnx")
    group.add_argument("--quantized", action="store_true", help="with --backend onnx: the int8 file (onnx/model_qint8_*.onnx)")
    group.add_argument("--model-dtype", choices=("float32", "float16", "bfloat16"), default=None,
                       help="torch weights in half precision (GPUs; bfloat16 also on recent CPUs), or OpenVINO's inference precision")
    group.add_argument("--threads", type=positive_int, default=None,
                       help="intra-op threads of the forward pass "
                            "(default: SLICE_ST_THREADS, else torch's own setting; "
                            "on a small shared machine, 1)")
    group.add_argument("--export-dir", metavar="DIR", default=None,
                       help="with --backend onnx/openvino: export the model into DIR first if it has no such file (offline, once)")


def model_options(args) -> dict:
    """``load_model`` keyword arguments from :func:`add_backend_arguments`' options (only those given).

    Also sets torch's intra-op threads when ``--threads`` (or ``SLICE_ST_THREADS``) is given; else torch keeps
    its own setting (:func:`slice_st.backends.set_torch_threads`).
    """
    from slice_st.backends import set_torch_threads

    set_torch_threads(getattr(args, "threads", None))
    options = {
        "backend": getattr(args, "backend", "torch"), "model_file": getattr(args, "model_file", None),
        "quantized": getattr(args, "quantized", False), "dtype": getattr(args, "model_dtype", None),
        "threads": getattr(args, "threads", None), "export_dir": getattr(args, "export_dir", None),
    }
    defaults = {"backend": "torch", "model_file": None, "quantized": False, "dtype": None, "threads": None, "export_dir": None}
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
    return f"{left}{on}{flat[start:end]}{off}{right}"


def write_rows(rows: list[dict], fields: list[str], args, out) -> int:
    """Write match rows as jsonl/csv (``fields``) or a table (``where``, span highlighted in ``text``; ``calibrated`` if present)."""
    if args.format == "jsonl":
        for row in rows:
            out.write(dumps_json({key: row[key] for key in fields}, ensure_ascii=False) + "\n")
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
