// runplane web UI: the run view's streams panel (its chunk counts follow the job view;
// a Watch button subscribes to a data stream, with a teleop box where the ticket allows).

import { TERMINAL, api, el, showError } from "./core.js";

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

// The chunk's values as dt/dd pairs (encoding json: the chunk's JSON text; text and
// base64 shown as they come).
function chunkValues(chunk) {
  let data = { value: chunk.data };
  if (chunk.encoding === "json") {
    try {
      const parsed = typeof chunk.data === "string" ? JSON.parse(chunk.data) : chunk.data;
      data = parsed && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : { value: parsed };
    } catch { /* not JSON after all: shown as text */ }
  }
  return Object.entries(data).flatMap(([k, v]) =>
    [el("dt", {}, k), el("dd", { "data-key": k }, typeof v === "object" ? JSON.stringify(v) : String(v))]);
}

function watchButton(state, st, values, received, box) {
  const watch = el("button", { type: "button" }, `Watch ${st.name}`);
  watch.addEventListener("click", async () => {
    watch.disabled = true;
    try {
      const ticket = await api(`/v1/jobs/${state.job.job_id}/streams/${encodeURIComponent(st.name)}/subscribe`,
        { method: "POST", body: "{}", headers: { "Content-Type": "application/json" } });
      if (ticket.teleop && st.kind === "data") box.replaceChildren(teleopBox(state.job, st, ticket));
      const source = new EventSource(ticket.url);
      let seen = 0;
      source.addEventListener("stream", (event) => {
        seen += 1;
        received.textContent = `, ${seen} received here`;
        values.replaceChildren(...chunkValues(JSON.parse(event.data)));
      });
      source.onerror = () => { if (TERMINAL.includes(state.job.phase)) source.close(); };
    } catch (error) { showError(error.message); watch.disabled = false; }
  });
  return watch;
}

// An empty panel says how a job makes a stream (docs/streams.md).
const streamsHint = () => ["No streams. A job publishes one by appending lines to a file in ",
  el("code", {}, "$RUNPLANE_STREAMS_DIR"), ", one chunk a line: ",
  el("code", {}, `echo '{"x": 1}' >> "$RUNPLANE_STREAMS_DIR/telemetry"`), " (docs/streams.md)."];

// The panel; its update(job) sets each stream's chunk count from a fresh job view and
// adds the streams that appeared since.
export function streamsPanel(job) {
  const state = { job };
  const list = el("div", { id: "streams" });
  const empty = el("p", { class: "muted", id: "streams-empty" }, ...streamsHint());
  const counts = new Map();
  const add = (st) => {
    const title = el("h3", {}, st.name, " ", el("span", { class: "muted" }, st.kind));
    if (st.kind === "video" || st.subscribable === false) {
      // video needs the WebRTC relay, which is not built yet: its note says so
      const why = st.note || (st.enabled === false ? "disabled in the stack's manifest"
        : "streams are disabled on this server");
      list.append(el("div", { "data-stream": st.name }, title, el("p", { class: "muted" }, why)));
      counts.set(st.name, null);
      return;
    }
    const values = el("dl", { class: "facts", "data-stream": st.name, "aria-live": "off" });
    const count = el("span", { class: "muted", "data-count": st.name });
    const received = el("span", { class: "muted" });
    const box = el("div");
    list.append(el("div", {}, title, watchButton(state, st, values, received, box), " ", count, received, values, box));
    counts.set(st.name, count);
  };
  const section = el("section", { id: "streams-panel" }, el("h2", {}, "Streams"), list, empty);
  section.update = (fresh) => {
    state.job = fresh;
    for (const st of fresh.streams || []) {
      if (!counts.has(st.name)) add(st);
      const count = counts.get(st.name);
      if (count) count.textContent = `${st.count ?? 0} chunks`;
    }
    empty.hidden = counts.size > 0;
  };
  section.update(job);
  return section;
}
