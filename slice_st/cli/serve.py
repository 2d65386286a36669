"""``slice-st serve``: a corpus index behind a JSON API and a search page (needs ``slice-st[serve]``).

slice-st serve runs/corpus-index                         # a saved index (re-opened when `index add` saves it)
slice-st serve calls.txt tickets.jsonl --model base      # an index built in memory first
SLICE_ST_TOKEN=s3cret slice-st serve runs/corpus-index --host 0.0.0.0 --port 8080 --allow-host search.example
"""

from __future__ import annotations

import argparse
import os
import sys

from slice_st.cli.common import (
    UsageError,
    add_backend_arguments,
    expand_inputs,
    model_options,
    positive_int,
    quiet_progress,
    report,
)
from slice_st.text import SPLITS

#: The environment variable ``--token`` is read from when not given (a command line is visible to other users).
TOKEN_VARIABLE = "SLICE_ST_TOKEN"


def _port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 1 to 65535, got {number}")
    return number


def _cost(value: str) -> int:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 1 <= number < 1e18 or number != int(number):
        raise argparse.ArgumentTypeError(f"a whole number from 1 (e.g. 2e8), got {value}")
    return int(number)


def add_serve_command(commands) -> None:
    """Register ``slice-st serve`` on the top-level subparsers."""
    serve = commands.add_parser(
        "serve",
        help="search a corpus in the browser (JSON API and page; slice-st[serve])",
        description="Serve an index (a saved index directory, or CORPUS files indexed in memory first) over HTTP: "
        "the search page at /, the JSON API under /api (schema at /openapi.json).",
    )
    serve.add_argument(
        "source",
        nargs="+",
        metavar="INDEX_DIR|CORPUS",
        help="a saved index directory (slice-st index build), or text/JSONL files to index in memory",
    )
    serve.add_argument(
        "-m",
        "--model",
        default=None,
        help="model for CORPUS files (default: the shipped slice-minilm); for an index, default: the one it was "
        "built with",
    )
    _add_network_arguments(serve)
    serve.add_argument(
        "--split",
        choices=SPLITS,
        default="auto",
        help="with CORPUS: what a document of a text file is (default auto: paragraphs when lines are hard-wrapped)",
    )
    serve.add_argument("--max-span", type=positive_int, default=None, help="with CORPUS: longest span indexed")
    serve.add_argument(
        "--follow-links", action="store_true", help="with CORPUS folders: also read file links leading out of them"
    )
    serve.add_argument("--max-queries", type=positive_int, default=64, help="queries per search request (default 64)")
    serve.add_argument(
        "--max-top-k", type=positive_int, default=1000, help="largest top_k / per_document of a request (default 1000)"
    )
    serve.add_argument(
        "--max-search-cost",
        type=_cost,
        default=2 * 10**8,
        metavar="N",
        help="refuse (413) a search whose query characters times the index's units pass N (default 2e8)",
    )
    serve.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="answer 503 to a search running longer, and stop it (default 30)",
    )
    serve.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda:0")
    add_backend_arguments(serve)
    serve.set_defaults(handler=_serve)


def _add_network_arguments(serve) -> None:
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    serve.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests addressed to NAME (the Host header; default: only the --host address and "
        "localhost, so a web page of another name cannot read the corpus); repeatable",
    )
    serve.add_argument(
        "--token",
        default=None,
        help=f"a secret every request must carry (default: ${TOKEN_VARIABLE}, else none); the page asks for "
        "/?token=TOKEN once. Give one whenever --host is not a loopback address",
    )


def _serve(args) -> int:
    from slice_st.serve import IndexSource, ServeLimits, listening_socket, run_server
    from slice_st.serve.guards import is_loopback
    from slice_st.text import require

    require("uvicorn", "serve", "slice-st serve")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout}.")
    token = args.token if args.token is not None else os.environ.get(TOKEN_VARIABLE) or None
    try:
        sock = listening_socket(args.host, args.port)  # a bad address fails now, not after the model has loaded
    except ValueError as error:
        raise UsageError(str(error)) from None
    try:
        if not is_loopback(args.host) and token is None:
            report(
                args,
                f"warning: serving on {args.host} with no token: anyone who can reach it can read the corpus "
                f"(set {TOKEN_VARIABLE} or --token)",
                sys.stderr,
            )
        quiet_progress(args)
        source = _source(args, IndexSource)
        index = source.current()
        report(args, f"serving {len(index)} documents on http://{args.host}:{args.port}/ (Ctrl-C stops)")
        limits = ServeLimits(
            max_queries=args.max_queries,
            max_top_k=args.max_top_k,
            timeout_s=args.timeout,
            max_search_cost=args.max_search_cost,
        )
        run_server(
            source,
            host=args.host,
            port=args.port,
            limits=limits,
            log_level="warning" if args.quiet else "info",
            allowed_hosts=args.allow_host,
            token=token,
            sock=sock,
        )
    finally:
        sock.close()
    return 0


def _source(args, IndexSource):
    """The index to serve: a saved index directory, or CORPUS files indexed in memory."""
    from slice_st.index.storage import MANIFEST
    from slice_st.loading import load_model

    options = model_options(args)
    first = args.source[0]
    if len(args.source) == 1 and os.path.isdir(first) and os.path.exists(os.path.join(first, MANIFEST)):
        if args.max_span is not None:
            raise UsageError("--max-span is for CORPUS files; a saved index keeps the span range it was built with.")
        model = (
            load_model(args.model, device=args.device, **options)
            if args.model is not None or options or args.device
            else None
        )
        return IndexSource.from_directory(first, model)
    for path in args.source:
        if os.path.isdir(path) and (
            os.path.exists(os.path.join(path, "shards.json"))
            or any(os.path.exists(os.path.join(entry.path, MANIFEST)) for entry in os.scandir(path) if entry.is_dir())
        ):
            raise UsageError(
                f"{path} holds index shards: serve takes one index directory (merge them first: slice-st index merge)."
            )
    from slice_st.data.corpus import read_corpus
    from slice_st.index.span_index import SpanIndex

    documents = read_corpus(
        expand_inputs(args.source, follow_links=args.follow_links),
        split=args.split,
        report=lambda path, mode: _say_paragraphs(args, path) if mode == "paragraph" else None,
    )
    model = load_model(args.model, device=args.device, **options)
    return IndexSource(
        SpanIndex.build(documents, model, max_span=args.max_span, show_progress_bar=not args.no_progress)
    )


def _say_paragraphs(args, path: str) -> None:
    """``--split auto`` read ``path`` as wrapped text: say so (one document per line is what a plain file gives)."""
    report(args, f"{path}: --split auto reads one document per paragraph (its lines are wrapped)", sys.stderr)
