// runplane web UI: the jobs list (/), with its filters in the URL (?phase=&stack=&project=
// &array=&pipeline=&node=), and an array's counts and cancel (/?array=).

import { api, el, keepingFocus, phaseBadge, showError, view } from "./core.js";
import { commandSummary, jobDuration, nodeNames, when } from "./format.js";

const PHASES = ["", "queued", "assigned", "pulling", "running", "succeeded", "failed", "timeout", "cancelled"];
const FILTERS = ["phase", "stack", "project", "array", "pipeline", "node"];

// What a person calls a job: its pipeline stage or session, else its command; a job that
// runs its stack's own default program (a script that says little in one line) is named by
// the stack and the config it was given, less the stack's defaults ("sim-cartpole
// episodes=50"). `stacks` maps a stack's name to its catalog entry (GET /v1/stacks).
export function jobName(job, stacks = new Map()) {
  if (job.stage) return { text: job.stage, kind: "stage" };
  if (job.session_id) return { text: job.session_id, kind: "session" };
  const command = (job.spec && job.spec.command) || [];
  const stack = stacks.get(job.stack);
  const own = stack && JSON.stringify(stack.default_command || []) === JSON.stringify(command);
  if (command.length && !own) return { text: commandSummary(command, 60), kind: "" };
  const defaults = new Map(((stack && stack.config) || []).map((f) => [f.key, f.default]));
  const config = Object.entries((job.spec && job.spec.config) || {})
    .filter(([k, v]) => JSON.stringify(defaults.get(k)) !== JSON.stringify(v))
    .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ");
  return { text: config ? `${job.stack} ${config}` : job.stack, kind: "" };
}

// The stack catalog by name, fetched once a page (an empty map when it cannot be read).
let catalog = null;
async function stacksByName() {
  if (!catalog) {
    try { catalog = new Map((await api("/v1/stacks")).map((s) => [s.name, s])); }
    catch { catalog = new Map(); }
  }
  return catalog;
}

function nameCell(job, stacks) {
  const name = jobName(job, stacks);
  const tags = [name.kind, job.stack, job.array_id !== null && job.array_id !== undefined ? `#${job.array_index}` : ""]
    .filter(Boolean).join(" · ");
  return el("td", { class: "job-cell" },
    el("a", { href: `/jobs/${job.job_id}`, class: "job-name", title: name.text }, name.text),
    el("div", { class: "job-sub muted" },
      el("span", { class: "id", title: job.job_id }, job.job_id), tags ? ` · ${tags}` : ""));
}

function jobRow(job, names, stacks) {
  const node = job.node_id ? names.get(job.node_id) || job.node_id : "";
  return el("tr", { "data-job": job.job_id },
    nameCell(job, stacks),
    el("td", { class: "phase-cell" }, phaseBadge(job.phase)),
    el("td", { class: "hide-narrow node-cell" }, node ? el("span", { title: job.node_id }, node) : ""),
    el("td", { class: "duration" }, jobDuration(job)),
    el("td", { class: "hide-narrow created" }, when(job.created_at)),
    el("td", { class: "hide-narrow muted wait" }, job.phase === "queued" ? job.wait_reason || "" : ""));
}

// No job at all: how to make the first one (the CLI and the API).
export function emptyJobs() {
  return el("div", { class: "empty", id: "jobs-empty" },
    el("p", {}, "No jobs yet. Submit one:"),
    el("pre", { class: "cmd" }, "runplane submit shell -- echo hello"),
    el("pre", { class: "cmd" }, `curl -X POST ${location.origin}/v1/jobs -H 'Authorization: Bearer $TOKEN' `
      + `-H 'Content-Type: application/json' -d '{"stack":"shell","command":["echo","hello"]}'`),
    el("p", {}, "or use the ", el("a", { href: "/submit" }, "Submit"), " page."));
}

function filterControls(query, names) {
  const phase = el("select", { id: "phase-filter", "aria-label": "phase", "data-filter": "phase" },
    ...PHASES.map((p) => el("option", { value: p }, p || "any phase")));
  const nodes = [...names].sort((a, b) => a[1].localeCompare(b[1]));
  if (query.get("node") && !names.has(query.get("node"))) nodes.push([query.get("node"), query.get("node")]);
  const node = el("select", { id: "node-filter", "aria-label": "node", "data-filter": "node" },
    el("option", { value: "" }, "any node"), ...nodes.map(([id, name]) => el("option", { value: id }, name)));
  const text = (key, placeholder) => el("input",
    { id: `${key}-filter`, placeholder, "aria-label": key, "data-filter": key, size: "12" });
  const controls = [phase, text("stack", "stack"), text("project", "project"),
    text("array", "array (arr_...)"), text("pipeline", "pipeline (plr_...)"), node];
  for (const c of controls) c.value = query.get(c.dataset.filter) || "";
  return controls;
}

export async function jobsPage() {
  document.title = "Jobs · runplane";
  const query = new URLSearchParams(location.search);
  // an expired share link sent the browser here: say so for as long as the page is open
  const notice = query.get("share_error")
    ? "That share link has expired or was revoked; ask its owner for a new one." : "";
  showError(notice);
  let names = await nodeNames();
  const stacks = await stacksByName();
  const controls = filterControls(query, names);
  const arrayBox = el("div", { id: "array-box", hidden: "" });
  const heading = el("h1", {}, "Jobs");
  const body = el("tbody");
  const empty = el("div", { id: "jobs-none" });
  const table = el("div", { class: "table-wrap" }, el("table", { class: "jobs" },
    el("thead", {}, el("tr", {}, el("th", {}, "job"), el("th", {}, "phase"),
      el("th", { class: "hide-narrow" }, "node"), el("th", {}, "duration"),
      el("th", { class: "hide-narrow" }, "created"), el("th", { class: "hide-narrow" }, "waiting because"))),
    body));
  view.replaceChildren(heading, arrayBox,
    el("form", { class: "filters", id: "filters", role: "search", onsubmit: (e) => e.preventDefault() }, controls),
    table, empty);
  const value = (key) => controls.find((c) => c.dataset.filter === key).value.trim();
  async function refresh() {
    const filters = new URLSearchParams();
    for (const key of FILTERS) if (value(key)) filters.set(key, value(key));
    const array = value("array");
    heading.textContent = array ? `Jobs of array ${array}` : "Jobs";
    const listing = new URLSearchParams(filters);
    listing.set("limit", array ? "1000" : "100");
    try {
      if (array) await arrayStatus(array, arrayBox); else arrayBox.hidden = true;
      const jobs = await api(`/v1/jobs?${listing}`);
      if (jobs.some((j) => j.node_id && !names.has(j.node_id))) names = await nodeNames(true);
      showError(notice);
      body.replaceChildren(...jobs.map((j) => jobRow(j, names, stacks)));
      table.hidden = !jobs.length;
      empty.replaceChildren(jobs.length ? "" : [...filters.keys()].length
        ? el("p", { class: "empty", id: "jobs-no-match" }, "No job matches the filters. ",
          el("a", { href: "/" }, "Show every job"))
        : emptyJobs());
    } catch (error) { showError(error.message); }
  }
  function filtered() {
    const next = new URLSearchParams();
    if (notice) next.set("share_error", query.get("share_error"));
    for (const key of FILTERS) if (value(key)) next.set(key, value(key));
    history.replaceState(null, "", next.size ? `/?${next}` : "/");
    refresh();
  }
  for (const c of controls) c.addEventListener("change", filtered);
  await refresh();
  setInterval(() => keepingFocus(refresh), 2000); // live phases and durations
}

// An array's counts per phase, a link to its sweep page and a button cancelling every live job.
export async function arrayStatus(arrayId, box, { sweepLink = true } = {}) {
  const info = await api(`/v1/arrays/${encodeURIComponent(arrayId)}`);
  const counts = Object.entries(info.phases).map(([p, n]) => `${n} ${p}`).join(", ");
  const live = ["queued", "assigned", "pulling", "running"].some((p) => info.phases[p]);
  const cancel = el("button", { type: "button", id: "array-cancel", "data-focus": "array-cancel" }, "Cancel the live jobs");
  cancel.hidden = !live;
  cancel.addEventListener("click", async () => {
    try {
      const done = await api(`/v1/arrays/${arrayId}/cancel`, { method: "POST" });
      showError(`${done.cancelled} jobs cancelled`);
    } catch (error) { showError(error.message); }
  });
  box.hidden = false;
  box.replaceChildren(el("p", { id: "array-counts", role: "status" },
    `${info.count} jobs${info.sweep ? ` (a sweep of ${Object.keys(info.sweep).join(" x ")})` : ""}: ${counts}`),
  el("p", {}, sweepLink ? el("a", { href: `/arrays/${arrayId}`, id: "sweep-link" }, "Compare them on the sweep page") : "",
    " ", cancel));
}
