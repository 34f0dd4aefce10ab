// runplane web UI: how times, durations and command lines read on every page.

import { api, el } from "./core.js";

// "12 s ago", "3 min ago", "5 h ago", "2 d ago" (future times: "in 3 min").
export function ago(iso, now = Date.now()) {
  if (!iso) return "";
  const seconds = Math.round((now - Date.parse(iso)) / 1000);
  const span = Math.abs(seconds);
  const text = span < 60 ? `${span} s` : span < 3600 ? `${Math.floor(span / 60)} min`
    : span < 86400 ? `${Math.floor(span / 3600)} h` : `${Math.floor(span / 86400)} d`;
  return seconds < 0 ? `in ${text}` : `${text} ago`;
}

// A <time> showing the relative time, the absolute one (local) on hover.
export function when(iso) {
  if (!iso) return el("span", { class: "muted" }, "—");
  return el("time", { datetime: iso, title: new Date(iso).toLocaleString() }, ago(iso));
}

// 850 ms, 12.3 s, 4 min 05 s, 2 h 10 min.
export function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}

// A job's run time: final once it ended, counting up (from started_at) while it runs.
export function jobDuration(job, now = Date.now()) {
  if (job.duration_ms !== null && job.duration_ms !== undefined) return duration(job.duration_ms);
  return job.started_at ? duration(now - Date.parse(job.started_at)) : "";
}

// A shell-like rendering of an argv (quoted only where a word needs it).
export function shellJoin(argv) {
  return (argv || []).map((word) => (/^[\w@%+=:,./-]+$/.test(word) ? word
    : `'${word.replaceAll("'", "'\\''")}'`)).join(" ");
}

// One line for lists: the first line of the command, cut to `max` characters, with how
// many lines were left out ("python3 -c 'import csv, json …' (+41 lines)").
export function commandSummary(argv, max = 80) {
  const lines = shellJoin(argv).split("\n");
  let first = lines[0];
  if (first.length > max) first = `${first.slice(0, max - 1)}…`;
  else if (lines.length > 1) first = `${first} …`;
  return lines.length > 1 ? `${first} (+${lines.length - 1} lines)` : first;
}

// id -> name of the nodes this caller can see (fetched once a page, refreshed on demand).
let names = null;
export async function nodeNames(refresh = false) {
  if (!names || refresh) {
    try {
      names = new Map((await api("/v1/nodes")).map((n) => [n.id, n.name || n.id]));
    } catch { names = names || new Map(); }
  }
  return names;
}
