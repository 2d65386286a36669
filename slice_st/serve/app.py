"""The FastAPI app of ``slice-st serve``: a JSON API over :meth:`SpanIndex.search` and the search page.

Endpoints (OpenAPI schema at ``/openapi.json``, interactive docs at ``/docs``):

- ``POST /api/search``: ``{"queries": "..." | [...], "top_k", "per_document", "threshold", "min_span",
  "max_span", ...}``; any other field naming a keyword option of :meth:`SpanIndex.search` (e.g.
  ``approximate``) is passed through to it. Returns the matches of each query, best first.
- ``GET /api/documents?id=ID[&q=QUERY]``: a document's text, the character range of each unit and,
  with a query, each unit's best covering span score (:meth:`SpanIndex.unit_profile`).
- ``GET /api/info``: what the index holds (:meth:`SpanIndex.info`) and the server's limits.
- ``GET /``: the search page (static HTML/CSS/JS shipped in the package; no network needed).

Bad requests are JSON errors with a 4xx status (400 for values the library refuses, 404 for an unknown
document, 413 for a body over the limit, 422 for malformed fields); a search that runs past the timeout
is answered 503 (the search finishes in the background).
"""

import asyncio
import functools
import inspect
import math
import threading
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any, Literal

from slice_st.index.span_index import SpanIndex
from slice_st.serve.source import IndexSource
from slice_st.text import require

#: Keyword options of :meth:`SpanIndex.search` a request may not set (where the work runs, or the queries themselves).
SEARCH_PASS_THROUGH_DENIED = frozenset({"self", "queries", "batch_size", "device", "prompt"})


@dataclass(frozen=True)
class ServeLimits:
    """Bounds on one request.

    Args:
        max_queries: queries in one search.
        max_query_chars: characters of one query.
        max_top_k: ``top_k`` and ``per_document`` of one search.
        max_body_bytes: bytes of a request body (larger: 413).
        timeout_s: seconds a search may run before the request is answered 503.
    """

    max_queries: int = 64
    max_query_chars: int = 2000
    max_top_k: int = 1000
    max_body_bytes: int = 1 << 20
    timeout_s: float = 30.0


#: The default limits.
LIMITS = ServeLimits()


def _fastapi():
    return require("fastapi", "serve", "slice-st serve")


def create_app(source: "IndexSource | SpanIndex", limits: ServeLimits = LIMITS):
    """The ASGI app (FastAPI) answering from ``source`` (an :class:`IndexSource`, or an in-memory index).

    Args:
        source: the index (a directory source is re-opened when another process saves it).
        limits: request bounds (:class:`ServeLimits`).

    Returns:
        A ``fastapi.FastAPI`` app; run it with uvicorn (:func:`run_server`) or test it with ``fastapi.testclient``.

    Example:
        >>> from fastapi.testclient import TestClient  # doctest: +SKIP
        >>> client = TestClient(create_app(IndexSource.from_directory("runs/corpus-index")))  # doctest: +SKIP
        >>> client.post("/api/search", json={"queries": "late flight", "top_k": 3}).json()  # doctest: +SKIP
    """
    fastapi = _fastapi()
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse
    from fastapi.staticfiles import StaticFiles

    pydantic = require("pydantic", "serve", "slice-st serve")  # installed with fastapi
    BaseModel, ConfigDict, Field = pydantic.BaseModel, pydantic.ConfigDict, pydantic.Field
    run_in_threadpool = require("starlette.concurrency", "serve", "slice-st serve").run_in_threadpool

    if isinstance(source, SpanIndex):
        source = IndexSource(source)
    search_lock = threading.Lock()  # one search at a time: the model's tokenizer is not safe to share across threads
    passed_through = sorted(
        name
        for name, parameter in inspect.signature(SpanIndex.search).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in SEARCH_PASS_THROUGH_DENIED
    )

    class SearchRequest(BaseModel):
        """One search: the queries and :meth:`SpanIndex.search`'s options (other keyword options pass through)."""

        model_config = ConfigDict(
            extra="allow", json_schema_extra={"example": {"queries": ["a late flight"], "top_k": 5, "per_document": 1}}
        )
        queries: str | list[str] = Field(description="one query, or a list of queries")
        top_k: int = Field(10, ge=1, le=limits.max_top_k, description="spans per query, best first")
        per_document: int | None = Field(
            None, ge=1, le=limits.max_top_k, description="at most this many spans of each document"
        )
        threshold: float | None = Field(None, ge=-1.0, le=1.0, description="keep spans whose score is at or above it")
        scorer: Literal["phrase", "max-cosine"] = Field(
            "phrase", description="how the best spans are chosen (slice_st.scoring)"
        )
        overlap: bool = Field(False, description="also return spans overlapping a better one of the same document")
        min_span: int | None = Field(None, ge=1, description="shortest span (default: the index's)")
        max_span: int | None = Field(None, ge=1, description="longest span (default: the index's)")

    class Match(BaseModel):
        query_index: int
        doc_id: str
        doc_index: int
        start: int
        end: int
        span: str
        score: float
        unit_start: int
        unit_end: int
        calibrated: float | None = None
        cosine: float | None = None

    class QueryResult(BaseModel):
        query: str
        matches: list[Match]

    class SearchResponse(BaseModel):
        results: list[QueryResult]

    class DocumentResponse(BaseModel):
        id: str
        index: int
        text: str
        units: list[tuple[int, int]] = Field(description="start and end character of each unit (word or token)")
        profile: list[float | None] | None = Field(
            None, description="with a query: each unit's best covering span score (null: no span covers it)"
        )

    app = fastapi.FastAPI(
        title="slice-st serve",
        version="1",
        description="Span search over a corpus index: the best-matching spans of each query, grouped by document.",
    )

    @app.middleware("http")
    async def bounded_body(request, call_next):
        if request.method in ("POST", "PUT", "PATCH"):
            length = request.headers.get("content-length")
            if length is None:
                return JSONResponse({"detail": "a request body needs a Content-Length header."}, status_code=411)
            if not length.isdigit() or int(length) > limits.max_body_bytes:
                return JSONResponse({"detail": f"request body over {limits.max_body_bytes} bytes."}, status_code=413)
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request, error: RequestValidationError):
        details = [{key: item.get(key) for key in ("loc", "msg", "type")} for item in error.errors()]
        return JSONResponse({"detail": details}, status_code=422)

    def bad_request(message: str, status: int = 400):
        return fastapi.HTTPException(status_code=status, detail=message)

    async def in_time(function, *args):
        try:
            return await asyncio.wait_for(run_in_threadpool(function, *args), timeout=limits.timeout_s)
        except TimeoutError:
            raise fastapi.HTTPException(
                status_code=503, detail=f"the search ran past {limits.timeout_s:g} s.", headers={"Retry-After": "5"}
            ) from None

    def current() -> SpanIndex:
        try:
            return source.current()
        except (OSError, ValueError) as error:
            raise fastapi.HTTPException(status_code=503, detail=f"the index cannot be read now: {error}") from None

    @functools.lru_cache(maxsize=2)  # the index served now (and the one before a reload)
    def positions(index: SpanIndex) -> dict[str, int]:
        return {doc_id: number for number, doc_id in enumerate(index.doc_ids)}

    def query_texts(queries: str | list[str]) -> list[str]:
        texts = [queries] if isinstance(queries, str) else list(queries)
        if not texts:
            raise bad_request("queries is empty: give at least one query.")
        if len(texts) > limits.max_queries:
            raise bad_request(f"at most {limits.max_queries} queries per search, got {len(texts)}.", 413)
        for position, text in enumerate(texts):
            if len(text) > limits.max_query_chars:
                raise bad_request(
                    f"query {position} has {len(text)} characters; at most {limits.max_query_chars}.", 413
                )
        return texts

    @app.post(
        "/api/search",
        response_model=SearchResponse,
        summary="Search the corpus",
        responses={400: {"description": "options the index refuses"}, 413: {"description": "request over the limits"}},
    )
    async def search(request: SearchRequest) -> dict[str, Any]:
        queries = query_texts(request.queries)
        extra = dict(request.model_extra or {})
        unknown = sorted(set(extra) - set(passed_through))
        if unknown:
            raise bad_request(
                f"unknown search options {unknown}; the options are top_k, per_document, threshold, min_span, "
                f"max_span and {', '.join(passed_through)}."
            )
        for name, value in extra.items():
            if not (value is None or isinstance(value, (str, bool, int, float))) or (
                isinstance(value, float) and not math.isfinite(value)
            ):
                raise bad_request(f"option {name} must be a string, number, boolean or null.")
        options = {
            "top_k": request.top_k,
            "per_document": request.per_document,
            "threshold": request.threshold,
            "min_span": request.min_span,
            "max_span": request.max_span,
            "scorer": request.scorer,
            "overlap": request.overlap,
        } | extra
        index = current()

        def run():
            with search_lock:
                return index.search(queries, **options)

        try:
            found = await in_time(run)
        except (ValueError, TypeError) as error:
            raise bad_request(str(error)) from None
        return {
            "results": [
                {"query": query, "matches": [asdict(match) for match in matches]}
                for query, matches in zip(queries, found)
            ]
        }

    @app.get(
        "/api/documents",
        response_model=DocumentResponse,
        summary="One document, its units and the query's profile",
        responses={404: {"description": "unknown document id"}},
    )
    async def document(
        id: str, q: str | None = None, min_span: int | None = None, max_span: int | None = None
    ) -> dict[str, Any]:
        index = current()
        position = positions(index).get(id)
        if position is None:
            raise bad_request(f"no document with id {id!r:.80}.", 404)
        query = query_texts(q)[0] if q is not None else None

        def run():
            with search_lock:
                return index.unit_profile(query, id, min_span, max_span)

        try:
            chars, scores = await in_time(run)
        except (ValueError, TypeError) as error:
            raise bad_request(str(error)) from None
        profile = None
        if query is not None:
            profile = [round(float(score), 6) if math.isfinite(score) else None for score in scores]
        return {"id": id, "index": position, "text": index.texts[position], "units": chars.tolist(), "profile": profile}

    @app.get("/api/info", summary="What the index holds, and the server's limits")
    async def info() -> dict[str, Any]:
        index = current()
        details = index.info()
        return {
            "index": {key: value for key, value in details.items() if key != "model_path"},
            "limits": asdict(limits),
            "search_options": passed_through,
        }

    static = resources.files("slice_st.serve") / "static"

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> str:
        return (static / "index.html").read_text(encoding="utf-8")

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    return app


def run_server(
    source: IndexSource | SpanIndex,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServeLimits = LIMITS,
    log_level: str = "info",
) -> None:
    """Serve ``source`` with uvicorn until interrupted (bound to 127.0.0.1 unless ``host`` says otherwise).

    Args:
        source: the index (see :func:`create_app`).
        host: the address to listen on (``0.0.0.0``: every interface).
        port: the TCP port.
        limits: request bounds.
        log_level: uvicorn's log level.

    Example:
        >>> run_server(IndexSource.from_directory("runs/corpus-index"), port=8080)  # doctest: +SKIP
    """
    uvicorn = require("uvicorn", "serve", "slice-st serve")
    uvicorn.run(create_app(source, limits), host=host, port=port, log_level=log_level)
