// runplane web UI: a job array's sweep page (/arrays/<id>): the counts and cancel button,
// the sweep table (docs/ui.md "Sweep page": one row per job, the config values that differ,
// the final metrics, the best per metric marked by the stack's higher_is_better), sortable
// by any column; a metric against a config key; a metric's curve of every job on one chart.

import { plot } from "./chart.js";
import { TERMINAL, api, el, phaseBadge, showError, view } from "./core.js";
import { arrayStatus } from "./jobs.js";

const CURVES_MAX = 50; // recordings fetched for the several-runs chart

const shown = (v) => (v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v));

// The sweep table's data: the rows by index, the config keys whose values differ, the
// final-metric keys, and the best job per metric the stack ranks ({key: higher_is_better}).
export function sweepTable(jobs, ranks) {
  const sorted = [...jobs].sort((a, b) => (a.array_index ?? 0) - (b.array_index ?? 0));
  const configs = sorted.map((j) => (j.spec && j.spec.config) || {});
  const keys = [...new Set(configs.flatMap((c) => Object.keys(c)))].sort();
  const configKeys = keys.filter((k) => new Set(configs.map((c) => JSON.stringify(c[k]))).size > 1);
  const metricKeys = [...new Set(sorted.flatMap((j) => Object.keys(j.final_metrics || {})))].sort();
  const rows = sorted.map((j, i) => ({
    index: j.array_index, job_id: j.job_id, phase: j.phase,
    config: Object.fromEntries(configKeys.map((k) => [k, configs[i][k]])),
    metrics: { ...(j.final_metrics || {}) },
  }));
  const best = {};
  for (const key of metricKeys) {
    if (!(key in ranks)) continue;
    let top = null;
    for (const row of rows) {
      const v = row.metrics[key];
      if (typeof v !== "number") continue;
      if (top === null || (ranks[key] ? v > top.metrics[key] : v < top.metrics[key])) top = row;
    }
    if (top) best[key] = top.job_id;
  }
  return { configKeys, metricKeys, best, rows };
}

// The value a column sorts by: numbers as numbers, the rest as text, missing ones last.
function cellValue(row, column) {
  if (column.kind === "config") return row.config[column.key];
  if (column.kind === "metric") return row.metrics[column.key];
  return row[column.key];
}

export function compare(a, b) {
  const missing = (v) => v === undefined || v === null || v === "";
  if (missing(a) || missing(b)) return missing(a) - missing(b);
  if (typeof a === "number" && typeof b === "number") return a - b;
  return shown(a).localeCompare(shown(b), undefined, { numeric: true });
}

function columnsOf(data) {
  return [{ kind: "", key: "index", label: "#" }, { kind: "", key: "job_id", label: "job" },
    { kind: "", key: "phase", label: "phase" },
    ...data.configKeys.map((key) => ({ kind: "config", key, label: key })),
    ...data.metricKeys.map((key) => ({ kind: "metric", key, label: key }))];
}

function renderTable(data, ranks, sort, onSort) {
  const columns = columnsOf(data);
  const rows = [...data.rows];
  const column = columns.find((c) => `${c.kind}:${c.key}` === sort.id);
  if (column) {
    rows.sort((a, b) => {
      const va = cellValue(a, column), vb = cellValue(b, column);
      const missing = (v) => v === undefined || v === null || v === "";
      if (missing(va) !== missing(vb)) return missing(va) ? 1 : -1; // missing last either way
      return sort.dir * compare(va, vb);
    });
  }
  const head = columns.map((c) => {
    const id = `${c.kind}:${c.key}`;
    const aria = id === sort.id ? (sort.dir > 0 ? "ascending" : "descending") : "none";
    const ranked = c.kind === "metric" && c.key in ranks;
    const rank = ranked ? el("span", { class: "rank muted" }, ranks[c.key] ? " (best: max)" : " (best: min)") : "";
    const button = el("button", { type: "button", class: "sort", "data-focus": `sort-${id}`,
      title: `sort by ${c.label}` }, c.label, rank);
    button.addEventListener("click", () => onSort(id));
    return el("th", { "aria-sort": aria, "data-column": id, class: c.kind ? `col-${c.kind}` : "" }, button);
  });
  const body = rows.map((row) => el("tr", { "data-job": row.job_id, "data-index": String(row.index) },
    columns.map((c) => {
      const v = cellValue(row, c);
      if (c.key === "job_id" && !c.kind) return el("td", {}, el("a", { href: `/jobs/${row.job_id}`, class: "id" }, row.job_id));
      if (c.key === "phase" && !c.kind) return el("td", {}, phaseBadge(row.phase));
      // the best value is marked on every job that reached it (ties included)
      const top = c.kind === "metric" ? data.rows.find((r) => r.job_id === data.best[c.key]) : null;
      const isBest = Boolean(top) && v === top.metrics[c.key];
      return el("td", { class: `${c.kind === "metric" ? "num" : ""}${isBest ? " best" : ""}`,
        "data-column": `${c.kind}:${c.key}`, ...(isBest ? { title: "best of the sweep" } : {}) }, shown(v));
    })));
  return el("div", { class: "table-wrap" }, el("table", { id: "sweep-table", class: "sweep" },
    el("thead", {}, el("tr", {}, head)), el("tbody", {}, body)));
}

// Options of a select, keeping a choice made while its key stays (else the first).
function setOptions(select, keys) {
  const current = select.value;
  const now = [...select.options].map((o) => o.value).join("\n");
  if (now !== keys.join("\n")) select.replaceChildren(...keys.map((k) => el("option", { value: k }, k)));
  select.value = select.dataset.chosen && keys.includes(current) ? current : keys[0] || "";
  select.disabled = !keys.length;
}

// A chosen metric against a chosen config key: one point per finished job with that metric;
// the jobs sharing the other swept values are one series, joined (up to 10 series).
function metricByConfig(data, metric, key) {
  const done = data.rows.filter((r) => TERMINAL.includes(r.phase) && typeof r.metrics[metric] === "number");
  const xs = done.map((r) => r.config[key]);
  const numeric = xs.every((x) => typeof x === "number");
  const categories = numeric ? null : [...new Set(xs.map(shown))].sort((a, b) => compare(a, b));
  const others = data.configKeys.filter((k) => k !== key);
  const groups = new Map();
  for (const r of done) {
    const name = others.map((k) => `${k}=${shown(r.config[k])}`).join(" ") || metric;
    if (!groups.has(name)) groups.set(name, []);
    groups.get(name).push([numeric ? r.config[key] : categories.indexOf(shown(r.config[key])), r.metrics[metric]]);
  }
  const joined = groups.size > 1 && groups.size <= 10;
  const series = joined ? [...groups].map(([name, points]) => ({ name, points }))
    : [{ name: metric, points: [...groups.values()].flat() }];
  return plot({ title: `${metric} by ${key}`, series, xLabel: key, yLabel: metric, categories,
    line: joined, xMargin: 0.05, id: "metric-by-config",
    caption: `${metric} against ${key}: ${done.length} finished job${done.length === 1 ? "" : "s"}` });
}

export async function sweepPage(arrayId) {
  document.title = `Sweep ${arrayId} · runplane`;
  const counts = el("div", { id: "array-box", hidden: "" });
  const tableBox = el("div", { id: "sweep-box" }, el("p", { class: "muted" }, "Loading…"));
  const metricSel = el("select", { id: "sweep-metric", "aria-label": "metric" });
  const configSel = el("select", { id: "sweep-config", "aria-label": "config key" });
  const curveSel = el("select", { id: "curve-metric", "aria-label": "metric over steps" });
  const scatter = el("div", { class: "chart-box", id: "scatter-box" });
  const curves = el("div", { class: "chart-box", id: "curves-box" });
  view.replaceChildren(
    el("h1", {}, "Sweep ", el("span", { class: "id" }, arrayId)), counts,
    el("p", {}, el("a", { href: `/?array=${encodeURIComponent(arrayId)}` }, "Its jobs in the jobs list")),
    el("section", {}, el("h2", {}, "Runs"), tableBox),
    el("section", { class: "sweep-charts" },
      el("div", {}, el("h2", {}, "A metric against a config key"),
        el("div", { class: "filters" }, el("label", {}, "metric ", metricSel), el("label", {}, "config ", configSel)), scatter),
      el("div", {}, el("h2", {}, "Several runs on one chart"),
        el("div", { class: "filters" }, el("label", {}, "metric ", curveSel)), curves)));
  const sort = { id: ":index", dir: 1 };
  let data = null, ranks = {}, stackName = null;
  const recordings = new Map(); // job id -> {phase, at, metrics}
  const drawn = { scatter: "", curves: "" };
  const draw = () => {
    tableBox.replaceChildren(renderTable(data, ranks, sort, (id) => {
      sort.dir = sort.id === id ? -sort.dir : 1;
      sort.id = id;
      draw();
      tableBox.querySelector(`[data-focus="${CSS.escape(`sort-${id}`)}"]`)?.focus();
    }));
  };
  async function drawCharts(jobs) {
    setOptions(metricSel, data.metricKeys);
    setOptions(configSel, data.configKeys);
    const sig = JSON.stringify([metricSel.value, configSel.value, data.rows.map((r) => [r.phase, r.metrics, r.config])]);
    if (sig !== drawn.scatter) {
      drawn.scatter = sig;
      scatter.replaceChildren(metricSel.value && configSel.value ? metricByConfig(data, metricSel.value, configSel.value)
        : el("p", { class: "muted" }, data.metricKeys.length ? "No config key differs between these jobs."
          : "No final metrics yet: a job reports them with ::metric lines."));
    }
    await drawCurves(jobs);
  }
  async function drawCurves(jobs) {
    const now = Date.now();
    for (const job of jobs.slice(0, CURVES_MAX)) {
      const had = recordings.get(job.job_id);
      const final = had && TERMINAL.includes(had.phase);
      if (final || (had && now - had.at < 10_000) || !job.started_at) continue;
      try {
        const rec = await api(`/v1/jobs/${job.job_id}/recording`);
        recordings.set(job.job_id, { phase: job.phase, at: now, metrics: rec.metrics || [] });
      } catch { /* expired or not readable: no curve */ }
    }
    const seen = new Map(); // metric key -> points, the most-charted first
    for (const r of recordings.values()) for (const m of r.metrics) for (const k of Object.keys(m.values)) seen.set(k, (seen.get(k) || 0) + 1);
    const keys = [...seen.keys()].sort((a, b) => seen.get(b) - seen.get(a) || a.localeCompare(b));
    setOptions(curveSel, keys);
    const key = curveSel.value;
    const series = data.rows.filter((r) => recordings.has(r.job_id)).map((r) => {
      const ms = recordings.get(r.job_id).metrics.filter((m) => key in m.values);
      const config = data.configKeys.map((k) => `${k}=${shown(r.config[k])}`).join(" ");
      return { name: `#${r.index}${config ? ` ${config}` : ""}`, href: `/jobs/${r.job_id}`,
        points: ms.map((m, i) => [m.step ?? i, m.values[key]]) };
    }).filter((s) => s.points.length);
    const sig = JSON.stringify([key, series]);
    if (sig === drawn.curves) return;
    drawn.curves = sig;
    curves.replaceChildren(series.length ? plot({ title: key, series, yLabel: key, id: "curves",
      caption: `${key} over steps, ${series.length} run${series.length === 1 ? "" : "s"}${jobs.length > CURVES_MAX ? ` (the first ${CURVES_MAX})` : ""}` })
      : el("p", { class: "muted" }, "No metric points yet."));
  }
  async function refresh() {
    try {
      await arrayStatus(arrayId, counts, { sweepLink: false });
      const jobs = await api(`/v1/jobs?array=${encodeURIComponent(arrayId)}&limit=1000`);
      if (jobs.length && stackName !== jobs[0].stack) {
        stackName = jobs[0].stack;
        const stack = await api(`/v1/stacks/${encodeURIComponent(stackName)}?view=launch`).catch(() => ({}));
        ranks = Object.fromEntries((stack.metrics || []).map((m) => [m.key, m.higher_is_better]));
      }
      const next = sweepTable(jobs, ranks);
      const changed = JSON.stringify(next) !== JSON.stringify(data);
      data = next;
      if (changed) {
        // a redraw keeps the keyboard on the header button it was on
        const focus = tableBox.contains(document.activeElement) ? document.activeElement.dataset.focus : null;
        draw();
        if (focus) tableBox.querySelector(`[data-focus="${CSS.escape(focus)}"]`)?.focus();
      }
      await drawCharts(jobs.sort((a, b) => (a.array_index ?? 0) - (b.array_index ?? 0)));
      showError("");
    } catch (error) { showError(error.message); }
  }
  for (const s of [metricSel, configSel, curveSel]) s.addEventListener("change", () => { s.dataset.chosen = "1"; });
  for (const s of [metricSel, configSel]) s.addEventListener("change", () => drawCharts([]));
  curveSel.addEventListener("change", () => drawCurves([]));
  await refresh();
  setInterval(refresh, 3000);
}
