// runplane web UI: the run view (/jobs/<id>, also ?share=) and the embed view (/embed).
// While the job is live its view is fetched every few seconds (facts, node, duration,
// stream counts); once it ended it is fetched again at once and twice more (artifacts are
// reported just after the end), so the page ends equal to the API without a reload.

import { chart } from "./chart.js";
import { TERMINAL, ansi, api, credentialQuery, el, embed, params, phaseBadge, share, showError, size, table, view } from "./core.js";
import { commandSummary, jobDuration, nodeNames, shellJoin, when } from "./format.js";
import { streamsPanel } from "./streams.js";

const REFRESH_MS = 3000;
const FINAL_MS = [0, 1500, 4000]; // the fetches after the end
const ended = (job) => TERMINAL.includes(job.phase);

// A node's name (its id on hover); the id itself where the name is not known (share view).
function nodeLabel(id, names) {
  if (!id) return el("span", { class: "muted" }, "—");
  return el("span", { class: "node", title: id }, names.get(id) || id);
}

// The command on one line (its first line, cut), the whole of it in a <details>.
export function commandBlock(job) {
  const argv = (job.spec && job.spec.command) || [];
  if (!argv.length) return null;
  return el("details", { class: "command", id: "command" },
    el("summary", {}, el("code", {}, commandSummary(argv, 100))),
    el("pre", { "aria-label": "the whole command" }, shellJoin(argv)));
}

function attemptText(job) {
  const extra = [[job.attempts, "requeued"], [job.retries, "retried"], [job.preemptions, "preempted"]]
    .filter(([n]) => n).map(([n, what]) => `${what} ${n}×`);
  return extra.length ? `${job.attempt} (${extra.join(", ")})` : String(job.attempt);
}

function factsList(job, names) {
  const exit = job.exit_code ?? (job.signal ? `signal ${job.signal}` : null);
  const pairs = [
    ["phase", el("dd", { id: "phase", "aria-live": "polite" }, phaseBadge(job.phase))],
    ["stack", el("dd", {}, job.stack)],
    ["node", el("dd", { id: "node" }, nodeLabel(job.node_id, names))],
    ["created", el("dd", {}, when(job.created_at))],
    ["started", el("dd", {}, when(job.started_at))],
    ["finished", el("dd", {}, when(job.finished_at))],
    ["duration", el("dd", { id: "duration" }, jobDuration(job) || "—")],
    ["attempt", el("dd", {}, attemptText(job))],
  ];
  if (job.wait_reason) pairs.splice(1, 0, ["waiting because", el("dd", { id: "wait-reason" }, job.wait_reason)]);
  if (exit !== null && exit !== undefined) pairs.push(["exit code", el("dd", { id: "exit-code" }, String(exit))]);
  if (job.error) pairs.push(["error", el("dd", { id: "job-error" }, job.error)]);
  return el("dl", { class: "facts", id: "facts" }, pairs.flatMap(([k, v]) => [el("dt", {}, k), v]));
}

// The phase timeline, the logs (the Pause/Follow button beside them, gone once the job
// ended) and the metric charts, from the job's event stream.
export function logsPanel(jobId, { categories = null, done = false, onPhase = () => {} } = {}) {
  const allowed = (c) => !categories || !categories.length || categories.includes(c);
  const pre = el("pre", { class: "logs", id: "logs", tabindex: "0", "aria-label": "logs" });
  let follow = true;
  const toggle = el("button", { type: "button", id: "follow", class: "small", "aria-controls": "logs" }, "Pause");
  toggle.hidden = done;
  toggle.addEventListener("click", () => {
    follow = !follow;
    toggle.textContent = follow ? "Pause" : "Follow";
    if (follow) pre.scrollTop = pre.scrollHeight;
  });
  const charts = el("div", { class: "charts", id: "charts" });
  const finals = el("dl", { class: "facts", id: "final-metrics" });
  const series = new Map();
  const timeline = el("ol", { id: "timeline" });
  const source = new EventSource(`/v1/jobs/${jobId}/events?${credentialQuery()}`);
  source.addEventListener("log", (event) => {
    const data = JSON.parse(event.data);
    const rank = data.rank === undefined ? "" : `[rank ${data.rank}] `;  // a gang's rank
    pre.append(el("div", { class: `stream-${data.stream}` }, rank, ansi(data.line)));
    if (follow) pre.scrollTop = pre.scrollHeight;
  });
  source.addEventListener("metric", (event) => {
    const data = JSON.parse(event.data);
    for (const [key, value] of Object.entries(data.values)) {
      if (!series.has(key)) series.set(key, []);
      series.get(key).push([data.step ?? series.get(key).length, value]);
    }
    charts.replaceChildren(...[...series].map(([key, points]) => chart(key, points)));
  });
  source.addEventListener("phase", (event) => {
    const data = JSON.parse(event.data);
    const retry = data.retry ? `retry ${data.retry}` : "";
    const preempted = data.by ? `preempted by ${data.by}` : ""; // docs/placement.md "Preemption"
    const what = data.node_id ? "" : retry || preempted || data.reason || data.error || "";
    const item = el("li", {}, phaseBadge(data.phase), " ", what);
    if (data.node_id) {
      const node = el("span", { class: "node", title: data.node_id }, data.node_id);
      item.append(`attempt ${data.attempt} on `, node);
      nodeNames().then((names) => names.has(data.node_id) ? names : nodeNames(true))
        .then((names) => { node.textContent = names.get(data.node_id) || data.node_id; });
    }
    timeline.append(item);
    document.getElementById("phase")?.replaceChildren(phaseBadge(data.phase));
    if (TERMINAL.includes(data.phase)) {
      source.close(); // the stream ends there
      toggle.hidden = true;
    }
    onPhase(data);
  });
  const parts = [el("section", {}, el("h2", {}, "Phases"), timeline)];
  if (allowed("logs")) {
    parts.push(el("section", { class: "logs-panel" },
      el("div", { class: "panel-head" }, el("h2", {}, "Logs"), toggle), pre));
  }
  if (allowed("metrics")) {
    parts.push(el("section", { id: "metrics" }, el("h2", {}, "Metrics"), finals, charts));
  }
  const update = (job) => {
    const metrics = Object.entries(job.final_metrics || {});
    finals.replaceChildren(...metrics.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-key": k }, String(v))]));
    if (ended(job)) toggle.hidden = true;
  };
  return { parts, update };
}

// An empty artifacts panel says how a job keeps files (docs/jobs.md "Outputs").
const artifactsHint = () => ["No artifacts. A job keeps files by naming them in its ",
  el("code", {}, "outputs"), ": ", el("code", {}, `"outputs": [{"artifact": "model", "glob": "out/*.pt"}]`),
  " in the job body, or ", el("code", {}, "runplane submit STACK --output 'model=out/*.pt' -- COMMAND"), "."];

export function artifactsPanel(job) {
  const body = el("div");
  const section = el("section", { id: "artifacts" }, el("h2", {}, "Artifacts"), body);
  section.update = (fresh) => {
    const rows = (fresh.artifacts || []).map((a) => el("li", { "data-artifact": a.ref },
      el("a", { href: a.ref, download: "" }, a.artifact), " ", el("span", { class: "muted" }, `${a.ref.replace(/^.*\/v1\/artifacts\/[^/]+\//, "")} · ${size(a.size)}`)));
    body.replaceChildren(rows.length ? el("ul", {}, rows)
      : el("p", { class: "muted", id: "artifacts-empty" }, ...(ended(fresh) ? artifactsHint() : ["none yet: they are collected when the job ends"])));
  };
  section.update(job);
  return section;
}

function recordingPanel(jobId) {
  const out = el("p", { id: "recording" }, el("span", { class: "muted" }, "loading…"));
  const section = el("section", {}, el("h2", {}, "Recording"), out);
  section.update = () => api(`/v1/jobs/${jobId}/recording`).then((rec) => {
    const blob = new Blob([JSON.stringify(rec, null, 2)], { type: "application/json" });
    out.replaceChildren(
      `${rec.logs.length} log lines, ${rec.metrics.length} metric points, ${rec.stream_points.length} stream chunks `,
      el("a", { href: URL.createObjectURL(blob), download: `${jobId}-recording.json` }, "download"));
  }).catch((error) => out.replaceChildren(error.message));
  section.update();
  return section;
}

function triesPanel(job, names) {
  if (!job.tries || !job.tries.length) return "";
  return el("section", { id: "tries" }, el("h2", {}, "Earlier tries"),
    table(["try", "attempt", "node", "phase", "exit code", "error"], job.tries.map((t) => el("tr", {},
      el("td", {}, String(t.try)), el("td", {}, String(t.attempt)), el("td", {}, nodeLabel(t.node_id, names)),
      el("td", {}, phaseBadge(t.phase)), el("td", {}, t.exit_code ?? t.signal ?? ""), el("td", {}, t.error || "")))));
}

function ranksPanel(job, names) {
  // a multi-node job's ranks: each one's node and phase (docs/jobs.md "Multi-node jobs")
  if (!job.ranks || !job.ranks.length) return "";
  return el("section", { id: "ranks" }, el("h2", {}, `Ranks (${job.ranks.length} nodes)`),
    table(["rank", "node", "phase"], job.ranks.map((r) => el("tr", {},
      el("td", {}, String(r.rank)), el("td", {}, nodeLabel(r.node_id, names)), el("td", {}, phaseBadge(r.phase))))));
}

// Keeps a page equal to the job view: `draw(job)` while live (every REFRESH_MS, the
// duration every second) and at FINAL_MS after the end. Returns the phase callback.
function following(jobId, first, draw) {
  let job = first, finishing = false;
  const fetchJob = async () => {
    try { job = await api(`/v1/jobs/${jobId}`); await draw(job); } catch (error) { showError(error.message); }
    return job;
  };
  const clock = setInterval(() => {
    const out = document.getElementById("duration");
    if (out && !ended(job)) out.textContent = jobDuration(job) || "—";
  }, 1000);
  const finish = () => {
    if (finishing) return;
    finishing = true;
    clearInterval(timer);
    clearInterval(clock);
    FINAL_MS.forEach((wait) => setTimeout(fetchJob, wait));
  };
  const timer = setInterval(async () => { if (ended(await fetchJob())) finish(); }, REFRESH_MS);
  if (ended(first)) { clearInterval(timer); clearInterval(clock); finishing = true; }
  return (event) => { if (TERMINAL.includes(event.phase)) finish(); };
}

function shareBox(jobId) {
  if (share) return el("p", { class: "muted", id: "shared-note" }, "Shared read-only view.");
  const shareButton = el("button", { type: "button", id: "share" }, "Share read-only link");
  const out = el("output", { id: "share-url" });
  shareButton.addEventListener("click", async () => {
    try { out.textContent = (await api(`/v1/jobs/${jobId}/share`, { method: "POST" })).url; }
    catch (error) { showError(error.message); }
  });
  return el("p", {}, shareButton, " ", out);
}

export async function runPage(jobId) {
  document.title = `${jobId} · runplane`;
  let job;
  try { job = await api(`/v1/jobs/${jobId}`); } catch (error) {
    view.replaceChildren(el("h1", {}, jobId));
    showError(error.message);
    return;
  }
  let names = await nodeNames();
  const asked = new Set();
  const facts = el("div", {}, factsList(job, names));
  const ranks = el("div", {}, ranksPanel(job, names));
  const tries = el("div", {}, triesPanel(job, names));
  const streams = streamsPanel(job);
  const artifacts = artifactsPanel(job);
  const recording = recordingPanel(jobId);
  const draw = async (fresh) => {
    if (fresh.node_id && !names.has(fresh.node_id) && !asked.has(fresh.node_id)) {
      asked.add(fresh.node_id); // (a share link cannot list nodes: asked once)
      names = await nodeNames(true);
    }
    facts.replaceChildren(factsList(fresh, names));
    ranks.replaceChildren(ranksPanel(fresh, names));
    tries.replaceChildren(triesPanel(fresh, names));
    streams.update(fresh);
    artifacts.update(fresh);
    logs.update(fresh);
    if (ended(fresh)) recording.update();
  };
  const onPhase = following(jobId, job, draw);
  const logs = logsPanel(jobId, { done: ended(job), onPhase });
  logs.update(job);
  const header = [el("h1", { class: "job-title" }, job.job_id), commandBlock(job) || "", facts];
  header.splice(share ? 0 : header.length, 0, shareBox(jobId));
  view.replaceChildren(...header, ranks, ...logs.parts, tries, streams, recording, artifacts);
}

// -- the embed view ---------------------------------------------------------------------

export async function embedPage() {
  document.getElementById("top").hidden = true;
  if (params.get("embed_error") || !embed) {
    view.replaceChildren(el("p", { role: "alert" }, "This embedded run is no longer available."));
    return;
  }
  let grant;
  try { grant = await api("/v1/embed/grant"); } catch (error) {
    view.replaceChildren(el("p", { role: "alert" }, error.message));
    return;
  }
  const brand = grant.branding || {};
  if (brand.accent) document.documentElement.style.setProperty("--accent", brand.accent);
  const title = el("div", { class: "embed-brand" },
    brand.logo_url ? el("img", { src: brand.logo_url, alt: "" }) : null,
    el("strong", { id: "embed-title" }, brand.title || grant.job));
  const job = await api(`/v1/jobs/${grant.job}`);
  const allows = (what) => !grant.allow.length || grant.allow.includes(what);
  const phase = el("span", { id: "phase" }, phaseBadge(job.phase));
  const panels = [];
  if (allows("streams")) panels.push(streamsPanel(job));
  if (allows("artifacts")) panels.push(artifactsPanel(job));
  const onPhase = following(grant.job, job, (fresh) => {
    phase.replaceChildren(phaseBadge(fresh.phase));
    panels.forEach((p) => p.update(fresh));
    logs.update(fresh);
  });
  const logs = logsPanel(grant.job, { categories: grant.allow, done: ended(job), onPhase });
  logs.update(job);
  view.replaceChildren(title, el("p", {}, phase, " ", job.stack), commandBlock(job) || "", ...logs.parts, ...panels);
}
