// runplane web UI: a small single-page app on the public API (no build step).
// Pages: jobs list (/), run view (/jobs/<id>, also read-only with ?share=<code>), and the
// minimal embed view (/embed?e=<token>&j=<job>). A bearer token typed in the header box is
// kept in this browser (localStorage) and sent as Authorization; the SSE route takes it
// as ?token= (the spec allows it there, EventSource cannot set headers).
// Each page is a module of its own; this one routes a path to its page.

import { TOKEN_KEY, embed, share, showError, token } from "./core.js";
import { jobsPage } from "./jobs.js";
import { nodesPage } from "./nodes.js";
import { pipelinePage, pipelinesPage } from "./pipelines.js";
import { embedPage, runPage } from "./run.js";
import { sessionsPage } from "./sessions.js";
import { submitPage } from "./submit.js";
import { sweepPage } from "./sweep.js";

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
  if (here === path || (here !== "/" && path.startsWith(here)) || (here === "/" && /^\/(jobs|arrays)\//.test(path))) {
    link.setAttribute("aria-current", "page");
  }
}
const run = path.match(/^\/jobs\/([^/]+)$/);
const pipeline = path.match(/^\/pipelines\/([^/]+)$/);
const array = path.match(/^\/arrays\/([^/]+)$/);
const pages = { "/nodes": nodesPage, "/pipelines": pipelinesPage, "/sessions": sessionsPage, "/submit": submitPage };
if (path === "/embed") embedPage();
else if (run) runPage(decodeURIComponent(run[1]));
else if (pipeline) pipelinePage(decodeURIComponent(pipeline[1]));
else if (array) sweepPage(decodeURIComponent(array[1])).catch((error) => showError(error.message));
else if (pages[path]) Promise.resolve().then(pages[path]).catch((error) => showError(error.message));
else jobsPage();
