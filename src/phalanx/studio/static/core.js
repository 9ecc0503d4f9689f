// phalanx studio, shared by every view. Data comes from /api/v1 as JSON and is
// written into the page as text (textContent), never as HTML: a rank's output,
// a job's name or a metric's name shows the characters it holds and runs nothing.
// The view scripts load after this one, main.js last (pages.py lists them).
"use strict";

const CSRF = document.querySelector('meta[name="csrf"]').content;
const main = document.getElementById("main");
const TERMINAL = new Set(["Completed", "Failed", "Canceled"]);
const STATUSES = ["Queued", "Preparing", "Running", "Finalizing", "Completed", "Failed", "Canceled"];

// Terminal escape sequences (colours, cursor moves, titles) and other control
// characters are dropped: on a page they are noise, not text.
const ESCAPES = /\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?|\x1b[ -/]*[0-~]?|[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;
function clean(text) { return String(text).replace(ESCAPES, ""); }

// el("td", {class: "x"}, "text", child…): strings become text nodes, never markup.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = clean(value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(clean(child)));
  }
  return node;
}

async function api(path, options) {
  const opts = Object.assign({credentials: "same-origin", headers: {}}, options || {});
  if (opts.method && opts.method !== "GET") opts.headers["X-Phalanx-CSRF"] = CSRF;
  if (opts.json !== undefined) {
    opts.body = JSON.stringify(opts.json);
    opts.headers["Content-Type"] = "application/json";
  }
  const response = await fetch("/api/v1" + path, opts);
  const body = await response.json().catch(() => ({}));
  if (response.status === 401 && document.body.dataset.view !== "signin") {
    location.href = "/signin";
  }
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// The caller ({user, role, auth}), asked once per page: what it may act on decides which
// buttons a page shows (the server refuses the rest anyway).
const WHOAMI = api("/whoami").catch(() => null);
function mayActOn(me, owner) {
  return !!me && (me.role === "admin" || (me.role === "member" && !!me.user && me.user === owner));
}

function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : "-"; }
function duration(job) {
  if (!job.started_at) return "-";
  let s = Math.round((job.ended_at || Date.now() / 1000) - job.started_at);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60); s %= 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${String(s).padStart(2, "0")}s` : `${s}s`;
}
function shape(job) {
  const spec = job.spec || {};
  const nodes = (spec.resources || {}).instance_count || 1;
  const procs = (spec.distribution || {}).process_count_per_instance || 1;
  return [nodes, procs];
}
function gpus(job) {
  const last = job.attempts && job.attempts[job.attempts.length - 1];
  if (!last) return "-";
  const n = last.nodes.reduce((sum, node) => sum + ((node.gpus || []).length), 0);
  return n ? String(n) : "-";
}
function badge(status) { return el("span", {class: "status " + status}, status); }
function queuePlace(job) {
  return job.status === "Queued" && job.queue && job.queue.position ? "#" + job.queue.position : "-";
}
function section(title, ...children) { return el("div", {class: "card"}, el("h2", {}, title), ...children); }
function grid(rows) {
  const dl = el("dl", {class: "grid"});
  for (const [key, value] of rows) dl.append(el("dt", {}, key), el("dd", {}, value));
  return dl;
}

// ---------------------------------------------------------------- humane values
// What a person reads: sizes in KiB/MiB/GiB, times relative (the exact time on hover),
// field names in words, a mapping as chips or a small table, never raw JSON.
function size(bytes) {
  if (typeof bytes !== "number" || !Number.isFinite(bytes)) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let k = 0;
  while (bytes >= 1024 && k < units.length - 1) { bytes /= 1024; k += 1; }
  return `${k ? bytes.toFixed(1) : bytes} ${units[k]}`;
}

// A time given as seconds since the epoch or as ISO text; null when it is neither.
function toDate(value) {
  if (value === null || value === undefined || value === "") return null;
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(String(value));
  return Number.isNaN(date.getTime()) ? null : date;
}
function relative(date) {
  const s = (Date.now() - date.getTime()) / 1000, a = Math.abs(s);
  const say = (n, unit) => (s >= 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`);
  if (a < 10) return "just now";
  if (a < 90) return say(Math.round(a), "s");
  if (a < 90 * 60) return say(Math.round(a / 60), "min");
  if (a < 36 * 3600) return say(Math.round(a / 3600), "h");
  if (a < 30 * 86400) return say(Math.round(a / 86400), "days");
  return date.toLocaleDateString();
}
// "5 min ago", its title the ISO time (UTC) and the local one.
function ago(value) {
  const date = toDate(value);
  if (!date) return "-";
  return el("time", {datetime: date.toISOString(), title: `${date.toISOString()} (${date.toLocaleString()} local)`},
    relative(date));
}
function seconds(s) {
  if (typeof s !== "number" || !Number.isFinite(s)) return "-";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60); s %= 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${String(s).padStart(2, "0")}s` : `${s}s`;
}
const WORDS = {uri: "URI", sha256: "SHA-256", id: "ID", url: "URL", gpus: "GPUs", cpus: "CPUs"};
function words(key) {
  if (WORDS[key]) return WORDS[key];
  const text = String(key).replace(/_at$/, "").replace(/_/g, " ");
  return text.charAt(0).toUpperCase() + text.slice(1);
}
function number(v) {
  return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(6)));
}
// A mapping as chips ("key value"); a list of plain values as chips too.
function chips(value) {
  const entries = Array.isArray(value) ? value.map((v) => [null, v]) : Object.entries(value || {});
  if (!entries.length) return "-";
  return el("span", {class: "chips"}, ...entries.map(([k, v]) => el("span", {class: "chip"},
    k === null ? null : el("span", {class: "key"}, k + "="), plain(v))));
}
// A mapping as a small table of its fields (values made humane in turn).
function fieldTable(value) {
  const entries = Object.entries(value || {});
  if (!entries.length) return "-";
  return el("table", {class: "fields"}, el("tbody", {}, ...entries.map(([k, v]) =>
    el("tr", {}, el("th", {}, words(k)), el("td", {}, humane(k, v))))));
}
// A list of mappings as a table with a column per field.
function rowsTable(rows) {
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  return el("div", {class: "scroll"}, el("table", {class: "fields"},
    el("thead", {}, el("tr", {}, ...keys.map((k) => el("th", {}, words(k))))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...keys.map((k) => el("td", {}, humane(k, r[k]))))))));
}
function plain(v) {
  if (v === null || v === undefined || v === "") return "-";
  if (typeof v === "number") return number(v);
  if (typeof v === "object") return yamlText(v).trim();
  return String(v);
}
const TIME_KEY = /(^|_)(at|time|when|created|modified|updated)$/;
// Any value as a person reads it, by its field's name and its shape.
function humane(key, value) {
  if (value === null || value === undefined || value === "") return "-";
  if (TIME_KEY.test(key) && (typeof value === "number" || typeof value === "string")) return ago(value);
  if (/(^|_)(size|bytes)$/.test(key) && typeof value === "number") return size(value);
  if (Array.isArray(value)) {
    if (!value.length) return "-";
    return value.every((v) => v !== null && typeof v === "object" && !Array.isArray(v)) ? rowsTable(value) : chips(value);
  }
  if (typeof value === "object") {
    const flat = Object.values(value).every((v) => v === null || typeof v !== "object");
    return flat ? chips(value) : fieldTable(value);
  }
  if (typeof value === "boolean") return value ? "yes" : "no";
  return plain(value);
}
// A value as YAML-like text (a spec as a person wrote it), never JSON.
function yamlText(value, indent) {
  const pad = "  ".repeat(indent || 0);
  const scalarText = (v) => (v === null || v === undefined ? "null" : typeof v === "string" ?
    (/^[\w./:@$+-][\w ./:@$+,=-]*$/.test(v) && !/[:\s]$/.test(v) ? v : "'" + v.replace(/'/g, "''") + "'") : String(v));
  if (Array.isArray(value)) {
    if (!value.length) return pad + "[]\n";
    return value.map((v) => (v !== null && typeof v === "object" && Object.keys(v).length
      ? pad + "-\n" + yamlText(v, (indent || 0) + 1) : pad + "- " + scalarText(v) + "\n")).join("");
  }
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value);
    if (!entries.length) return pad + "{}\n";
    return entries.map(([k, v]) => (v !== null && typeof v === "object" && Object.keys(v).length
      ? `${pad}${k}:\n` + yamlText(v, (indent || 0) + 1) : `${pad}${k}: ${typeof v === "object" && v ? (Array.isArray(v) ? "[]" : "{}") : scalarText(v)}\n`)).join("");
  }
  return pad + scalarText(value) + "\n";
}
// An absolute path on the server's disk: through a server it means nothing to the reader
// (and tells what it need not know; terminal/places.py is the CLI's rule), so never shown.
function serverPath(v) { return typeof v === "string" && v.startsWith("/"); }
// A wide table scrolls inside its own box, never the page.
function scrolling(table) { return el("div", {class: "scroll"}, table); }
