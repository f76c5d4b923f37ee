// The explain view: POST /v1/explain, then (a) the beam lattice step by step, (b) every layer x
// head of the encoder, decoder and cross-attention as small multiples (one enlarged on click),
// (c) the KV cache growing one column per decoding step.
"use strict";

const $ = (id) => document.getElementById(id);
const KINDS = [
  ["encoder", "Encoder self-attention", "source_tokens", "source_tokens"],
  ["decoder", "Decoder self-attention", "target_in", "target_in"],
  ["cross", "Cross-attention", "target_in", "source_tokens"],
];
let info = null;
let answer = null;

function option(value, text) {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = text;
  return o;
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

async function init() {
  try {
    info = await (await fetch("/v1/info")).json();
  } catch (e) {
    showError("cannot reach the server: " + e);
    return;
  }
  for (const p of info.pairs) $("pair").append(option(`${p.source}-${p.target}`, p.name));
  for (let b = 1; b <= info.limits.max_beam; b++) $("beam").append(option(b, b));
  $("beam").value = String(Math.min(info.defaults.beam, info.limits.max_beam));
  $("key-label").hidden = !info.api_key_required;
  $("explain").addEventListener("click", explain);
  $("text").addEventListener("keydown", (e) => { if (e.key === "Enter") explain(); });
  $("step").addEventListener("input", renderKV);
  document.body.dataset.ready = "true";
}

async function explain() {
  const text = $("text").value.trim();
  if (!info || !text) return;
  const [source, target] = $("pair").value.split("-");
  const headers = { "Content-Type": "application/json" };
  if (info.api_key_required) headers.Authorization = "Bearer " + $("key").value;
  const started = performance.now();
  $("status").textContent = "decoding…";
  $("explain").disabled = true;
  delete document.body.dataset.renderMs;
  try {
    const r = await fetch("/v1/explain", {
      method: "POST", headers,
      body: JSON.stringify({ text, source, target, beam: Number($("beam").value) }),
    });
    const a = await r.json();
    if (!r.ok) throw new Error(a.error || r.statusText);
    answer = a;
    // the decoder's queries read bos then each target token but the last (eos)
    answer.target_in = ["<s>", ...a.target_tokens.slice(0, -1)];
    showError("");
    render();
    const ms = Math.round(performance.now() - started);
    document.body.dataset.renderMs = String(ms);
    $("status").textContent = `${a.steps.length} steps, rendered in ${ms} ms`;
  } catch (e) {
    $("status").textContent = "";
    showError(String(e.message || e));
  } finally {
    $("explain").disabled = false;
  }
}

function render() {
  $("results").hidden = false;
  $("translation").textContent = answer.translation;
  renderLattice();
  renderMultiples();
  const steps = answer.target_tokens.length;
  $("step").max = String(steps);
  $("step").value = String(steps);
  renderKV();
}

function tokenText(tok) {
  return tok.replace(/\u2581/g, " ").trim() || "\u2581";
}

function spelled(tokens) {
  return tokens.map(tokenText).join(" ");
}

// (a) the lattice: one column per step, its candidates best first
function renderLattice() {
  const box = $("lattice");
  box.replaceChildren();
  for (const s of answer.steps) {
    const col = el("div", "step-col" + (s.done ? " done" : ""));
    col.dataset.step = s.step;
    col.append(el("h3", null, `step ${s.step}${s.done ? " · search ends" : ""}`));
    const kept = new Set(s.kept.map((h) => h.tokens.join("\u0001")));
    const ended = new Map(s.ended.map((h) => [h.tokens.join("\u0001"), h]));
    for (const c of s.candidates) {
      const key = c.tokens.join("\u0001");
      const prefix = c.tokens.slice(0, -1).join("\u0001");
      let what = "dropped";
      let tail = c.logprob.toFixed(3);
      if (c.tokens[c.tokens.length - 1] === "</s>" && ended.has(prefix)) {
        what = "ended";
        tail = `${c.logprob.toFixed(3)} → ${ended.get(prefix).score.toFixed(3)}`;
      } else if (kept.has(key) && !s.done) {
        what = "kept";
      }
      const row = el("div", "cand " + what);
      row.title = `${spelled(c.tokens)}\nlog-prob ${c.logprob}` +
        (what === "ended" ? `, score ${ended.get(prefix).score}` : "") + ` (${what})`;
      row.append(el("span", "tok-last", tokenText(c.tokens[c.tokens.length - 1])),
                 el("span", "lp", tail));
      col.append(row);
    }
    box.append(col);
  }
}

function heat(v) {
  // white -> the page's accent, like the heatmap of the page
  const r = Math.round(255 - v * (255 - 29));
  const g = Math.round(255 - v * (255 - 78));
  const b = Math.round(255 - v * (255 - 216));
  return `rgb(${r},${g},${b})`;
}

function drawMap(canvas, map, cell) {
  const rows = map.length;
  const cols = rows ? map[0].length : 0;
  canvas.width = cols * cell;
  canvas.height = rows * cell;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(cols, rows);
  for (let q = 0; q < rows; q++) {
    for (let k = 0; k < cols; k++) {
      const v = Math.max(0, Math.min(1, map[q][k]));
      const i = 4 * (q * cols + k);
      img.data[i] = 255 - v * (255 - 29);
      img.data[i + 1] = 255 - v * (255 - 78);
      img.data[i + 2] = 255 - v * (255 - 216);
      img.data[i + 3] = 255;
    }
  }
  if (cell === 1) {
    ctx.putImageData(img, 0, 0);
  } else {
    const tmp = document.createElement("canvas");
    tmp.width = cols; tmp.height = rows;
    tmp.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(tmp, 0, 0, cols * cell, rows * cell);
  }
}

// (b) small multiples: per kind a grid of layers (rows) x heads (columns)
function renderMultiples() {
  const box = $("multiples");
  box.replaceChildren();
  $("enlarged-wrap").hidden = true;
  for (const [kind, title] of KINDS) {
    const layers = answer.maps[kind];
    if (!layers.length) continue;
    const heads = layers[0].length;
    const section = el("div", "kind");
    section.append(el("h3", null, title));
    const grid = el("div", "kind-grid");
    grid.style.gridTemplateColumns = `2.2rem repeat(${heads}, 1fr)`;
    grid.append(el("span", "lbl", ""));
    for (let h = 0; h < heads; h++) grid.append(el("span", "lbl", `head ${h + 1}`));
    layers.forEach((layer, l) => {
      grid.append(el("span", "lbl", `L${l + 1}`));
      layer.forEach((map, h) => {
        const c = el("canvas", "mini");
        c.dataset.kind = kind; c.dataset.layer = l; c.dataset.head = h;
        c.title = `${title}, layer ${l + 1}, head ${h + 1}`;
        drawMap(c, map, 1);
        c.addEventListener("click", () => enlarge(c, kind, l, h));
        grid.append(c);
      });
    });
    section.append(grid);
    box.append(section);
  }
}

function enlarge(mini, kind, l, h) {
  for (const c of document.querySelectorAll("canvas.mini.active")) c.classList.remove("active");
  mini.classList.add("active");
  const [, title, rowsKey, colsKey] = KINDS.find((k) => k[0] === kind);
  const map = answer.maps[kind][l][h];
  const rows = answer[rowsKey].map(tokenText);
  const cols = answer[colsKey].map(tokenText);
  const cell = 22;
  const canvas = $("enlarged");
  const ctx = canvas.getContext("2d");
  ctx.font = "12px ui-monospace, Menlo, monospace";
  const left = 12 + Math.max(...rows.map((t) => ctx.measureText(t).width));
  const top = 12 + Math.max(...cols.map((t) => ctx.measureText(t).width));
  canvas.width = left + cols.length * cell + 4;
  canvas.height = top + rows.length * cell + 4;
  ctx.font = "12px ui-monospace, Menlo, monospace";
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.fillStyle = "#6b7280";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  rows.forEach((t, q) => ctx.fillText(t, left - 6, top + q * cell + cell / 2));
  cols.forEach((t, k) => {
    ctx.save();
    ctx.translate(left + k * cell + cell / 2, top - 6);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(t, 0, 0);
    ctx.restore();
  });
  map.forEach((row, q) => row.forEach((v, k) => {
    ctx.fillStyle = heat(Math.max(0, Math.min(1, v)));
    ctx.fillRect(left + k * cell, top + q * cell, cell - 1, cell - 1);
  }));
  $("enlarged-title").textContent =
    `${title}, layer ${l + 1}, head ${h + 1}: row = query, column = key`;
  $("enlarged-wrap").hidden = false;
}

function averaged(layerMaps, q) {
  // the heads' mean of query row q
  const heads = layerMaps.length;
  const out = layerMaps[0][q].map(() => 0);
  for (const m of layerMaps) m[q].forEach((v, k) => { out[k] += v / heads; });
  return out;
}

function cells(count, filled, weights, labels) {
  const box = el("div", "kv-cells");
  for (let k = 0; k < count; k++) {
    const c = el("span", "kv-cell" + (k < filled ? " filled" : " empty"));
    if (k < filled) {
      c.style.background = heat(Math.min(1, weights[k]));
      c.title = `${labels[k]}: ${weights[k].toFixed(3)}`;
    }
    box.append(c);
  }
  return box;
}

// (c) the KV cache at step t: each decoder layer's self-attention cache holds t columns (the
// keys/values of <s> and the t - 1 tokens written so far); the cross-attention's S columns were
// computed once from the encoder's output
function renderKV() {
  if (!answer) return;
  const t = Number($("step").value);
  const total = answer.target_tokens.length;
  const S = answer.source_tokens.length;
  $("step-label").textContent = `${t} of ${total} (writes ${tokenText(answer.target_tokens[t - 1])})`;
  const box = $("kv");
  box.replaceChildren();
  answer.maps.decoder.forEach((self, l) => {
    const row = el("div", "kv-row");
    row.dataset.layer = l;
    row.append(el("span", "side", `layer ${l + 1} self K/V`),
               cells(total, t, averaged(self, t - 1), answer.target_in));
    box.append(row);
    const cross = el("div", "kv-row");
    cross.append(el("span", "side", `layer ${l + 1} cross K/V`),
                 cells(S, S, averaged(answer.maps.cross[l], t - 1), answer.source_tokens));
    box.append(cross);
  });
}

init();
