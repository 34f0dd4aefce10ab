// runplane web UI: the submit page (/submit).

import { api, el, showError, view } from "./core.js";

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
export async function submitPage() {
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
