"use strict";
// ---------------------------------------------------------------- compute and queue
// Both read /queue (what the CLI's `phalanx queue` prints) every few seconds: the compute
// page draws each target's hosts as a grid of devices (which job holds which GPU, whose,
// for how long), the queue page each target's waiting jobs in order with the reason.

const LIVE_MS = 3000;

// Seconds as "45s", "3m 20s", "2h 05m", "3d 4h".
function spanText(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  let s = Math.max(0, Math.round(seconds));
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  s %= 60;
  if (d) return h ? `${d}d ${h}h` : `${d}d`;
  if (h) return m ? `${h}h ${String(m).padStart(2, "0")}m` : `${h}h`;
  if (m) return s ? `${m}m ${String(s).padStart(2, "0")}s` : `${m}m`;
  return `${s}s`;
}
// Seconds ago as "just now", "40 s ago", "3 min ago", "2 h ago", "3 days ago".
function agoText(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.max(0, Math.round(seconds));
  if (s < 5) return "just now";
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  const d = Math.floor(s / 86400);
  return d === 1 ? "1 day ago" : `${d} days ago`;
}
// An estimated start (Unix seconds) as "in 12m", "now", or "unknown" (no time limit tells).
function startText(start) {
  if (start === null || start === undefined) return "unknown";
  const left = start - Date.now() / 1000;
  return left <= 0 ? "now" : "in " + spanText(Math.ceil(left));
}
function plural(n, unit) { return `${n} ${unit}${n === 1 ? "" : "s"}`; }
function gibText(n) { return n ? `${(n / 2 ** 30).toPrecision(3).replace(/\.?0+$/, "")} GiB` : ""; }
function jobLink(name) { return el("a", {href: "/jobs/" + encodeURIComponent(name)}, name); }
function ownerText(user) { return user || "this machine"; }
// What a job asks: "2 nodes × 4 GPUs" (else CPU slots), with memory if it asks for some.
function asksText(request) {
  const r = request || {nodes: 1};
  const each = r.gpus ? plural(r.gpus, "GPU") : plural(r.cpus || 0, "CPU slot");
  return `${plural(r.nodes || 1, "node")} × ${each}` + (r.memory ? ` + ${gibText(r.memory)}` : "");
}
// An elastic target's size in words: what runs now against what its queue wants.
function elasticText(s) {
  const kind = s.tier === "low_priority" ? "low-priority worker nodes" : "worker nodes";
  const now = s.nodes === null || s.nodes === undefined ? "not read yet" : String(s.nodes);
  const asked = s.requested !== null && s.requested !== undefined ? s.requested : s.wanted;
  let text = `Elastic: ${kind} now ${now}, wanted ${asked} (size ${s.min_nodes} to ${s.max_nodes}`;
  text += `; idle ${spanText(s.idle_time_before_scale_down)} before scale-down)`;
  if (s.requested_s_ago !== null && s.requested_s_ago !== undefined) text += `; asked ${agoText(s.requested_s_ago)}`;
  if (s.adding) text += `; adding ${s.adding}`;
  return text;
}

// Poll `load` every few seconds while the page is open; a failure shows, then it tries again.
function pollEvery(load, status) {
  async function tick() {
    try { await load(); status.textContent = `updated ${new Date().toLocaleTimeString()}`; status.classList.remove("error"); }
    catch (e) { status.textContent = e.message; status.classList.add("error"); }
    setTimeout(tick, LIVE_MS);
  }
  tick();
}

// ---------------------------------------------------------------- the compute page
async function computeView() {
  const name = location.pathname.split("/").slice(2).map(decodeURIComponent).join("/");
  const status = el("span", {class: "muted live", id: "updated"});
  main.append(el("h1", {}, name ? el("a", {href: "/compute"}, "Compute") : "Compute",
    name ? ` / ${name}` : null, status));
  const box = el("div", {id: "targets"});
  main.append(box);
  pollEvery(async () => {
    const [views, listed] = await Promise.all([
      api("/queue" + (name ? "?compute=" + encodeURIComponent(name) : "")),
      api("/compute")]);
    const where = Object.fromEntries(listed.targets.map((t) => [t.settings.name, t]));
    box.replaceChildren(...views.targets.map((v) => targetCard(v, where[v.target])));
    if (name && where[name]) box.append(section("Settings", grid(settingRows(where[name].settings))));
  }, status);
}

// A target's settings as words: lists joined, nested values as "key: value" pairs.
function settingRows(settings) {
  const text = (v) => v === null || v === undefined ? "-" : Array.isArray(v) ? (v.map(text).join(", ") || "none")
    : typeof v === "object" ? Object.entries(v).map(([k, x]) => `${k}: ${text(x)}`).join("; ") : String(v);
  return Object.entries(settings).map(([k, v]) => [k.replace(/_/g, " "), text(v)]);
}

function targetCard(view, listed) {
  const settings = (listed || {}).settings || {};
  const card = el("div", {class: "card target", "data-target": view.target});
  const title = el("h2", {}, targetLink(view.target), " ",
    el("span", {class: "muted"}, [settings.type, listed && listed.where].filter(Boolean).join(" · ")));
  card.append(title);
  if (view.scaling) {
    card.append(el("div", {class: "elastic"}, elasticText(view.scaling)));
    if (view.scaling.trouble) card.append(el("div", {class: "error"}, `Ray's autoscaler: ${view.scaling.trouble}`));
  }
  const hosts = view.capacity ? view.capacity.hosts : [];
  // Hosts the capacity does not list (a Ray cluster not read yet) still show what runs there.
  const seen = new Set(hosts.map((h) => h.host));
  for (const r of view.running) {
    if (!seen.has(r.host)) { seen.add(r.host); hosts.push({host: r.host, gpus: [], cpus: null, memory: 0, unread: true}); }
  }
  if (!view.capacity) card.append(el("div", {class: "muted"}, "Capacity not read yet: the Ray cluster places what it can."));
  else if (view.capacity.read_s_ago !== undefined) {
    card.append(el("div", {class: "muted"}, `The cluster's nodes as read ${agoText(view.capacity.read_s_ago)}.`));
  }
  for (const host of hosts) card.append(hostGrid(host, view.running.filter((r) => r.host === host.host)));
  if (!hosts.length) card.append(el("div", {class: "muted"}, "No nodes up."));
  const waiting = view.queued.length;
  card.append(el("div", {class: "queued-note"}, waiting
    ? el("a", {href: "/queue#" + encodeURIComponent(view.target)}, `${plural(waiting, "job")} queued`)
    : el("span", {class: "muted"}, "Nothing queued.")));
  return card;
}
function targetLink(target) { return el("a", {href: "/compute/" + encodeURIComponent(target)}, target); }

// One host: a cell per GPU (the job holding it, or free), then its CPU slots: a cell per job
// holding slots but no GPU here, and the slots left free.
function hostGrid(host, running) {
  const facts = [host.gpus.length ? plural(host.gpus.length, "GPU") : "no GPUs"];
  if (host.cpus !== null) facts.push(plural(host.cpus, "CPU slot"));
  if (host.memory) facts.push(gibText(host.memory));
  const cells = el("div", {class: "devices"});
  const holder = {};
  for (const r of running) for (const gpu of r.gpus) holder[gpu] = r;
  for (const gpu of host.gpus) cells.append(deviceCell(`GPU ${gpu}`, holder[gpu], {"data-gpu": gpu}));
  // A device held that the capacity does not list (read before a node changed): shown too.
  for (const gpu of Object.keys(holder)) if (!host.gpus.includes(gpu)) cells.append(deviceCell(`GPU ${gpu}`, holder[gpu], {"data-gpu": gpu}));
  // A node that holds no GPU here is a cell of its own: its CPU slots, if it asked for some.
  for (const r of running.filter((r) => !r.gpus.length)) {
    cells.append(deviceCell(r.cpus ? plural(r.cpus, "CPU slot") : `node ${r.node}`, r, {"data-cpus": r.job}));
  }
  if (host.cpus !== null) {
    const used = running.reduce((sum, r) => sum + (r.cpus || 0), 0);
    const free = Math.max(0, host.cpus - used);
    if (!host.gpus.length || free) cells.append(deviceCell(`${plural(Math.round(free * 100) / 100, "CPU slot")}`, null, {"data-cpus": "free"}));
  }
  return el("div", {class: "host", "data-host": host.host},
    el("h3", {}, host.host, " ", el("span", {class: "muted"}, facts.join(" · "))), cells);
}

function deviceCell(label, holding, attrs) {
  const box = el("div", Object.assign({class: "device " + (holding ? (holding.leaving ? "held leaving" : "held") : "free")}, attrs),
    el("div", {class: "label"}, label));
  if (!holding) { box.append(el("div", {class: "who"}, "free")); return box; }
  box.setAttribute("data-job", holding.job);
  box.append(el("div", {class: "job"}, jobLink(holding.job)),
    el("div", {class: "who"}, ownerText(holding.created_by)),
    el("div", {class: "for"}, holding.leaving ? `leaving (preempted) after ${spanText(holding.held_s)}` : `for ${spanText(holding.held_s)}`));
  if (holding.time_limit_s) box.append(el("div", {class: "muted limit"}, `limit ${spanText(holding.time_limit_s)}`));
  return box;
}

// ---------------------------------------------------------------- the queue page
async function queueView() {
  const status = el("span", {class: "muted live", id: "updated"});
  main.append(el("h1", {}, "Queue", status));
  const box = el("div", {id: "queues"});
  main.append(box);
  pollEvery(async () => {
    const views = (await api("/queue")).targets;
    box.replaceChildren(...views.map(queueCard));
  }, status);
}

function queueCard(view) {
  const card = el("div", {class: "card queue", id: view.target, "data-target": view.target},
    el("h2", {}, targetLink(view.target), " ", el("span", {class: "muted"},
      `${view.queued.length} waiting · ${plural(new Set(view.running.map((r) => r.job)).size, "job")} running`)));
  if (view.scaling) card.append(el("div", {class: "elastic"}, elasticText(view.scaling)));
  if (!view.queued.length) { card.append(el("div", {class: "muted"}, "Nothing queued.")); return card; }
  const columns = ["#", "job", "user", "priority", "tier", "asks", "time limit", "waiting since", "starts", "why it waits"];
  card.append(el("table", {class: "queue-table"},
    el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", {}, c)))),
    el("tbody", {}, ...view.queued.map((q) => el("tr", {"data-job": q.job},
      el("td", {"data-col": "position"}, q.position ? String(q.position) : "-"),
      el("td", {}, jobLink(q.job)),
      el("td", {}, ownerText(q.created_by)),
      el("td", {}, q.priority || "-"),
      el("td", {}, q.tier || "-"),
      el("td", {}, asksText(q.request)),
      el("td", {}, spanText(q.time_limit_s)),
      el("td", {title: new Date(Date.now() - q.waiting_s * 1000).toLocaleString()}, agoText(q.waiting_s)),
      el("td", {"data-col": "start", title: q.start ? new Date(q.start * 1000).toLocaleString()
        : "no time limit tells: a job ahead, or one holding what it needs, has none"}, startText(q.start)),
      el("td", {"data-col": "reason"}, q.reason))))));
  return card;
}
