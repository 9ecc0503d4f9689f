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
