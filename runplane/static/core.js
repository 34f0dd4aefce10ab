// runplane web UI: what every page shares (credentials, the API call, DOM building, tables, live refresh).

export const TOKEN_KEY = "runplane.token";
export const TERMINAL = ["succeeded", "failed", "timeout", "cancelled"];
export const params = new URLSearchParams(location.search);
export const share = params.get("share");
export const embed = params.get("e");
export const view = document.getElementById("view");

export function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

export function credentialHeaders() {
  if (share) return { "X-Share-Token": share };
  if (embed) return { "X-Embed-Token": embed };
  return token() ? { Authorization: `Bearer ${token()}` } : {};
}

export function credentialQuery() {
  if (share) return `share=${encodeURIComponent(share)}`;
  if (embed) return `embed=${encodeURIComponent(embed)}`;
  return token() ? `token=${encodeURIComponent(token())}` : "";
}

export function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message;
  box.hidden = !message;
}

export async function api(path, options = {}) {
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

export function el(tag, attrs = {}, ...children) {
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

export function phaseBadge(phase) { return el("span", { class: `phase phase-${phase}` }, phase); }

export function size(bytes) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

// ANSI SGR colours (30-37, 90-97, bold, reset) as spans; everything else is dropped.
export function ansi(line) {
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

export function table(head, rows) {
  return el("div", { class: "table-wrap" }, el("table", {},
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: String(head.length), class: "muted" }, "none")))));
}

// A refresh replaces rows: the keyboard's place is kept (the focused link by its href, a
// button by its data-focus key) so a keyboard or screen-reader user is not thrown out.
export async function keepingFocus(render) {
  const active = document.activeElement;
  const key = active && view.contains(active)
    ? (active.dataset.focus ? `[data-focus="${CSS.escape(active.dataset.focus)}"]`
      : active.tagName === "A" ? `a[href="${CSS.escape(active.getAttribute("href"))}"]` : null)
    : null;
  await render();
  if (key && !view.contains(active)) view.querySelector(key)?.focus();
}

export function live(render) {
  const tick = async () => {
    try { await keepingFocus(render); } catch (error) { showError(error.message); }
  };
  tick();
  setInterval(tick, 2000);
}
