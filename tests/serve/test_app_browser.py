"""`slice-st serve` in a real browser: headless Chromium (the distribution's package) driven by Playwright against a
uvicorn server started here. Slow; skipped with the reason when Chromium or Playwright is missing.

    SERVE_SCREENSHOT=docs/img/serve.png pytest -m slow tests/serve/test_app_browser.py    # also refreshes the docs'
    picture
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import threading
import time

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
SAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples", "sample_corpus.txt")


@pytest.fixture(scope="module")
def browser():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set SLICE_ST_CHROMIUM)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
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
        lines = [(number, line.strip()) for number, line in enumerate(handle, start=1) if line.strip()]
    texts = [text for _, text in lines] + list(HOSTILE.values()) + list(HOSTILE_LONG.values())
    ids = [f"sample_corpus.txt:{number}" for number, _ in lines] + list(HOSTILE) + list(HOSTILE_LONG)
    SpanIndex.build(texts, real_model, ids).save(folder)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound before the server starts: no race for the port
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(IndexSource.from_directory(folder, real_model)), log_level="warning")
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


def test_search_highlight_and_open_a_document(browser, server_url, tmp_path):
    page = browser.new_page(viewport={"width": 1000, "height": 640})
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(server_url + "/")
    page.wait_for_function("document.getElementById('index-info').textContent.includes('documents')")
    page.fill("#query", "my luggage was lost")
    page.click("#search-button")
    page.wait_for_selector("article.doc mark")
    marks = page.locator("article.doc mark")
    assert marks.count() >= 1
    first_doc = page.locator("article.doc").first
    assert "bag" in first_doc.locator("mark").first.inner_text().lower() or "luggage" in first_doc.inner_text().lower()
    scores = [float(text) for text in page.locator("article.doc .score").all_inner_texts()]
    assert scores and all(-1 <= score <= 1 for score in scores)
    # the threshold slider hides spans below it
    before = page.locator(".match").count()
    page.locator("#threshold").fill(str(math.floor(max(scores) * 100) / 100))  # the slider snaps to steps of 0.01
    page.wait_for_function(f"document.querySelectorAll('.match').length < {before}")
    assert page.locator(".match").count() >= 1
    page.locator("#threshold").fill("0.3")
    page.wait_for_function(f"document.querySelectorAll('.match').length == {before}")
    shot = tmp_path / "serve.png"
    page.screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("SERVE_SCREENSHOT"):
        _save_small(shot, os.environ["SERVE_SCREENSHOT"])
    # open the best document: its text with the matches highlighted, and the strip drawn
    page.locator("button.doc-id").first.click()
    page.wait_for_selector("#document:not([hidden]) #document-text mark")
    assert page.locator("#document-text mark").count() >= 1
    assert page.locator("#document-title").inner_text() == first_doc.get_attribute("data-doc")
    painted = page.evaluate(
        "() => { const c = document.getElementById('strip'); const d = c.getContext('2d').getImageData(0, 0, "
        "c.width, c.height).data;"
        " let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }"
    )
    assert painted > 0
    page.click("#close-document")
    assert page.locator("#results").is_visible()
    assert all(url.startswith(server_url) for url in requests), [
        url for url in requests if not url.startswith(server_url)
    ]
    page.close()


def test_highlights_match_the_api_spans_after_emoji_and_for_any_id(browser, server_url):
    page = browser.new_page(viewport={"width": 1000, "height": 640})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server_url + "/")
    page.wait_for_function("document.getElementById('index-info').textContent.includes('documents')")
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
        card = page.locator("article.doc").filter(has=page.locator("button.doc-id", has_text=doc_id)).first
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
    page.wait_for_function("document.getElementById('index-info').textContent.includes('documents')")
    page.fill("#query", "plays the guitar on the roof")
    page.locator("#threshold").fill("-0.2")
    page.click("#search-button")
    page.wait_for_selector("article.doc mark")
    card = page.locator("article.doc").filter(has=page.locator("button.doc-id", has_text="x" * 100)).first
    assert card.count() == 1
    width = "() => document.documentElement.scrollWidth"
    assert page.evaluate(width) <= 1000
    card.locator("button.doc-id").click()
    page.wait_for_selector("#document:not([hidden]) #document-text mark")
    assert page.locator("#document-title").inner_text() == LONG_ID
    assert page.evaluate(width) <= 1000
    page.close()
