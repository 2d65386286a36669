// slice-st serve: the search page. Plain JS, no build step, no network beyond this server.
"use strict";
const $ = (id) => document.getElementById(id);
// Offsets from the API count code points (Python's str); JavaScript strings index UTF-16 units, so every
// offset goes through doc.at (code point -> UTF-16 index) before it touches a string.
const state = { query: "", results: [], documentId: null, docs: new Map(), searchTurn: 0, documentTurn: 0 };
const CONTEXT = 90;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value; else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);  // strings become text nodes: never parsed as HTML
  return node;
}

function threshold() { return parseFloat($("threshold").value); }

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

async function search(event) {
  if (event) event.preventDefault();
  const query = $("query").value.trim();
  if (!query) return;
  $("status").textContent = "searching…";
  $("status").className = "muted";
  const turn = ++state.searchTurn;  // a slower answer to an earlier search is dropped
  try {
    const body = await api("/api/search", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ queries: [query], top_k: parseInt($("top-k").value, 10) || 50,
                             per_document: parseInt($("per-document").value, 10) || 3 }),
    });
    const docs = await loadDocuments(body.results[0].matches);
    if (turn !== state.searchTurn) return;
    state.query = query;
    state.results = body.results[0].matches;
    state.docs = docs;
    renderResults();
  } catch (error) {
    if (turn !== state.searchTurn) return;
    $("status").textContent = "error: " + error.message;
    $("status").className = "error";
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
  const shown = state.results.filter((m) => m.score >= threshold());
  const groups = new Map();
  for (const match of shown) {
    if (!groups.has(match.doc_id)) groups.set(match.doc_id, []);
    groups.get(match.doc_id).push(match);
  }
  const results = $("results");
  results.replaceChildren();
  for (const [id, matches] of groups) {
    const open = el("button", { class: "doc-id", type: "button" }, id);
    open.addEventListener("click", () => openDocument(id));
    const card = el("article", { class: "doc", "data-doc": id },
      el("div", { class: "doc-head" }, open, el("span", { class: "muted" }, `${matches.length} match${matches.length > 1 ? "es" : ""}`)));
    for (const match of matches) {
      card.append(el("div", { class: "match" }, el("span", { class: "score" }, match.score.toFixed(3)),
        snippet(state.docs.get(id), match.start, match.end)));
    }
    results.append(card);
  }
  $("status").textContent = shown.length
    ? `${shown.length} spans in ${groups.size} documents at or above ${threshold().toFixed(2)} (of ${state.results.length} found)`
    : `no span at or above ${threshold().toFixed(2)}`;
  $("status").className = "muted";
  if (state.documentId) openDocument(state.documentId);
}

async function openDocument(id) {
  state.documentId = id;
  const query = state.query ? "&q=" + encodeURIComponent(state.query) : "";
  const turn = ++state.documentTurn;
  let doc;
  try {
    doc = withOffsets(await api("/api/documents?id=" + encodeURIComponent(id) + query));
  } catch (error) {
    if (turn !== state.documentTurn) return;
    $("status").textContent = "error: " + error.message;
    $("status").className = "error";
    return;
  }
  if (turn !== state.documentTurn || state.documentId !== id) return;  // another document was opened since
  $("document-title").textContent = doc.id;
  const matches = state.results.filter((m) => m.doc_id === id && m.score >= threshold()).sort((a, b) => a.start - b.start);
  const best = Math.max(...matches.map((m) => m.score));
  const text = $("document-text");
  text.replaceChildren();
  let at = 0;
  for (const match of matches) {
    if (match.start < at) continue;  // overlapping spans: the earlier one stays highlighted
    text.append(slice(doc, at, match.start));
    const mark = el("mark", { title: match.score.toFixed(3) }, slice(doc, match.start, match.end));
    if (match.score === best) mark.className = "best";
    text.append(mark);
    at = match.end;
  }
  text.append(slice(doc, at, doc.length));
  drawStrip(doc);
  $("results").hidden = true;
  $("document").hidden = false;
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
    context.fillStyle = score >= threshold() ? `rgba(230, 110, 0, ${0.2 + 0.8 * level})` : `rgba(60, 90, 160, ${0.15 + 0.5 * level})`;
    const x = (start / length) * width, w = Math.max(1, ((end - start) / length) * width);
    const h = Math.max(2, level * height);
    context.fillRect(x, height - h, w, h);
  });
}

function closeDocument() {
  state.documentId = null;
  $("document").hidden = true;
  $("results").hidden = false;
}

async function showInfo() {
  try {
    const info = await api("/api/info");
    const index = info.index;
    $("index-info").textContent = `${index.documents} documents, ${index.units} ${index.unit}s, spans of ${index.min_span}–${index.max_span} ${index.unit}s, model ${index.model_name || "?"}`;
  } catch (error) {
    $("index-info").textContent = "index info unavailable: " + error.message;
  }
}

$("search-form").addEventListener("submit", search);
$("threshold").addEventListener("input", () => {
  $("threshold-value").textContent = threshold().toFixed(2);
  if (state.query) renderResults();
});
$("close-document").addEventListener("click", closeDocument);
showInfo();
