"""``slice-st serve``: a corpus index behind a JSON API and a search page (needs ``slice-st[serve]``)."""

from __future__ import annotations

import os

from slice_st.cli.common import (
    BACKEND,
    UsageError,
    add_command,
    at_least,
    load_cli_model,
    model_options,
    paragraph_note,
    pick,
    positive_int,
    report,
)
from slice_st.files import expand_paths

#: The environment variable ``--token`` is read from when not given (a command line is visible to other users).
TOKEN_VARIABLE = "SLICE_ST_TOKEN"


def add_commands(commands) -> None:
    about = "Serve an index over HTTP: the search page at /, the JSON API under /api (schema at /openapi.json)."
    options = ("--model", "--split", "--max-span", "--follow-links", "--device", *BACKEND)
    serve = add_command(
        commands, "serve", "search a corpus in the browser (slice-st[serve])", _serve, *options
    )
    serve.description = about
    serve.add_argument(
        "source", nargs="+", metavar="INDEX_DIR|CORPUS", help="an index folder, or text/JSONL files"
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)"
    )
    serve.add_argument(
        "--port", type=at_least(1, 65535), default=8000, help="TCP port (default 8000)"
    )
    serve.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME", help="also answer Host: NAME"
    )
    serve.add_argument(
        "--token", help=f"a secret every request must carry (default: ${TOKEN_VARIABLE}, else none)"
    )
    serve.add_argument(
        "--max-queries",
        type=positive_int,
        default=64,
        help="queries per search request (default 64)",
    )
    serve.add_argument(
        "--max-top-k",
        type=positive_int,
        default=1000,
        help="largest top_k of a request (default 1000)",
    )
    serve.add_argument(
        "--max-search-cost",
        type=at_least(1, 10**18),
        default=2 * 10**8,
        metavar="N",
        help="bound on a search's work (docs/serve.md)",
    )
    serve.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        dest="timeout_s",
        metavar="S",
        help="seconds per search",
    )


def _serve(args) -> int:
    from slice_st._extras import needs_extra
    from slice_st.serve import ServeLimits, listening_socket, run_server
    from slice_st.serve.guards import server_url

    with needs_extra("serve", "slice-st serve"):
        import uvicorn  # noqa: F401  (run_server needs it: missing, say so before loading the model)
    if not args.timeout_s > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout_s}.")
    token = args.token if args.token is not None else os.environ.get(TOKEN_VARIABLE)
    # `--token "$TOKEN"` with TOKEN unset must not serve openly
    if token is not None and not token.strip():
        where = "--token" if args.token is not None else f"${TOKEN_VARIABLE}"
        raise UsageError(
            f"{where} is empty: give the secret every request must carry (or leave it out for none)."
        )
    # a bad address fails now, not after the model loads
    with listening_socket(args.host, args.port) as sock:
        source = _source(args)
        where = server_url(args.host, args.port)
        report(args, f"serving {len(source.current())} documents on {where} (Ctrl-C stops)")
        limits = ServeLimits(
            **pick(args, "max_queries", "max_top_k", "timeout_s", "max_search_cost")
        )
        log_level = "warning" if args.quiet else "info"
        options = dict(limits=limits, log_level=log_level, allowed_hosts=args.allow_host)
        run_server(source, host=args.host, port=args.port, sock=sock, token=token, **options)
    return 0


def _source(args):
    """The index to serve: a saved index directory, or CORPUS files indexed in memory."""
    from slice_st.index.storage import MANIFEST, SHARD_LIST
    from slice_st.serve import IndexSource

    options, first = model_options(args), args.source[0]
    if len(args.source) == 1 and os.path.exists(os.path.join(first, MANIFEST)):
        if args.max_span is not None:
            raise UsageError(
                "--max-span is for CORPUS files; a saved index keeps the span range it was built with."
            )
        return IndexSource.from_directory(first, args.model, device=args.device, **options)
    for path in args.source:  # an index named among others, or by its manifest, is not a corpus
        name = os.path.basename(os.path.normpath(path))
        if name in (MANIFEST, SHARD_LIST) and os.path.isfile(path):
            folder = os.path.dirname(os.path.normpath(path)) or "."
            raise UsageError(
                f"{path} is an index's manifest, not a corpus: give the index folder ({folder})."
            )
        if os.path.isfile(os.path.join(path, MANIFEST)):
            raise UsageError(
                f"{path} is an index folder: serve takes one index directory alone, or corpus files (merge indexes "
                "first: slice-st index merge)."
            )
    for path in filter(os.path.isdir, args.source):
        inside = [
            os.path.join(entry.path, MANIFEST) for entry in os.scandir(path) if entry.is_dir()
        ]
        if any(map(os.path.exists, [os.path.join(path, SHARD_LIST), *inside])):
            raise UsageError(
                f"{path} holds index shards: serve takes one index directory (merge them first: slice-st index merge)."
            )
    from slice_st.data.corpus import read_corpus
    from slice_st.index.span_index import SpanIndex

    paths = expand_paths(args.source, follow_links=args.follow_links)
    documents = read_corpus(paths, split=args.split, report=paragraph_note(args))
    model = load_cli_model(args, **options)
    index = SpanIndex.build(
        documents, model, max_span=args.max_span, show_progress_bar=not args.no_progress
    )
    return IndexSource(index)
