// runplane web UI: the nodes page (/nodes).

import { chart } from "./chart.js";
import { api, el, live, phaseBadge, table, view } from "./core.js";

export function nodesPage() {
  document.title = "Nodes · runplane";
  const body = el("div");
  view.replaceChildren(el("h1", {}, "Nodes"), body);
  live(async () => {
    const nodes = await api("/v1/nodes");
    body.replaceChildren(table(["node", "status", "CPU used", "RAM used", "GPUs used", "running jobs"],
      nodes.map((n) => el("tr", { "data-node": n.id },
        el("td", {}, n.name || n.id), el("td", {}, phaseBadge(n.status)),
        el("td", {}, `${n.used_cpu} / ${n.cpu_cores}`), el("td", {}, `${n.used_ram} / ${n.ram_gb} GB`),
        el("td", {}, `${n.used_gpu} / ${n.gpus}`),
        el("td", {}, (n.running_jobs || []).map((j) => j.job_id
          ? el("a", { href: `/jobs/${j.job_id}` }, `${j.job_id} `) : `${j.phase} `))))));
    for (const n of nodes.slice(0, 10)) {
      const metrics = await api(`/v1/nodes/${n.id}/metrics?window=15m`);
      if (metrics.samples.length > 1) {
        body.append(chart(`${n.name || n.id} load`, metrics.samples.map((p, i) => [i, p.load])));
      }
    }
  });
}
