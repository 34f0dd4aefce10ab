// runplane web UI: a small single-page app on the public API (no build step).
// Pages: jobs list (/), run view (/jobs/<id>, also read-only with ?share=<code>), and the
// minimal embed view (/embed?e=<token>&j=<job>). A bearer token typed in the header box is
// kept in this browser (localStorage) and sent as Authorization; the SSE route takes it
// as ?token= (the spec allows it there, EventSource cannot set headers).

const TOKEN_KEY = "runplane.token";
const TERMINAL = ["succeeded", "failed", "timeout", "cancelled"];
const params = new URLSearchParams(location.search);
const share = params.get("share");
const embed = params.get("e");
const view = document.getElementById("view");

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

function credentialHeaders() {
  if (share) return { "X-Share-Token": share };
  if (embed) return { "X-Embed-Token": embed };
  return token() ? { Authorization: `Bearer ${token()}` } : {};
}

function credentialQuery() {
  if (share) return `share=${encodeURIComponent(share)}`;
  if (embed) return `embed=${encodeURIComponent(embed)}`;
  return token() ? `token=${encodeURIComponent(token())}` : "";
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message;
  box.hidden = !message;
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { ...credentialHeaders(), ...(options.headers || {}) },
  });
  const text = await response.text();
  const body = text ? JSON.parse(text) : null;
  if (!response.ok) {
    // RFC 9457 problems: show the detail, which says what to do next
    const detail = body && body.detail ? body.detail : `${response.status} ${response.statusText}`;
    throw new Error(detail);
  }
  return body;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  return node;
}

function phaseBadge(phase) { return el("span", { class: `phase phase-${phase}` }, phase); }

function size(bytes) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

// ANSI SGR colours (30-37, 90-97, bold, reset) as spans; everything else is dropped.
function ansi(line) {
  const out = document.createDocumentFragment();
  let classes = [];
  for (const part of line.split(/(\x1b\[[0-9;]*m)/)) {
    const code = part.match(/^\x1b\[([0-9;]*)m$/);
    if (code) {
      for (const n of (code[1] || "0").split(";").map(Number)) {
        if (n === 0) classes = [];
        else if (n === 1) classes.push("ansi-bold");
        else if (n >= 30 && n <= 37) classes.push(`ansi-${n}`);
        else if (n >= 90 && n <= 97) classes.push(`ansi-${n - 60}`);
      }
    } else if (part) {
      out.append(classes.length ? el("span", { class: classes.join(" ") }, part) : part);
    }
  }
  return out;
}

function chart(key, points) {
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

// -- the jobs list ---------------------------------------------------------------------

async function jobsPage() {
  document.title = "Jobs · runplane";
  // an expired share link sent the browser here: say so for as long as the page is open
  const notice = params.get("share_error")
    ? "That share link has expired or was revoked; ask its owner for a new one." : "";
  showError(notice);
  const phase = el("select", { id: "phase-filter", "aria-label": "phase" },
    ...["", "queued", "running", "succeeded", "failed", "timeout", "cancelled"].map(
      (p) => el("option", { value: p }, p || "any phase")));
  const stack = el("input", { id: "stack-filter", placeholder: "stack", "aria-label": "stack" });
  // a job array (a sweep from the submit page): its jobs only, its phase counts, a cancel
  const array = params.get("array");
  const arrayBox = el("div", { id: "array-box", hidden: "" });
  const body = el("tbody");
  const table = el("div", { class: "table-wrap" }, el("table", {},
    el("thead", {}, el("tr", {}, el("th", {}, "job"), el("th", {}, "stack"), el("th", {}, "phase"),
      el("th", { class: "hide-narrow" }, "waiting because"), el("th", { class: "hide-narrow" }, "created"))),
    body));
  view.replaceChildren(el("h1", {}, array ? `Jobs of array ${array}` : "Jobs"), arrayBox,
    el("div", { class: "filters" }, phase, stack), table);
  async function refresh() {
    const query = new URLSearchParams({ limit: array ? "1000" : "100" });
    if (phase.value) query.set("phase", phase.value);
    if (stack.value.trim()) query.set("stack", stack.value.trim());
    if (array) query.set("array", array);
    try {
      if (array) await arrayStatus(array, arrayBox);
      const jobs = await api(`/v1/jobs?${query}`);
      showError(notice);
      body.replaceChildren(...jobs.map((j) => el("tr", { "data-job": j.job_id },
        el("td", {}, el("a", { href: `/jobs/${j.job_id}` }, j.job_id)),
        el("td", {}, j.stack), el("td", {}, phaseBadge(j.phase)),
        el("td", { class: "hide-narrow muted" }, j.wait_reason || ""),
        el("td", { class: "hide-narrow muted" }, j.created_at))));
      if (!jobs.length) body.replaceChildren(el("tr", {}, el("td", { colspan: "5", class: "muted" }, "no jobs")));
    } catch (error) { showError(error.message); }
  }
  phase.addEventListener("change", refresh);
  stack.addEventListener("change", refresh);
  await refresh();
  setInterval(() => keepingFocus(refresh), 2000); // live phases
}

// An array's counts per phase and a button cancelling every live job of it.
async function arrayStatus(arrayId, box) {
  const info = await api(`/v1/arrays/${arrayId}`);
  const counts = Object.entries(info.phases).map(([p, n]) => `${n} ${p}`).join(", ");
  const live = ["queued", "assigned", "pulling", "running"].some((p) => info.phases[p]);
  const cancel = el("button", { type: "button", id: "array-cancel" }, "Cancel the live jobs");
  cancel.hidden = !live;
  cancel.addEventListener("click", async () => {
    try {
      const done = await api(`/v1/arrays/${arrayId}/cancel`, { method: "POST" });
      showError(`${done.cancelled} jobs cancelled`);
    } catch (error) { showError(error.message); }
  });
  box.hidden = false;
  box.replaceChildren(el("p", { id: "array-counts", role: "status" },
    `${info.count} jobs${info.sweep ? ` (a sweep of ${Object.keys(info.sweep).join(" x ")})` : ""}: ${counts}`), cancel);
}

// -- the run view ---------------------------------------------------------------------

function logsPanel(jobId, { categories = null } = {}) {
  const allowed = (c) => !categories || !categories.length || categories.includes(c);
  const pre = el("pre", { class: "logs", id: "logs", tabindex: "0", "aria-label": "logs" });
  let follow = true;
  const toggle = el("button", { type: "button", id: "follow" }, "Pause");
  toggle.addEventListener("click", () => {
    follow = !follow;
    toggle.textContent = follow ? "Pause" : "Follow";
    if (follow) pre.scrollTop = pre.scrollHeight;
  });
  const charts = el("div", { class: "charts", id: "charts" });
  const series = new Map();
  const timeline = el("ol", { id: "timeline" });
  const source = new EventSource(`/v1/jobs/${jobId}/events?${credentialQuery()}`);
  source.addEventListener("log", (event) => {
    const data = JSON.parse(event.data);
    const rank = data.rank === undefined ? "" : `[rank ${data.rank}] `;  // a gang's rank
    const row = el("div", { class: `stream-${data.stream}` }, rank, ansi(data.line));
    pre.append(row);
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
    const where = data.node_id ? `attempt ${data.attempt} on node ${data.node_id}` : "";
    const retry = data.retry ? `retry ${data.retry}` : "";
    const preempted = data.by ? `preempted by ${data.by}` : ""; // docs/placement.md "Preemption"
    timeline.append(el("li", {}, phaseBadge(data.phase), " ", where || retry || preempted || data.reason || data.error || ""));
    const current = document.getElementById("phase");
    if (current) current.replaceChildren(phaseBadge(data.phase));
    if (TERMINAL.includes(data.phase)) source.close(); // the stream ends there
  });
  const parts = [];
  parts.push(el("section", {}, el("h2", {}, "Phases"), timeline));
  if (allowed("logs")) parts.push(el("section", {}, el("h2", {}, "Logs ", toggle), pre));
  if (allowed("metrics")) parts.push(el("section", {}, el("h2", {}, "Metrics"), charts));
  return parts;
}

function artifactsPanel(job) {
  const rows = (job.artifacts || []).map((a) => el("li", {},
    el("a", { href: a.ref, download: "" }, a.artifact), " ", el("span", { class: "muted" }, size(a.size))));
  return el("section", { id: "artifacts" }, el("h2", {}, "Artifacts"),
    rows.length ? el("ul", {}, rows) : el("p", { class: "muted" }, "none yet"));
}

// A teleop box for a data stream the ticket may drive: a JSON frame sent as it is
// (POST .../teleop with the ticket as the bearer); the answer's seq is shown.
function teleopBox(job, st, ticket) {
  const frame = el("textarea", { id: `teleop-${st.name}`, rows: "2", spellcheck: "false" }, "{}");
  const sent = el("output", { "aria-live": "polite" });
  const form = el("form", { class: "teleop", "data-teleop": st.name },
    el("label", { for: frame.id }, `frame for ${st.name} (JSON)`), frame,
    el("button", { type: "submit" }, "Send"), " ", sent);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let body;
    try { body = JSON.stringify(JSON.parse(frame.value)); } catch {
      sent.textContent = "not JSON: fix the frame";
      return;
    }
    try {
      const path = `/v1/jobs/${job.job_id}/streams/${encodeURIComponent(st.name)}/teleop`;
      const answer = await fetch(path, {
        method: "POST", body, headers: { "Content-Type": "application/json", Authorization: `Bearer ${ticket.ticket}` },
      });
      const result = await answer.json();
      sent.textContent = answer.ok ? `sent, seq ${result.seq}` : result.detail;
    } catch (error) { sent.textContent = error.message; }
  });
  return form;
}

function streamsPanel(job) {
  const list = el("div", { id: "streams" });
  for (const st of job.streams || []) {
    const title = el("h3", {}, st.name, " ", el("span", { class: "muted" }, st.kind));
    if (st.kind === "video" || st.subscribable === false) {
      // video needs the WebRTC relay, which is not built yet: its note says so
      const why = st.note || (st.enabled === false ? "disabled in the stack's manifest"
        : "streams are disabled on this server");
      list.append(el("div", { "data-stream": st.name }, title, el("p", { class: "muted" }, why)));
      continue;
    }
    const values = el("dl", { class: "facts", "data-stream": st.name, "aria-live": "off" });
    const count = el("span", { class: "muted" }, `${st.count ?? 0} chunks`);
    const watch = el("button", { type: "button" }, `Watch ${st.name}`);
    const box = el("div");
    watch.addEventListener("click", async () => {
      watch.disabled = true;
      try {
        const ticket = await api(`/v1/jobs/${job.job_id}/streams/${encodeURIComponent(st.name)}/subscribe`,
          { method: "POST", body: "{}", headers: { "Content-Type": "application/json" } });
        if (ticket.teleop && st.kind === "data") box.replaceChildren(teleopBox(job, st, ticket));
        const source = new EventSource(ticket.url);
        let seen = 0;
        source.addEventListener("stream", (event) => {
          const chunk = JSON.parse(event.data);
          seen += 1;
          count.textContent = `${seen} chunks received`;
          // encoding json: the chunk's JSON text; text and base64 shown as they come
          let data = { value: chunk.data };
          if (chunk.encoding === "json") {
            try {
              const parsed = typeof chunk.data === "string" ? JSON.parse(chunk.data) : chunk.data;
              data = parsed && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : { value: parsed };
            } catch { /* not JSON after all: shown as text */ }
          }
          values.replaceChildren(...Object.entries(data).flatMap(([k, v]) =>
            [el("dt", {}, k), el("dd", { "data-key": k }, typeof v === "object" ? JSON.stringify(v) : String(v))]));
        });
        source.onerror = () => { if (TERMINAL.includes(job.phase)) source.close(); };
      } catch (error) { showError(error.message); watch.disabled = false; }
    });
    list.append(el("div", {}, title, watch, " ", count, values, box));
  }
  return el("section", {}, el("h2", {}, "Streams"), (job.streams || []).length ? list : el("p", { class: "muted" }, "none"));
}

function recordingPanel(jobId) {
  const out = el("p", { id: "recording" }, el("span", { class: "muted" }, "loading…"));
  api(`/v1/jobs/${jobId}/recording`).then((rec) => {
    const blob = new Blob([JSON.stringify(rec, null, 2)], { type: "application/json" });
    out.replaceChildren(
      `${rec.logs.length} log lines, ${rec.metrics.length} metric points, ${rec.stream_points.length} stream chunks `,
      el("a", { href: URL.createObjectURL(blob), download: `${jobId}-recording.json` }, "download"));
  }).catch((error) => out.replaceChildren(error.message));
  return el("section", {}, el("h2", {}, "Recording"), out);
}

function triesPanel(job) {
  if (!job.tries || !job.tries.length) return null;
  return el("section", { id: "tries" }, el("h2", {}, "Earlier tries"),
    table(["try", "attempt", "node", "phase", "exit code", "error"], job.tries.map((t) => el("tr", {},
      el("td", {}, String(t.try)), el("td", {}, String(t.attempt)), el("td", {}, t.node_id || ""),
      el("td", {}, phaseBadge(t.phase)), el("td", {}, t.exit_code ?? t.signal ?? ""), el("td", {}, t.error || "")))));
}

function ranksPanel(job) {
  // a multi-node job's ranks: each one's node and phase (docs/jobs.md "Multi-node jobs")
  if (!job.ranks || !job.ranks.length) return null;
  return el("section", { id: "ranks" }, el("h2", {}, `Ranks (${job.ranks.length} nodes)`),
    table(["rank", "node", "phase"], job.ranks.map((r) => el("tr", {},
      el("td", {}, String(r.rank)), el("td", {}, r.node_id), el("td", {}, phaseBadge(r.phase))))));
}

async function runPage(jobId) {
  document.title = `${jobId} · runplane`;
  let job;
  try { job = await api(`/v1/jobs/${jobId}`); } catch (error) {
    view.replaceChildren(el("h1", {}, jobId));
    showError(error.message);
    return;
  }
  const facts = el("dl", { class: "facts" },
    el("dt", {}, "phase"), el("dd", { id: "phase", "aria-live": "polite" }, phaseBadge(job.phase)),
    el("dt", {}, "stack"), el("dd", {}, job.stack),
    el("dt", {}, "node"), el("dd", {}, job.node_id || "—"),
    el("dt", {}, "attempt"), el("dd", {}, `${job.attempt} (requeues ${job.attempts}, retries ${job.retries ?? 0}, preemptions ${job.preemptions ?? 0})`),
    el("dt", {}, "error"), el("dd", {}, job.error || "—"));
  const header = [el("h1", {}, job.job_id), facts];
  if (share) {
    header.unshift(el("p", { class: "muted", id: "shared-note" }, "Shared read-only view."));
  } else {
    const shareButton = el("button", { type: "button", id: "share" }, "Share read-only link");
    const out = el("output", { id: "share-url" });
    shareButton.addEventListener("click", async () => {
      try { out.textContent = (await api(`/v1/jobs/${jobId}/share`, { method: "POST" })).url; }
      catch (error) { showError(error.message); }
    });
    header.push(el("p", {}, shareButton, " ", out));
  }
  view.replaceChildren(...header, ranksPanel(job) || "", ...logsPanel(jobId), triesPanel(job) || "",
    streamsPanel(job),
    recordingPanel(jobId), artifactsPanel(job));
}

// -- the embed view ---------------------------------------------------------------------

async function embedPage() {
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
  const parts = [title, el("p", {}, phaseBadge(job.phase), " ", job.stack),
    ...logsPanel(grant.job, { categories: grant.allow })];
  if (!grant.allow.length || grant.allow.includes("streams")) parts.push(streamsPanel(job));
  if (!grant.allow.length || grant.allow.includes("artifacts")) parts.push(artifactsPanel(job));
  view.replaceChildren(...parts);
}


// -- nodes, pipelines, sessions, submit ------------------------------------------------

function table(head, rows) {
  return el("div", { class: "table-wrap" }, el("table", {},
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: String(head.length), class: "muted" }, "none")))));
}

// A refresh replaces rows: the keyboard's place is kept (the focused link by its href, a
// button by its data-focus key) so a keyboard or screen-reader user is not thrown out.
async function keepingFocus(render) {
  const active = document.activeElement;
  const key = active && view.contains(active)
    ? (active.dataset.focus ? `[data-focus="${CSS.escape(active.dataset.focus)}"]`
      : active.tagName === "A" ? `a[href="${CSS.escape(active.getAttribute("href"))}"]` : null)
    : null;
  await render();
  if (key && !view.contains(active)) view.querySelector(key)?.focus();
}

function live(render) {
  const tick = async () => {
    try { await keepingFocus(render); } catch (error) { showError(error.message); }
  };
  tick();
  setInterval(tick, 2000);
}

function nodesPage() {
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

function pipelinesPage() {
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

function pipelinePage(runId) {
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

function sessionsPage() {
  document.title = "Sessions · runplane";
  const body = el("div");
  view.replaceChildren(el("h1", {}, "Sessions"), body);
  const act = async (path, method) => {
    try { await api(path, { method }); } catch (error) { showError(error.message); }
  };
  const ENDED = ["stopped", "failed"];
  live(async () => {
    const sessions = await api("/v1/sessions");
    // the services of the live ones (a detail view each, at most 20)
    const services = new Map(await Promise.all(sessions.filter((x) => !ENDED.includes(x.phase)).slice(0, 20)
      .map(async (x) => [x.id, (await api(`/v1/sessions/${x.id}`)).services || []])));
    body.replaceChildren(table(["session", "name", "phase", "services", "last keepalive", ""], sessions.map((x) => el("tr", { "data-session": x.id },
      el("td", {}, el("a", { href: `/jobs/${x.job_id}`, title: "its pod's job: logs of every service" }, x.id)),
      el("td", {}, x.name || ""), el("td", {}, phaseBadge(x.phase)),
      el("td", { class: "services" }, (services.get(x.id) || []).map((v) => `${v.name} (${v.stack})`).join(", ")),
      el("td", { class: "muted" }, x.last_keepalive || ""),
      el("td", {},
        el("button", { type: "button", "aria-label": `Keep ${x.name || x.id} alive`, "data-focus": `${x.id}:keepalive`, onclick: () => act(`/v1/sessions/${x.id}/keepalive`, "POST") }, "Keep alive"), " ",
        el("button", { type: "button", "aria-label": `Stop ${x.name || x.id}`, "data-focus": `${x.id}:stop`, onclick: () => act(`/v1/sessions/${x.id}`, "DELETE") }, "Stop"))))));
  });
}

function configInput(field, value) {
  const id = `config-${field.key}`;
  const data = { id, "data-key": field.key, "data-type": field.type };
  if (field.type === "bool") {
    const box = el("input", { ...data, type: "checkbox" });
    box.checked = value === undefined ? Boolean(field.default) : Boolean(value);
    return box;
  }
  if (field.type === "enum" || field.type === "select") {
    const chosen = value === undefined ? field.default : value;
    return el("select", data, (field.values || []).map((v) =>
      el("option", v === chosen ? { value: v, selected: "" } : { value: v }, v)));
  }
  const numeric = field.type === "int" || field.type === "number";
  const input = el("input", {
    ...data,
    type: numeric ? "number" : "text",
    placeholder: String(field.default ?? ""),
    ...(field.min !== null && field.min !== undefined ? { min: String(field.min) } : {}),
    ...(field.max !== null && field.max !== undefined ? { max: String(field.max) } : {}),
    ...(field.type === "number" ? { step: "any" } : numeric ? { step: "1" } : {}),
  });
  if (value !== undefined) input.value = String(value);
  return input;
}

function configValue(input) {
  const type = input.dataset.type;
  if (type === "bool") return input.checked;
  const raw = input.value.trim();
  if (!raw) return undefined; // blank: the stack's default
  return type === "int" ? parseInt(raw, 10) : type === "number" ? parseFloat(raw) : raw;
}

// "key=v1,v2; key2=v3" as a sweep {key: [v1, v2], key2: [v3]} (numbers and booleans typed);
// null when blank.
function sweepOf(text) {
  const grid = {};
  for (const part of text.split(";").map((p) => p.trim()).filter(Boolean)) {
    const [key, values] = part.split("=", 2);
    if (!key || values === undefined) throw new Error(`sweep: "${part}" is not key=v1,v2`);
    grid[key.trim()] = values.split(",").map((v) => v.trim()).map((v) => {
      try { return JSON.parse(v); } catch { return v; }
    });
  }
  return Object.keys(grid).length ? grid : null;
}

// The submit page: a stack from the catalog's launch view, one of its launch tasks (its
// command, fixed config and the settings it shows) and a preset (config values filled in),
// the config fields typed from the stack; /v1/runs/validate lists problems before /v1/runs.
async function submitPage() {
  document.title = "Submit · runplane";
  const stacks = (await api("/v1/stacks?view=launch")).filter((s) => !s.unavailable);
  const stack = el("select", { id: "submit-stack" },
    stacks.map((s) => el("option", { value: s.name }, s.display_name || s.name)));
  const task = el("select", { id: "submit-task" });
  const taskLabel = el("label", { for: "submit-task" }, "task ", task);
  const taskNote = el("p", { class: "muted", id: "task-note" });
  const presets = el("fieldset", { id: "submit-presets" });
  const command = el("input", { id: "submit-command", placeholder: "blank: the stack's or the task's" });
  // a sweep: "key=v1,v2; key2=v3,v4" submits one job per combination (a job array)
  const sweep = el("input", { id: "submit-sweep", placeholder: "optional: episodes=10,20; epsilon=0,0.5" });
  const config = el("div", { id: "submit-config" });
  const problems = el("ul", { id: "submit-problems", role: "status", "aria-live": "polite" });
  const chosenStack = () => stacks.find((s) => s.name === stack.value) || {};
  const chosenTask = () => ((chosenStack().launch || {}).tasks || []).find((t) => t.id === task.value) || null;
  let preset = null;
  const fields = () => {
    const current = chosenTask();
    const values = { ...(current ? current.config : {}), ...(preset ? preset.config : {}) };
    const shown = current && current.settings.length ? current.settings : null;
    config.replaceChildren(...(chosenStack().config || [])
      .filter((field) => !shown || shown.includes(field.key))
      .map((field) => el("label", { for: `config-${field.key}` }, `${field.key} `, configInput(field, values[field.key]),
        field.description ? el("span", { class: "muted" }, ` ${field.description}`) : null)));
  };
  const presetsOf = () => {
    const current = chosenTask();
    preset = null;
    taskNote.textContent = current ? current.description : "";
    const list = current ? current.presets : [];
    presets.hidden = !list.length;
    presets.replaceChildren(el("legend", {}, "preset"), ...[{ id: "", title: "none", config: {} }, ...list].map((p) => {
      const radio = el("input", { type: "radio", name: "preset", id: `preset-${p.id || "none"}`, value: p.id });
      radio.checked = !p.id;
      radio.addEventListener("change", () => { preset = p.id ? p : null; fields(); });
      return el("label", { for: radio.id, title: p.description || "" }, radio, ` ${p.title}`);
    }));
    fields();
  };
  const tasksOf = () => {
    const tasks = (chosenStack().launch || {}).tasks || [];
    task.replaceChildren(el("option", { value: "" }, "none: every setting"),
      ...tasks.map((t) => el("option", { value: t.id }, t.title)));
    if (tasks.length) task.value = tasks[0].id;
    taskLabel.hidden = !tasks.length;
    presetsOf();
  };
  stack.addEventListener("change", tasksOf);
  task.addEventListener("change", presetsOf);
  tasksOf();
  const body = () => {
    const current = chosenTask();
    const values = { ...(current ? current.config : {}), ...(preset ? preset.config : {}) };
    for (const input of config.querySelectorAll("[data-key]")) {
      const value = configValue(input);
      if (value === undefined) delete values[input.dataset.key];
      else values[input.dataset.key] = value;
    }
    const out = { stack: stack.value, config: values };
    if (command.value.trim()) out.command = ["sh", "-c", command.value.trim()];
    else if (current && current.command.length) out.command = current.command;
    return out;
  };
  const post = (path) => api(path, { method: "POST", body: JSON.stringify(body()), headers: { "Content-Type": "application/json" } });
  const form = el("form", { id: "submit-form", novalidate: "" },
    el("label", { for: "submit-stack" }, "stack ", stack), taskLabel, taskNote, presets,
    el("label", { for: "submit-command" }, "command ", command), config,
    el("label", { for: "submit-sweep" }, "sweep ", sweep),
    el("button", { type: "submit" }, "Validate and submit"), problems);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const check = await post("/v1/runs/validate");
      problems.replaceChildren(...[...check.errors, ...check.warnings].map((p) => el("li", {}, `${p.key}: ${p.message}`)));
      if (!check.ok) { problems.querySelector("li")?.focus?.(); return; }
      const grid = sweepOf(sweep.value);
      if (grid) {
        const made = await api("/v1/jobs/batch", { method: "POST",
          body: JSON.stringify({ job: body(), sweep: grid }), headers: { "Content-Type": "application/json" } });
        location.href = `/?array=${made.array_id}`;
        return;
      }
      const job = await post("/v1/runs");
      location.href = `/jobs/${job.job_id}`;
    } catch (error) { showError(error.message); }
  });
  view.replaceChildren(el("h1", {}, "Submit a run"), form);
}

// -- start ------------------------------------------------------------------------------

const box = document.getElementById("token-box");
const input = document.getElementById("token");
input.value = token();
box.addEventListener("submit", (event) => {
  event.preventDefault();
  localStorage.setItem(TOKEN_KEY, input.value.trim());
  location.reload();
});
if (share || embed) box.hidden = true;

const path = location.pathname;
for (const link of document.querySelectorAll("nav a")) {
  const here = link.getAttribute("href");
  if (here === path || (here !== "/" && path.startsWith(here)) || (here === "/" && path.startsWith("/jobs/"))) {
    link.setAttribute("aria-current", "page");
  }
}
const run = path.match(/^\/jobs\/([^/]+)$/);
const pipeline = path.match(/^\/pipelines\/([^/]+)$/);
const pages = { "/nodes": nodesPage, "/pipelines": pipelinesPage, "/sessions": sessionsPage, "/submit": submitPage };
if (path === "/embed") embedPage();
else if (run) runPage(decodeURIComponent(run[1]));
else if (pipeline) pipelinePage(decodeURIComponent(pipeline[1]));
else if (pages[path]) Promise.resolve().then(pages[path]).catch((error) => showError(error.message));
else jobsPage();
