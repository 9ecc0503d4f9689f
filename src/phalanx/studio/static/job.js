"use strict";
// ---------------------------------------------------------------- a job's page
// A sweep's page is its trials (sweep.js); a command job's its logs, metrics and files.
async function jobView() {
  const name = decodeURIComponent(location.pathname.split("/")[2] || "");
  let job = null;
  try { job = await api("/jobs/" + encodeURIComponent(name)); }
  catch (e) { /* the command job's page says why */ }
  if (job && job.target === "sweep") sweepView(name); else commandJobView(name);
}

// Buttons switching between panes, the chosen one kept in the URL's #fragment.
function tabbed(panes) {
  const tabs = el("div", {class: "tabs"});
  for (const label of Object.keys(panes)) {
    tabs.append(el("button", {"data-tab": label, onclick: () => { history.replaceState(null, "", "#" + label.toLowerCase()); show(label); }}, label));
  }
  function show(label) {
    for (const [key, pane] of Object.entries(panes)) pane.hidden = key !== label;
    for (const b of tabs.children) b.classList.toggle("on", b.dataset.tab === label);
    if (panes[label].load) panes[label].load();
  }
  const first = Object.keys(panes)[0];
  const fromHash = () => Object.keys(panes).find((k) => "#" + k.toLowerCase() === location.hash);
  tabs.start = () => show(fromHash() || first);
  window.addEventListener("hashchange", () => show(fromHash() || first));
  return tabs;
}

function commandJobView(name) {
  const title = el("h1", {}, name);
  const standing = el("div", {id: "standing"});
  const cause = el("div", {id: "rootcause"});
  const overview = el("div", {id: "overview"});
  const attempts = el("div", {id: "attempts"});
  const panes = {Logs: logsPane(name), Metrics: metricsPane(name), Files: filesPane(name),
    Spec: specPane(name)};
  const tabs = tabbed(panes);
  main.append(title, standing, cause, overview, attempts, tabs, ...Object.values(panes));
  tabs.start();
  let last = null;
  let me = null;
  async function load() {
    me = me || await WHOAMI;
    let job;
    try { job = await api("/jobs/" + encodeURIComponent(name)); }
    catch (e) { title.replaceChildren(name + ": " + e.message); return; }
    const changed = !last || last.status !== job.status || last.attempts.length !== job.attempts.length;
    last = job;
    renderHead(title, job, mayActOn(me, job.created_by));
    renderStanding(standing, job);
    if (changed) {
      renderCause(cause, job); renderOverview(overview, job); renderAttempts(attempts, job);
      panes.Logs.ranks(job);
    }
    if (!TERMINAL.has(job.status)) setTimeout(load, 2000);
  }
  load();
}

function renderHead(title, job, mayAct) {
  // Buttons only for what this caller may do to this job (its owner's, or an admin's).
  const stoppable = !TERMINAL.has(job.status) && mayAct;
  const act = (verb, body) => async (event) => {
    if (!confirm(`${verb} job ${job.name}?`)) return;
    event.target.disabled = true;
    try { await api(`/jobs/${encodeURIComponent(job.name)}/${verb}`, {method: "POST", json: body}); }
    catch (e) { alert(e.message); event.target.disabled = false; }
  };
  const buttons = [];
  if (stoppable) buttons.push(el("button", {class: "danger", id: "cancel", onclick: act("cancel")}, "Cancel"));
  if (stoppable && job.status === "Running") buttons.push(el("button", {id: "preempt", onclick: act("preempt", {})}, "Preempt"));
  title.replaceChildren(job.name, badge(job.status), ...buttons);
}

// Where a job that does not run yet stands, redrawn at every poll: a Queued job's place
// and why it waits; a Preparing job's step (a build, a pull, a wait for another job's
// build), how long it has taken, its output's last line and a link to that system log.
function renderStanding(box, job) {
  const note = job.queue || {};
  if (job.status === "Queued" && note.reason) {
    box.replaceChildren(el("div", {class: "card standing"},
      (note.position ? `#${note.position} in the queue of ${job.target}: ` : "in the queue: ") + note.reason));
  } else if (job.status === "Preparing" && note.reason) {
    const took = typeof note.since === "number" ? ` · ${seconds(Date.now() / 1000 - note.since)}` : "";
    const log = note.log ? el("a", {id: "step-log", target: "_blank",
      href: `/api/v1/jobs/${encodeURIComponent(job.name)}/files/${note.log.split("/").map(encodeURIComponent).join("/")}?raw=true`},
    note.log) : null;
    box.replaceChildren(el("div", {class: "card standing"},
      el("div", {id: "step"}, note.reason + took),
      note.progress ? el("pre", {id: "step-progress"}, note.progress) : null,
      log ? el("div", {class: "muted"}, "its output: ", log) : null));
  } else {
    box.replaceChildren();
  }
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

// An input: where it comes from, a link where the studio shows that place.
function inputCell(v) {
  if (v === null || typeof v !== "object") return place(String(v));
  const where = v.path || v.uri;
  return el("span", {}, where ? place(where) : (v.value !== undefined ? plain(v.value) : "-"),
    v.mode ? el("span", {class: "muted"}, ` (${v.mode})`) : null);
}

const MODEL_TYPES = new Set(["custom_model", "mlflow_model", "triton_model"]);
// An output: the job's folder of it (in the Files tab), a download of it as a tar, and
// the model or data asset it was registered as; one kept elsewhere is its place.
function outputCell(job, key, v) {
  const spec = v && typeof v === "object" ? v : {};
  if (spec.path) return place(String(spec.path));
  const parts = [el("a", {href: "#files", class: "output", "data-output": key}, `outputs/${key}`), " · ",
    el("a", {href: `/api/v1/jobs/${encodeURIComponent(job.name)}/files/outputs/${encodeURIComponent(key)}`,
      download: `${job.name}-${key}.tar`}, "download (tar)")];
  if (spec.name) {
    const kind = MODEL_TYPES.has(spec.type) ? "models" : "data";
    parts.push(" · ", kind === "models" ? "model " : "data asset ",
      el("a", {href: `/${kind}/${encodeURIComponent(spec.name)}` + (spec.version ? `?version=${encodeURIComponent(spec.version)}` : "")}, spec.name));
  }
  return el("span", {}, ...parts);
}

function listed(items, cell) {
  const entries = Object.entries(items || {});
  if (!entries.length) return "-";
  return el("table", {class: "fields"}, el("tbody", {}, ...entries.map(([k, v]) =>
    el("tr", {"data-name": k}, el("th", {}, k), el("td", {}, cell(k, v))))));
}

// A registered environment links to its page; one written inline is named by its image.
function environmentCell(env) {
  if (!env) return "-";
  if (typeof env === "string") {
    const m = /^azureml:([^:@/]+)(?:[:@](.+))?$/.exec(env);
    if (!m) return env;
    const version = m[2] && m[2] !== "latest" ? `?version=${encodeURIComponent(m[2])}` : "";
    return el("a", {href: `/environments/${encodeURIComponent(m[1])}${version}`}, env);
  }
  if (env.image) return `image ${env.image}`;
  return env.build ? "built from a build context (see Spec)" : "inline (see Spec)";
}

function renderOverview(box, job) {
  const spec = job.spec || {};
  const [nodes, procs] = shape(job);
  const last = job.attempts[job.attempts.length - 1];
  const devices = last && last.nodes.length ? last.nodes.map((n, k) =>
    `node ${k} (${n.host || n.hostname || "?"}): ` + ((n.gpus || []).length ? "GPUs " + n.gpus.join(",") : `${n.cpus || 0} CPU slots`)).join("; ") : "-";
  // The spec's tags and what its MLflow run set (MLflow's own mlflow.* tags left out).
  const pairs = (items) => Object.fromEntries(Object.entries(items || {}).filter(([k]) => !k.startsWith("mlflow.")));
  const outside = job.target === "mlflow";
  box.replaceChildren(section("Overview", grid([
    ["experiment", job.experiment_name], ["display name", job.display_name || "-"],
    ["created by", job.created_by || "-"],
    ...(job.parent ? [["sweep", el("a", {id: "sweep-link", href: "/jobs/" + encodeURIComponent(job.parent)},
      `trial of ${job.parent}`)]] : []),
    ["compute", outside ? "none: an MLflow run logged from outside a job" : (spec.compute || job.target || "local")],
    ["tags", chips(pairs({...(job.tags || {}), ...(job.run_tags || {})}))], ["params", chips(pairs(job.params))],
    ["nodes × processes", `${nodes} × ${procs}`], ["devices per node", devices],
    ["created", ago(job.created_at)], ["started", ago(job.started_at)],
    ["ended", ago(job.ended_at)], ["duration", duration(job)],
    ["queue", queuePlace(job)], ["command", el("pre", {}, spec.command || "-")],
    ["inputs", listed(spec.inputs, (k, v) => inputCell(v))],
    ["outputs", el("div", {id: "outputs"}, listed(spec.outputs, (k, v) => outputCell(job, k, v)))],
    ["environment", environmentCell(spec.environment)],
    ["files", el("span", {}, el("a", {href: "#files"}, "outputs and checkpoints"),
      el("span", {class: "muted"}, ` · to copy them here: phalanx job download ${job.name}`))],
  ])));
}

// An attempt ended by a preemption or a cancel is shown as what it was, not as a failure.
function attemptStatus(a) {
  if (a.cause === "preemption") return "Preempted";
  if (a.cause === "canceled") return "Canceled";
  return a.status;
}

function renderAttempts(box, job) {
  if (!job.attempts.length) { box.replaceChildren(); return; }
  const rows = job.attempts.map((a, i) => {
    const next = job.attempts[i + 1];
    const followed = next ? `attempt ${next.number}` : (TERMINAL.has(job.status) ? `job ${job.status}` : "-");
    return el("tr", {}, el("td", {}, String(a.number)), el("td", {}, badge(attemptStatus(a))),
      el("td", {}, ago(a.started_at)), el("td", {}, a.ended_at ? duration({started_at: a.started_at, ended_at: a.ended_at}) : "-"),
      el("td", {}, a.cause || "-"), el("td", {}, a.exit_code === null ? "-" : String(a.exit_code)),
      el("td", {}, a.note || (a.error ? a.error.message : "") || "-"), el("td", {}, followed));
  });
  // A timeline: each attempt a bar placed and sized by when it ran, coloured by its status.
  const t0 = job.attempts[0].started_at;
  const t1 = Math.max(...job.attempts.map((a) => a.ended_at || Date.now() / 1000), t0 + 1);
  const line = el("div", {class: "timeline", id: "timeline"}, ...job.attempts.map((a) => {
    const left = (100 * (a.started_at - t0)) / (t1 - t0);
    const width = Math.max(1.5, (100 * ((a.ended_at || Date.now() / 1000) - a.started_at)) / (t1 - t0));
    return el("div", {class: "bar status " + attemptStatus(a), style: `left:${left}%;width:${width}%`,
      title: `attempt ${a.number}: ${attemptStatus(a)}${a.cause ? " (" + a.cause + ")" : ""}`},
    `#${a.number}${a.cause ? " " + a.cause : ""}`);
  }));
  box.replaceChildren(section("Attempts", line, el("table", {id: "attempts-table"},
    el("thead", {}, el("tr", {}, ...["#", "status", "started", "took", "cause", "exit", "note", "then"].map((c) => el("th", {}, c)))),
    el("tbody", {}, ...rows))));
}
