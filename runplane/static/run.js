// runplane web UI: the run view (/jobs/<id>, also ?share=) and the embed view (/embed).

import { chart } from "./chart.js";
import { TERMINAL, ansi, api, credentialQuery, el, embed, params, phaseBadge, share, showError, size, table, view } from "./core.js";

export function logsPanel(jobId, { categories = null } = {}) {
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

export function artifactsPanel(job) {
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

export function streamsPanel(job) {
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

export async function runPage(jobId) {
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
  const parts = [title, el("p", {}, phaseBadge(job.phase), " ", job.stack),
    ...logsPanel(grant.job, { categories: grant.allow })];
  if (!grant.allow.length || grant.allow.includes("streams")) parts.push(streamsPanel(job));
  if (!grant.allow.length || grant.allow.includes("artifacts")) parts.push(artifactsPanel(job));
  view.replaceChildren(...parts);
}


// -- nodes, pipelines, sessions, submit ------------------------------------------------
