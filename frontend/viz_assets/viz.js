// The VIZ page: reads DATA ({realizes, kernels, trace}) and draws it with plain DOM + SVG (no libraries, no network).
"use strict";
const NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
function el(tag, attrs, text) {
  const e = tag === "svg" || ["rect", "text", "line", "path", "g", "title"].includes(tag) ? document.createElementNS(NS, tag) : document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
// nodes {id, src:[ids], label, cls} laid out in layers by dependency depth; returns an <svg>
function layered(nodes, boxW = 120, boxH = 18) {
  const depth = {}, rows = {};
  for (const n of nodes) depth[n.id] = 1 + Math.max(-1, ...n.src.map((s) => depth[s] ?? -1));
  const pos = {};
  for (const n of nodes) { const d = depth[n.id]; rows[d] = (rows[d] || 0) + 1; pos[n.id] = [10 + d * (boxW + 30), 10 + (rows[d] - 1) * (boxH + 8)]; }
  const w = 40 + Object.keys(rows).length * (boxW + 30), h = 30 + Math.max(1, ...Object.values(rows)) * (boxH + 8);
  const svg = el("svg", { width: w, height: h });
  for (const n of nodes) for (const s of n.src) if (pos[s]) {
    const [x1, y1] = pos[s], [x2, y2] = pos[n.id];
    svg.appendChild(el("line", { class: "edge", x1: x1 + boxW, y1: y1 + boxH / 2, x2: x2, y2: y2 + boxH / 2 }));
  }
  for (const n of nodes) {
    const [x, y] = pos[n.id], g = el("g", { class: "gnode" });
    g.appendChild(el("rect", { class: "node " + (n.cls || ""), x, y, width: boxW, height: boxH, rx: 3 }));
    g.appendChild(el("text", { x: x + 3, y: y + 12 }, n.label.slice(0, 20)));
    g.appendChild(el("title", {}, n.title || n.label));
    svg.appendChild(g);
  }
  return svg;
}
function showRealize(i) {
  const r = DATA.realizes[i], m = $("main");
  m.innerHTML = "";
  m.appendChild(el("h3", {}, `realize ${i}: ${r.kernels.length} schedule items`));
  // the lazy graph: kernels in dependency layers, each outlined, with the tensor ops fused into it laid out inside
  const kdepth = [], boxes = [];
  r.kernels.forEach((k, j) => { kdepth[j] = 1 + Math.max(-1, ...r.edges.filter((e) => e[1] === j).map((e) => kdepth[e[0]])); });
  let W = 0, H = 0;
  r.kernels.forEach((k, j) => {
    const ops = k.nodes.filter((n) => n.op !== "CONST"), ids = new Set(ops.map((n) => n.id)), d = {};
    for (const n of ops) d[n.id] = 1 + Math.max(-1, ...n.src.filter((s) => ids.has(s)).map((s) => d[s]));
    const layers = Math.max(0, ...Object.values(d)) + 1, per = {};
    for (const n of ops) per[d[n.id]] = (per[d[n.id]] || 0) + 1;
    const w = Math.max(150, layers * 95 + 10), h = 24 + Math.max(1, ...Object.values(per)) * 20;
    const x = 0, y = 0;   // (placed below)
    boxes.push({ j, k, ops, d, w, h, x, y });
  });
  // place: one column per kernel layer, boxes stacked in it
  const colX = {}, colY = {};
  for (const b of boxes) { colX[kdepth[b.j]] = Math.max(colX[kdepth[b.j]] || 0, b.w); }
  const xs = {}; let acc = 10;
  for (const c of Object.keys(colX).map(Number).sort((a, b) => a - b)) { xs[c] = acc; acc += colX[c] + 40; }
  for (const b of boxes) { const c = kdepth[b.j]; b.x = xs[c]; b.y = 10 + (colY[c] || 0); colY[c] = (colY[c] || 0) + b.h + 16; W = Math.max(W, b.x + b.w); H = Math.max(H, b.y + b.h); }
  const svg = el("svg", { id: "lazygraph", width: W + 20, height: H + 20 });
  for (const [a, b] of r.edges) {
    const A = boxes[a], B = boxes[b];
    svg.appendChild(el("line", { class: "edge", x1: A.x + A.w, y1: A.y + A.h / 2, x2: B.x, y2: B.y + B.h / 2 }));
  }
  for (const b of boxes) {
    const g = el("g", { class: "kgroup" });
    g.appendChild(el("rect", { class: "kbox", x: b.x, y: b.y, width: b.w, height: b.h, rx: 4 }));
    g.appendChild(el("text", { x: b.x + 4, y: b.y + 12 }, `${b.k.kind} ${b.k.name}`));
    g.appendChild(el("title", {}, `${b.k.name}: separate because ${b.k.why}\n${b.k.lines.join("\n")}`));
    const row = {};
    for (const n of b.ops) {
      const c = b.d[n.id]; row[c] = (row[c] || 0) + 1;
      const nx = b.x + 5 + c * 95, ny = b.y + 18 + (row[c] - 1) * 20;
      g.appendChild(el("rect", { class: "node", x: nx, y: ny, width: 90, height: 16, rx: 3 }));
      g.appendChild(el("text", { x: nx + 3, y: ny + 11 }, n.op.slice(0, 13)));
    }
    svg.appendChild(g);
  }
  m.appendChild(svg);
  const tbl = el("div", { id: "schedule" });
  r.kernels.forEach((k, j) => {
    const d = el("div", { class: "sched-item" });
    d.appendChild(el("b", {}, `[${j}] ${k.kind} ${k.name}`));
    d.appendChild(el("div", {}, `ops: ${k.ops.filter((o) => o !== "CONST").join(" ")}`));
    d.appendChild(el("div", {}, `from: ${k.lines.join(", ")}`));
    d.appendChild(el("div", {}, `separate because ${k.why}`));
    tbl.appendChild(d);
  });
  m.appendChild(tbl);
}
function showKernel(i, s) {
  const k = DATA.kernels[i], m = $("main");
  m.innerHTML = "";
  document.querySelectorAll("#kernels li").forEach((li, j) => li.classList.toggle("sel", j === i));
  m.appendChild(el("h3", { id: "kernel-title" }, `${k.name} on ${k.device}`));
  m.appendChild(el("div", { id: "opts" }, `opts applied: ${k.opts.join(", ") || "none"}`));
  const bar = el("div", { id: "stages" });
  s = s ?? k.stages.length - 1;
  k.stages.forEach((st, j) => {
    const b = el("button", { class: "stage" + (j === s ? " sel" : "") }, `${j}: ${st.name} (${st.changed} new)`);
    b.onclick = () => showKernel(i, j);
    bar.appendChild(b);
  });
  m.appendChild(bar);
  const st = k.stages[s];
  m.appendChild(el("div", { id: "rule" }, `stage ${s}: ${st.name}; highlighted: the ${st.changed} UOps this stage made`));
  const svg = layered(st.nodes.map((n) => ({ id: n.id, src: n.src, label: `${n.op} ${n.arg !== "None" ? n.arg : ""}`,
    title: `${n.id} ${n.op} ${n.dtype} ${n.arg}`, cls: n.new ? "new" : "" })));
  svg.id = "uopgraph";
  m.appendChild(svg);
  m.appendChild(el("h3", {}, "source"));
  m.appendChild(el("pre", { id: "source" }, k.src));
  m.appendChild(el("h3", {}, "machine code"));
  m.appendChild(el("pre", { id: "asm" }, k.asm));
}
function showTimeline() {
  const m = $("main"), ev = DATA.trace.traceEvents;
  m.innerHTML = "";
  m.appendChild(el("h3", {}, "timeline"));
  const names = {}, X = ev.filter((e) => e.ph === "X");
  for (const e of ev) if (e.ph === "M") names[e.pid] = e.args.name;
  if (!X.length) { m.appendChild(el("div", {}, "no events (run with VIZ=1 or PROFILE=1)")); return; }
  const t0 = Math.min(...X.map((e) => e.ts)), t1 = Math.max(...X.map((e) => e.ts + e.dur));
  const pids = [...new Set(X.map((e) => e.pid))].sort(), W = 1100, rowH = 40, sc = (W - 120) / Math.max(1, t1 - t0);
  const svg = el("svg", { id: "timeline", width: W, height: 20 + pids.length * rowH });
  const color = { kernel: "#6a6", copy: "#69c", jit: "#c96", compile: "#bbb", host: "#ddd", beam: "#c6c" };
  pids.forEach((p, r) => {
    const g = el("g", { class: "track", "data-track": names[p] || p });
    g.appendChild(el("text", { x: 2, y: 14 + r * rowH + rowH / 2 }, names[p] || p));
    for (const e of X.filter((e) => e.pid === p)) {
      const y = 10 + r * rowH + (e.tid ? rowH / 2 : 0);
      const rc = el("rect", { class: "ev", "data-cat": e.cat, x: 110 + (e.ts - t0) * sc, y, width: Math.max(0.5, e.dur * sc), height: rowH / 2 - 2, fill: color[e.cat] || "#999" });
      rc.appendChild(el("title", {}, `${e.name} ${e.dur.toFixed(1)} us ${JSON.stringify(e.args)}`));
      g.appendChild(rc);
    }
    svg.appendChild(g);
  });
  m.appendChild(svg);
}
function init() {
  const rl = $("realizes"), kl = $("kernels");
  DATA.realizes.forEach((r, i) => { const li = el("li", {}, `realize ${i} (${r.kernels.length})`); li.onclick = () => showRealize(i); rl.appendChild(li); });
  DATA.kernels.forEach((k, i) => { const li = el("li", { class: "kernel" }, k.name); li.onclick = () => showKernel(i); kl.appendChild(li); });
  $("tl").onclick = showTimeline;
  const h = location.hash.slice(1);
  if (h === "timeline") showTimeline();
  else if (h.startsWith("realize")) showRealize(+h.slice(7) || 0);
  else if (h.startsWith("kernel")) showKernel(+h.slice(6) || 0);
  else if (DATA.kernels.length) showKernel(0);
}
init();
