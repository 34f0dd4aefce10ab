// runplane web UI: empty states that teach: the CLI lines and the curl line that make a
// page's first item (small enough for a 2-core CPU machine; docs/pipelines.md,
// docs/sessions.md, docs/cli.md).

import { el, token } from "./core.js";

function curl(path, body) {
  const auth = token() ? ` -H "Authorization: Bearer $RUNPLANE_TOKEN"` : "";
  return `curl -X POST ${location.origin}${path} -H 'Content-Type: application/json'${auth} -d '${JSON.stringify(body)}'`;
}

function howTo(id, lead, file, yaml, verb, path, body) {
  const cli = `cat > ${file} <<'EOF'\n${yaml}\nEOF\nrunplane --url ${location.origin} ${verb} ${file}`;
  return el("div", { class: "howto", id },
    el("p", {}, lead),
    el("p", {}, "With the CLI:"), el("pre", { "data-howto": "cli" }, cli),
    el("p", {}, "Or with curl:"), el("pre", { "data-howto": "curl" }, curl(path, body)));
}

export function pipelinesHowTo() {
  return howTo("pipelines-howto", "No pipelines yet. A pipeline runs stages as jobs, each once the stages it needs succeeded; this one runs two shell stages, the second after the first:",
    "hello-pipeline.yaml",
    "name: hello\nstages:\n  - {name: hello, stack: shell, command: [echo, hello]}\n  - {name: world, stack: shell, command: [echo, world], needs: [hello]}",
    "pipeline run", "/v1/pipelines",
    { name: "hello", stages: [{ name: "hello", stack: "shell", command: ["echo", "hello"] },
      { name: "world", stack: "shell", command: ["echo", "world"], needs: ["hello"] }] });
}

export function sessionsHowTo() {
  const command = ["sh", "-c", "while sleep 5; do date; done"];
  return howTo("sessions-howto", "No sessions yet. A session keeps a pod of services running while it is kept alive; this one runs one shell service:",
    "hello-session.yaml",
    `name: hello\npod:\n  services:\n    - {name: clock, command: [sh, -c, "while sleep 5; do date; done"]}`,
    "session create", "/v1/sessions", { name: "hello", pod: { services: [{ name: "clock", command }] } });
}
