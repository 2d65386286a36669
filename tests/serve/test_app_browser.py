"""`slice-st serve` in a real browser: headless Chromium (the distribution's package) driven by Playwright against a
uvicorn server started here. Slow; skipped with the reason when Chromium or Playwright is missing.

    SERVE_SCREENSHOTS=docs/img pytest -m slow tests/serve/test_app_browser.py    # also refreshes the docs' pictures
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from urllib.parse import parse_qsl, urlsplit

import pytest

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("SLICE_ST_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Documents that broke the page: emoji before the match (offsets in code points, JavaScript counts UTF-16 units)
#: and an id that is a property of every JavaScript object.
HOSTILE = {
    "emoji-first": "🎸🎸🎸🎸🎸🎸🎸🎸🎸🎸 Homer: my son plays the guitar in the garage every evening.",
    "__proto__": "Marge: the neighbour plays the guitar far too loudly at night.",
}
#: A 3,000-character id (the page was 25,735 px wide).
LONG_ID = "tickets/" + "x" * 3000
HOSTILE_LONG = {LONG_ID: "Bart: he plays the guitar on the roof of the school."}
#: Two files named notes.txt in two folders (ids path:line), one of them of two documents, given out of line order.
NOTES = {
    "team-a/notes.txt:7": "Lisa: my brother plays the guitar badly in his room.",
    "team-a/notes.txt:2": "Lisa: the saxophone is the instrument I practise.",
    "team-b/notes.txt:3": "Milhouse: he plays the guitar in a band on Fridays.",
}
SAMPLE = os.path.join(
    os.path.dirname(__file__), os.pardir, os.pardir, "examples", "sample_corpus.txt"
)


@pytest.fixture(scope="module")
def browser():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(
            f"no Chromium at {CHROMIUM} (apt-get install chromium, or set SLICE_ST_CHROMIUM)"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install playwright)"
    )
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server_url(real_model, tmp_path_factory):
    pytest.importorskip("fastapi", reason="slice-st[serve] is not installed")
    uvicorn = pytest.importorskip("uvicorn", reason="slice-st[serve] is not installed")
    from slice_st.index.span_index import SpanIndex
    from slice_st.serve import IndexSource, create_app

    folder = tmp_path_factory.mktemp("serve") / "ix"
    with open(SAMPLE, encoding="utf-8") as handle:
        lines = [
            (number, line.strip()) for number, line in enumerate(handle, start=1) if line.strip()
        ]
    texts = (
        [text for _, text in lines]
        + list(HOSTILE.values())
        + list(HOSTILE_LONG.values())
        + list(NOTES.values())
    )
    ids = (
        [f"sample_corpus.txt:{number}" for number, _ in lines]
        + list(HOSTILE)
        + list(HOSTILE_LONG)
        + list(NOTES)
    )
    SpanIndex.build(texts, real_model, ids).save(folder)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound before the server starts: no race for the port
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(IndexSource.from_directory(folder, real_model)), log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)
    sock.close()


def _save_small(source, target) -> None:
    """Copy the screenshot for the docs, as a 64-colour palette PNG when Pillow is there (a third of the bytes)."""
    try:
        from PIL import Image
    except ImportError:
        shutil.copy(source, target)
        return
    Image.open(source).convert("RGB").quantize(64).save(target, optimize=True)


#: The page's default filter: slice-minilm's documented confidence cut.
CUT = "0.50"


def _params(page) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(page.url).query))


def _api_matches(page, query: str) -> list[dict]:
    return page.evaluate(
        "async (q) => (await (await fetch('/api/search', {method: 'POST', headers: {'Content-Type': "
        "'application/json'}, body: JSON.stringify({queries: [q], top_k: 50, per_document: 3})})).json())"
        ".results[0].matches",
        query,
    )


def _file_of(doc_id: str) -> str:
    path, _, line = doc_id.rpartition(":")
    return path if path and line.isdigit() else doc_id


def test_search_grouped_by_file_the_whole_file_and_the_url(browser, server_url, tmp_path):
    page = browser.new_page(viewport={"width": 1000, "height": 640})
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(server_url + "/")
    page.wait_for_function(
        "document.getElementById('index-info').textContent.includes('documents')"
    )
    # the model has a confidence: the slider filters on it, from the model's documented cut
    assert float(page.locator("#threshold").input_value()) == float(CUT)
    assert page.locator("#threshold-label").inner_text() == "confidence"
    query = "my luggage was lost"
    page.fill("#query", query)
    page.click("#search-button")
    page.wait_for_function(
        f"document.getElementById('status').textContent.includes('at or above confidence {CUT}')"
    )
    assert _params(page) == {"q": query}  # defaults stay out of the URL
    found = _api_matches(page, query)
    below = [match for match in found if match["confidence"] < float(CUT)]
    scores = [float(text) for text in page.locator(".match .score").all_inner_texts()]
    assert len(scores) == len(found) - len(below)
    percents = page.locator(".match .confidence").all_inner_texts()
    assert all(int(text.rstrip("%")) >= 100 * float(CUT) for text in percents)
    assert (f"{len(below)} below it hidden" in page.locator("#status").inner_text()) == bool(below)
    # the status line is where the results are: above them, in the main column
    assert page.evaluate("document.getElementById('status').nextElementSibling.id") == "results"
    assert page.locator("#status").inner_text().startswith(f"{len(scores)} span")
    shot = tmp_path / "serve.png"
    page.screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page.locator("#threshold").fill("-0.2")
    page.wait_for_function(f"document.querySelectorAll('.match').length == {len(found)}")
    assert _params(page) == {"q": query, "threshold": "-0.20"}
    # one card per file, best file first, its matches from several documents of it
    files = list(dict.fromkeys(_file_of(match["doc_id"]) for match in found))
    assert (
        page.locator("article.doc").evaluate_all("cards => cards.map((c) => c.dataset.file)")
        == files
    )
    card = page.locator('article.doc[data-file="sample_corpus.txt"]')
    docs_in_card = card.locator(".match").evaluate_all("rows => rows.map((r) => r.dataset.doc)")
    assert len(set(docs_in_card)) > 1 and all(
        doc.startswith("sample_corpus.txt:") for doc in docs_in_card
    )
    assert card.locator("button.doc-id").inner_text() == "sample_corpus.txt"
    page.locator("#threshold").fill(CUT)
    page.wait_for_function(f"document.querySelectorAll('.match').length == {len(scores)}")
    assert _params(page) == {"q": query}
    # open the file: all its documents, the matches above the threshold in place, the strip drawn
    card.locator("button.doc-id").click()
    page.wait_for_selector("#document:not([hidden]) #document-text mark")
    assert _params(page) == {"q": query, "file": "sample_corpus.txt"}
    whole = page.evaluate(
        "async () => (await (await fetch('/api/files?path=sample_corpus.txt')).json()).text"
    )
    assert page.locator("#document-text").inner_text() == whole
    assert page.locator("#document-title").inner_text() == "sample_corpus.txt"
    expected = sorted(
        (
            match
            for match in found
            if _file_of(match["doc_id"]) == "sample_corpus.txt"
            and match["confidence"] >= float(CUT)
        ),
        key=lambda match: (int(match["doc_id"].rpartition(":")[2]), match["start"]),
    )
    marks = page.locator("#document-text mark").all_inner_texts()
    assert marks and marks == [
        match["span"] for match in expected if not _overlaps(match, expected)
    ]
    assert (
        page.locator("#document-text mark.best").inner_text()
        == max(expected, key=lambda m: m["score"])["span"]
    )
    in_view = "() => { const r = document.querySelector('#document-text mark.best').getBoundingClientRect();"
    assert page.evaluate(
        in_view + " return r.top >= 0 && r.bottom <= window.innerHeight; }"
    )  # the match in place
    painted = page.evaluate(
        "() => { const c = document.getElementById('strip'); const d = c.getContext('2d').getImageData(0, 0, "
        "c.width, c.height).data;"
        " let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }"
    )
    assert painted > 0
    page.evaluate("window.scrollTo(0, 0)")  # the picture shows the status line and the strip too
    file_shot = tmp_path / "serve-file.png"
    page.screenshot(path=str(file_shot))
    if os.environ.get("SERVE_SCREENSHOTS"):
        for picture in (shot, file_shot):
            _save_small(picture, os.path.join(os.environ["SERVE_SCREENSHOTS"], picture.name))
    # Back: the results of the same search (not searched again), then the page before the search
    searches = len([url for url in requests if url.endswith("/api/search")])
    page.go_back()
    page.wait_for_selector("#results:not([hidden]) article.doc")
    assert page.locator("#document").is_hidden() and page.locator(".match").count() == len(scores)
    page.go_back()
    page.wait_for_function("document.getElementById('query').value === ''")
    assert page.locator("article.doc").count() == 0 and _params(page) == {}
    page.go_forward()
    page.wait_for_selector("article.doc")
    assert page.locator("#query").input_value() == query and float(
        page.locator("#threshold").input_value()
    ) == float(CUT)
    assert (
        len([url for url in requests if url.endswith("/api/search")]) == searches + 1
    )  # forward: searched again
    assert all(url.startswith(server_url) for url in requests), [
        url for url in requests if not url.startswith(server_url)
    ]
    page.close()


def _overlaps(match, matches) -> bool:
    """Whether an earlier match of the same file's text overlaps it (the page highlights the earlier one)."""
    before = matches[: matches.index(match)]
    return any(m["doc_id"] == match["doc_id"] and m["end"] > match["start"] for m in before)


def test_a_bookmark_opens_the_same_search_settings_and_file(browser, server_url):
    page = browser.new_page(viewport={"width": 1000, "height": 640})
    searched = []
    page.on(
        "request",
        lambda request: (
            searched.append(request.post_data) if request.url.endswith("/search") else None
        ),
    )
    url = "/?q=plays+the+guitar&threshold=-0.05&top_k=20&per_document=1&scorer=phrase&file=team-a%2Fnotes.txt"
    page.goto(server_url + url)
    page.wait_for_selector("#document:not([hidden]) #document-text mark")
    assert page.locator("#query").input_value() == "plays the guitar"
    assert (
        float(page.locator("#threshold").input_value()) == -0.05
        and page.locator("#top-k").input_value() == "20"
    )
    assert (
        page.locator("#per-document").input_value() == "1"
        and page.locator("#scorer").input_value() == "phrase"
    )
    assert [json.loads(body) for body in searched] == [
        {"queries": ["plays the guitar"], "top_k": 20, "per_document": 1, "scorer": "phrase"}
    ]
    assert page.locator("#document-title").inner_text() == "team-a/notes.txt"
    lines = sorted(NOTES, key=lambda doc_id: int(doc_id.rpartition(":")[2]))
    text = "\n\n".join(NOTES[doc_id] for doc_id in lines if doc_id.startswith("team-a/"))
    assert page.locator("#document-text").inner_text() == text  # the file's documents in line order
    assert "plays the guitar" in " ".join(page.locator("#document-text mark").all_inner_texts())
    page.close()


def test_same_named_files_show_their_shortest_distinct_paths(browser, server_url):
    page = browser.new_page(viewport={"width": 1000, "height": 640})
    page.goto(server_url + "/?q=plays+the+guitar&threshold=-0.2")
    page.wait_for_selector("article.doc")
    names = dict(
        page.locator("article.doc").evaluate_all(
            "cards => cards.map((c) => [c.dataset.file, c.querySelector('button.doc-id').textContent])"
        )
    )
    assert (
        names["team-a/notes.txt"] == "team-a/notes.txt"
        and names["team-b/notes.txt"] == "team-b/notes.txt"
    )
    assert (
        names["sample_corpus.txt"] == "sample_corpus.txt"
        and names[LONG_ID] == LONG_ID.split("/")[-1]
    )
    page.close()


def test_highlights_match_the_api_spans_after_emoji_and_for_any_id(browser, server_url):
    page = browser.new_page(viewport={"width": 1000, "height": 640})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server_url + "/")
    page.wait_for_function(
        "document.getElementById('index-info').textContent.includes('documents')"
    )
    page.fill("#query", "plays the guitar")
    page.locator("#threshold").fill("-0.2")
    page.click("#search-button")
    page.wait_for_selector("article.doc mark")
    found = page.evaluate(
        "async () => (await (await fetch('/api/search', {method: 'POST', headers: {'Content-Type': "
        "'application/json'}, body: JSON.stringify({queries: ['plays the guitar'], top_k: 50, per_document: 3})}))"
        ".json()).results[0].matches"
    )
    for doc_id in HOSTILE:
        spans = [match["span"] for match in found if match["doc_id"] == doc_id]
        assert spans, doc_id
        card = (
            page.locator("article.doc")
            .filter(has=page.locator("button.doc-id", has_text=doc_id))
            .first
        )
        assert card.locator("mark").all_inner_texts() == spans
        card.locator("button.doc-id").click()
        page.wait_for_selector("#document:not([hidden]) #document-text mark")
        assert page.locator("#document-title").inner_text() == doc_id
        assert page.locator("#document-text").inner_text() == HOSTILE[doc_id]
        page.click("#close-document")
    assert not errors, errors
    page.close()


def test_a_very_long_document_id_keeps_the_page_its_width(browser, server_url):
    """A 3,000-character document id wraps: the page is no wider than the window, in the results and the document."""
    page = browser.new_page(viewport={"width": 1000, "height": 640})
    page.goto(server_url + "/")
    page.wait_for_function(
        "document.getElementById('index-info').textContent.includes('documents')"
    )
    page.fill("#query", "plays the guitar on the roof")
    page.locator("#threshold").fill("-0.2")
    page.click("#search-button")
    page.wait_for_selector("article.doc mark")
    card = (
        page.locator("article.doc")
        .filter(has=page.locator("button.doc-id", has_text="x" * 100))
        .first
    )
    assert card.count() == 1
    width = "() => document.documentElement.scrollWidth"
    assert page.evaluate(width) <= 1000
    card.locator("button.doc-id").click()
    page.wait_for_selector("#document:not([hidden]) #document-text mark")
    assert page.locator("#document-title").inner_text() == LONG_ID
    assert page.evaluate(width) <= 1000
    page.close()
