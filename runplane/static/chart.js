// runplane web UI: charts (SVG drawn here, no chart library: docs/ui.md "Charts").
// chart(key, points, options) draws one series; plot(options) draws several on one chart.
// Points are [x, y] pairs. A chart has x and y axes with a few tick labels, axis titles,
// a dot per point when there are few (a single point is a dot with its value), a <title>
// per dot, a hover readout of the nearest point, and a legend when there are several series.

import { el } from "./core.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 480, H = 220;
const PAD = { left: 56, right: 14, top: 12, bottom: 40 };
export const COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2",
  "#ca8a04", "#db2777", "#4b5563", "#65a30d"];

function svgEl(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

// A number as a tick or readout shows it: short, without float noise.
export function num(value) {
  if (typeof value !== "number" || !Number.isFinite(value)) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs >= 1e6 || abs < 1e-3)) return value.toExponential(2);
  return String(Number(value.toPrecision(4)));
}

// About `count` round tick values covering lo..hi.
export function ticks(lo, hi, count = 5) {
  if (lo === hi) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

function clock(ms, span) {
  const seconds = span < 600_000 ? { second: "2-digit" } : {};
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", ...seconds });
}

// The range of some values; `margin` (a fraction of it) keeps dots off the axes.
// A single value gets `single` either side (by default a tenth of it, or 1).
function extent(values, margin = 0, single = null) {
  const lo = Math.min(...values), hi = Math.max(...values);
  if (lo === hi) { const pad = single ?? (Math.abs(lo) * 0.1 || 1); return [lo - pad, hi + pad]; }
  const pad = (hi - lo) * margin;
  return [lo - pad, hi + pad];
}

// One series: chart(key, points) as the run view always called it; options as for plot().
export function chart(key, points, options = {}) {
  return plot({ title: key, yLabel: key, ...options, series: [{ name: key, points }] });
}

// options: title, series [{name, points, href?}], xLabel ("step" by default; "time" with
// xTime: x in unix ms), yLabel, unit, yMin/yMax (a fixed range), categories (x labels:
// x is their index), line (false: dots only), xMargin (room either side of x, a fraction
// of its span), caption (default "title: last value"), id.
// The drawing follows its box's width (a ResizeObserver redraws it), text keeps its size.
export function plot(options) {
  const { title = "", series = [], xTime = false } = options;
  const xLabel = options.xLabel || (xTime ? "time" : "step");
  const yLabel = `${options.yLabel ?? title}${options.unit ? ` (${options.unit})` : ""}`;
  const all = series.flatMap((s) => s.points);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  const readout = el("output", { class: "chart-readout muted" }, "");
  const last = series.length === 1 && all.length ? all[all.length - 1][1] : null;
  const caption = options.caption ?? (last === null ? title : `${title}: ${num(last)}`);
  const figure = el("figure", { class: "chart", "data-key": title, ...(options.id ? { id: options.id } : {}) },
    el("figcaption", {}, caption), svg, readout);
  svg.setAttribute("aria-label", `${yLabel} against ${xLabel}${last === null ? "" : `: last ${num(last)}`}`);
  if (series.length > 1) {
    figure.append(el("ul", { class: "legend" }, series.map((s, i) => el("li", { "data-series": s.name },
      el("span", { class: "swatch", style: `background:${COLOURS[i % COLOURS.length]}` }),
      s.href ? el("a", { href: s.href }, s.name) : s.name))));
  }
  if (!all.length) {
    svg.append(svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "chart-empty" }, "no points yet"));
    return figure;
  }
  const state = { targets: [], ring: null };
  const draw = (width) => {
    svg.setAttribute("viewBox", `0 0 ${width} ${H}`);
    svg.replaceChildren(...drawing({ ...options, series, all, xLabel, yLabel, width }, state));
  };
  draw(W);
  hover(svg, series, state, { ...options, readout });
  if (typeof ResizeObserver !== "undefined") {
    let drawnAt = W;
    new ResizeObserver(() => {
      const width = Math.round(svg.getBoundingClientRect().width);
      if (width > 80 && Math.abs(width - drawnAt) > 2) { drawnAt = width; draw(width); }
    }).observe(svg);
  }
  return figure;
}

function drawing({ series, all, xTime = false, categories = null, line = true, xLabel, yLabel, width, yMin, yMax, xMargin }, state) {
  const [x0, x1] = categories ? [-0.5, categories.length - 0.5] : extent(all.map((p) => p[0]), xMargin ?? (line ? 0 : 0.05), xTime ? 60_000 : null);
  let [y0, y1] = extent(all.map((p) => p[1]), 0.05);
  if (yMin !== undefined) y0 = Math.min(yMin, y0);
  if (yMax !== undefined) y1 = Math.max(yMax, y1);
  const px = (x) => PAD.left + ((x - x0) / (x1 - x0)) * (width - PAD.left - PAD.right);
  const py = (y) => H - PAD.bottom - ((y - y0) / (y1 - y0)) * (H - PAD.top - PAD.bottom);
  const xs = new Set(all.map((p) => p[0])), ys = new Set(all.map((p) => p[1]));
  const only = { x: xs.size === 1 ? [...xs] : null, y: ys.size === 1 && yMin === undefined ? [...ys] : null,
    integers: [...xs].every(Number.isInteger) };
  const out = [axes({ x0, x1, y0, y1, px, py, xTime, categories, xLabel, yLabel, width, only })];
  const dots = all.length <= 60 || !line;
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    const g = svgEl("g", { class: "series", "data-series": s.name, stroke: colour, fill: colour });
    const sorted = [...s.points].sort((a, b) => a[0] - b[0]);
    if (line && sorted.length > 1) {
      g.append(svgEl("polyline", { points: sorted.map((p) => `${px(p[0])},${py(p[1])}`).join(" "), fill: "none" }));
    }
    if (dots || sorted.length === 1) {
      for (const p of sorted) {
        const dot = svgEl("circle", { cx: px(p[0]), cy: py(p[1]), r: sorted.length === 1 ? 4 : 3, class: "dot" });
        dot.append(svgEl("title", {}, `${s.name}: ${xText(p[0], xTime, categories)}, ${num(p[1])}`));
        g.append(dot);
      }
    }
    if (all.length === 1) {
      g.append(svgEl("text", { x: px(sorted[0][0]) + 7, y: py(sorted[0][1]) - 7, class: "dot-value", stroke: "none" }, num(sorted[0][1])));
    }
    out.push(g);
  });
  state.ring = svgEl("circle", { r: 6, class: "hover-ring", visibility: "hidden" });
  out.push(state.ring);
  state.targets = series.flatMap((s, i) => s.points.map((p) => ({ s, i, p, x: px(p[0]), y: py(p[1]) })));
  state.width = width;
  return out;
}

function xText(x, xTime, categories) {
  if (categories) return String(categories[x]);
  return xTime ? new Date(x).toLocaleTimeString() : num(x);
}

// `only`: the single x or y value when there is one (its only tick), and whether every x
// is an integer (steps: no ticks between them).
function axes({ x0, x1, y0, y1, px, py, xTime, categories, xLabel, yLabel, width, only }) {
  const g = svgEl("g", { class: "axes" });
  const bottom = H - PAD.bottom;
  g.append(svgEl("line", { x1: PAD.left, y1: bottom, x2: width - PAD.right, y2: bottom }));
  g.append(svgEl("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: bottom }));
  for (const v of only.y || ticks(y0, y1)) {
    g.append(svgEl("line", { x1: PAD.left, y1: py(v), x2: width - PAD.right, y2: py(v), class: "grid" }));
    g.append(svgEl("text", { x: PAD.left - 5, y: py(v) + 4, "text-anchor": "end", class: "tick y-tick" }, num(v)));
  }
  const room = Math.max(2, Math.floor((width - PAD.left - PAD.right) / 90)); // labels ~90 px apart
  let xs = categories ? categories.map((_, i) => i) : only.x || (xTime ? timeTicks(x0, x1, room) : ticks(x0, x1, Math.min(room, 6)));
  if (!categories && !xTime && only.integers && xs.some(Number.isInteger)) xs = xs.filter(Number.isInteger);
  for (const v of xs) {
    const label = categories ? String(categories[v]) : xTime ? clock(v, x1 - x0) : num(v);
    const anchor = px(v) > width - PAD.right - 30 ? "end" : "middle"; // the last one stays inside
    g.append(svgEl("text", { x: px(v), y: bottom + 15, "text-anchor": anchor, class: "tick x-tick" }, label));
  }
  g.append(svgEl("text", { x: (PAD.left + width - PAD.right) / 2, y: H - 6, "text-anchor": "middle", class: "axis-title x-title" }, xLabel));
  g.append(svgEl("text", { x: 12, y: (PAD.top + bottom) / 2, "text-anchor": "middle", class: "axis-title y-title",
    transform: `rotate(-90 12 ${(PAD.top + bottom) / 2})` }, yLabel));
  return g;
}

// Time ticks on round seconds or minutes.
function timeTicks(lo, hi, count) {
  const steps = [1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600].map((s) => s * 1000);
  const step = steps.find((s) => (hi - lo) / s <= count) || steps[steps.length - 1];
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
  return out.length ? out : [lo, hi]; // under a second: its two ends
}

// The pointer's nearest point (by distance on the drawing): a ring on it and its values read out.
function hover(svg, series, state, { xTime = false, categories = null, readout }) {
  svg.addEventListener("mousemove", (event) => {
    const box = svg.getBoundingClientRect();
    const mx = ((event.clientX - box.left) / box.width) * state.width, my = ((event.clientY - box.top) / box.height) * H;
    let best = null, dist = Infinity;
    for (const t of state.targets) {
      const d = (t.x - mx) ** 2 + ((t.y - my) ** 2) / 4;
      if (d < dist) { dist = d; best = t; }
    }
    if (!best) return;
    state.ring.setAttribute("cx", best.x); state.ring.setAttribute("cy", best.y);
    state.ring.setAttribute("stroke", COLOURS[best.i % COLOURS.length]);
    state.ring.setAttribute("visibility", "visible");
    const who = series.length > 1 ? `${best.s.name}: ` : "";
    readout.textContent = `${who}x ${xText(best.p[0], xTime, categories)}, y ${num(best.p[1])}`;
  });
  svg.addEventListener("mouseleave", () => { state.ring?.setAttribute("visibility", "hidden"); readout.textContent = ""; });
}
