// The explain view: POST /v1/explain, then (a) the beam lattice step by step, each candidate linked
// to the hypothesis it extends, (b) every layer x head of the encoder, decoder and cross-attention
// as small multiples (one enlarged on click, its values written), (c) the KV cache growing one
// column per decoding step. ?text=...&beam=... in the URL explains that sentence on load (the URL
// follows each explanation); without one, an example sentence of the source language is filled in.
// Every map has rows = queries (the tokens that attend; a decoder row is named by the token its
// position writes) and columns = keys, as `qkv attention` draws them.
"use strict";

const $ = (id) => document.getElementById(id);
// kind, title, rows (queries), columns (keys), what the rows and columns are
const KINDS = [
  ["encoder", "Encoder self-attention", "source_tokens", "source_tokens",
   "source token", "source token"],
  ["decoder", "Decoder self-attention", "target_tokens", "target_in",
   "the target token it writes", "target token read"],
  ["cross", "Cross-attention", "target_tokens", "source_tokens",
   "the target token it writes", "source token"],
];
const EXAMPLES = {
  digits: "4 0 5 2", en: "A man is riding a bike.", de: "Ein Mann fährt Fahrrad.",
  fr: "Un homme fait du vélo.", zh: "我爱吃梨。",
};
const WRITTEN = 0.1; // the enlarged map writes the weights of at least this much
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
  $("pair").addEventListener("change", fillExample);
  for (const id of ["scale-maps", "scale-kv"]) drawScale($(id));
  const asked = new URLSearchParams(location.search);
  const beam = Number(asked.get("beam"));
  if (beam >= 1 && beam <= info.limits.max_beam) $("beam").value = String(beam);
  if (asked.get("text")) $("text").value = asked.get("text");
  else fillExample();
  document.body.dataset.ready = "true";
  if (asked.get("text") && !info.api_key_required) explain();
}

function fillExample() {
  // the example of the pair's source language, unless the user typed something else
  const old = $("text").value.trim();
  if (old && !Object.values(EXAMPLES).includes(old)) return;
  $("text").value = EXAMPLES[$("pair").value.split("-")[0]] || "";
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
    const url = new URL(location.href);
    url.searchParams.set("text", text);
    url.searchParams.set("beam", $("beam").value);
    history.replaceState(null, "", url);
    $("address").textContent = url.pathname + url.search;
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

// (a) the lattice: one column per step, its candidates best first; each candidate extends a
// hypothesis the previous step kept (step 0's extend <s>), named by its place in that beam (#k)
function renderLattice() {
  const box = $("lattice");
  box.replaceChildren();
  let beamBefore = new Map(); // tokens -> the id of the cell the last step kept
  for (const s of answer.steps) {
    const col = el("div", "step-col" + (s.done ? " done" : ""));
    col.dataset.step = s.step;
    col.append(el("h3", null, `step ${s.step}${s.done ? " · search ends" : ""}`));
    const kept = new Map(s.kept.map((h, i) => [h.tokens.join("\u0001"), i + 1]));
    const ended = new Map(s.ended.map((h) => [h.tokens.join("\u0001"), h]));
    const beamNow = new Map();
    s.candidates.forEach((c, n) => {
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
      row.id = `cand-${s.step}-${n}`;
      if (what === "ended") row.dataset.score = String(ended.get(prefix).score);
      row.dataset.parent = beamBefore.get(prefix) || "";
      const parent = s.step === 0 ? "<s>" : `#${$(row.dataset.parent)?.dataset.slot || "?"}`;
      const extended = s.step === 0 ? "<s>"
        : `${spelled(c.tokens.slice(0, -1))} (${parent} of step ${s.step - 1})`;
      row.title = `${spelled(c.tokens)}\nextends ${extended}\nlog-prob ${c.logprob}` +
        (what === "ended" ? `, score ${ended.get(prefix).score}` : "") + ` (${what})`;
      const slot = what === "kept" ? `#${kept.get(key)}` : "";
      if (slot) {
        row.dataset.slot = String(kept.get(key));
        beamNow.set(key, row.id);
      }
      row.append(el("span", "from", s.step === 0 ? "" : `${parent}→`),
                 el("span", "tok-last", tokenText(c.tokens[c.tokens.length - 1])),
                 el("span", "slot", slot), el("span", "lp", tail));
      row.addEventListener("mouseenter", () => tracePath(row, true));
      row.addEventListener("mouseleave", () => tracePath(row, false));
      col.append(row);
    });
    beamBefore = beamNow;
    box.append(col);
  }
  // the translation: the finished hypothesis of the best score
  const ends = [...box.querySelectorAll(".cand.ended")];
  const score = (c) => Number(c.dataset.score);
  if (ends.length) ends.reduce((a, b) => (score(b) > score(a) ? b : a)).classList.add("best");
}

function tracePath(row, on) {
  // the hypothesis a candidate extends, and the one that extends, back to step 0
  for (let r = row; r; r = r.dataset.parent ? $(r.dataset.parent) : null) {
    r.classList.toggle("path", on);
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
  for (const [kind, title, rowsKey, colsKey, rowsAre, colsAre] of KINDS) {
    const layers = answer.maps[kind];
    if (!layers.length) continue;
    const heads = layers[0].length;
    const section = el("div", "kind");
    section.dataset.kind = kind;
    section.append(el("h3", null, title));
    const axes = el("p", "axes");
    axes.append(el("span", null, `rows ↓ (${rowsAre}): `),
                el("code", null, answer[rowsKey].map(tokenText).join(" ")), el("br"),
                el("span", null, `columns → (${colsAre}): `),
                el("code", null, answer[colsKey].map(tokenText).join(" ")));
    section.append(axes);
    const grid = el("div", "kind-grid");
    grid.style.gridTemplateColumns = `2.2rem repeat(${heads}, 1fr)`;
    grid.append(el("span", "lbl", ""));
    for (let h = 0; h < heads; h++) grid.append(el("span", "lbl", `head ${h + 1}`));
    layers.forEach((layer, l) => {
      grid.append(el("span", "lbl", `L${l + 1}`));
      layer.forEach((map, h) => {
        const c = el("canvas", "mini");
        c.dataset.kind = kind; c.dataset.layer = l; c.dataset.head = h;
        c.title = `${title}, layer ${l + 1}, head ${h + 1}: rows ${rowsAre}, columns ${colsAre}`;
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
  const [, title, rowsKey, colsKey, rowsAre, colsAre] = KINDS.find((k) => k[0] === kind);
  const map = answer.maps[kind][l][h];
  const rows = answer[rowsKey].map(tokenText);
  const cols = answer[colsKey].map(tokenText);
  const cell = 30;
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
  ctx.textAlign = "center";
  ctx.font = "10px ui-monospace, Menlo, monospace";
  map.forEach((row, q) => row.forEach((v, k) => {
    const w = Math.max(0, Math.min(1, v));
    ctx.fillStyle = heat(w);
    ctx.fillRect(left + k * cell, top + q * cell, cell - 1, cell - 1);
    if (v >= WRITTEN) {
      ctx.fillStyle = w > 0.5 ? "#fff" : "#1f2937";
      ctx.fillText(v.toFixed(2).replace(/^0/, ""), left + k * cell + cell / 2, top + q * cell + cell / 2);
    }
  }));
  canvas.dataset.written = String(map.flat().filter((v) => v >= WRITTEN).length);
  $("enlarged-title").textContent =
    `${title}, layer ${l + 1}, head ${h + 1}: row = query (${rowsAre}), column = key ` +
    `(${colsAre}); weights of ${WRITTEN} or more written, each row sums to 1`;
  $("enlarged-wrap").hidden = false;
}

function drawScale(box) {
  // the colour scale of every map and of the KV cache: weight 0 (white) to 1 (the accent)
  const bar = el("span", "scale-bar");
  bar.style.background = `linear-gradient(to right, ${heat(0)}, ${heat(1)})`;
  const ticks = el("span", "scale-ticks");
  for (const v of [0, 0.25, 0.5, 0.75, 1]) ticks.append(el("span", null, String(v)));
  const wrap = el("span", "scale-wrap");
  wrap.append(bar, ticks);
  box.replaceChildren(el("span", null, "colour scale: attention weight"), wrap);
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
