"""`slice-st serve` answers only its user and survives hostile requests: Host allow-list, token, body limit on the bytes
read, one search at a time (503 at once when busy or timed out, the lock given back), cost bound, idle connections
closed, no CDN docs page, a removed index noticed, address errors before the model loads. Network tests use loopback
only, with bounded waits."""

from __future__ import annotations

import shutil
import socket
import threading

import pytest

pytest.importorskip("fastapi", reason="slice-st[serve] (fastapi) is not installed")
pytest.importorskip("httpx", reason="fastapi.testclient needs httpx")
from fastapi.testclient import TestClient

from slice_st.index.span_index import SpanIndex
from slice_st.serve import LIMITS, IndexSource, ServeLimits, create_app

DOCS = [
    "Customer: my bag was lost on the way to Denver.",
    "Agent: the flight was delayed by the storm over the lakes.",
    "A man plays the guitar at the gate while people wait for the late flight.",
    "Refund the ticket please, the train never came.",
]
IDS = ["calls:1", "calls:3", "tickets/T1", "tickets/T2"]
BASE = "http://localhost"
WAIT = 20  # seconds a bounded wait may take on a loaded machine before the test fails


@pytest.fixture()
def index(tiny_model):
    return SpanIndex.build(DOCS, tiny_model, IDS, max_span=5)


def _client(index_or_source, limits=LIMITS, **options):
    return TestClient(create_app(index_or_source, limits, **options), base_url=BASE)


# ------------------------------------------------------------------ who is answered
@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example"])
def test_a_page_of_another_name_reads_nothing(index, host):
    """DNS rebinding: a page at http://evil.example:PORT/ whose name now points at 127.0.0.1."""
    with _client(index) as client:
        headers = {"Host": host}
        assert (
            client.post("/api/search", json={"queries": "late"}, headers=headers).status_code == 400
        )
        assert (
            client.get("/api/documents", params={"id": "calls:1"}, headers=headers).status_code
            == 400
        )
        assert client.get("/api/info", headers=headers).status_code == 400
        for host_ok in ("localhost", "127.0.0.1:8000"):
            assert client.get("/api/info", headers={"Host": host_ok}).status_code == 200


def test_more_host_names_are_answered_when_allowed(index):
    with _client(index, allowed_hosts=["search.example"]) as client:
        assert client.get("/api/info", headers={"Host": "search.example"}).status_code == 200
        assert client.get("/api/info", headers={"Host": "evil.example"}).status_code == 400


def test_v01_an_ipv6_host_is_answered_by_its_browser_name(index):
    """V01: ``serve --host ::1``: a browser sends ``Host: [::1]:PORT``; answered (before: 400 "Invalid host header"),
    and the address printed is ``http://[::1]:PORT/``."""
    from slice_st.serve.guards import default_hosts, server_url

    with _client(index, allowed_hosts=default_hosts("::1") + ["fe80::2"]) as client:
        for host in ("[::1]:8905", "[::1]", "localhost:8905", "[fe80::2]:80"):
            assert client.get("/api/info", headers={"Host": host}).status_code == 200, host
        assert client.get("/api/info", headers={"Host": "[::2]:8905"}).status_code == 400
    assert (
        server_url("::1", 8905) == "http://[::1]:8905/"
        and server_url("0.0.0.0", 80) == "http://0.0.0.0:80/"
    )


def test_a_token_is_needed_when_given(index):
    with _client(index, token="s3cret-token") as client:
        assert client.post("/api/search", json={"queries": "late"}).status_code == 401
        assert client.get("/api/documents", params={"id": "calls:1"}).status_code == 401
        assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = client.post(
            "/api/search",
            json={"queries": "late"},
            headers={"Authorization": "Bearer s3cret-token"},
        )
        assert ok.status_code == 200
        entry = client.get("/", params={"token": "s3cret-token"}, follow_redirects=False)
        assert entry.status_code == 303 and "HttpOnly" in entry.headers["set-cookie"]
        assert client.get("/api/info").status_code == 200  # the page's cookie from now on


@pytest.mark.parametrize("token", ["", "   "])
def test_t17_an_empty_token_never_means_open(index, token):
    """T17: ``token=""`` (``--token "$TOKEN"`` with TOKEN unset) is refused, never a server without authentication."""
    from slice_st.errors import SpanInputError

    with pytest.raises(SpanInputError, match="non-empty secret"):
        create_app(index, token=token)


@pytest.mark.parametrize(
    "token", ["two words", "a&b=c", "x#y", "clé-ü", "p%20q+r", "semi;colon,comma"]
)
def test_t11_a_percent_encoded_token_in_the_page_address_is_decoded(index, token):
    """T11: the browser sends ``/?token=`` percent-encoded; the cookie it gets back carries the token encoded too."""
    from urllib.parse import quote

    with _client(index, token=token) as client:
        assert client.get("/api/info").status_code == 401
        entry = client.get(f"/?token={quote(token, safe='')}", follow_redirects=False)
        assert entry.status_code == 303, entry.text
        assert client.get("/api/info").status_code == 200  # the cookie from the redirect
        client.cookies.clear()
        assert client.get("/?token=wrong", follow_redirects=False).status_code == 401
        if "+" not in token:  # a form-encoded space
            form = quote(token, safe="").replace("%20", "+")
            assert client.get(f"/?token={form}", follow_redirects=False).is_redirect


def test_no_interactive_docs_page_from_a_cdn(index):
    with _client(index) as client:
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            assert client.get(path).status_code == 404
        assert "/api/search" in client.get("/openapi.json").json()["paths"]


# ------------------------------------------------------------------ bodies and options
def test_a_chunked_body_over_the_limit_is_refused_as_read(index):
    """No Content-Length (chunked): the limit counts the bytes as they arrive (a live server stops reading there:
    see the lying-Content-Length test below)."""

    def body():
        for _ in range(64):
            yield b"x" * 1024

    with _client(index, ServeLimits(max_body_bytes=4096)) as client:
        response = client.post(
            "/api/search", content=body(), headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 413 and "bytes" in response.json()["detail"]
        small = client.post(
            "/api/search",
            content=iter([b'{"queries": ', b'"late"}']),
            headers={"Content-Type": "application/json"},
        )
        assert small.status_code == 200


def test_only_allowed_options_reach_the_search(index, monkeypatch):
    seen = []
    real = index.search

    def recording(queries, **options):
        seen.append(options)
        return real(queries, **options)

    monkeypatch.setattr(index, "search", recording)
    with _client(index) as client:
        assert (
            client.post("/api/search", json={"queries": "late", "batch_size": 10**6}).status_code
            == 422
        )
        assert (
            client.post("/api/search", json={"queries": "late", "device": "cuda:0"}).status_code
            == 422
        )
        assert client.post("/api/search", json={"queries": "late", "top_k": 3}).status_code == 200
    assert len(seen) == 1 and set(seen[0]) == {
        "top_k",
        "per_document",
        "threshold",
        "min_confidence",
        "scorer",
        "overlap",
        "min_span",
        "max_span",
        "approximate",
        "candidates",
        "nprobe",
        "merge_identical",
    }


def test_a_search_over_the_cost_bound_is_refused_before_it_starts(index, monkeypatch):
    from slice_st.serve.app import search_cost

    calls = []
    monkeypatch.setattr(index, "search", lambda *args, **kwargs: calls.append(args))
    cost_of_one = search_cost(index, ["x" * 2000], {"top_k": 10})
    with _client(index, ServeLimits(max_search_cost=cost_of_one)) as client:
        response = client.post("/api/search", json={"queries": ["x" * 2000, "y" * 2000]})
    assert response.status_code == 413 and "would cost" in response.json()["detail"] and not calls


def _words(count: int, seed: int = 0) -> str:
    """``count`` words of plain sentences, seeded."""
    import random

    rng = random.Random(seed)
    subjects, verbs, things = (
        ["the man", "a woman", "the agent", "my bag"],
        ["lost", "found", "saw"],
        ["a flight"],
    )
    out: list[str] = []
    while len(out) < count:
        out += f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(things)} at gate {rng.randint(1, 9)}.".split()
    return " ".join(out[:count])


@pytest.fixture(scope="module")
def long_index(tiny_model):
    """One 15,000-word document (HS1) and a short one."""
    return SpanIndex.build([_words(15_000), DOCS[0]], tiny_model, ["long", "short"], max_span=20)


def test_hs1_the_search_cost_counts_the_windows_re_ranked(long_index, tiny_model):
    """HS1: the bound measures the work: the same units in one document cost a re-ranked search far more than in 100
    (every window of the long document is re-ranked); span lengths, queries and top_k multiply it; 'phrase' skips it."""
    from slice_st.serve.app import search_cost

    text = _words(15_000).split()
    many = SpanIndex.build(
        [" ".join(text[i : i + 150]) for i in range(0, 15_000, 150)], tiny_model, max_span=20
    )
    one = {"top_k": 10}
    assert search_cost(long_index, ["abc"], one) > 5 * search_cost(many, ["abc"], one)
    assert search_cost(long_index, ["abc"] * 8, one) == pytest.approx(
        8 * search_cost(long_index, ["abc"], one)
    )
    assert search_cost(long_index, ["abc"], {**one, "max_span": 10}) < 0.51 * search_cost(
        long_index, ["abc"], one
    )
    assert search_cost(long_index, ["abc"], {"top_k": 1000}) > 10 * search_cost(
        long_index, ["abc"], one
    )
    assert (
        search_cost(long_index, ["abc"], {**one, "scorer": "phrase"})
        < search_cost(long_index, ["abc"], one) / 10
    )


def test_hs1_a_search_on_one_long_document_answers_or_is_refused_at_once(long_index, monkeypatch):
    """HS1: with the default bound, 64 three-character queries on one 15,000-word document are refused at once (413,
    nothing searched); one query answers; while a search runs, /api/info and the document answer."""
    real, calls = long_index.search, []
    monkeypatch.setattr(
        long_index, "search", lambda queries, **kw: calls.append(queries) or real(queries, **kw)
    )
    with _client(long_index) as client:
        refused = client.post("/api/search", json={"queries": ["abc"] * 64})
        assert refused.status_code == 413 and "would cost" in refused.json()["detail"] and not calls
        answered = client.post("/api/search", json={"queries": "abc"})
        assert answered.status_code == 200 and answered.json()["results"][0]["matches"]
    started, release, _ = _blocking_search(long_index, monkeypatch)
    with _client(long_index) as client:
        search = threading.Thread(
            target=lambda: client.post("/api/search", json={"queries": "abc"})
        )
        search.start()
        assert started.wait(WAIT)
        info = client.get("/api/info")
        document = client.get("/api/documents", params={"id": "long"})
        release.set()
        search.join(WAIT)
    assert (
        info.status_code == 200
        and document.status_code == 200
        and len(document.json()["units"]) >= 15_000
    )


# ------------------------------------------------------------------ one search at a time, never queued
def _blocking_search(index, monkeypatch):
    started, release, calls = threading.Event(), threading.Event(), []
    real = index.search

    def blocked(queries, **options):
        calls.append(list(queries))
        started.set()
        release.wait(WAIT)
        return real(queries, **options)

    monkeypatch.setattr(index, "search", blocked)
    return started, release, calls


def test_a_second_search_while_one_runs_is_answered_503_at_once(index, monkeypatch):
    started, release, _ = _blocking_search(index, monkeypatch)
    with _client(index) as client:
        first = {}
        worker = threading.Thread(
            target=lambda: first.update(r=client.post("/api/search", json={"queries": "late"}))
        )
        worker.start()
        assert started.wait(WAIT)
        second = client.post("/api/search", json={"queries": "guitar"})
        profile = client.get("/api/documents", params={"id": "calls:1", "q": "late"})
        text_only = client.get(
            "/api/documents", params={"id": "calls:1"}
        )  # needs no model: never refused
        release.set()
        worker.join(WAIT)
    assert second.status_code == 503 and "another search" in second.json()["detail"]
    assert second.headers["retry-after"] and profile.status_code == 503
    assert text_only.status_code == 200 and first["r"].status_code == 200


def test_a_timed_out_search_stops_and_gives_the_lock_back(index, monkeypatch):
    import slice_st.serve.app

    monkeypatch.setattr(
        slice_st.serve.app, "COST_PER_SECOND", 10**12
    )  # the timeout is what is tried, not the bound
    started, release, calls = _blocking_search(index, monkeypatch)
    queries = [f"query {number}" for number in range(20)]  # three chunks of queries
    with _client(index, ServeLimits(timeout_s=0.05)) as client:
        response = client.post("/api/search", json={"queries": queries})
        assert response.status_code == 503 and "ran past" in response.json()["detail"]
        runner = client.app.state.runner
        assert runner.busy  # the first chunk is still running
        release.set()
        for _ in range(WAIT * 100):  # bounded: the chunk ends, the search stops, the lock is back
            if not runner.busy:
                break
            threading.Event().wait(0.01)
        assert not runner.busy
        assert len(calls) == 1  # the later chunks never ran
        monkeypatch.undo()
        runner.timeout_s = WAIT  # the next search runs in full
        assert client.post("/api/search", json={"queries": "late"}).status_code == 200


def test_dd2_a_long_document_fetch_never_holds_the_other_requests(index, monkeypatch):
    """DD2: ``GET /api/documents?id=ID`` (no query) is worked out off the event loop: while one is still being worked
    out, ``/api/info`` and another document answer (today's code: both wait for it)."""
    started, release = threading.Event(), threading.Event()
    real = index.unit_profile

    def slow(query, doc_id, *args, **kwargs):
        if doc_id == "tickets/T1":  # the long one
            started.set()
            release.wait(WAIT)
        return real(query, doc_id, *args, **kwargs)

    monkeypatch.setattr(index, "unit_profile", slow)
    answers: dict[str, int] = {}
    with _client(index) as client:
        fetch = lambda key, path, **params: answers.update(  # noqa: E731
            {key: client.get(path, params=params).status_code}
        )
        long = threading.Thread(
            target=fetch, args=("long", "/api/documents"), kwargs={"id": "tickets/T1"}
        )
        long.start()
        assert started.wait(WAIT)
        others = [
            threading.Thread(target=fetch, args=("info", "/api/info")),
            threading.Thread(
                target=fetch, args=("short", "/api/documents"), kwargs={"id": "calls:1"}
            ),
        ]
        for thread in others:
            thread.start()
        for thread in others:
            thread.join(WAIT)
        answered = dict(answers)  # before the long fetch is let go
        release.set()
        long.join(WAIT)
    assert answered == {"info": 200, "short": 200} and answers["long"] == 200


# ------------------------------------------------------------------ the index on disk
def test_a_removed_index_is_noticed(index, tiny_model, tmp_path):
    path = tmp_path / "ix"
    index.save(path)
    with _client(IndexSource.from_directory(path, tiny_model)) as client:
        assert client.get("/api/documents", params={"id": "calls:1"}).status_code == 200
        shutil.rmtree(path)
        for response in (
            client.get("/api/documents", params={"id": "calls:1"}),
            client.post("/api/search", json={"queries": "bag"}),
            client.get("/api/info"),
        ):
            assert response.status_code == 503 and "No index" in response.json()["detail"]


def test_a_removed_manifest_is_noticed(index, tiny_model, tmp_path):
    path = tmp_path / "ix"
    index.save(path)
    with _client(IndexSource.from_directory(path, tiny_model)) as client:
        (path / "manifest.json").unlink()
        response = client.post("/api/search", json={"queries": "bag"})
        assert response.status_code == 503 and "not a SpanIndex" in response.json()["detail"]


# ------------------------------------------------------------------ a real server on loopback
@pytest.fixture()
def live_server(index, request):
    """uvicorn with the guards (run_server's protocol and limits) on 127.0.0.1, in a thread; yields the port.
    The request timeout is 0.5 s, or the test's parameter."""
    uvicorn = pytest.importorskip("uvicorn")
    from slice_st.serve.guards import guarded_protocol, listening_socket

    timeout = getattr(request, "param", 0.5)
    limits = ServeLimits(
        max_body_bytes=4096, request_timeout_s=timeout, max_connections=8, max_client_connections=4
    )
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    app = create_app(index, limits, allowed_hosts=["127.0.0.1", f"127.0.0.1:{port}"])
    config = uvicorn.Config(
        app,
        log_level="error",
        http=guarded_protocol(
            limits.request_timeout_s, limits.max_connections, limits.max_client_connections
        ),
        limit_concurrency=limits.max_connections,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(WAIT * 100):
        if server.started:
            break
        threading.Event().wait(0.01)
    yield port
    server.should_exit = True
    thread.join(WAIT)
    sock.close()


def test_t16_the_token_never_appears_in_the_access_log(index):
    """T16: uvicorn's access line for ``GET /?token=…`` shows ``token=***`` (what the guarded protocol logs)."""
    import logging

    import httpx
    import uvicorn

    from slice_st.serve.guards import guarded_protocol, listening_socket

    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    app = create_app(index, allowed_hosts=["127.0.0.1"], token="s3cret token")
    config = uvicorn.Config(app, log_level="info", http=guarded_protocol(10, 8), lifespan="off")
    lines: list[str] = []
    catcher = logging.Handler()
    catcher.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("uvicorn.access").addHandler(catcher)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(WAIT * 100):
            if server.started:
                break
            threading.Event().wait(0.01)
        for query in ("token=s3cret%20token", "token=s3cret+token&x=1", "x=1&token=wrong-s3cret"):
            httpx.get(f"http://127.0.0.1:{port}/?{query}", timeout=WAIT, follow_redirects=False)
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()
        logging.getLogger("uvicorn.access").removeHandler(catcher)
    assert len([line for line in lines if "GET /?" in line]) == 3, lines
    assert not any("s3cret" in line for line in lines) and all(
        "token=***" in line for line in lines if "?" in line
    )


def _closed_by_server(connection: socket.socket) -> bool:
    connection.settimeout(WAIT)
    try:
        return connection.recv(1024) == b""
    except ConnectionResetError:
        return True


def test_an_idle_connection_is_closed(live_server):
    with socket.create_connection(("127.0.0.1", live_server), timeout=WAIT) as idle:
        assert _closed_by_server(idle)  # it never sent a request


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=WAIT, source_address=(source, 0))


def _answers(connection: socket.socket, port: int) -> bool:
    connection.sendall(f"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    connection.settimeout(WAIT)
    return connection.recv(64).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    "live_server", [600.0], indirect=True
)  # no idle timeout within the test's wait
def test_connections_past_the_cap_are_closed_at_once(live_server):
    sources = ["127.0.0.1", "127.0.0.2"] * 4  # two clients, each at its own cap of 4
    held = [_connect(live_server, source) for source in sources]
    try:
        with _connect(live_server, "127.0.0.3") as extra:
            assert _closed_by_server(extra)
    finally:
        for connection in held:
            connection.close()


@pytest.mark.parametrize("live_server", [600.0], indirect=True)
def test_c01_one_client_holding_its_connections_does_not_lock_out_another(live_server):
    """C01: one address holds at most ``max_client_connections`` (4 here) of the server's 8; another still gets in."""
    held = [_connect(live_server) for _ in range(4)]
    try:
        with _connect(live_server) as fifth:
            assert _closed_by_server(fifth)
        with _connect(live_server, "127.0.0.2") as other:
            assert _answers(other, live_server)
    finally:
        for connection in held:
            connection.close()


def test_c01_a_request_body_that_stalls_is_answered_408_and_closed(live_server):
    """C01: a request head with ``Content-Length: 100`` and 10 bytes of body, then nothing: closed after 0.5 s."""
    head = (
        f"POST /api/search HTTP/1.1\r\nHost: 127.0.0.1:{live_server}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n"
    ).encode()
    with _connect(live_server) as connection:
        connection.sendall(head + b'{"queries"')
        connection.settimeout(WAIT)
        answer = b""
        while True:
            part = connection.recv(4096)
            if not part:
                break
            answer += part
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_a_lying_content_length_with_a_chunked_body_is_read_only_to_the_limit(live_server):
    """``Content-Length: 10`` and ``Transfer-Encoding: chunked``: the chunks are counted as read, 413 past 4 KB."""
    head = (
        f"POST /api/search HTTP/1.1\r\nHost: 127.0.0.1:{live_server}\r\nContent-Type: application/json\r\n"
        "Content-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"%x\r\n%s\r\n" % (1024, b"x" * 1024)
    with socket.create_connection(("127.0.0.1", live_server), timeout=WAIT) as connection:
        connection.sendall(head)
        answer = b""
        try:
            for _ in range(64):  # 64 KB offered; the server answers (and closes) long before
                connection.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        connection.settimeout(WAIT)
        try:
            while not answer.endswith(b"}") and len(answer) < 10_000:
                part = connection.recv(4096)
                if not part:
                    break
                answer += part
        except ConnectionResetError:
            pass
    status = answer.split(b"\r\n", 1)[0]
    assert status.startswith((b"HTTP/1.1 413", b"HTTP/1.1 400")), answer[
        :200
    ]  # 400: h11 refuses the pair itself


# ------------------------------------------------------------------ the command line
def _cli_error(argv, capsys, monkeypatch) -> str:
    import slice_st.loading
    from slice_st.cli import main

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the address was checked")

    monkeypatch.setattr(slice_st.loading, "load_model", no_model)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    assert error.strip().splitlines()[-1].startswith("slice-st: error:"), (
        error
    )  # argparse's usage may come first
    assert "Traceback" not in error
    return error


def test_cli_port_out_of_range_is_one_line(tmp_path, capsys, monkeypatch):
    error = _cli_error(["serve", str(tmp_path), "--port", "70000"], capsys, monkeypatch)
    assert "1 to 65535" in error


def test_cli_port_in_use_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(DOCS) + "\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        error = _cli_error(["serve", str(corpus), "--port", str(port)], capsys, monkeypatch)
    assert f"cannot listen on 127.0.0.1:{port}" in error and "in use" in error


def test_cli_unresolvable_host_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(DOCS) + "\n")
    error = _cli_error(
        ["serve", str(corpus), "--host", "no-such-host.invalid"], capsys, monkeypatch
    )
    assert "cannot listen on no-such-host.invalid" in error


@pytest.mark.parametrize("how", ["option", "environment"])
def test_t17_cli_empty_token_is_one_line_before_anything(tmp_path, capsys, monkeypatch, how):
    """``serve --host 0.0.0.0 --token "$TOKEN"`` with TOKEN unset (or ``SLICE_ST_TOKEN=``): refused, not served open."""
    import slice_st.serve

    monkeypatch.setattr(
        slice_st.serve,
        "listening_socket",
        lambda *args: pytest.fail("listened with an empty token"),
    )
    monkeypatch.setenv("SLICE_ST_TOKEN", "")
    argv = ["serve", str(tmp_path), "--host", "0.0.0.0"] + (
        ["--token", ""] if how == "option" else []
    )
    error = _cli_error(argv, capsys, monkeypatch)
    assert ("--token is empty" if how == "option" else "$SLICE_ST_TOKEN is empty") in error


def test_cli_warns_when_serving_beyond_this_machine_without_a_token(
    index, tmp_path, capsys, caplog, monkeypatch
):
    """``--host 0.0.0.0``: the warning, once (``run_server``'s, which library users get too). (The socket is a
    loopback one and uvicorn does not run: no test listens beyond this machine.)"""
    import uvicorn

    import slice_st.serve
    from slice_st.cli import main
    from slice_st.serve.guards import listening_socket

    path = tmp_path / "ix"
    index.save(path)
    calls, run_server = [], slice_st.serve.run_server
    monkeypatch.setattr(
        slice_st.serve, "listening_socket", lambda host, port: listening_socket("127.0.0.1", 0)
    )
    monkeypatch.setattr(
        slice_st.serve,
        "run_server",
        lambda source, **kw: calls.append(kw) or run_server(source, **kw),
    )
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    monkeypatch.delenv("SLICE_ST_TOKEN", raising=False)
    with caplog.at_level("WARNING", logger="slice_st"):
        assert (
            main(["serve", str(path), "--host", "0.0.0.0", "--allow-host", "search.example"]) == 0
        )
    warned = [record.getMessage() for record in caplog.records if "no token" in record.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(
        "serving on 0.0.0.0 with no token: anyone who can reach it"
    )
    assert "no token" not in capsys.readouterr().err  # the command line adds no copy of its own
    assert calls[0]["token"] is None and calls[0]["allowed_hosts"] == ["search.example"]
    caplog.clear()
    monkeypatch.setenv("SLICE_ST_TOKEN", "s3cret")
    assert main(["serve", str(path), "--host", "0.0.0.0", "--max-search-cost", "1e6"]) == 0
    assert "no token" not in caplog.text + capsys.readouterr().err and calls[1]["token"] == "s3cret"
    assert (
        calls[0]["limits"].max_search_cost == 2 * 10**8
        and calls[1]["limits"].max_search_cost == 10**6
    )
