// The qkv page: translate with POST /v1/translate and show the n-best list and the attention.
"use strict";

const $ = (id) => document.getElementById(id);
const DEBOUNCE_MS = 400;
let info = null;         // GET /v1/info
let results = [];        // the last answer's translations, one per non-empty source line
let selected = 0;        // the sentence shown in the details
let timer = null;
let inFlight = null;     // AbortController of the request in flight
let sequence = 0;        // answers to older requests are dropped

function option(value, text) {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = text;
  return o;
}

async function init() {
  try {
    const r = await fetch("/v1/info");
    info = await r.json();
  } catch (e) {
    showError("cannot reach the server: " + e);
    return;
  }
  for (const p of info.pairs) $("pair").append(option(`${p.source}-${p.target}`, p.name));
  for (let b = 1; b <= info.limits.max_beam; b *= 2) $("beam").append(option(b, b));
  $("beam").value = String(info.defaults.beam);
  if ($("beam").value === "") $("beam").append(option(info.defaults.beam, info.defaults.beam));
  $("beam").value = String(info.defaults.beam);
  fillNbest();
  $("key-label").hidden = !info.api_key_required;
  $("source").addEventListener("input", schedule);
  $("source").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); translate(); }
  });
  $("translate").addEventListener("click", translate);
  $("pair").addEventListener("change", translate);
  $("beam").addEventListener("change", () => { fillNbest(); translate(); });
  $("nbest").addEventListener("change", translate);
  document.body.dataset.ready = "true";
}

function fillNbest() {
  const beam = Number($("beam").value);
  const previous = Number($("nbest").value) || 3;
  $("nbest").replaceChildren();
  for (let n = 1; n <= beam; n++) $("nbest").append(option(n, n));
  $("nbest").value = String(Math.min(previous, beam));
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(translate, DEBOUNCE_MS);
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

async function translate() {
  clearTimeout(timer);
  const lines = $("source").value.split("\n").map((l) => l.trim()).filter((l) => l);
  if (!info || lines.length === 0) {
    results = [];
    render();
    return;
  }
  if (inFlight) inFlight.abort();
  inFlight = new AbortController();
  const mine = ++sequence;
  const [source, target] = $("pair").value.split("-");
  const body = {
    text: lines, source, target, beam: Number($("beam").value),
    nbest: Number($("nbest").value), attention: true, split: "sentences",
  };
  const headers = { "Content-Type": "application/json" };
  if (info.api_key_required) headers.Authorization = "Bearer " + $("key").value;
  $("status").textContent = "translating…";
  const started = performance.now();
  try {
    const r = await fetch("/v1/translate", {
      method: "POST", headers, body: JSON.stringify(body), signal: inFlight.signal,
    });
    const answer = await r.json();
    if (mine !== sequence) return;
    if (!r.ok) throw new Error(answer.error || r.statusText);
    results = answer.translations;
    selected = Math.max(0, Math.min(selected, results.length - 1));
    showError("");
    const ms = Math.round(performance.now() - started);
    $("status").textContent = `${results.length} sentence${results.length > 1 ? "s" : ""}, ${ms} ms`;
    render();
  } catch (e) {
    if (e.name === "AbortError" || mine !== sequence) return;
    $("status").textContent = "";
    showError(String(e.message || e));
  }
}

function render() {
  const out = $("output");
  out.replaceChildren();
  results.forEach((t, i) => {
    const div = document.createElement("div");
    div.className = "sentence" + (i === selected ? " selected" : "");
    div.textContent = t.text;
    div.dataset.i = i;
    div.addEventListener("click", () => { selected = i; render(); });
    out.append(div);
  });
  $("details").hidden = results.length === 0;
  if (results.length) renderDetails(results[selected]);
}

function tokenText(tok) {
  return tok.replace(/^\u2581/, "").replace(/\u2581/g, " ") || "\u2581";
}

function renderDetails(t) {
  const body = $("nbest-table").tBodies[0];
  body.replaceChildren();
  t.nbest.forEach((h, k) => {
    const tr = body.insertRow();
    tr.insertCell().textContent = k + 1;
    tr.insertCell().textContent = h.text;
    tr.insertCell().textContent = h.score.toFixed(4);
  });
  const src = t.source_tokens || [], tgt = t.target_tokens || [], attn = t.attention || [];
  const srcBox = $("src-tokens"), tgtBox = $("tgt-tokens"), map = $("heatmap");
  srcBox.replaceChildren();
  tgtBox.replaceChildren();
  map.replaceChildren();
  src.forEach((tok, s) => srcBox.append(chip(tok, "src-token", { s })));
  tgt.forEach((tok, r) => {
    const c = chip(tok, "tgt-token", { t: r });
    c.addEventListener("mouseenter", () => highlight(r));
    c.addEventListener("focus", () => highlight(r));
    c.tabIndex = 0;
    tgtBox.append(c);
  });
  const head = map.createTHead().insertRow();
  head.append(document.createElement("th"));
  for (const tok of src) {
    const th = document.createElement("th");
    th.textContent = tokenText(tok);
    head.append(th);
  }
  const rows = map.createTBody();
  attn.forEach((weights, r) => {
    const tr = rows.insertRow();
    tr.dataset.t = r;
    const th = document.createElement("th");
    th.textContent = tokenText(tgt[r] || "");
    tr.append(th);
    weights.forEach((w, s) => {
      const td = tr.insertCell();
      td.style.background = `rgba(var(--heat), ${w.toFixed(3)})`;
      td.title = `${tokenText(tgt[r] || "")} → ${tokenText(src[s] || "")}: ${w.toFixed(3)}`;
    });
    tr.addEventListener("mouseenter", () => highlight(r));
  });
}

function chip(tok, cls, data) {
  const span = document.createElement("span");
  span.className = "tok " + cls;
  span.textContent = tokenText(tok);
  span.title = tok;
  Object.assign(span.dataset, data);
  return span;
}

// Target token r: its row of attention lights the source tokens (darker = more attention).
function highlight(r) {
  const weights = (results[selected].attention || [])[r] || [];
  const top = weights.indexOf(Math.max(...weights));
  const peak = weights[top] || 1;
  document.querySelectorAll(".tgt-token").forEach((c) => {
    c.classList.toggle("active", Number(c.dataset.t) === r);
  });
  document.querySelectorAll(".src-token").forEach((c) => {
    const s = Number(c.dataset.s);
    const w = weights[s] || 0;
    c.style.background = `rgba(var(--heat), ${(0.85 * w / peak).toFixed(3)})`;
    c.style.color = w / peak > 0.55 ? "#fff" : "";
    c.classList.toggle("hl", w / peak >= 0.25);
    c.classList.toggle("top", s === top);
  });
  document.querySelectorAll("#heatmap tbody tr").forEach((tr) => {
    tr.classList.toggle("active", Number(tr.dataset.t) === r);
  });
}

init();
