// runplane web UI: the sessions page (/sessions).

import { api, el, live, phaseBadge, showError, table, view } from "./core.js";
import { when } from "./format.js";
import { sessionsHowTo } from "./howto.js";

const ENDED = ["stopped", "failed"];
const ENDING = ["stopping", ...ENDED]; // nothing to keep alive or stop

export function sessionsPage() {
  document.title = "Sessions · runplane";
  const body = el("div");
  view.replaceChildren(el("h1", {}, "Sessions"), body);
  const act = async (path, method) => {
    try { await api(path, { method }); } catch (error) { showError(error.message); }
  };
  const actions = (x) => ENDING.includes(x.phase) ? [] : [
    el("button", { type: "button", "aria-label": `Keep ${x.name || x.id} alive`, "data-focus": `${x.id}:keepalive`, onclick: () => act(`/v1/sessions/${x.id}/keepalive`, "POST") }, "Keep alive"), " ",
    el("button", { type: "button", "aria-label": `Stop ${x.name || x.id}`, "data-focus": `${x.id}:stop`, onclick: () => act(`/v1/sessions/${x.id}`, "DELETE") }, "Stop")];
  live(async () => {
    const sessions = await api("/v1/sessions");
    if (!sessions.length) {
      if (!body.querySelector("#sessions-howto")) body.replaceChildren(sessionsHowTo());
      return;
    }
    // the services of the live ones (a detail view each, at most 20)
    const services = new Map(await Promise.all(sessions.filter((x) => !ENDED.includes(x.phase)).slice(0, 20)
      .map(async (x) => [x.id, (await api(`/v1/sessions/${x.id}`)).services || []])));
    body.replaceChildren(table(["session", "name", "phase", "services", "last keepalive", ""], sessions.map((x) => el("tr", { "data-session": x.id },
      el("td", {}, el("a", { href: `/jobs/${x.job_id}`, title: "its pod's job: logs of every service" }, x.id)),
      el("td", {}, x.name || ""), el("td", {}, phaseBadge(x.phase), x.error ? el("div", { class: "muted" }, x.error) : null),
      el("td", { class: "services" }, (services.get(x.id) || []).map((v) => `${v.name} (${v.stack || v.image})`).join(", ")),
      el("td", {}, when(x.last_keepalive)),
      el("td", { class: "actions" }, actions(x))))));
  });
}
