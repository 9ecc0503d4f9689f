// phalanx studio: every view of the page. Data comes from /api/v1 as JSON and is
// written into the page as text (textContent), never as HTML: a rank's output,
// a job's name or a metric's name shows the characters it holds and runs nothing.
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

// ---------------------------------------------------------------- jobs table
function jobsView() {
  const status = el("select", {id: "f-status"}, el("option", {value: ""}, "any status"),
    ...STATUSES.map((s) => el("option", {value: s}, s)));
  const experiment = el("input", {id: "f-experiment", placeholder: "experiment"});
  const text = el("input", {id: "f-text", placeholder: "filter by text"});
  const count = el("span", {class: "muted", id: "count"});
  const picked = new Set();
  const compare = el("button", {id: "compare", disabled: true, onclick: () => {
    location.href = "/compare?jobs=" + encodeURIComponent([...picked].join(","));
  }}, "Compare selected");
  const body = el("tbody", {id: "jobs"});
  const columns = ["", "name", "status", "experiment", "compute", "nodes × procs", "GPUs",
    "created", "duration", "queue"];
  main.append(el("h1", {}, "Jobs"), el("div", {class: "filters"}, status, experiment, text, compare, count),
    el("table", {}, el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", {}, c)))), body));
  let jobs = [], shownKey = "";
  function render() {
    const needle = text.value.trim().toLowerCase();
    const shown = jobs.filter((j) => !needle ||
      [j.name, j.display_name, j.experiment_name, j.status, j.created_by].join(" ").toLowerCase().includes(needle));
    body.replaceChildren(...shown.map((j) => {
      const [nodes, procs] = shape(j);
      const box = el("input", {type: "checkbox", class: "pick", checked: picked.has(j.name)});
      box.addEventListener("change", () => {
        if (box.checked) picked.add(j.name); else picked.delete(j.name);
        compare.disabled = picked.size < 2;
      });
      return el("tr", {"data-job": j.name}, el("td", {}, box),
        el("td", {}, el("a", {href: "/jobs/" + encodeURIComponent(j.name)}, j.name)),
        el("td", {}, badge(j.status)), el("td", {}, j.experiment_name),
        el("td", {}, (j.spec || {}).compute || j.target || "local"),
        el("td", {}, `${nodes} × ${procs}`), el("td", {}, gpus(j)),
        el("td", {}, when(j.created_at)), el("td", {}, duration(j)), el("td", {}, queuePlace(j)));
    }));
    count.textContent = `${shown.length} of ${jobs.length}`;
  }
  async function load() {
    const q = new URLSearchParams({limit: "1000"});
    if (status.value) q.set("status", status.value);
    if (experiment.value.trim()) q.set("experiment", experiment.value.trim());
    try {
      const fresh = (await api("/jobs?" + q)).jobs;
      const key = JSON.stringify(fresh);
      // Redrawn when something changed, or while a job runs (its duration grows).
      if (key !== shownKey || fresh.some((j) => !TERMINAL.has(j.status))) {
        jobs = fresh; shownKey = key; render();
      }
    }
    catch (e) { count.textContent = e.message; }
  }
  status.addEventListener("change", load);
  experiment.addEventListener("change", load);
  text.addEventListener("input", render);
  load();
  setInterval(load, 2000);  // the table follows the workspace without a reload
}

// ---------------------------------------------------------------- a job's page
function jobView() {
  const name = decodeURIComponent(location.pathname.split("/")[2] || "");
  const title = el("h1", {}, name);
  const cause = el("div", {id: "rootcause"});
  const overview = el("div", {id: "overview"});
  const attempts = el("div", {id: "attempts"});
  const tabs = el("div", {class: "tabs"});
  const panes = {Logs: logsPane(name), Metrics: metricsPane(name), Files: filesPane(name),
    Spec: specPane(name)};
  for (const label of Object.keys(panes)) {
    tabs.append(el("button", {"data-tab": label, onclick: () => { history.replaceState(null, "", "#" + label.toLowerCase()); show(label); }}, label));
  }
  function show(label) {
    for (const [key, pane] of Object.entries(panes)) pane.hidden = key !== label;
    for (const b of tabs.children) b.classList.toggle("on", b.dataset.tab === label);
    if (panes[label].load) panes[label].load();
  }
  main.append(title, cause, overview, attempts, tabs, ...Object.values(panes));
  const fromHash = () => Object.keys(panes).find((k) => "#" + k.toLowerCase() === location.hash);
  show(fromHash() || "Logs");
  window.addEventListener("hashchange", () => show(fromHash() || "Logs"));
  let last = null;
  async function load() {
    let job;
    try { job = await api("/jobs/" + encodeURIComponent(name)); }
    catch (e) { title.replaceChildren(name + ": " + e.message); return; }
    const changed = !last || last.status !== job.status || last.attempts.length !== job.attempts.length;
    last = job;
    renderHead(title, job);
    if (changed) {
      renderCause(cause, job); renderOverview(overview, job); renderAttempts(attempts, job);
      panes.Logs.ranks(job);
    }
    if (!TERMINAL.has(job.status)) setTimeout(load, 2000);
  }
  load();
}

function renderHead(title, job) {
  const running = !TERMINAL.has(job.status);
  const act = (verb, body) => async (event) => {
    if (!confirm(`${verb} job ${job.name}?`)) return;
    event.target.disabled = true;
    try { await api(`/jobs/${encodeURIComponent(job.name)}/${verb}`, {method: "POST", json: body}); }
    catch (e) { alert(e.message); event.target.disabled = false; }
  };
  const buttons = [];
  if (running) buttons.push(el("button", {class: "danger", id: "cancel", onclick: act("cancel")}, "Cancel"));
  if (job.status === "Running") buttons.push(el("button", {id: "preempt", onclick: act("preempt", {})}, "Preempt"));
  title.replaceChildren(job.name, badge(job.status), ...buttons);
}

function renderCause(box, job) {
  const e = job.error;
  if (!e || job.status !== "Failed") { box.replaceChildren(); return; }
  const where = e.rank === null || e.rank === undefined ? "the launcher" : `rank ${e.rank}`;
  box.replaceChildren(el("div", {class: "card rootcause"},
    el("h2", {}, `Root cause: ${where}` + (e.exit_code !== null && e.exit_code !== undefined ? `, exit code ${e.exit_code}` : "") +
      (e.signal ? `, ${e.signal}` : "")),
    el("div", {class: "message"}, e.message),
    e.traceback ? el("pre", {class: "traceback"}, e.traceback) : null));
}

function renderOverview(box, job) {
  const spec = job.spec || {};
  const [nodes, procs] = shape(job);
  const last = job.attempts[job.attempts.length - 1];
  const devices = last && last.nodes.length ? last.nodes.map((n, k) =>
    `node ${k} (${n.host || n.hostname || "?"}): ` + ((n.gpus || []).length ? "GPUs " + n.gpus.join(",") : `${n.cpus || 0} CPU slots`)).join("; ") : "-";
  const io = (items) => Object.entries(items || {}).map(([k, v]) =>
    `${k}: ${typeof v === "object" && v ? (v.path || v.uri || JSON.stringify(v)) + (v.mode ? ` (${v.mode})` : "") : v}`).join("\n") || "-";
  const env = spec.environment;
  box.replaceChildren(section("Overview", grid([
    ["experiment", job.experiment_name], ["display name", job.display_name || "-"],
    ["created by", job.created_by || "-"], ["compute", (spec.compute || job.target || "local")],
    ["nodes × processes", `${nodes} × ${procs}`], ["devices per node", devices],
    ["created", when(job.created_at)], ["started", when(job.started_at)],
    ["ended", when(job.ended_at)], ["duration", duration(job)],
    ["queue", queuePlace(job)], ["command", el("pre", {}, spec.command || "-")],
    ["inputs", el("pre", {}, io(spec.inputs))], ["outputs", el("pre", {}, io(spec.outputs))],
    ["environment", typeof env === "object" && env ? JSON.stringify(env) : (env || "-")],
    ["job folder", job.job_dir],
  ])));
}

function renderAttempts(box, job) {
  if (!job.attempts.length) { box.replaceChildren(); return; }
  const rows = job.attempts.map((a, i) => {
    const next = job.attempts[i + 1];
    const followed = next ? `attempt ${next.number}` : (TERMINAL.has(job.status) ? `job ${job.status}` : "-");
    return el("tr", {}, el("td", {}, String(a.number)), el("td", {}, badge(a.status)),
      el("td", {}, when(a.started_at)), el("td", {}, a.ended_at ? duration({started_at: a.started_at, ended_at: a.ended_at}) : "-"),
      el("td", {}, a.cause || "-"), el("td", {}, a.exit_code === null ? "-" : String(a.exit_code)),
      el("td", {}, a.note || (a.error ? a.error.message : "") || "-"), el("td", {}, followed));
  });
  // A timeline: each attempt a bar placed and sized by when it ran, coloured by its status.
  const t0 = job.attempts[0].started_at;
  const t1 = Math.max(...job.attempts.map((a) => a.ended_at || Date.now() / 1000), t0 + 1);
  const line = el("div", {class: "timeline", id: "timeline"}, ...job.attempts.map((a) => {
    const left = (100 * (a.started_at - t0)) / (t1 - t0);
    const width = Math.max(1.5, (100 * ((a.ended_at || Date.now() / 1000) - a.started_at)) / (t1 - t0));
    return el("div", {class: "bar status " + a.status, style: `left:${left}%;width:${width}%`,
      title: `attempt ${a.number}: ${a.status}${a.cause ? " (" + a.cause + ")" : ""}`},
    `#${a.number}${a.cause ? " " + a.cause : ""}`);
  }));
  box.replaceChildren(section("Attempts", line, el("table", {id: "attempts-table"},
    el("thead", {}, el("tr", {}, ...["#", "status", "started", "took", "cause", "exit", "note", "then"].map((c) => el("th", {}, c)))),
    el("tbody", {}, ...rows))));
}

// ---------------------------------------------------------------- logs
const LOG_CAP = 100000;  // lines kept in the page; older ones are paged back in on scroll

function logsPane(name) {
  const picker = el("select", {id: "rank"});
  const query = el("input", {id: "search", placeholder: "search this rank's log"});
  const hits = el("div", {class: "hits", id: "hits"});
  const state = el("span", {class: "muted", id: "log-state"});
  const log = el("div", {id: "log"});
  const pane = el("div", {class: "card"}, el("div", {class: "tools"}, el("h2", {}, "Logs"), picker,
    query, el("button", {onclick: () => find()}, "Search"), state), hits, log);
  query.addEventListener("keydown", (e) => { if (e.key === "Enter") find(); });
  let source = null, starts = {}, known = "", loading = false;
  const path = "/jobs/" + encodeURIComponent(name) + "/logs";

  function line(rank, text, all) {
    const div = el("div", {class: "ln", "data-rank": String(rank)});
    if (all) div.append(el("span", {class: "rk"}, `[${rank}] `));
    div.append(clean(text));
    return div;
  }
  async function open() {
    if (source) source.close();
    const rank = picker.value || "0";
    const all = rank === "all";
    log.replaceChildren(); hits.replaceChildren(); starts = {};
    let pages;
    try { pages = (await api(`${path}/page?rank=${rank}&kib=256`)).pages; }
    catch (e) { state.textContent = e.message; return; }
    const at = [];
    for (const page of pages) {
      starts[page.rank] = page.start;
      if (page.start > 0 && !all) log.append(el("div", {class: "more"}, "… earlier lines load as you scroll up"));
      log.append(...page.lines.map((t) => line(page.rank, t, all)));
      at.push(`${page.rank}:${page.end}`);
    }
    log.scrollTop = log.scrollHeight;
    source = new EventSource(`/api/v1${path}/events?rank=${rank}&at=${at.join(",")}`);
    state.textContent = pane.ended ? "" : "live";
    source.onmessage = (event) => {
      const data = JSON.parse(event.data);
      const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 30;
      for (const [r, t, cont] of data.lines) {
        // The rest of a line shown before (a long line, or one that waited for its end).
        const last = log.lastElementChild;
        if (cont && last && last.dataset.rank === String(r)) last.append(clean(t));
        else log.append(line(r, t, all));
      }
      while (log.childElementCount > LOG_CAP) { log.firstElementChild.remove(); starts = {}; }
      if (stick) log.scrollTop = log.scrollHeight;
    };
    source.addEventListener("end", () => { source.close(); state.textContent = "the job has ended"; });
    source.onerror = () => { state.textContent = "reconnecting…"; };
  }
  async function earlier() {
    const rank = picker.value;
    if (loading || rank === "all" || !starts[rank]) return;
    loading = true;
    try {
      const page = (await api(`${path}/page?rank=${rank}&before=${starts[rank]}&kib=256`)).pages[0];
      const height = log.scrollHeight;
      const marker = log.querySelector(".more");
      if (marker) marker.remove();
      log.prepend(...page.lines.map((t) => line(page.rank, t, false)));
      if (page.start > 0) log.prepend(el("div", {class: "more"}, "… earlier lines load as you scroll up"));
      starts[rank] = page.start;
      log.scrollTop += log.scrollHeight - height;
    } finally { loading = false; }
  }
  log.addEventListener("scroll", () => { if (log.scrollTop < 80) earlier(); });
  async function find() {
    const q = query.value.trim();
    if (!q) { hits.replaceChildren(); return; }
    const rank = picker.value === "all" ? "0" : picker.value;
    try {
      const found = await api(`${path}/search?rank=${rank}&q=${encodeURIComponent(q)}&limit=500`);
      hits.replaceChildren(el("div", {class: "muted"}, `${found.matches.length}${found.complete ? "" : "+"} lines of rank ${rank} hold “${q}”`),
        ...found.matches.map((m) => el("div", {}, el("span", {class: "no"}, String(m.line)), clean(m.text))));
    } catch (e) { hits.replaceChildren(el("div", {class: "error"}, e.message)); }
  }
  picker.addEventListener("change", open);
  pane.ranks = (job) => {
    pane.ended = TERMINAL.has(job.status);
    const ranks = (job.logs && job.logs.user_logs || []).map((p) => p.match(/_(\d+)\.txt$/)[1]);
    if (!ranks.length) ranks.push("0");
    const key = ranks.join(",");
    if (key === known) return;
    const chosen = picker.value || "0";
    known = key;
    picker.replaceChildren(...ranks.map((r) => el("option", {value: r}, `rank ${r}`)),
      el("option", {value: "all"}, "all ranks interleaved"));
    picker.value = ranks.includes(chosen) || chosen === "all" ? chosen : "0";
    if (!source || picker.value !== chosen) open();
  };
  return pane;
}

// ---------------------------------------------------------------- files and spec
function size(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let k = 0;
  while (bytes >= 1024 && k < units.length - 1) { bytes /= 1024; k += 1; }
  return `${k ? bytes.toFixed(1) : bytes} ${units[k]}`;
}

function filesPane(name) {
  const pane = el("div", {id: "files-pane"});
  const job = encodeURIComponent(name);
  pane.load = async () => {
    const parts = [];
    for (const folder of ["outputs", "checkpoints"]) {
      let listed;
      try { listed = await api(`/jobs/${job}/tree?path=${folder}`); }
      catch (e) { parts.push(section(folder, el("div", {class: "muted"}, e.message))); continue; }
      const rows = listed.files.map((f) => el("tr", {},
        el("td", {}, el("a", {href: `/api/v1/jobs/${job}/files/${f.path.split("/").map(encodeURIComponent).join("/")}?raw=true`,
          download: f.path.split("/").pop()}, f.path)),
        el("td", {}, size(f.size))));
      parts.push(section(folder + (listed.complete ? "" : " (first files only)"), rows.length
        ? el("table", {class: "tree", "data-folder": folder}, el("tbody", {}, ...rows))
        : el("div", {class: "muted"}, "no files"),
      el("div", {}, el("a", {href: `/api/v1/jobs/${job}/files/${folder}`, download: `${name}-${folder}.tar`}, `download all of ${folder} (tar)`))));
    }
    pane.replaceChildren(...parts);
  };
  return pane;
}

function specPane(name) {
  const pane = el("div", {id: "spec"});
  pane.load = async () => {
    try {
      const spec = await api(`/jobs/${encodeURIComponent(name)}/spec`);
      pane.replaceChildren(section("Spec as submitted", el("pre", {id: "spec-submitted"}, spec.submitted || "-")),
        section("Spec as resolved", el("pre", {id: "spec-resolved"}, JSON.stringify(spec.resolved, null, 2))));
    } catch (e) { pane.replaceChildren(el("div", {class: "error"}, e.message)); }
  };
  return pane;
}

// ---------------------------------------------------------------- metrics
function ema(values, weight) {
  if (!weight) return values;
  let last = null;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return null;
    last = last === null ? v : last * weight + (1 - weight) * v;
    return last;
  });
}

function chart(box, title, points, opts) {
  const stepped = points.filter((p) => p[0] !== null);
  const xs = stepped.map((p) => p[0]);
  let ys = stepped.map((p) => (p[1] === null ? null : Number(p[1])));
  if (opts.log) ys = ys.map((v) => (v !== null && v > 0 ? v : null));
  const data = [xs, ys];
  const series = [{label: "step"}, {label: title, stroke: "#9bb3e8", width: 1}];
  if (opts.smooth > 0) { data.push(ema(ys, opts.smooth)); series.push({label: "smoothed", stroke: "#2457c5", width: 2}); }
  else series[1].stroke = "#2457c5";
  const holder = el("div", {class: "chart card", "data-metric": title, "data-points": String(xs.length)},
    el("h3", {}, title));
  box.append(holder);
  // eslint-disable-next-line no-undef
  new uPlot({width: Math.max(300, holder.clientWidth - 28), height: 220, series, scales: {x: {time: false}, y: opts.log ? {distr: 3} : {}},
    legend: {show: true}}, data, holder);
}

function metricsPane(name) {
  const smooth = el("input", {type: "range", id: "smooth", min: "0", max: "0.99", step: "0.01", value: "0.6"});
  const log = el("input", {type: "checkbox", id: "logscale"});
  const user = el("div", {class: "charts", id: "metric-charts"});
  const system = el("div", {class: "charts", id: "system-charts"});
  const state = el("span", {class: "muted"});
  const pane = el("div", {},
    el("div", {class: "card"}, el("div", {class: "tools"}, el("h2", {}, "Metrics"),
      el("label", {}, "smoothing ", smooth), el("label", {}, log, " log scale"), state), user),
    el("div", {class: "card"}, el("h2", {}, "System metrics (per node)"), system));
  let data = null, timer = null;
  function draw() {
    const opts = {smooth: Number(smooth.value), log: log.checked};
    user.replaceChildren(); system.replaceChildren();
    for (const [metric, points] of Object.entries(data.metrics)) chart(user, metric, points, opts);
    for (const [metric, points] of Object.entries(data.system)) chart(system, metric, points, {smooth: 0, log: false});
    if (!Object.keys(data.metrics).length) user.append(el("div", {class: "muted"}, "no metric logged yet (phalanx.train.log_metric)"));
    if (!Object.keys(data.system).length) system.append(el("div", {class: "muted"}, "no system sample yet"));
  }
  pane.load = async () => {
    try { data = await api(`/jobs/${encodeURIComponent(name)}/metrics?points=2000`); draw(); state.textContent = ""; }
    catch (e) { state.textContent = e.message; }
    clearTimeout(timer);
    if (!pane.hidden) timer = setTimeout(pane.load, 5000);
  };
  smooth.addEventListener("input", () => data && draw());
  log.addEventListener("change", () => data && draw());
  return pane;
}

// ---------------------------------------------------------------- compare
function compareView() {
  const names = el("input", {id: "compare-jobs", placeholder: "job names, comma-separated", size: "60"});
  const metric = el("select", {id: "compare-metric"});
  const box = el("div", {class: "card", id: "compare-chart"});
  const params = new URLSearchParams(location.search);
  names.value = params.get("jobs") || "";
  let wanted = params.get("metric") || "";
  let histories = {};
  async function load() {
    const jobs = names.value.split(",").map((s) => s.trim()).filter(Boolean);
    histories = {};
    await Promise.all(jobs.map((j) => api(`/jobs/${encodeURIComponent(j)}/metrics?points=2000`)
      .then((d) => { histories[j] = d.metrics; }).catch(() => { histories[j] = {}; })));
    const metrics = [...new Set(Object.values(histories).flatMap((m) => Object.keys(m)))].sort();
    wanted = metrics.includes(metric.value) ? metric.value : metrics.includes(wanted) ? wanted : metrics[0] || "";
    metric.replaceChildren(...metrics.map((m) => el("option", {value: m}, m)));
    metric.value = wanted;
    draw();
  }
  function draw() {
    const jobs = Object.keys(histories);
    box.replaceChildren();
    if (!jobs.length || !metric.value) { box.append(el("div", {class: "muted"}, "name jobs with a metric in common")); return; }
    history.replaceState(null, "", `?jobs=${encodeURIComponent(jobs.join(","))}&metric=${encodeURIComponent(metric.value)}`);
    const series = jobs.map((j) => (histories[j][metric.value] || []).filter((p) => p[0] !== null));
    const steps = [...new Set(series.flatMap((h) => h.map((p) => p[0])))].sort((a, b) => a - b);
    const data = [steps, ...series.map((h) => {
      const at = new Map(h.map((p) => [p[0], p[1]]));
      return steps.map((s) => (at.has(s) ? at.get(s) : null));
    })];
    const colors = ["#2457c5", "#c5247a", "#1e7f45", "#9a6700", "#6a3fc5", "#0f7f8a"];
    box.append(el("h2", {}, metric.value));
    // eslint-disable-next-line no-undef
    new uPlot({width: Math.max(400, box.clientWidth - 28), height: 360, scales: {x: {time: false}},
      series: [{label: "step"}, ...jobs.map((j, i) => ({label: j, stroke: colors[i % colors.length], spanGaps: true}))]},
    data, box);
  }
  metric.addEventListener("change", draw);
  main.append(el("h1", {}, "Compare"), el("div", {class: "filters"}, names,
    el("button", {onclick: load}, "Load"), metric), box);
  load();
}

// ---------------------------------------------------------------- models, data, datastores, compute
const COLLECTIONS = {
  models: {title: "Models", list: "/models", key: "models", versioned: true},
  data: {title: "Data assets", list: "/data", key: "assets", versioned: true},
  datastores: {title: "Datastores", list: "/datastores", key: "datastores",
    row: (d) => Object.assign({name: d.show.name, type: d.show.type, where: d.where}, d.show)},
  compute: {title: "Compute", list: "/compute", key: "targets",
    row: (t) => Object.assign({name: t.settings.name, where: t.where}, t.settings)},
};

function scalar(value) {
  return value === null || value === undefined ? "-" :
    typeof value === "object" ? JSON.stringify(value) : String(value);
}

function valueCell(key, value) {
  if (key === "job" && value) return el("a", {href: "/jobs/" + encodeURIComponent(value)}, value);
  if (value !== null && typeof value === "object") return el("pre", {}, JSON.stringify(value, null, 2));
  return scalar(value);
}

async function collectionView(kind) {
  const spec = COLLECTIONS[kind];
  const rest = location.pathname.split("/").slice(2).map(decodeURIComponent).join("/");
  if (rest) return itemView(kind, spec, rest);
  main.append(el("h1", {}, spec.title));
  let items;
  try { items = (await api(spec.list))[spec.key].map(spec.row || ((i) => i)); }
  catch (e) { main.append(el("div", {class: "error"}, e.message)); return; }
  if (!items.length) { main.append(el("div", {class: "muted"}, `no ${spec.title.toLowerCase()} yet`)); return; }
  const columns = Object.keys(items[0]).filter((k) =>
    items.some((i) => i[k] === null || typeof i[k] !== "object")).slice(0, 9);
  main.append(el("table", {id: "items"}, el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", {}, c)))),
    el("tbody", {}, ...items.map((item) => el("tr", {"data-name": item.name},
      ...columns.map((c) => el("td", {}, c === "name"
        ? el("a", {href: `/${kind}/${encodeURIComponent(item.name)}` + (spec.versioned ? `?version=${encodeURIComponent(item.version)}` : "")}, item.name)
        : valueCell(c, item[c]))))))));
  if (kind === "compute") {
    const queue = (await api("/queue")).targets;
    main.append(el("h1", {}, "Queue"), el("pre", {id: "queue"}, JSON.stringify(queue, null, 2)));
  }
}

async function itemView(kind, spec, name) {
  const version = new URLSearchParams(location.search).get("version");
  const path = `${spec.list}/${encodeURIComponent(name)}` + (version ? `?version=${encodeURIComponent(version)}` : "");
  main.append(el("h1", {}, el("a", {href: `/${kind}`}, spec.title), " / ", name));
  let item;
  try { item = await api(path); }
  catch (e) { main.append(el("div", {class: "error"}, e.message)); return; }
  const files = kind === "models" ? item.files : null;
  main.append(section("Details", grid(Object.entries(item).filter(([k]) => k !== "files")
    .map(([k, v]) => [k, valueCell(k, v)]))));
  if (files) {
    main.append(section("Files", el("table", {id: "files"},
      el("thead", {}, el("tr", {}, el("th", {}, "path"), el("th", {}, "bytes"), el("th", {}, "sha256"))),
      el("tbody", {}, ...files.map((f) => el("tr", {},
        el("td", {}, el("a", {href: `/api/v1/models/${encodeURIComponent(item.name)}/file?version=${encodeURIComponent(item.version)}&path=${encodeURIComponent(f.path)}`, download: f.path.split("/").pop()}, f.path)),
        el("td", {}, scalar(f.size)), el("td", {}, scalar(f.sha256))))))));
  }
  if (kind === "datastores") {
    try {
      const entries = (await api(`/datastores/${encodeURIComponent(name)}/ls`)).entries;
      main.append(section("Top folder", el("pre", {id: "ls"}, entries.map((e) => typeof e === "object" ? (e.name || e.path || JSON.stringify(e)) : String(e)).join("\n") || "(empty)")));
    } catch (e) { main.append(section("Top folder", el("pre", {id: "ls", class: "error"}, e.message))); }
  }
}

// ---------------------------------------------------------------- sign in
function signinView() {
  const token = el("input", {type: "password", id: "token", placeholder: "phx_…", autocomplete: "off"});
  const message = el("div", {class: "error"});
  async function go() {
    try { await api("/session", {method: "POST", json: {token: token.value}}); location.href = "/"; }
    catch (e) { message.textContent = e.message; }
  }
  token.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
  main.append(el("div", {class: "card signin"}, el("h2", {}, "Sign in"),
    el("div", {class: "muted"}, "Paste your API token (phalanx server token create --user NAME)."),
    token, el("button", {id: "signin", onclick: go}, "Sign in"), message));
}

async function who() {
  try {
    const me = await api("/whoami");
    const box = document.getElementById("who");
    if (me.auth) {
      box.replaceChildren(me.user + " ", el("a", {href: "#", onclick: async (e) => {
        e.preventDefault(); await api("/session", {method: "DELETE"}); location.href = "/signin"; }}, "sign out"));
    } else box.textContent = "this machine (no auth)";
  } catch (e) { /* signed out: the sign-in page says so */ }
}

const VIEWS = {jobs: jobsView, job: jobView, compare: compareView, signin: signinView};
for (const kind of Object.keys(COLLECTIONS)) VIEWS[kind] = () => collectionView(kind);
VIEWS[document.body.dataset.view]();
if (document.body.dataset.view !== "signin") who();
