// slice-st serve: the search page. Plain JS, no build step, no network beyond this server.
"use strict";
const $ = (id) => document.getElementById(id);
// Offsets from the API count code points (Python's str); JavaScript strings index UTF-16 units, so every
// offset goes through doc.at (code point -> UTF-16 index) before it touches a string.
const state = { query: "", options: "", results: [], file: null, docs: new Map(), searchTurn: 0, documentTurn: 0 };
const CONTEXT = 90;
// The slider filters on each match's confidence (the calibrated probability of a real match) where the index's model
// has one, from the model's documented cut; else on the score, from 0.55 (on the real-text dev set a first result
// scoring there is a match about one time in ten: docs/results.md, "A calibrated confidence").
const DEFAULT_THRESHOLD = 0.55;
const filter = { confidence: false };  // set from /api/info before the page reads its URL
// What the URL holds (so Back and bookmarks work), with the page's defaults; a value equal to its default is left out.
const SETTINGS = { q: "", top_k: "50", per_document: "3", scorer: "reranked", threshold: DEFAULT_THRESHOLD.toFixed(2), file: "" };
const FIELDS = { q: "query", top_k: "top-k", per_document: "per-document", scorer: "scorer", threshold: "threshold" };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value; else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);  // strings become text nodes: never parsed as HTML
  return node;
}

function threshold() { return parseFloat($("threshold").value); }

// Whether a match passes the slider: its confidence where it has one (a match of a scorer without one passes), else
// its score.
function passes(match) {
  if (filter.confidence) return match.confidence === null || match.confidence === undefined || match.confidence >= threshold();
  return match.score >= threshold();
}

function filterName() { return filter.confidence ? "confidence" : "score"; }

// A document id "path:line" belongs to the file "path"; any other id is a file of its own (as the server reads it).
function fileOf(id) {
  const found = /^([\s\S]*):(\d+)$/.exec(id);
  return found ? found[1] : id;
}

// Each path's shortest distinct tail: "notes.txt" alone, "team-a/notes.txt" and "team-b/notes.txt" when two share it.
function shortNames(paths) {
  const parts = new Map(paths.map((path) => [path, path.split("/")]));
  const tail = (path, n) => parts.get(path).slice(-n).join("/");
  const names = new Map();
  for (const path of paths) {
    const most = parts.get(path).length;
    let n = 1;
    while (n < most && paths.some((other) => other !== path && tail(other, n) === tail(path, n))) n++;
    names.set(path, tail(path, n));
  }
  return names;
}

function settingsFromPage() {
  const values = {};
  for (const [key, field] of Object.entries(FIELDS)) values[key] = $(field).value.trim();
  values.q = $("query").value.trim();
  values.threshold = threshold().toFixed(2);
  values.file = state.file || "";
  return values;
}

function urlFor(values) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(values)) if (value && value !== SETTINGS[key]) params.set(key, value);
  const text = params.toString();
  return location.pathname + (text ? "?" + text : "");
}

// push: a new history entry (a search, a file opened or closed); else the current one is rewritten (the slider).
function remember(push) {
  const url = urlFor(settingsFromPage());
  if (url === location.pathname + location.search) return;
  if (push) history.pushState(null, "", url); else history.replaceState(null, "", url);
}

function status(text, kind) {
  $("status").textContent = text;
  $("status").className = kind || "muted";
}

async function api(path, options) {
  const response = await fetch(path, options);
  const json = (response.headers.get("content-type") || "").includes("application/json");
  if (!response.ok) {  // the status first: a proxy's or a busy server's answer may not be JSON
    let detail = response.status === 503 ? "the server is busy; try again in a moment" : response.statusText;
    if (json) {
      const body = await response.json().catch(() => ({}));
      if (Array.isArray(body.detail)) detail = body.detail.map((d) => d.msg).join("; ");
      else if (typeof body.detail === "string") detail = body.detail;
    }
    throw new Error(`${response.status}: ${detail}`);
  }
  if (!json) throw new Error(`unexpected answer (${response.headers.get("content-type") || "no content type"})`);
  return response.json();
}

function withOffsets(doc) {
  const at = [];
  let index = 0;
  for (const character of doc.text) { at.push(index); index += character.length; }
  at.push(index);
  return { ...doc, at, length: at.length - 1 };  // length: in code points, as the API counts
}

function slice(doc, start, end) { return doc.text.slice(doc.at[start], doc.at[end]); }

function snippet(doc, start, end) {
  const left = Math.max(0, start - CONTEXT), right = Math.min(doc.length, end + CONTEXT);
  return el("span", { class: "context" },
    (left > 0 ? "…" : "") + slice(doc, left, start), el("mark", {}, slice(doc, start, end)),
    slice(doc, end, right) + (right < doc.length ? "…" : ""));
}

async function submit(event) {
  event.preventDefault();
  if (!$("query").value.trim()) return;
  state.file = null;
  remember(true);
  await search();
  showView();
}

function searchOptions() {
  return { top_k: parseInt($("top-k").value, 10) || 50, per_document: parseInt($("per-document").value, 10) || 3,
           scorer: $("scorer").value };
}

async function search() {
  const query = $("query").value.trim();
  if (!query) return;
  const options = searchOptions();
  status("searching…");
  const turn = ++state.searchTurn;  // a slower answer to an earlier search is dropped
  try {
    const body = await api("/api/search", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ queries: [query], ...options }),
    });
    const docs = await loadDocuments(body.results[0].matches);
    if (turn !== state.searchTurn) return;
    state.query = query;
    state.options = JSON.stringify(options);
    state.results = body.results[0].matches;
    state.docs = docs;
    renderResults();
  } catch (error) {
    if (turn !== state.searchTurn) return;
    status("error: " + error.message, "error");
  }
}

async function loadDocuments(matches) {
  const docs = new Map();  // a Map: an id such as "__proto__" is a key like any other
  const ids = [...new Set(matches.map((m) => m.doc_id))];
  await Promise.all(ids.map(async (id) => {
    docs.set(id, withOffsets(await api("/api/documents?id=" + encodeURIComponent(id))));
  }));
  return docs;
}

function renderResults() {
  const shown = state.results.filter(passes);
  const groups = new Map();  // file -> its matches, best file first (the matches come best first)
  for (const match of shown) {
    const file = fileOf(match.doc_id);
    if (!groups.has(file)) groups.set(file, []);
    groups.get(file).push(match);
  }
  const names = shortNames([...new Set(state.results.map((m) => fileOf(m.doc_id)))]);
  const results = $("results");
  results.replaceChildren();
  for (const [file, matches] of groups) {
    const open = el("button", { class: "doc-id", type: "button", title: file }, names.get(file));
    open.addEventListener("click", () => { state.file = file; remember(true); showView(); });
    const card = el("article", { class: "doc", "data-file": file },
      el("div", { class: "doc-head" }, open, el("span", { class: "muted" }, `${matches.length} match${matches.length > 1 ? "es" : ""}`)));
    for (const match of matches) {
      const line = match.doc_id === file ? "" : ":" + match.doc_id.slice(file.length + 1);
      card.append(el("div", { class: "match", "data-doc": match.doc_id },
        el("span", { class: "score" }, match.score.toFixed(3)),
        el("span", { class: "confidence muted" }, typeof match.confidence === "number" ? `${Math.round(100 * match.confidence)}%` : ""),
        el("span", { class: "line muted" }, line),
        snippet(state.docs.get(match.doc_id), match.start, match.end)));
    }
    results.append(card);
  }
  const hidden = state.results.length - shown.length;
  const below = hidden ? ` (${hidden} below it hidden: lower the slider to see them)` : "";
  status(shown.length
    ? `${shown.length} span${shown.length > 1 ? "s" : ""} in ${groups.size} file${groups.size > 1 ? "s" : ""} at or above ${filterName()} ${threshold().toFixed(2)}${below}`
    : `no span at or above ${filterName()} ${threshold().toFixed(2)}${below}`);
}

// The file named in the URL, or the results.
function showView() {
  if (state.file) openFile(state.file); else closeDocument();
}

async function openFile(file) {
  const query = state.query ? "&q=" + encodeURIComponent(state.query) : "";
  const turn = ++state.documentTurn;
  let doc;
  try {
    doc = withOffsets(await api("/api/files?path=" + encodeURIComponent(file) + query));
  } catch (error) {
    if (turn !== state.documentTurn) return;
    status("error: " + error.message, "error");
    return;
  }
  if (turn !== state.documentTurn || state.file !== file) return;  // another file was opened since
  $("document-title").textContent = doc.path;
  const starts = new Map(doc.parts.map((part) => [part.id, part.start]));
  const matches = state.results.filter((m) => starts.has(m.doc_id) && passes(m))
    .map((m) => ({ ...m, start: m.start + starts.get(m.doc_id), end: m.end + starts.get(m.doc_id) }))
    .sort((a, b) => a.start - b.start);
  const best = Math.max(...matches.map((m) => m.score));
  const text = $("document-text");
  text.replaceChildren();
  let at = 0, bestMark = null;
  for (const match of matches) {
    if (match.start < at) continue;  // overlapping spans: the earlier one stays highlighted
    text.append(slice(doc, at, match.start));
    const mark = el("mark", { title: match.score.toFixed(3) }, slice(doc, match.start, match.end));
    if (match.score === best) { mark.className = "best"; bestMark = bestMark || mark; }
    text.append(mark);
    at = match.end;
  }
  text.append(slice(doc, at, doc.length));
  $("results").hidden = true;
  $("document").hidden = false;
  drawStrip(doc);
  status(matches.length
    ? `${matches.length} span${matches.length > 1 ? "s" : ""} at or above ${filterName()} ${threshold().toFixed(2)} in this file (${doc.parts.length} document${doc.parts.length > 1 ? "s" : ""})`
    : `no span of this file at or above ${filterName()} ${threshold().toFixed(2)}`);
  if (bestMark) bestMark.scrollIntoView({ block: "center" });  // the match in place, in the whole file
}

function drawStrip(doc) {
  const canvas = $("strip");
  const width = canvas.clientWidth || 800, height = canvas.height;
  canvas.width = width;
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, width, height);
  const profile = doc.profile || [];
  const length = doc.length || 1;
  const scores = profile.filter((s) => s !== null);
  if (!scores.length) return;
  const low = Math.min(...scores), high = Math.max(...scores);
  doc.units.forEach(([start, end], unit) => {
    const score = profile[unit];
    if (score === null) return;
    const level = high > low ? (score - low) / (high - low) : 1;
    context.fillStyle = (filter.confidence || score >= threshold()) ? `rgba(230, 110, 0, ${0.2 + 0.8 * level})` : `rgba(60, 90, 160, ${0.15 + 0.5 * level})`;
    const x = (start / length) * width, w = Math.max(1, ((end - start) / length) * width);
    const h = Math.max(2, level * height);
    context.fillRect(x, height - h, w, h);
  });
}

function closeDocument() {
  state.file = null;
  $("document").hidden = true;
  $("results").hidden = false;
  if (state.query) renderResults();
}

async function showInfo() {
  try {
    const info = await api("/api/info");
    const index = info.index;
    if (info.confidence) {  // the slider filters on confidence, from the model's documented cut
      filter.confidence = true;
      SETTINGS.threshold = info.confidence.default_min_confidence.toFixed(2);
      const slider = $("threshold");
      slider.value = SETTINGS.threshold;
      slider.title = "matches whose confidence (the calibrated probability of a real match) is below it are hidden";
      $("threshold-label").textContent = "confidence";
    }
    $("index-info").textContent = `${index.documents} documents, ${index.units} ${index.unit}s, spans of ${index.min_span}–${index.max_span} ${index.unit}s, model ${index.model_name || "?"}`;
  } catch (error) {
    $("index-info").textContent = "index info unavailable: " + error.message;
  }
}

// The page as the URL says: the form's fields, the search (again only if its query or options changed), the file.
async function fromUrl() {
  const params = new URLSearchParams(location.search);
  const values = {};
  for (const key of Object.keys(SETTINGS)) values[key] = params.get(key) ?? SETTINGS[key];
  for (const [key, field] of Object.entries(FIELDS)) $(field).value = values[key];
  if (!$("scorer").value) $("scorer").value = SETTINGS.scorer;  // a value the list does not hold
  $("threshold-value").textContent = threshold().toFixed(2);
  state.file = values.file || null;
  const query = $("query").value.trim();
  if (!query) {
    state.query = ""; state.results = []; $("results").replaceChildren(); status("");
  } else if (query !== state.query || JSON.stringify(searchOptions()) !== state.options) {
    await search();
  } else {
    renderResults();
  }
  showView();
}

$("search-form").addEventListener("submit", submit);
$("threshold").addEventListener("input", () => {
  $("threshold-value").textContent = threshold().toFixed(2);
  remember(false);
  if (state.file) openFile(state.file); else if (state.query) renderResults();
});
$("close-document").addEventListener("click", () => { closeDocument(); remember(true); });
window.addEventListener("popstate", fromUrl);
showInfo().then(fromUrl);
