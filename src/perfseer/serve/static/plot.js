// A small SVG line chart (no library): series of [x, y] points on log or linear axes.
"use strict";
const PALETTE = ["#2271b1", "#d63638", "#00a32a", "#dba617", "#8c5fc7", "#135e96", "#e65054", "#007017"];

function niceTicks(lo, hi, log) {
  if (log) {
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of [1, 2, 5]) { const v = m * Math.pow(10, e); if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v); }
    }
    return out.length >= 2 ? out : [lo, hi];
  }
  const span = hi - lo || 1, step0 = Math.pow(10, Math.floor(Math.log10(span / 5)));
  const step = [1, 2, 5, 10].map(m => m * step0).find(s => span / s <= 6);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(v);
  return out;
}

function fmt(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e4 || a < 1e-2) return v.toExponential(0);
  return String(+v.toPrecision(3));
}

function linePlot({title, xlabel, ylabel, series, logx = true, logy = true, width = 520, height = 320, hlines = []}) {
  const NS = "http://www.w3.org/2000/svg";
  const el = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const svg = el("svg", {width, height, class: "plot", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title});
  const m = {l: 62, r: 12, t: 26, b: 68};
  const pts = series.flatMap(s => s.points).filter(p => isFinite(p[0]) && isFinite(p[1]) && (!logx || p[0] > 0) && (!logy || p[1] > 0));
  const ys = pts.map(p => p[1]).concat(hlines.map(h => h.y));
  if (!pts.length) { svg.appendChild(el("text", {x: 20, y: 40}, "nothing to plot")); return svg; }
  let [x0, x1] = [Math.min(...pts.map(p => p[0])), Math.max(...pts.map(p => p[0]))];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 = logx ? x0 / 2 : x0 - 1; x1 = logx ? x1 * 2 : x1 + 1; }
  if (y0 === y1) { y0 = logy ? y0 / 2 : y0 - 1; y1 = logy ? y1 * 2 : y1 + 1; }
  if (logy) { y0 /= 1.3; y1 *= 1.3; } else { y0 = Math.min(0, y0); y1 *= 1.05; }
  const tx = v => logx ? Math.log10(v) : v, ty = v => logy ? Math.log10(v) : v;
  const X = v => m.l + (tx(v) - tx(x0)) / (tx(x1) - tx(x0) || 1) * (width - m.l - m.r);
  const Y = v => height - m.b - (ty(v) - ty(y0)) / (ty(y1) - ty(y0) || 1) * (height - m.t - m.b);
  svg.appendChild(el("text", {x: m.l, y: 16, class: "title"}, title));
  for (const v of niceTicks(y0, y1, logy)) {
    svg.appendChild(el("line", {x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v), class: "grid"}));
    svg.appendChild(el("text", {x: m.l - 6, y: Y(v) + 4, "text-anchor": "end"}, fmt(v)));
  }
  for (const v of niceTicks(x0, x1, logx)) {
    svg.appendChild(el("line", {x1: X(v), x2: X(v), y1: m.t, y2: height - m.b, class: "grid"}));
    svg.appendChild(el("text", {x: X(v), y: height - m.b + 14, "text-anchor": "middle"}, fmt(v)));
  }
  svg.appendChild(el("line", {x1: m.l, x2: m.l, y1: m.t, y2: height - m.b, class: "axis"}));
  svg.appendChild(el("line", {x1: m.l, x2: width - m.r, y1: height - m.b, y2: height - m.b, class: "axis"}));
  svg.appendChild(el("text", {x: (m.l + width - m.r) / 2, y: height - m.b + 30, "text-anchor": "middle"}, xlabel));
  svg.appendChild(el("text", {x: 14, y: (m.t + height - m.b) / 2, "text-anchor": "middle",
                              transform: `rotate(-90 14 ${(m.t + height - m.b) / 2})`}, ylabel));
  for (const h of hlines) {
    svg.appendChild(el("line", {x1: m.l, x2: width - m.r, y1: Y(h.y), y2: Y(h.y), stroke: "#50575e", "stroke-dasharray": "4 3"}));
    svg.appendChild(el("text", {x: width - m.r - 4, y: Y(h.y) - 4, "text-anchor": "end"}, h.label));
  }
  series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length];
    const ok = s.points.filter(p => isFinite(p[1]) && (!logy || p[1] > 0)).sort((a, b) => a[0] - b[0]);
    if (s.band) {
      const band = s.band.filter(b => b[1] > 0 && b[2] > 0).sort((a, b) => a[0] - b[0]);
      if (band.length > 1) {
        const d = band.map((b, j) => `${j ? "L" : "M"}${X(b[0])},${Y(b[2])}`).join("") +
          band.slice().reverse().map(b => `L${X(b[0])},${Y(b[1])}`).join("") + "Z";
        svg.appendChild(el("path", {d, fill: color, "fill-opacity": 0.12, stroke: "none"}));
      }
    }
    svg.appendChild(el("path", {d: ok.map((p, j) => `${j ? "L" : "M"}${X(p[0])},${Y(p[1])}`).join(""),
                                fill: "none", stroke: color, "stroke-width": 2}));
    for (const p of ok) svg.appendChild(el("circle", {cx: X(p[0]), cy: Y(p[1]), r: 3, fill: color}));
    const lx = m.l + (i % 2) * (width - m.l - m.r) / 2, ly = height - 22 + Math.floor(i / 2) * 13;
    svg.appendChild(el("rect", {x: lx, y: ly - 8, width: 10, height: 10, fill: color}));
    svg.appendChild(el("text", {x: lx + 14, y: ly + 1}, s.name));
  });
  return svg;
}
