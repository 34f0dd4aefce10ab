// runplane web UI: the pipelines list (/pipelines) and a pipeline run (/pipelines/<id>).

import { api, el, live, phaseBadge, table, view } from "./core.js";

function depthOf(stages) {
  const by = new Map(stages.map((s) => [s.name, s]));
  const depth = new Map();
  const of = (name) => {
    if (!depth.has(name)) depth.set(name, 1 + Math.max(-1, ...by.get(name).needs.map(of)));
    return depth.get(name);
  };
  stages.forEach((s) => of(s.name));
  return depth;
}

export function pipelinesPage() {
  document.title = "Pipelines · runplane";
  const body = el("div");
  view.replaceChildren(el("h1", {}, "Pipelines"), body);
  live(async () => {
    const runs = await api("/v1/pipelines");
    body.replaceChildren(table(["run", "name", "status", "stages"], runs.map((r) => el("tr", {},
      el("td", {}, el("a", { href: `/pipelines/${r.pipeline_run_id}` }, r.pipeline_run_id)),
      el("td", {}, r.name), el("td", {}, phaseBadge(r.status)), el("td", {}, String(r.stage_count))))));
  });
}

export function pipelinePage(runId) {
  document.title = `${runId} · runplane`;
  const body = el("div", { class: "dag", id: "dag" });
  const status = el("span");
  view.replaceChildren(el("h1", {}, runId, " ", status), body);
  live(async () => {
    const run = await api(`/v1/pipelines/${runId}`);
    status.replaceChildren(phaseBadge(run.status));
    const depth = depthOf(run.stages);
    const columns = [];
    for (const stage of run.stages) {
      const d = depth.get(stage.name);
      columns[d] = columns[d] || el("ol", { class: "dag-level", "aria-label": `level ${d + 1}` });
      columns[d].append(el("li", { "data-stage": stage.name },
        stage.job_id ? el("a", { href: `/jobs/${stage.job_id}` }, stage.name) : stage.name, " ",
        phaseBadge(stage.phase),
        stage.needs.length ? el("span", { class: "muted" }, ` ← ${stage.needs.join(", ")}`) : null,
        stage.error ? el("div", { class: "muted" }, stage.error) : null));
    }
    body.replaceChildren(...columns.filter(Boolean));
  });
}
