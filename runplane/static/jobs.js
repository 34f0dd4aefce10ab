// runplane web UI: the jobs list (/), with an array's counts and cancel (/?array=).

import { api, el, keepingFocus, params, phaseBadge, showError, view } from "./core.js";


export async function jobsPage() {
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
