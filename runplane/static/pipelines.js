// runplane web UI: the pipelines list (/pipelines) and a pipeline run (/pipelines/<id>),
// drawn as its DAG: a column per depth, a box per stage (live phase colour, a link to its
// job, its exit code or error), an SVG edge from each stage it needs.

import { TERMINAL, api, el, live, phaseBadge, table, view } from "./core.js";
import { when } from "./format.js";
import { pipelinesHowTo } from "./howto.js";

const SVG = "http://www.w3.org/2000/svg";

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
    if (!runs.length) {
      if (!body.querySelector("#pipelines-howto")) body.replaceChildren(pipelinesHowTo());
      return;
    }
    body.replaceChildren(table(["name", "run", "status", "stages", "created"], runs.map((r) => el("tr", { "data-pipeline": r.pipeline_run_id },
      el("td", {}, el("a", { href: `/pipelines/${r.pipeline_run_id}` }, r.name || r.pipeline_run_id)),
      el("td", { class: "muted" }, r.pipeline_run_id), el("td", {}, phaseBadge(r.status)),
      el("td", {}, String(r.stage_count)), el("td", {}, when(r.created_at))))));
  });
}

function stageBox(stage, job) {
  const exit = job ? job.exit_code ?? (job.signal ? `signal ${job.signal}` : null) : null;
  return el("li", { class: `stage stage-${stage.phase}`, "data-stage": stage.name, "data-phase": stage.phase },
    el("div", { class: "stage-name" },
      stage.job_id ? el("a", { href: `/jobs/${stage.job_id}` }, stage.name) : el("strong", {}, stage.name)),
    el("div", {}, phaseBadge(stage.phase), " ", el("span", { class: "muted" }, stage.stack || "")),
    exit !== null && exit !== undefined ? el("div", { class: "stage-exit" }, `exit code ${exit}`) : null,
    stage.error && stage.error !== `exit code ${exit}` ? el("div", { class: "stage-error" }, stage.error) : null);
}

// The edges, drawn once the boxes are laid out: from the right of a need to the left of
// the stage that needs it (an arrowhead at the stage).
function drawEdges(graph, stages) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "dag-edges");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("width", String(graph.scrollWidth));
  svg.setAttribute("height", String(graph.scrollHeight));
  svg.innerHTML = '<defs><marker id="dag-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0 L8,4 L0,8 z"/></marker></defs>';
  const origin = graph.getBoundingClientRect();
  const box = (name) => graph.querySelector(`[data-stage="${CSS.escape(name)}"]`).getBoundingClientRect();
  for (const stage of stages) {
    for (const need of stage.needs) {
      const from = box(need), to = box(stage.name);
      const x1 = from.right - origin.left, y1 = from.top + from.height / 2 - origin.top;
      const x2 = to.left - origin.left, y2 = to.top + to.height / 2 - origin.top;
      const bend = (x2 - x1) / 2;
      const path = document.createElementNS(SVG, "path");
      path.setAttribute("d", `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`);
      path.setAttribute("data-edge", `${need}->${stage.name}`);
      path.setAttribute("marker-end", "url(#dag-arrow)");
      svg.append(path);
    }
  }
  graph.prepend(svg);
}

export function pipelinePage(runId) {
  document.title = `${runId} · runplane`;
  const graph = el("div", { class: "dag-graph" });
  const body = el("div", { class: "dag", id: "dag" }, graph);
  const title = el("span", {}, runId);
  const status = el("span");
  const id = el("span", { class: "muted run-id" });
  const jobs = new Map(); // the stage jobs that ended (their exit codes), fetched once
  view.replaceChildren(el("h1", { class: "pipeline-title" }, title, " ", id, " ", status), body);
  live(async () => {
    const run = await api(`/v1/pipelines/${runId}`);
    if (run.name) {
      title.textContent = run.name;
      id.textContent = runId;
      document.title = `${run.name} · runplane`;
    }
    status.replaceChildren(phaseBadge(run.status));
    const missing = run.stages.some((s) => s.job_id && TERMINAL.includes(s.phase) && !jobs.has(s.job_id));
    if (missing) {
      for (const job of await api(`/v1/jobs?pipeline=${encodeURIComponent(runId)}`)) {
        if (TERMINAL.includes(job.phase)) jobs.set(job.job_id, job);
      }
    }
    const depth = depthOf(run.stages);
    const columns = [];
    for (const stage of run.stages) {
      const d = depth.get(stage.name);
      columns[d] = columns[d] || el("ol", { class: "dag-level", "aria-label": `level ${d + 1}` });
      columns[d].append(stageBox(stage, jobs.get(stage.job_id)));
    }
    graph.replaceChildren(...columns.filter(Boolean));
    drawEdges(graph, run.stages);
  });
}
