"""`slice-st serve`'s JSON API through FastAPI's in-process client: the same results as SpanIndex.search, 4xx for bad
input."""

from __future__ import annotations

import dataclasses
import sys
import threading

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="slice-st[serve] (fastapi) is not installed")
pytest.importorskip("httpx", reason="fastapi.testclient needs httpx")
from fastapi.testclient import TestClient

from slice_st.errors import MissingExtraError
from slice_st.index.span_index import SpanIndex
from slice_st.serve import IndexSource, ServeLimits, create_app

DOCS = [
    "Customer: my bag was lost on the way to Denver.",
    "Agent: the flight was delayed by the storm over the lakes.",
    "A man plays the guitar at the gate while people wait for the late flight.",
    "Refund the ticket please, the train never came.",
]
IDS = ["calls:1", "calls:3", "tickets/T1", "tickets/T2"]
BASE = "http://localhost"  # a Host the app answers (it refuses any other)


@pytest.fixture(
    params=[(None, True), ("pq8", True), ("pq8", False)],
    ids=["exact", "compressed", "no-exact-tier"],
)
def saved(tiny_model, tmp_path, request):
    compression, exact_tier = request.param
    index = SpanIndex.build(
        DOCS, tiny_model, IDS, max_span=5, compression=compression, exact_tier=exact_tier
    )
    path = tmp_path / "ix"
    index.save(path)
    return path, index


@pytest.fixture()
def client(saved, tiny_model):
    path, _ = saved
    source = IndexSource.from_directory(path, tiny_model)
    with TestClient(
        create_app(
            source,
            ServeLimits(max_queries=4, max_query_chars=50, max_top_k=100, max_body_bytes=4096),
        ),
        base_url=BASE,
    ) as client:
        client.source = source
        yield client


def _as_dicts(results):
    """The JSON of matches: their fields, and (deprecated, for one release) the old names doc_index and cosine."""
    old = lambda m: {"doc_index": m.text_index, "cosine": m.similarity}  # noqa: E731
    fields = lambda m: {k: v for k, v in dataclasses.asdict(m).items() if k != "places"}  # noqa: E731 (merged only)
    return [[fields(match) | old(match) for match in matches] for matches in results]


@pytest.mark.parametrize(
    "body, options",
    [
        ({"queries": "the flight was late"}, {}),
        ({"queries": ["the flight was late", "lost bag", "guitar"], "top_k": 7}, {"top_k": 7}),
        (
            {"queries": ["the flight was late"], "top_k": 3, "per_document": 1},
            {"top_k": 3, "per_document": 1},
        ),
        (
            {"queries": "a refund", "top_k": 20, "threshold": 0.2, "min_span": 2, "max_span": 4},
            {"top_k": 20, "threshold": 0.2, "min_span": 2, "max_span": 4},
        ),
    ],
)
def test_search_equals_span_index_search(client, saved, body, options):
    _, index = saved
    response = client.post("/api/search", json=body)
    assert response.status_code == 200, response.text
    queries = [body["queries"]] if isinstance(body["queries"], str) else body["queries"]
    results = response.json()["results"]
    assert [result["query"] for result in results] == queries
    expected = _as_dicts(index.search(queries, **options))
    got = [result["matches"] for result in results]
    floats = ("score", "similarity", "cosine")
    assert [[{k: v for k, v in m.items() if k not in floats} for m in q] for q in got] == [
        [{k: v for k, v in m.items() if k not in floats} for m in q] for q in expected
    ]
    for name in floats:
        assert np.allclose(
            [m[name] for q in got for m in q], [m[name] for q in expected for m in q], atol=1e-6
        )
    assert any(got)


def test_merge_identical_lists_every_place(tiny_model, tmp_path):
    """The clause of three documents: one match with its count and places, as SpanIndex.search gives it; without the
    option the matches have neither field."""
    clause = ["The bag was lost, sorry.", "the bag  was lost, SORRY.", "THE BAG WAS LOST, sorry."]
    index = SpanIndex.build(DOCS + clause, tiny_model, [*IDS, "a", "b", "c"], max_span=5)
    index.save(tmp_path / "ix")
    with TestClient(
        create_app(IndexSource.from_directory(tmp_path / "ix", tiny_model)), base_url=BASE
    ) as client:
        body = {
            "queries": "the bag was lost, sorry",
            "top_k": 3,
            "per_document": 1,
            "scorer": "phrase",
        }
        plain = client.post("/api/search", json=body).json()["results"][0]["matches"]
        merged = client.post("/api/search", json=body | {"merge_identical": True}).json()[
            "results"
        ][0]["matches"]
    assert (
        [m["doc_id"] for m in plain] == ["a", "b", "c"]
        and "places" not in plain[0]
        and "count" not in plain[0]
    )
    expected = index.search(
        body["queries"], top_k=3, per_document=1, scorer="phrase", merge_identical=True
    )[0]
    assert [m["span"] for m in merged] == [m.span for m in expected] and len(merged) == 3
    assert merged[0]["count"] == 3 and [p["doc_id"] for p in merged[0]["places"]] == ["a", "b", "c"]
    assert set(merged[0]["places"][0]) == {"doc_id", "text_index", "start", "end", "score"}
    assert all(m["count"] == 1 for m in merged[1:])


def test_merge_identical_asks_for_a_bounded_number_of_spans(tiny_model, tmp_path):
    """A template in 40 documents: the library lists all 40 and finds the second distinct span; the server asks for at
    most MERGE_FETCH x top_k spans, so the copies fill them: one match, 32 places."""
    from slice_st.serve.app import MERGE_FETCH

    texts = ["We will get back to you within two working days."] * 40 + [
        "A refund for the lost bag."
    ]
    index = SpanIndex.build(texts, tiny_model, max_span=5)
    index.save(tmp_path / "ix")
    body = {
        "queries": "we will answer in two days",
        "top_k": 2,
        "per_document": 1,
        "scorer": "max-cosine",
    }
    library = index.search(
        body["queries"], top_k=2, per_document=1, scorer="max-cosine", merge_identical=True
    )[0]
    assert [m.count for m in library] == [40, 1]
    with TestClient(
        create_app(IndexSource.from_directory(tmp_path / "ix", tiny_model)), base_url=BASE
    ) as client:
        merged = client.post("/api/search", json=body | {"merge_identical": True}).json()[
            "results"
        ][0]["matches"]
    assert [m["count"] for m in merged] == [MERGE_FETCH * 2] and merged[0]["span"] == library[
        0
    ].span


def test_allowed_search_options_reach_the_library(client, saved, monkeypatch):
    """An option of the allow-list (here ``approximate``) reaches SpanIndex.search unchanged."""
    response = client.post("/api/search", json={"queries": "late", "approximate": True})
    assert (
        response.status_code == 400 and "candidate stage" in response.json()["detail"]
    )  # the library's own refusal
    assert "approximate" in client.get("/api/info").json()["search_options"]


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"queries": []}, 400, "empty"),
        ({"queries": "   "}, 400, "whitespace"),
        ({"queries": ["a", 3]}, 422, ""),
        ({"queries": "late", "top_k": 0}, 422, ""),
        ({"queries": "late", "top_k": 101}, 422, ""),
        ({"queries": "late", "top_k": "many"}, 422, ""),
        ({"queries": "late", "per_document": -1}, 422, ""),
        ({"queries": "late", "threshold": 2}, 422, ""),
        ({"queries": "late", "min_span": 3, "max_span": 2}, 400, "span"),
        ({"queries": "late", "max_span": 9}, 400, "cannot search"),
        ({"queries": ["a", "b", "c", "d", "e"]}, 413, "at most 4 queries"),
        ({"queries": "x" * 51}, 413, "characters"),
        ({"queries": "late", "scorer_of_doom": 1}, 422, "extra inputs"),
        ({"queries": "late", "device": "cuda:7"}, 422, "extra inputs"),
        ({"queries": "late", "batch_size": 100000}, 422, "extra inputs"),
        ({"queries": "late", "prompt": "x" * 1000}, 422, "extra inputs"),
        ({"queries": "late", "candidates": [1, 2]}, 422, ""),
        ({"queries": "late", "candidates": 10**9}, 422, "less than or equal"),
        ({"queries": "late", "nprobe": 0}, 422, ""),
        ({"queries": "late", "merge_identical": [1]}, 422, ""),
        ({"queries": "late", "min_span": 10**6}, 422, ""),
        ({}, 422, ""),
    ],
)
def test_bad_search_requests_are_json_4xx(client, body, status, words):
    response = client.post("/api/search", json=body)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail
    assert words.lower() in str(detail).lower()


def test_bad_bodies_are_json_4xx(client):
    assert (
        client.post(
            "/api/search", content=b"{not json", headers={"content-type": "application/json"}
        ).status_code
        == 422
    )
    big = b'{"queries": "' + b"a" * 5000 + b'"}'
    response = client.post("/api/search", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "bytes" in response.json()["detail"]
    assert client.get("/api/search").status_code == 405
    assert client.get("/api/nothing-here").status_code == 404


def test_document_endpoint_and_profile(client, saved):
    _, index = saved
    response = client.get("/api/documents", params={"id": "tickets/T1"})
    assert response.status_code == 200
    doc = response.json()
    assert doc["text"] == DOCS[2] and doc["index"] == 2 and doc["profile"] is None
    words = [doc["text"][start:end] for start, end in doc["units"]]
    assert words[:4] == ["A", "man", "plays", "the"]
    query = "the late flight"
    with_query = client.get("/api/documents", params={"id": "tickets/T1", "q": query}).json()
    profile = with_query["profile"]
    assert len(profile) == len(doc["units"]) and all(score is not None for score in profile)
    best = index.search(query, top_k=len(DOCS), per_document=1, scorer="max-cosine")[
        0
    ]  # the profile is of cosines
    best_here = next(match for match in best if match.doc_id == "tickets/T1")
    assert max(profile) == pytest.approx(best_here.score, abs=1e-5)
    for unit in range(
        best_here.unit_start, best_here.unit_end
    ):  # the best span's words peak at its score
        assert profile[unit] == pytest.approx(best_here.score, abs=1e-5)


@pytest.mark.parametrize(
    "params, status",
    [
        ({"id": "nope"}, 404),
        ({}, 422),
        ({"id": "calls:1", "q": "x" * 51}, 413),
        ({"id": "calls:1", "q": " "}, 400),
        ({"id": "calls:1", "q": "late", "max_span": 50}, 400),
    ],
)
def test_bad_document_requests_are_json_4xx(client, params, status):
    response = client.get("/api/documents", params=params)
    assert response.status_code == status, response.text
    assert response.json()["detail"]


FILE_DOCS = {
    "team-a/notes.txt:9": "Refund the ticket please, the train never came.",
    "team-a/notes.txt:1": "Customer: my bag was lost on the way to Denver. 🎸",
    "team-a/notes.txt:4": "Agent: the flight was delayed by the storm over the lakes.",
    "team-b/notes.txt:1": "A man plays the guitar at the gate while people wait for the late flight.",
    "odd:id:x": "An id without a line number is a file of its own.",
}


@pytest.fixture()
def files_client(tiny_model):
    index = SpanIndex.build(list(FILE_DOCS.values()), tiny_model, list(FILE_DOCS), max_span=5)
    with TestClient(create_app(index, ServeLimits(max_query_chars=50)), base_url=BASE) as client:
        client.index = index
        yield client


def test_file_endpoint_joins_a_files_documents_in_line_order(files_client):
    response = files_client.get("/api/files", params={"path": "team-a/notes.txt"})
    assert response.status_code == 200, response.text
    got = response.json()
    order = [
        "team-a/notes.txt:1",
        "team-a/notes.txt:4",
        "team-a/notes.txt:9",
    ]  # by line, not by id or insertion
    assert [part["id"] for part in got["parts"]] == order
    assert [part["line"] for part in got["parts"]] == [1, 4, 9]
    assert (
        got["text"] == "\n\n".join(FILE_DOCS[doc_id] for doc_id in order) and got["profile"] is None
    )
    for part in got[
        "parts"
    ]:  # each document in place (offsets in code points: the emoji counts one)
        assert got["text"][part["start"] : part["end"]] == FILE_DOCS[part["id"]]
        assert part["index"] == files_client.index.doc_ids.index(part["id"])
    words = [got["text"][start:end] for start, end in got["units"]]
    assert words[:3] == ["Customer:", "my", "bag"] and "Agent:" in words and words[-1] == "came."
    single = files_client.get(
        "/api/files", params={"path": "odd:id:x"}
    ).json()  # no line number: the id is the file
    assert [part["line"] for part in single["parts"]] == [None] and single["text"] == FILE_DOCS[
        "odd:id:x"
    ]


def test_file_profile_is_each_documents_profile_in_place(files_client):
    query = "the late flight"
    got = files_client.get("/api/files", params={"path": "team-a/notes.txt", "q": query}).json()
    assert len(got["profile"]) == len(got["units"])
    at = 0
    for part in got["parts"]:
        doc = files_client.get("/api/documents", params={"id": part["id"], "q": query}).json()
        units = got["units"][at : at + len(doc["units"])]
        assert units == [
            [start + part["start"], end + part["start"]] for start, end in doc["units"]
        ]
        assert got["profile"][at : at + len(doc["units"])] == pytest.approx(
            doc["profile"], abs=1e-5
        )
        at += len(doc["units"])
    assert at == len(got["units"])


@pytest.mark.parametrize(
    "params, status",
    [
        ({"path": "team-c/notes.txt"}, 404),
        ({"path": "notes.txt"}, 404),  # a file is named by its whole path
        ({"path": "team-a/notes.txt:1"}, 404),  # a document id is not a file
        ({}, 422),
        ({"path": "team-a/notes.txt", "q": "x" * 51}, 413),
        ({"path": "team-a/notes.txt", "q": " "}, 400),
        ({"path": "team-a/notes.txt", "q": "late", "max_span": 50}, 400),
    ],
)
def test_bad_file_requests_are_json_4xx(files_client, params, status):
    response = files_client.get("/api/files", params=params)
    assert response.status_code == status, response.text
    assert response.json()["detail"]


def test_a_file_over_the_cost_bound_is_refused_before_it_runs(tiny_model, monkeypatch):
    index = SpanIndex.build(list(FILE_DOCS.values()), tiny_model, list(FILE_DOCS), max_span=5)
    ran = []
    monkeypatch.setattr(SpanIndex, "unit_profile", lambda *args, **kwargs: ran.append(args))
    with TestClient(create_app(index, ServeLimits(max_search_cost=10)), base_url=BASE) as client:
        response = client.get("/api/files", params={"path": "team-a/notes.txt", "q": "late"})
    assert response.status_code == 413 and "cost" in response.json()["detail"] and not ran


def test_a_file_profile_waits_for_no_search_but_is_refused_while_one_runs(files_client):
    runner = files_client.app.state.runner
    with runner._lock:  # a search holds the model
        busy = files_client.get("/api/files", params={"path": "team-a/notes.txt", "q": "late"})
        plain = files_client.get(
            "/api/files", params={"path": "team-a/notes.txt"}
        )  # no query: no model needed
    assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
    assert plain.status_code == 200


def test_info_openapi_and_page(client):
    info = client.get("/api/info").json()
    assert info["index"]["documents"] == 4 and info["limits"]["max_queries"] == 4
    schema = client.get("/openapi.json").json()
    assert {"/api/search", "/api/documents", "/api/files", "/api/info"} <= set(schema["paths"])
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    for name in ("app.js", "style.css"):
        asset = client.get(f"/static/{name}")
        assert asset.status_code == 200
        assert (
            "http://" not in asset.text and "https://" not in asset.text
        )  # nothing fetched from elsewhere: works offline
    assert "http" not in page.text.replace("http-equiv", "")


def test_a_save_by_another_writer_is_seen_by_the_next_request(client, saved, tiny_model):
    path, _ = saved
    before = client.post("/api/search", json={"queries": "a violin concert", "top_k": 100}).json()[
        "results"
    ][0]["matches"]
    assert {m["doc_id"] for m in before} == set(IDS)
    with SpanIndex.open_for_update(path, tiny_model) as writer:  # as `slice-st index add` does
        writer.add(["A violin concert in the old church."], ["new-doc"])
    after = client.post("/api/search", json={"queries": "a violin concert", "top_k": 100}).json()[
        "results"
    ][0]["matches"]
    assert {m["doc_id"] for m in after} == set(IDS) | {"new-doc"}
    assert client.get("/api/documents", params={"id": "new-doc"}).status_code == 200
    assert client.source.reloads == 1


def test_a_save_racing_the_reload_gives_the_new_index(client, saved, tiny_model, monkeypatch):
    """The reload reads the manifest, then another process saves (removing the data folder just named):
    the reader's retry returns the new index, and the request answers from it, never an error."""
    path, _ = saved
    with SpanIndex.open_for_update(path, tiny_model) as writer:
        writer.add(["First added document."], ["added-1"])
    read_data = SpanIndex._read_data
    raced = []

    def racing(cls, *args, **kwargs):
        if not raced:
            raced.append(True)
            with SpanIndex.open_for_update(
                path, tiny_model
            ) as writer:  # the save lands between manifest read and data read
                writer.add(["Second added document."], ["added-2"])
        return read_data.__func__(cls, *args, **kwargs)

    monkeypatch.setattr(SpanIndex, "_read_data", classmethod(racing))
    response = client.post("/api/search", json={"queries": "added document", "top_k": 100})
    assert response.status_code == 200 and raced
    ids = {m["doc_id"] for m in response.json()["results"][0]["matches"]}
    assert {"added-1", "added-2"} <= ids


def test_a_slow_search_is_answered_503_not_held(saved, tiny_model, monkeypatch):
    path, _ = saved
    release = threading.Event()
    index = SpanIndex.load(path, tiny_model)
    real_search = index.search

    def blocked(*args, **kwargs):
        release.wait(10)
        return real_search(*args, **kwargs)

    monkeypatch.setattr(index, "search", blocked)
    with TestClient(create_app(index, ServeLimits(timeout_s=0.05)), base_url=BASE) as client:
        response = client.post("/api/search", json={"queries": "late"})
        release.set()
    assert response.status_code == 503 and "ran past" in response.json()["detail"]


def test_missing_extra_is_a_clear_error(monkeypatch):
    for name in [name for name in sys.modules if name.startswith("slice_st.serve")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "fastapi", None)
    with pytest.raises(MissingExtraError, match=r"slice-st\[serve\]"):
        import slice_st.serve  # noqa: F401


@pytest.mark.parametrize("kind", ["index", "corpus"])
def test_cli_serve_loads_once_and_binds_loopback(
    saved, tiny_model_dir, tmp_path, monkeypatch, kind
):
    import slice_st.serve
    from slice_st.cli import main

    path, _ = saved
    calls = []
    monkeypatch.setattr(
        slice_st.serve,
        "run_server",
        lambda source, **options: calls.append(
            (source, options | {"bound": options["sock"].getsockname()[:2]})
        ),
    )
    port = _free_port()
    if kind == "index":
        argv = ["serve", str(path), "--model", tiny_model_dir, "--port", str(port), "--quiet"]
    else:
        corpus = tmp_path / "c.txt"
        corpus.write_text("\n".join(DOCS) + "\n")
        argv = [
            "serve",
            str(corpus),
            "--model",
            tiny_model_dir,
            "--max-span",
            "4",
            "--port",
            str(port),
            "--quiet",
        ]
    assert main(argv) == 0
    source, options = calls[0]
    assert len(source.current()) == 4 and options["host"] == "127.0.0.1"
    assert options["bound"] == ("127.0.0.1", port)  # bound before the model loaded
    assert (source.directory is None) == (kind == "corpus")
    if kind == "corpus":
        assert options["port"] == port and source.current().span_config.max_span == 4


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_cli_serve_errors(tmp_path, capsys):
    from slice_st.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", str(tmp_path / "missing.txt"), "--quiet"])
    assert exit_info.value.code == 2 and "slice-st: error:" in capsys.readouterr().err


def test_cli_serve_refuses_shards(saved, tiny_model_dir, tmp_path, capsys):
    import shutil

    from slice_st.cli import main

    path, _ = saved
    shards = tmp_path / "shards"
    shutil.copytree(path, shards / "a")
    with pytest.raises(SystemExit):
        main(["serve", str(shards), "--model", tiny_model_dir, "--quiet"])
    assert "holds index shards" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["two indexes", "the manifest", "an index and a file"])
def test_cli_serve_names_an_index_given_as_a_corpus(
    saved, tiny_model_dir, tmp_path, capsys, monkeypatch, how
):
    """``serve IDX1 IDX2`` / ``serve IDX/manifest.json``: one line naming the index, never "no .txt file" or the
    manifest indexed as text (nothing is loaded)."""
    import shutil

    import slice_st.loading
    from slice_st.cli import main

    path, _ = saved
    other = tmp_path / "ix2"
    shutil.copytree(path, other)
    corpus = tmp_path / "c.txt"
    corpus.write_text("a line of text\n")
    monkeypatch.setattr(
        slice_st.loading, "load_model", lambda *a, **k: pytest.fail("a model was loaded")
    )
    argv = {
        "two indexes": [str(path), str(other)],
        "the manifest": [str(path / "manifest.json")],
        "an index and a file": [str(corpus), str(path)],
    }[how]
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", *argv, "--model", tiny_model_dir, "--quiet", "--port", str(_free_port())])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in error
    expected = (
        "is an index's manifest, not a corpus"
        if how == "the manifest"
        else "is an index folder: serve takes"
    )
    assert expected in error, error


def test_a_long_file_fetch_never_holds_the_other_requests(files_client, monkeypatch):
    """DD2 for files: ``GET /api/files?path=PATH`` is worked out off the event loop, so while one is, ``/api/info``,
    a document and another file answer."""
    index, started, release = files_client.index, threading.Event(), threading.Event()
    real = index.unit_profile

    def slow(query, doc_id, *args, **kwargs):
        if doc_id.startswith("team-a/"):  # the long file
            started.set()
            release.wait(30)
        return real(query, doc_id, *args, **kwargs)

    monkeypatch.setattr(index, "unit_profile", slow)
    answers: dict[str, int] = {}
    fetch = lambda key, route, **params: answers.update(  # noqa: E731
        {key: files_client.get(route, params=params).status_code}
    )
    long = threading.Thread(
        target=fetch, args=("long", "/api/files"), kwargs={"path": "team-a/notes.txt"}
    )
    long.start()
    assert started.wait(30)
    others = [
        threading.Thread(target=fetch, args=("info", "/api/info")),
        threading.Thread(
            target=fetch, args=("document", "/api/documents"), kwargs={"id": "odd:id:x"}
        ),
        threading.Thread(
            target=fetch, args=("file", "/api/files"), kwargs={"path": "team-b/notes.txt"}
        ),
    ]
    for thread in others:
        thread.start()
    for thread in others:
        thread.join(30)
    answered = dict(answers)  # before the long fetch is let go
    release.set()
    long.join(30)
    assert answered == {"info": 200, "document": 200, "file": 200} and answers["long"] == 200


def test_min_confidence_and_the_models_cut(real_model, tmp_path):
    """A shipped model: /api/info gives its documented cut, matches carry their confidence and min_confidence cuts
    by it (as SpanIndex.search); a model without one: no cut, and min_confidence is a 400."""
    SpanIndex.build(DOCS, real_model, IDS).save(tmp_path / "ix")
    with TestClient(
        create_app(IndexSource.from_directory(tmp_path / "ix", real_model)), base_url=BASE
    ) as client:
        assert client.get("/api/info").json()["confidence"] == {"default_min_confidence": 0.5}
        body = {"queries": "my luggage was lost", "top_k": 4}
        matches = client.post("/api/search", json=body).json()["results"][0]["matches"]
        assert all(0 <= match["confidence"] <= 1 for match in matches)
        for cut in (0.5, "default"):
            kept = client.post("/api/search", json=body | {"min_confidence": cut}).json()
            assert kept["results"][0]["matches"] == [m for m in matches if m["confidence"] >= 0.5]
        assert client.post("/api/search", json=body | {"min_confidence": 1.5}).status_code == 422


def test_no_confidence_for_a_model_without_one(client):
    assert client.get("/api/info").json()["confidence"] is None
    response = client.post("/api/search", json={"queries": "late", "min_confidence": 0.5})
    assert response.status_code == 400 and "calibrated confidence" in response.json()["detail"]
