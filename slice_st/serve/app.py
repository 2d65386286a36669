"""The FastAPI app of ``slice-st serve``: ``POST /api/search``, ``GET /api/documents?id=ID[&q=QUERY]``,
``GET /api/files?path=PATH[&q=QUERY]``, ``GET /api/info`` and the page (``GET /``); see docs/serve.md. Character
offsets count code points."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Annotated, Any, Literal

import numpy as np

from slice_st._extras import needs_extra

with needs_extra("serve", "slice-st serve"):
    from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.exceptions import RequestValidationError
    from fastapi.middleware.trustedhost import TrustedHostMiddleware
    from fastapi.responses import HTMLResponse, JSONResponse
    from fastapi.staticfiles import StaticFiles
    from pydantic import BaseModel, ConfigDict, Field, field_serializer  # installed with fastapi

from slice_st.index.search import IndexMatch  # noqa: E402
from slice_st.index.span_index import SpanIndex  # noqa: E402
from slice_st.search import search_calibrator, search_scorer  # noqa: E402
from slice_st.serve.guards import (  # noqa: E402
    BodyLimit,
    SearchBusy,
    SearchRunner,
    TokenGate,
    check_token,
    default_hosts,
    host_names,
)
from slice_st.serve.source import IndexSource  # noqa: E402


@dataclass(frozen=True)
class ServeLimits:
    """Bounds on one request and on the server's connections: queries per search, characters per query, ``top_k`` /
    ``per_document``, body bytes (413 past them), seconds a search may run (then 503), a search's cost
    (:func:`search_cost`; also at most ``timeout_s`` × :data:`COST_PER_SECOND`), seconds a silent connection (or a
    request body that stalls) is kept, connections held at once, and from one address."""

    max_queries: int = 64
    max_query_chars: int = 2000
    max_top_k: int = 1000
    max_body_bytes: int = 1 << 20
    timeout_s: float = 30.0
    max_search_cost: int = 2 * 10**8
    request_timeout_s: float = 10.0
    max_connections: int = 256
    max_client_connections: int = 32


#: The default limits.
LIMITS = ServeLimits()

#: Queries searched at a time: at most this many, and no more than :data:`CHUNK_COST` of work (one query at least),
#: so a timed-out search stops soon.
QUERY_CHUNK = 8
CHUNK_COST = 2 * 10**7


class SearchRequest(BaseModel):
    """One search: the queries and the options of :meth:`SpanIndex.search` a request may set, each bounded (``top_k``
    and ``per_document`` again by the server's :class:`ServeLimits`)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "example": {"queries": ["a late flight"], "top_k": 5, "per_document": 1}
        },
    )
    queries: str | list[str] = Field(description="one query, or a list of queries")
    top_k: int = Field(10, ge=1, le=100_000, description="spans per query, best first")
    per_document: int | None = Field(
        None, ge=1, le=100_000, description="at most this many spans of each document"
    )
    threshold: float | None = Field(
        None, ge=-1.0, le=1.0, description="keep spans whose score is at or above it"
    )
    min_confidence: Annotated[float, Field(ge=0.0, le=1.0)] | Literal["default"] | None = Field(
        None,
        description="keep spans whose confidence (the calibrated probability of a real match; a shipped model "
        "with scorer 'reranked') is at or above it; 'default': the model's documented cut",
    )
    scorer: Literal["reranked", "phrase", "max-cosine"] = Field(
        "reranked",
        description="how the best spans are chosen ('reranked': the documents of the best 'phrase' spans)",
    )
    overlap: bool = Field(
        False, description="also return spans overlapping a better one of the same document"
    )
    merge_identical: bool = Field(
        False,
        description="one match for a span found in several documents: its count and places list every one",
    )
    min_span: int | None = Field(
        None, ge=1, le=1000, description="shortest span (default: the index's)"
    )
    max_span: int | None = Field(
        None, ge=1, le=1000, description="longest span (default: the index's)"
    )
    approximate: bool = Field(
        False, description="use the index's candidate stage (built with --candidates)"
    )
    candidates: int | None = Field(
        None,
        ge=1,
        le=65_536,
        description="candidate chunks per query (approximate); documents (a compressed index)",
    )
    nprobe: int | None = Field(
        None, ge=1, le=65_536, description="FAISS lists probed per query (approximate)"
    )


class QueryResult(BaseModel):
    query: str
    matches: list[IndexMatch]

    @field_serializer("matches")
    def _old_names_too(self, matches: list[IndexMatch]) -> list[dict[str, Any]]:
        """Each match's fields (``count`` and ``places`` only when merged), and for one release its old ``doc_index``
        and ``cosine`` (deprecated)."""
        return [
            _fields(match) | {"doc_index": match.text_index, "cosine": match.similarity}
            for match in matches
        ]


def _fields(match: IndexMatch) -> dict[str, Any]:
    fields = asdict(match)
    places = fields.pop("places")
    return fields | ({"count": len(places), "places": places} if places else {})


class SearchResponse(BaseModel):
    results: list[QueryResult]


class DocumentResponse(BaseModel):
    id: str
    index: int
    text: str
    units: list[tuple[int, int]] = Field(
        description="start and end character (code point) of each unit"
    )
    profile: list[float | None] | None = Field(
        None,
        description="with a query: each unit's best covering span score (null: no span covers it)",
    )


router = APIRouter()


#: The answer of every endpoint that runs on the search runner when it cannot.
_BUSY = {503: "another search is running, or this one ran past the timeout"}


def _responses(descriptions: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses``: each status code's description."""
    return {status: {"description": text} for status, text in descriptions.items()}


def _busy(detail: str) -> HTTPException:
    return HTTPException(status_code=503, detail=detail, headers={"Retry-After": "1"})


def _check_cost(limits: ServeLimits, cost: float, doing: str, counted: str, advice: str) -> None:
    """413 where ``cost`` passes the server's bound (``--max-search-cost``, or its share of the timeout)."""
    most = min(limits.max_search_cost, limits.timeout_s * COST_PER_SECOND)
    if cost > most:
        raise HTTPException(
            413, f"{doing} would cost {cost:.3g} ({counted}); at most {most:.3g}{advice}"
        )


def _current(request: Request) -> SpanIndex:
    try:
        return request.app.state.source.current()
    except (OSError, ValueError) as error:
        raise _busy(f"the index cannot be read now: {error}") from None


def _query_texts(queries: str | list[str], limits: ServeLimits) -> list[str]:
    texts = [queries] if isinstance(queries, str) else list(queries)
    if not texts:
        raise HTTPException(400, "queries is empty: give at least one query.")
    if len(texts) > limits.max_queries:
        raise HTTPException(
            413, f"at most {limits.max_queries} queries per search, got {len(texts)}."
        )
    for position, text in enumerate(texts):
        if len(text) > limits.max_query_chars:
            raise HTTPException(
                413,
                f"query {position} has {len(text)} characters; at most {limits.max_query_chars}.",
            )
    return texts


async def _run(request: Request, work, alone: bool = True):
    """``work(cancelled)`` on the search runner (``alone=False``: in a worker thread now, never waiting for a search:
    no model needed); busy or past the timeout: 503 at once; refused values: 400."""
    runner: SearchRunner = request.app.state.runner
    try:
        return await runner.run(work) if alone else await run_in_threadpool(work, None)
    except SearchBusy:
        raise _busy("another search is running; try again in a moment.") from None
    except TimeoutError:
        raise _busy(f"the search ran past {runner.timeout_s:g} s and was stopped.") from None
    except (ValueError, TypeError) as error:
        raise HTTPException(400, str(error)) from None


@router.post(
    "/api/search",
    response_model=SearchResponse,
    summary="Search the corpus",
    responses=_responses(
        {400: "options the index refuses", 413: "request over the limits", **_BUSY}
    ),
)
async def search(body: SearchRequest, request: Request) -> dict[str, Any]:
    limits = request.app.state.limits
    queries = _query_texts(body.queries, limits)
    for name in ("top_k", "per_document"):  # the server's bound, reported as the model's own are
        if (getattr(body, name) or 0) > limits.max_top_k:
            message = f"Input should be less than or equal to {limits.max_top_k}"
            raise HTTPException(
                422, [{"loc": ["body", name], "msg": message, "type": "less_than_equal"}]
            )
    index = _current(request)
    options = body.model_dump(exclude={"queries"})
    cost_options = options
    if body.merge_identical:  # the spans searched, bounded: what the cost is charged for
        options["merge_limit"] = min(limits.max_top_k, MERGE_FETCH * body.top_k)
        cost_options = options | {"top_k": options["merge_limit"]}
    search = functools.partial(index.search, **options)
    cost = search_cost(index, queries, cost_options)
    _check_cost(
        limits,
        cost,
        "this search",
        f"units × span lengths × queries, each re-ranked document window counted {RERANK_WEIGHT}x or more",
        f" (--max-search-cost, or {COST_PER_SECOND:.0e} a second of --timeout): send fewer or shorter queries, "
        "a smaller top_k or span range, or scorer 'phrase'.",
    )

    step = max(1, min(QUERY_CHUNK, int(CHUNK_COST * len(queries) / cost)))

    def work(cancelled):  # a timed-out search stops after the chunk of queries it is in
        found = []
        for start in range(0, len(queries), step):
            if cancelled.is_set():
                raise TimeoutError("the search ran past its time")
            found += search(queries[start : start + step])
        return found

    found = await _run(request, work)
    return {
        "results": [{"query": query, "matches": matches} for query, matches in zip(queries, found)]
    }


#: With ``merge_identical``, a search asks for at most this many spans per distinct span wanted (and ``max_top_k``).
MERGE_FETCH = 16


#: What a search's parts cost, in spans scanned (measured: benchmarks/bench_serve_cost.py): a span of a re-ranked
#: document window costs RERANK_WEIGHT, times ``1 + picks / RERANK_TOP_K``; a span ranked one by one (``per_document``
#: needing more documents than the largest hold) RANK_WEIGHT; a query ``1 + characters / QUERY_CHARS`` times its scan,
#: plus QUERY_CHAR_COST a character (its encoding and word profile, whatever the index).
RERANK_WEIGHT, RERANK_TOP_K, RANK_WEIGHT, QUERY_CHARS, QUERY_CHAR_COST = 20, 25, 60, 50, 5000

#: Spans scanned per second that one CPU core sustains, taken low (benchmarks/bench_serve_cost.py measures it): a
#: ``--timeout`` of S seconds also bounds the cost by ``S × COST_PER_SECOND``, so a search the bound lets through
#: answers within it; a faster machine answers sooner, a much slower one can still reach the timeout (503).
COST_PER_SECOND = 10**7


def _span_lengths(index: SpanIndex, min_span: int | None, max_span: int | None) -> int:
    """How many span lengths a search of ``index`` scores (``None``: the index's own bound)."""
    config = index.span_config
    return (max_span or config.max_span) - (min_span or config.min_span) + 1


def search_cost(index: SpanIndex, queries: list[str], options: dict[str, Any]) -> float:
    """An upper bound on a search's work, in spans scanned, per query × the span lengths: the units scanned (all, or
    the candidate chunks'), the windows of the ``top_k`` largest documents re-ranked, and with ``per_document`` the
    units ranked until enough documents are found (all of them when the index has fewer). What time and memory grow
    with, so one long document cannot pass as cheap."""
    lengths = _span_lengths(index, options.get("min_span"), options.get("max_span"))
    scanned = index.num_units
    stage = getattr(index, "_candidates", None)
    if options.get("approximate") and stage is not None:
        scanned = min(
            scanned,
            (options.get("candidates") or stage.settings["candidates"]) * stage.settings["chunk"],
        )
    top_k, per_document = options.get("top_k") or 10, options.get("per_document")
    windows = _document_window_units(index)  # largest first
    work = 0.0
    # at most top_k documents re-ranked: the largest
    if options.get("scorer", "reranked") == "reranked":
        work += (
            RERANK_WEIGHT
            * float(windows[:top_k].sum())
            * (1 + min(top_k, per_document or top_k) / RERANK_TOP_K)
        )
    if per_document:  # the scan grows (4x a time) until it holds top_k / per_document documents
        needed = -(-top_k // per_document)
        ranked = (
            scanned if len(windows) < needed else min(scanned, 4 * float(windows[:needed].sum()))
        )
        work += RANK_WEIGHT * ranked
    per_query = [(1 + len(query) / QUERY_CHARS) * max(1, scanned) + work for query in queries]
    return float(sum(per_query)) * max(1, lengths) + QUERY_CHAR_COST * sum(map(len, queries))


@functools.lru_cache(maxsize=2)  # the index served now (and the one before a reload)
def _document_window_units_by_position(index: SpanIndex) -> np.ndarray:
    """The units of each document's stored windows (overlaps counted), by position in the index."""
    arrays = index.arrays
    sizes = np.diff(np.asarray(arrays["segment_units"]))
    return np.bincount(np.asarray(arrays["segment_docs"]), weights=sizes, minlength=len(index))


@functools.lru_cache(maxsize=2)  # the index served now (and the one before a reload)
def _document_window_units(index: SpanIndex) -> np.ndarray:
    """The units of each document's stored windows (overlaps counted), largest first."""
    return np.sort(_document_window_units_by_position(index))[::-1]


def _rounded(scores: np.ndarray) -> list[float | None]:
    """A unit profile as JSON numbers (``null``: no span covers the unit)."""
    return [round(float(score), 6) if math.isfinite(score) else None for score in scores]


@dataclass(frozen=True)
class _ProfileParameters:
    """The query parameters of ``/api/documents`` and ``/api/files``: a query to profile the units by, its spans'
    lengths."""

    q: str | None = None
    min_span: int | None = None
    max_span: int | None = None

    def query(self, limits: ServeLimits) -> str | None:
        """``q`` within the server's limits (413 past them)."""
        return None if self.q is None else _query_texts(self.q, limits)[0]


_ProfileQuery = Annotated[_ProfileParameters, Depends()]


@functools.lru_cache(maxsize=2)  # the index served now (and the one before a reload)
def _positions(index: SpanIndex) -> dict[str, int]:
    return {doc_id: number for number, doc_id in enumerate(index.doc_ids)}


@router.get(
    "/api/documents",
    response_model=DocumentResponse,
    summary="One document, its units and the query's profile",
    responses=_responses({404: "unknown document id"}),
)
async def document(request: Request, id: str, options: _ProfileQuery) -> dict[str, Any]:
    index = _current(request)
    position = _positions(index).get(id)
    if position is None:
        raise HTTPException(404, f"no document with id {id!r:.80}.")
    query = options.query(request.app.state.limits)

    # a long document's units take a while to serialise: never in the loop
    def answer(cancelled) -> JSONResponse:
        chars, scores = index.unit_profile(query, id, options.min_span, options.max_span)
        profile = None if scores is None else _rounded(scores)  # None: no query
        text = index.texts[position]
        return JSONResponse(
            {"id": id, "index": position, "text": text, "units": chars.tolist(), "profile": profile}
        )

    return await _run(request, answer, alone=query is not None)  # no query: no model needed


#: A document id ``path:line`` (how files are indexed): the file is ``path``; any other id is a file of its own.
_LINE_ID = re.compile(r"(.*):(\d+)", re.DOTALL)
#: What separates a file's documents in its text: a blank line, as between the paragraphs they were read from.
FILE_SEPARATOR = "\n\n"


def file_of(doc_id: str) -> tuple[str, int | None]:
    """The file and first line of a document id: ``"a/b.txt:12"`` → ``("a/b.txt", 12)``, ``"T1"`` → ``("T1", None)``."""
    found = _LINE_ID.fullmatch(doc_id)
    return (found[1], int(found[2])) if found else (doc_id, None)


@functools.lru_cache(maxsize=2)  # the index served now (and the one before a reload)
def _files(index: SpanIndex) -> dict[str, list[int]]:
    """Each file's documents (positions in the index), in line order."""
    files: dict[str, list[tuple[int, int]]] = {}
    for position, doc_id in enumerate(index.doc_ids):
        path, line = file_of(doc_id)
        files.setdefault(path, []).append((-1 if line is None else line, position))
    return {path: [position for _, position in sorted(parts)] for path, parts in files.items()}


class FilePart(BaseModel):
    id: str
    index: int
    line: int | None = Field(
        description="the document's first line in the file (null: an id without one)"
    )
    start: int = Field(description="where the document starts in the file's text (code points)")
    end: int


class FileResponse(BaseModel):
    path: str
    text: str = Field(description="the file's documents in line order, a blank line between two")
    parts: list[FilePart]
    units: list[tuple[int, int]] = Field(
        description="start and end character (code point) of each unit in text"
    )
    profile: list[float | None] | None = Field(
        None,
        description="with a query: each unit's best covering span score (null: no span covers it)",
    )


def file_cost(index: SpanIndex, positions: list[int], query: str | None, lengths: int) -> float:
    """An upper bound on reading a file, in spans scanned: a scan of the index's segments per document (to find its
    own), and with a query its units × span lengths and a query encoding per document (:data:`QUERY_CHAR_COST` a
    character)."""
    work = float(len(positions) * len(index.arrays["segment_docs"]))
    if query is not None:
        units = float(_document_window_units_by_position(index)[positions].sum())
        encoding = len(positions) * QUERY_CHAR_COST * len(query)
        work += (1 + len(query) / QUERY_CHARS) * units * max(1, lengths) + encoding
    return work


@router.get(
    "/api/files",
    response_model=FileResponse,
    summary="One file (its documents in line order), its units and the query's profile",
    responses=_responses(
        {
            404: "no document of that file",
            413: "the query, or the profile's cost, over the limits",
            **_BUSY,
        }
    ),
)
async def file(request: Request, path: str, options: _ProfileQuery) -> JSONResponse:
    index = _current(request)
    positions = _files(index).get(path)
    if positions is None:
        raise HTTPException(404, f"no document of the file {path!r:.80}.")
    limits = request.app.state.limits
    query = options.query(limits)
    lengths = _span_lengths(index, options.min_span, options.max_span)
    _check_cost(
        limits,
        file_cost(index, positions, query, lengths),
        "reading this file",
        "a scan per document; with a query, units × span lengths and a query encoding per document",
        ": open one of its documents (/api/documents).",
    )

    # a long file's units take a while to serialise: never in the loop
    def answer(cancelled) -> JSONResponse:
        parts, texts, units, profile, at = [], [], [], [], 0
        for position in positions:
            if cancelled is not None and cancelled.is_set():
                raise TimeoutError("the file's profile ran past its time")
            doc_id, text = index.doc_ids[position], index.texts[position]
            chars, scores = index.unit_profile(query, doc_id, options.min_span, options.max_span)
            line = file_of(doc_id)[1]
            parts.append(dict(id=doc_id, index=position, line=line, start=at, end=at + len(text)))
            texts.append(text)
            units += (chars + at).tolist()
            if scores is not None:
                profile += _rounded(scores)
            at += len(text) + len(FILE_SEPARATOR)
        body = {"path": path, "text": FILE_SEPARATOR.join(texts), "parts": parts, "units": units}
        return JSONResponse(body | {"profile": profile if query is not None else None})

    return await _run(request, answer, alone=query is not None)  # no query: no model needed


@router.get("/api/info", summary="What the index holds, and the server's limits")
async def info(request: Request) -> dict[str, Any]:
    index = _current(request)
    details = index.info()
    calibrator, _ = search_calibrator(index.model, search_scorer(None, index.model))
    return {
        "index": {key: value for key, value in details.items() if key != "model_path"},
        # the page filters on it by default where the model has one
        "confidence": None
        if calibrator is None
        else {"default_min_confidence": calibrator.default_min_confidence},
        "limits": asdict(request.app.state.limits),
        "search_options": sorted(SearchRequest.model_fields.keys() - {"queries"}),
    }


_STATIC = resources.files("slice_st.serve") / "static"


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def page() -> str:
    return (_STATIC / "index.html").read_text(encoding="utf-8")


async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    details = [{key: item.get(key) for key in ("loc", "msg", "type")} for item in error.errors()]
    return JSONResponse({"detail": details}, status_code=422)


def create_app(
    source: IndexSource | SpanIndex,
    limits: ServeLimits = LIMITS,
    *,
    allowed_hosts: list[str] | None = None,
    token: str | None = None,
) -> FastAPI:
    """The FastAPI app answering from ``source`` (an :class:`IndexSource`, or an in-memory index) within ``limits``.

    ``allowed_hosts``: the ``Host`` values answered (others: 400; default ``127.0.0.1`` and ``localhost``, any port, so
    a test client needs ``base_url="http://localhost"``; ``["*"]``: any); ``token``: a secret every request must carry
    (``Authorization: Bearer``, or the page's cookie set by ``/?token=``).
    """
    check_token(token)
    if isinstance(source, SpanIndex):
        source = IndexSource(source)
    app = FastAPI(
        title="slice-st serve",
        version="1",
        description="Span search over a corpus index: the best-matching spans of each query, grouped by document.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.source = source
    app.state.limits = limits
    app.state.runner = SearchRunner(limits.timeout_s)
    app.include_router(router)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.mount("/static", StaticFiles(directory=str(_STATIC)), name="static")
    app.add_middleware(
        BodyLimit, max_bytes=limits.max_body_bytes, timeout_s=limits.request_timeout_s
    )
    app.add_middleware(TokenGate, token=token)
    hosts = host_names(allowed_hosts) if allowed_hosts is not None else default_hosts("127.0.0.1")
    # outermost: a rebinding page gets nothing
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts)
    return app
