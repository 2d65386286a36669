"""``slice-st serve``: a corpus index behind a JSON API and a search page (needs ``slice-st[serve]``).

slice-st serve runs/corpus-index                         # a saved index (re-opened when `index add` saves it)
slice-st serve calls.txt tickets.jsonl --model base      # an index built in memory first
slice-st serve runs/corpus-index --host 0.0.0.0 --port 8080
"""

from __future__ import annotations

import os

from slice_st.cli.common import (
    add_backend_arguments,
    expand_inputs,
    model_options,
    positive_int,
    quiet_progress,
    report,
)
from slice_st.text import SPLITS


def add_serve_command(commands) -> None:
    """Register ``slice-st serve`` on the top-level subparsers."""
    serve = commands.add_parser(
        "serve",
        help="search a corpus in the browser (JSON API and page; slice-st[serve])",
        description="Serve an index (a saved index directory, or CORPUS files indexed in memory first) over HTTP: "
        "the search page at /, the JSON API under /api (schema at /docs).",
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
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    serve.add_argument("--port", type=positive_int, default=8000, help="TCP port (default 8000)")
    serve.add_argument(
        "--split",
        choices=SPLITS,
        default="auto",
        help="with CORPUS: what a document of a text file is (default auto: paragraphs when lines are hard-wrapped)",
    )
    serve.add_argument("--max-span", type=positive_int, default=None, help="with CORPUS: longest span indexed")
    serve.add_argument("--max-queries", type=positive_int, default=64, help="queries per search request (default 64)")
    serve.add_argument(
        "--max-top-k", type=positive_int, default=1000, help="largest top_k / per_document of a request (default 1000)"
    )
    serve.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="answer 503 to a search running longer (default 30)",
    )
    serve.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda:0")
    add_backend_arguments(serve)
    serve.set_defaults(handler=_serve)


def _serve(args) -> int:
    from slice_st.index.storage import MANIFEST
    from slice_st.loading import load_model
    from slice_st.serve import IndexSource, ServeLimits, run_server
    from slice_st.text import require

    require("fastapi", "serve", "slice-st serve")
    require("uvicorn", "serve", "slice-st serve")
    if not args.timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}.")
    quiet_progress(args)
    options = model_options(args)
    first = args.source[0]
    if len(args.source) == 1 and os.path.isdir(first) and os.path.exists(os.path.join(first, MANIFEST)):
        model = (
            load_model(args.model, device=args.device, **options)
            if args.model is not None or options or args.device
            else None
        )
        source = IndexSource.from_directory(first, model)
        if args.max_span is not None:
            raise ValueError("--max-span is for CORPUS files; a saved index keeps the span range it was built with.")
    else:
        for path in args.source:
            if os.path.isdir(path) and (
                os.path.exists(os.path.join(path, "shards.json"))
                or any(
                    os.path.exists(os.path.join(entry.path, MANIFEST)) for entry in os.scandir(path) if entry.is_dir()
                )
            ):
                raise ValueError(
                    f"{path} holds index shards: serve takes one index directory (merge them first: slice-st index "
                    f"merge)."
                )
        files = expand_inputs(args.source)
        model = load_model(args.model, device=args.device, **options)
        source = IndexSource.from_files(
            files, model, split=args.split, max_span=args.max_span, show_progress_bar=not args.no_progress
        )
    index = source.current()
    report(args, f"serving {len(index)} documents on http://{args.host}:{args.port}/ (Ctrl-C stops)")
    limits = ServeLimits(max_queries=args.max_queries, max_top_k=args.max_top_k, timeout_s=args.timeout)
    run_server(source, host=args.host, port=args.port, limits=limits, log_level="warning" if args.quiet else "info")
    return 0
