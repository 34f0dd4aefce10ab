// runplane web UI: the nodes page (/nodes): the table by name, each node's load as a chart.

import { chart } from "./chart.js";
import { api, el, live, phaseBadge, table, view } from "./core.js";

// No node yet: how to start an agent (docs/agent.md), with this server's address.
function emptyNodes() {
  const server = location.origin;
  return el("div", { class: "empty", id: "nodes-empty" },
    el("p", {}, "No nodes yet. runplane serve starts one on its own machine (unless RUNPLANE_LOCAL_AGENT=0). "
      + "To add a machine, mint a join token (the admin token) and start an agent on it (docs/enrollment.md):"),
    el("pre", { class: "cmd" },
      `curl -X POST ${server}/v1/nodes/join-tokens -H 'Authorization: Bearer $ADMIN_TOKEN'\n`
      + `runplane agent --server ${server} --join-token rpj_...`));
}

function nodeRow(n) {
  return el("tr", { "data-node": n.id },
    el("td", {}, el("span", { class: "node-name", title: n.id }, n.name || n.id)),
    el("td", {}, phaseBadge(n.status)),
    el("td", {}, `${n.used_cpu} / ${n.cpu_cores}`), el("td", {}, `${n.used_ram} / ${n.ram_gb} GB`),
    el("td", {}, `${n.used_gpu} / ${n.gpus}`),
    el("td", {}, (n.running_jobs || []).map((j) => j.job_id
      ? el("a", { href: `/jobs/${j.job_id}`, class: "id" }, `${j.job_id} `) : `${j.phase} `)));
}

// The committed load sampled every 30 s (GET /v1/nodes/{id}/metrics), as a percentage.
async function loadChart(n) {
  const metrics = await api(`/v1/nodes/${n.id}/metrics?window=15m`);
  const points = metrics.samples.map((p) => [p.ts, Math.round(p.load * 1000) / 10]);
  return chart(n.name || n.id, points, {
    xTime: true, yLabel: "load", unit: "%", yMin: 0, yMax: 100, id: `load-${n.id}`,
    caption: `${n.name || n.id}: committed load (the peak of CPU, RAM and job slots)`
      + `${points.length ? `, now ${points[points.length - 1][1]} %` : ", no sample yet"}`,
  });
}

export function nodesPage() {
  document.title = "Nodes · runplane";
  const body = el("div");
  const charts = el("div", { class: "node-charts", id: "node-charts" });
  view.replaceChildren(el("h1", {}, "Nodes"), body,
    el("h2", {}, "Load, last 15 minutes"), charts);
  let tick = 0;
  live(async () => {
    const nodes = await api("/v1/nodes");
    body.replaceChildren(nodes.length
      ? table(["node", "status", "CPU used", "RAM used", "GPUs used", "running jobs"], nodes.map(nodeRow))
      : emptyNodes());
    // the samples come every 30 s: redraw the charts every 10 s (a hover keeps its readout between)
    if (tick++ % 5 === 0 || charts.childElementCount !== Math.min(nodes.length, 10)) {
      charts.replaceChildren(...await Promise.all(nodes.slice(0, 10).map(loadChart)));
    }
  });
}
