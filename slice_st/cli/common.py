"""What the commands share: the options (declared once, here), value types, output switches, strict JSON."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import logging
import math
import os
import sys
import warnings
from typing import Any

from slice_st.errors import SliceError
from slice_st.scoring import SPAN_SCORERS  # no numpy: --help stays fast
from slice_st.text import SPLITS

#: Texts (documents) shown per query when ``--texts`` is not given.
DEFAULT_TEXTS = 10
#: Control characters (C0 but tab, DEL, C1) and how they are shown.
_CONTROL = {
    code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0A, 0x20), *range(0x7F, 0xA0))
}
#: Environment switches that turn progress bars off (tqdm, huggingface_hub, datasets).
_PROGRESS_ENV = tuple(
    "TQDM_DISABLE HF_HUB_DISABLE_PROGRESS_BARS HF_DATASETS_DISABLE_PROGRESS_BARS".split()
)
_LOGGERS = tuple(
    "transformers sentence_transformers huggingface_hub datasets mteb accelerate slice_st".split()
)


class UsageError(SliceError, ValueError):
    """Options that do not go together, found by the command line before any work: one line, exit status 2."""


def suggestion(word: str, known) -> str:
    """``"; did you mean X?"`` for the closest of ``known`` to a mistyped ``word``, or ``""``."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6) if word else []
    return f"; did you mean {close[0]}?" if close else ""


def terminal_safe(text: str) -> str:
    """``text`` with every control character but tab shown as ``\\xNN`` (untrusted text cannot drive the terminal)."""
    return text.translate(_CONTROL)


def refuse(*rules) -> None:
    """Raise :class:`UsageError` with the message of the first ``(condition, message)`` rule that holds."""
    for condition, message in rules:
        if condition:
            raise UsageError(message)


def at_least(minimum: float, maximum: float = math.inf, cast: type = int):
    """An ``argparse`` type: a finite number (an integer when ``cast`` is ``int``; ``2e8`` too) in
    ``[minimum, maximum]``, checked while parsing."""

    def parse(value: str):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or (cast is int and not number.is_integer()):
            raise argparse.ArgumentTypeError(
                f"not an integer: {value!r}"
                if cast is int
                else f"must be a finite number, got {value}"
            )
        if not minimum <= number <= maximum:
            bounds = f">= {minimum}" if maximum == math.inf else f"from {minimum} to {maximum}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return cast(number)

    return parse


positive_int = at_least(1)
count = at_least(0)
finite_float = at_least(-math.inf, cast=float)
_probability = at_least(0, 1, cast=float)


def probability_or_default(value: str) -> float | str:
    """An ``argparse`` type: a number from 0 to 1, or ``default``."""
    return value if value == "default" else _probability(value)


#: Every option two commands share, by its long flag: (flags, ``add_argument`` keyword arguments).
OPTIONS: dict[str, tuple[list[str], dict[str, Any]]] = {}


def _shared(flags: str, **kwargs: Any) -> None:
    """Declare the shared option ``flags`` (space-separated, the long one last)."""
    OPTIONS[flags.split()[-1]] = (flags.split(), kwargs)


_shared("-q --query", action="append", help="an origin phrase (repeatable)")
_shared("--queries", action="append", metavar="FILE", help="a file with one query per line")
_shared(
    "--texts",
    type=count,
    metavar="N",
    help=f"the N best texts per query (default {DEFAULT_TEXTS}; 0: all)",
)
_shared(
    "--per-text",
    type=count,
    default=1,
    metavar="M",
    help="spans of each text (default 1; 0: no limit)",
)
_shared("--spans", type=positive_int, metavar="N", help="at most N spans per query in all")
_shared("-t --threshold", type=finite_float, metavar="T", help="keep matches whose score is >= T")
_shared(
    "--min-confidence",
    type=probability_or_default,
    nargs="?",
    const="default",
    metavar="P",
    help="keep matches whose confidence (the calibrated probability of a real match) is >= P "
    "(no P: the model's documented cut); shipped models with the default scorer",
)
_shared("--scorer", choices=tuple(SPAN_SCORERS), help="which span wins (default: reranked)")
_shared("--overlap", action="store_true", help="also show spans overlapping a better one")
_shared(
    "--merge-identical",
    action="store_true",
    help="one result for a span found in several texts, listing every place",
)
_shared(
    "-f --format",
    choices=("text", "json", "jsonl", "html", "csv"),
    default="text",
    help="output format",
)
_shared("--color", choices=("auto", "always", "never"), default="auto", help="highlight spans")
_shared("--approximate", action="store_true", help="with an index: use its FAISS candidate stage")
_shared(
    "--candidates",
    type=positive_int,
    metavar="N",
    help="with a compressed index: documents searched exactly (500)",
)
_shared(
    "-m --model",
    help="model id or path (default: the index's, else slice-minilm; base: all-MiniLM-L6-v2)",
)
_shared("--min-span", type=positive_int, help="shortest span (default: the model's, 1)")
_shared("--max-span", type=positive_int, help="longest span (default: the model's, 20)")
_shared("--unit", choices=("word", "token"), help="span unit (default: the model's, word)")
_shared("--batch-size", type=positive_int, default=32)
_shared("--device", help="torch device, e.g. cpu or cuda:0")
_shared(
    "--split",
    choices=SPLITS,
    default="auto",
    help="a text is a line, a paragraph, or auto (by the file)",
)
_shared(
    "--follow-links", action="store_true", help="also read file links leading out of a folder named"
)
_shared(
    "--skip-bad", action="store_true", help="leave out (and list) texts the model cannot window"
)
_shared(
    "--ray", nargs="?", const="local", metavar="ADDRESS", help="run on Ray: here, or auto/HOST:PORT"
)
_shared("--workers", type=positive_int, metavar="N", help="with --ray: Ray actors (default: all)")
_shared("--force", action="store_true", help="replace an index already in DIR")
_shared("-o --output", required=True, metavar="DIR", help="the folder to write")
_shared(
    "--backend",
    choices=("torch", "onnx", "openvino"),
    default="torch",
    help="where the forward pass runs",
)
_shared(
    "--model-file", metavar="FILE", help="exported file in the model folder, e.g. onnx/model.onnx"
)
_shared("--quantized", action="store_true", help="with --backend onnx: the int8 file")
_shared("--model-dtype", choices=("float32", "float16", "bfloat16"), help="weights' precision")
_shared(
    "--threads",
    type=positive_int,
    help="intra-op threads (default: SLICE_ST_THREADS, else torch's)",
)
_shared(
    "--export-dir",
    metavar="DIR",
    help="with --backend onnx/openvino: export into DIR first if needed",
)
#: The switches every command has.
OUTPUT_FLAGS = {"--no-progress": "hide progress bars", "--quiet": "print only results and errors"}
#: The options of where the forward pass runs, listed under their own heading.
BACKEND = ("--backend", "--model-file", "--quantized", "--model-dtype", "--threads", "--export-dir")


def add_command(commands, name: str, help: str, handler=None, *options: str, **defaults):
    """The (sub-)command ``name`` with the shared ``options`` (long flags of :data:`OPTIONS`); ``help`` is its line in
    the list and its description; ``defaults`` override the options' defaults."""
    parser = commands.add_parser(name, help=help, description=f"{help[0].upper()}{help[1:]}.")
    backend = (
        parser.add_argument_group("inference backend") if set(options) & set(BACKEND) else None
    )
    for option in options:
        flags, kwargs = OPTIONS[option]
        (backend if option in BACKEND else parser).add_argument(*flags, **kwargs)
    # a command, not a group: the output switches; its parser looks up an unrecognized option
    if handler:
        for flag, text in OUTPUT_FLAGS.items():
            parser.add_argument(flag, action="store_true", help=text)
        defaults |= {"handler": handler, "parser": parser}
    parser.set_defaults(**defaults)
    return parser


def pick(args, *names: str) -> dict:
    """``{name: args.name}`` for ``names``: keyword arguments of a library call."""
    return {name: getattr(args, name) for name in names}


def model_options(args) -> dict:
    """``load_model`` keyword arguments from the backend options given; sets torch's intra-op threads."""
    from slice_st.backends import set_torch_threads

    set_torch_threads(getattr(args, "threads", None))
    options = {"dtype": getattr(args, "model_dtype", None)}
    if "backend" in args:
        options |= pick(args, "backend", "model_file", "quantized", "threads", "export_dir")
    return {key: value for key, value in options.items() if value not in (None, False, "torch")}


def load_cli_model(args, **options: Any):
    """The model ``--model`` names: :func:`slice_st.load_model`'s, or a ColBERT / PyLate checkpoint folder as the
    ``MultiVectorEncoder`` it is (``SentenceTransformer`` would read it as a plain model without its projection)."""
    import slice_st
    from slice_st.multi_vector import load_multi_vector_folder

    found = load_multi_vector_folder(args.model, device=args.device, **options)
    if found is None:
        return slice_st.load_model(args.model, device=args.device, **options)
    return found


@contextlib.contextmanager
def output_options(args):
    """Act on ``--quiet`` (implies ``--no-progress``; no warnings or library logs) and ``--no-progress``, then put
    the environment and loggers back (``main`` may be called in-process: tests, notebooks)."""
    saved_env = {name: os.environ.get(name) for name in _PROGRESS_ENV}
    saved_levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    with warnings.catch_warnings():
        if args.quiet:
            args.no_progress = True
            warnings.simplefilter("ignore")
            for name in _LOGGERS:
                logging.getLogger(name).setLevel(logging.ERROR)
        if args.no_progress:
            # transformers reads it when imported
            os.environ.update(dict.fromkeys(_PROGRESS_ENV, "1"))
            if "transformers" in sys.modules:  # imported already (main() called in-process)
                sys.modules["transformers"].utils.logging.disable_progress_bar()
        try:
            yield
        finally:
            for name in _PROGRESS_ENV:
                os.environ.pop(name, None)
            os.environ.update(
                {name: value for name, value in saved_env.items() if value is not None}
            )
            for name, level in saved_levels.items():
                logging.getLogger(name).setLevel(level)


def report(args, message: str, out=None) -> None:
    """A status line (not a result): to ``out`` (standard output by default) unless ``--quiet``."""
    if not args.quiet:
        print(message, file=out or sys.stdout)


def paragraph_note(args):
    """``read_texts``' ``report``: say on standard error which files ``--split auto`` reads as paragraphs (not with
    ``--no-progress`` or ``--quiet``)."""

    def note(path: str, mode: str) -> None:
        # a line per file: chatter a script asked not to get
        if mode == "paragraph" and not args.no_progress:
            message = f"{path}: --split auto reads one text per paragraph (its lines are wrapped)"
            report(args, message, sys.stderr)

    return note


def report_skipped(skipped, what: str) -> None:
    """Name each ``(where, why)`` left out by ``--skip-bad`` on standard error, then their count."""
    for where, reason in skipped:
        sys.stderr.write(f"slice-st: skipped {terminal_safe(where)}: {terminal_safe(reason)}\n")
    if skipped:
        sys.stderr.write(f"slice-st: {len(skipped)} {what} skipped\n")


def text_files(paths: list[str], read, skip_bad: bool) -> list[str]:
    """``paths``, with ``--skip-bad`` less those ``read([path])`` finds are not text (a binary file: not UTF-8), each
    listed on standard error; standard input (``-``) is kept, as it cannot be read twice."""
    if not skip_bad:
        return paths
    from slice_st.errors import DataFormatError

    kept, skipped = [], []
    for path in paths:
        try:
            if path != "-":
                read([path])
            kept.append(path)
        except DataFormatError as error:
            skipped.append((path, str(error).removeprefix(f"{path} ")))
    report_skipped(skipped, "files")
    return kept


def json_ready(value):
    """``value`` with NaN/inf floats as ``None`` and numpy scalars/arrays as Python values (strict JSON)."""
    if isinstance(value, dict):
        return {str(key): json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    # numpy scalar or array, torch tensor
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return json_ready(value.tolist())
    return None if isinstance(value, float) and not math.isfinite(value) else value


def dumps_json(value, **kwargs) -> str:
    """Strict JSON (``null`` for NaN/inf; never the bare ``NaN`` that JSON parsers reject)."""
    return json.dumps(json_ready(value), allow_nan=False, ensure_ascii=False, **kwargs)
