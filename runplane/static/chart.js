// runplane web UI: metric and load charts (SVG drawn here; no chart library).

import { el } from "./core.js";

export function chart(key, points) {
  const values = points.map((p) => p[1]);
  const lo = Math.min(...values), hi = Math.max(...values);
  const span = hi - lo || 1;
  const coords = points
    .map((p, i) => `${(i / Math.max(points.length - 1, 1)) * 100},${40 - ((p[1] - lo) / span) * 36 - 2}`)
    .join(" ");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 100 40");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${key}: last ${values[values.length - 1]}`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", coords);
  svg.append(line);
  return el("figure", { class: "chart", "data-key": key },
    el("figcaption", {}, `${key}: ${values[values.length - 1]}`), svg);
}

