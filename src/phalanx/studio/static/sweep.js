"use strict";
// ---------------------------------------------------------------- a sweep's page
// What its search is and how far it got, its trials in a table sortable by any column
// (the primary metric, best first, to begin with), the primary metric of each trial
// over steps, and each trial's parameters against its objective as parallel coordinates.
// Everything from GET /jobs/<sweep> and GET /jobs/<sweep>/sweep, redrawn while it runs.

// A trial's objective: its final value, else the last point it reported so far.
function trialValue(t) {
  if (t.value !== null && t.value !== undefined) return t.value;
  const curve = t.curve || [];
  return curve.length ? curve.reduce((a, b) => (b[0] >= a[0] ? b : a))[1] : null;
}

// The parameters in the order the spec's search_space lists them.
function paramNames(job, view) {
  const listed = Object.keys((job.spec || {}).search_space || {});
  const seen = view.trials.flatMap((t) => Object.keys(t.params));
  return [...new Set([...listed, ...seen])];
}

function num(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(6)));
  return typeof v === "object" ? plain(v) : String(v);
}

function sweepView(name) {
  const title = el("h1", {}, name);
  const cause = el("div", {id: "rootcause"});
  const head = el("div", {id: "sweep-head"});
  const trials = el("div", {id: "sweep-trials"});
  const curves = el("div", {class: "card chart", id: "sweep-chart"});
  const parallel = el("div", {class: "card chart", id: "sweep-parallel"});
  const panes = {Trials: el("div", {}, trials, el("div", {class: "charts pair"}, curves, parallel)),
    Spec: specPane(name)};
  const tabs = tabbed(panes);
  main.append(title, cause, head, tabs, ...Object.values(panes));
  tabs.start();
  const table = trialsTable(trials);
  let me = null, shown = "";
  async function load() {
    me = me || await WHOAMI;
    let job, view;
    try {  // the job first: a sweep seen over is drawn from a view read after it ended
      job = await api("/jobs/" + encodeURIComponent(name));
      view = await api(`/jobs/${encodeURIComponent(name)}/sweep`);
    } catch (e) { title.replaceChildren(name + ": " + e.message); return; }
    renderHead(title, job, mayActOn(me, job.created_by));
    // Redrawn when something changed (charts are rebuilt whole), and the running
    // durations with them.
    const key = JSON.stringify([job.status, view]);
    if (key !== shown) {
      shown = key;
      renderCause(cause, job);
      sweepHead(head, job, view);
      table.show(job, view);
      trialCurves(curves, view);
      parallelCoordinates(parallel, job, view);
    }
    if (!TERMINAL.has(job.status)) setTimeout(load, 2000);
  }
  load();
}

function sweepHead(box, job, view) {
  const spec = job.spec || {};
  const algorithm = typeof spec.sampling_algorithm === "object" && spec.sampling_algorithm
    ? spec.sampling_algorithm : {type: spec.sampling_algorithm || "random"};
  const sampling = (algorithm.type || "random") + (algorithm.rule === "sobol" ? " (sobol)" : "") +
    (algorithm.seed !== undefined && algorithm.seed !== null ? `, seed ${algorithm.seed}` : "");
  const policy = spec.early_termination;
  const stopping = policy ? `${policy.type} (` + Object.entries(policy).filter(([k]) => k !== "type")
    .map(([k, v]) => `${k}=${v}`).join(", ") + ")" : "none";
  const limits = spec.limits || {};
  const running = view.trials.filter((t) => t.state === "pending" || t.state === "started").length;
  const made = `${view.trials.length} made` + (limits.max_total_trials ? ` of ${limits.max_total_trials}` : "") +
    `, ${running} running` + (limits.max_concurrent_trials ? ` (at most ${limits.max_concurrent_trials} at once)` : "");
  const best = view.trials.find((t) => t.number === view.best_trial);
  box.replaceChildren(section("Sweep", grid([
    ["objective", `${view.goal} ${view.metric}`], ["sampling", sampling], ["early termination", stopping],
    ["trials", made], ["stopped", view.ended_reason || (TERMINAL.has(job.status) ? job.status : "not yet")],
    ["best trial", best ? el("span", {}, el("a", {id: "best-trial", href: "/jobs/" + encodeURIComponent(best.job_name)},
      `#${best.number} ${best.job_name}`), `: ${view.metric} = ${num(view.best_value)}`) : "none yet"],
    ["register it", view.register ? el("pre", {id: "register"}, view.register) : "-"],
    ["experiment", job.experiment_name], ["created by", job.created_by || "-"],
    ["trials run on", spec.compute || "local"], ["created", ago(job.created_at)],
    ["duration", duration(job)],
  ])));
}

// The table's columns: each a header and the value it sorts and shows a trial by.
function trialColumns(job, view) {
  const names = paramNames(job, view);
  const status = (t) => t.status || t.state;
  return [
    {key: "number", label: "#", get: (t) => t.number},
    {key: "job", label: "trial", get: (t) => t.job_name,
      cell: (t) => el("a", {href: "/jobs/" + encodeURIComponent(t.job_name)}, t.job_name)},
    {key: "status", label: "status", get: status,
      cell: (t) => el("span", {}, badge(status(t)), t.state === "pruned" ? " stopped early" : "")},
    {key: "value", label: view.metric, get: trialValue, best: true},
    ...names.map((p) => ({key: "param:" + p, label: p, get: (t) => t.params[p]})),
    {key: "why", label: "why it stopped", get: (t) => t.reason},
  ];
}

function trialsTable(box) {
  let sort = null, job = null, view = null;
  const compare = (get, dir) => (a, b) => {
    const x = get(a), y = get(b);
    const none = (v) => v === null || v === undefined;
    if (none(x) || none(y)) return none(x) - none(y) || a.number - b.number;  // no value: last
    const order = typeof x === "number" && typeof y === "number" ? x - y : num(x).localeCompare(num(y));
    return dir * order || a.number - b.number;
  };
  function draw() {
    const columns = trialColumns(job, view);
    // First shown by the objective, best first for the sweep's goal.
    const bestFirst = view.goal === "maximize" ? -1 : 1;
    if (!sort || !columns.some((c) => c.key === sort.key)) sort = {key: "value", dir: bestFirst};
    const by = columns.find((c) => c.key === sort.key);
    const rows = [...view.trials].sort(compare(by.get, sort.dir));
    const header = columns.map((c) => el("th", {class: "sortable", "data-sort": c.key,
      "aria-sort": c.key === sort.key ? (sort.dir > 0 ? "ascending" : "descending") : null,
      onclick: () => {
        sort = sort.key === c.key ? {key: c.key, dir: -sort.dir} : {key: c.key, dir: c.best ? bestFirst : 1};
        draw();
      }}, c.label, c.key === sort.key ? (sort.dir > 0 ? " ▲" : " ▼") : ""));
    box.replaceChildren(section(`Trials by ${by.label}`, el("table", {id: "trials"},
      el("thead", {}, el("tr", {}, ...header)),
      el("tbody", {}, ...rows.map((t) => el("tr", {"data-trial": String(t.number), "data-job": t.job_name,
        class: t.number === view.best_trial ? "best" : null},
      ...columns.map((c) => el("td", {"data-col": c.key,
        "data-value": c.key === "value" && c.get(t) !== null ? String(c.get(t)) : null},
      c.cell ? c.cell(t) : num(c.get(t)))))))),
    view.trials.length ? null : el("div", {class: "muted"}, "no trial made yet")));
  }
  return {show(sweepJob, fresh) { job = sweepJob; view = fresh; draw(); }};
}

function trialCurves(box, view) {
  const drawn = view.trials.filter((t) => (t.curve || []).length);
  box.replaceChildren(el("h2", {}, `${view.metric} per trial`));
  box.dataset.series = String(drawn.length);
  if (!drawn.length) { box.append(el("div", {class: "muted"}, "no trial reported it yet")); return; }
  linesChart(box, drawn.map((t) => `#${t.number}`), drawn.map((t) => t.curve), 280);
}

// ---------------------------------------------------------------- parallel coordinates
const SVG_NS = "http://www.w3.org/2000/svg";
// svg("path", {d: …}, children…): like el(), in SVG's namespace; strings are text nodes.
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : document.createTextNode(clean(child)));
  }
  return node;
}

// One axis per parameter, then the objective: a number axis (log for log-distributed
// parameters) where every value is a number and the space is not a choice, else the
// values as evenly spaced categories (a choice's in the order it lists them).
function parallelAxes(job, view, trials) {
  const space = (job.spec || {}).search_space || {};
  const axes = paramNames(job, view).map((p) => {
    const kind = String((space[p] || {}).type || "").toLowerCase();
    const values = trials.map((t) => t.params[p]);
    if (kind !== "choice" && values.every((v) => typeof v === "number" && Number.isFinite(v))) {
      return numberAxis(p, values, kind.includes("log") && values.every((v) => v > 0));
    }
    const listed = Array.isArray((space[p] || {}).values) ? space[p].values.map(num) : [];
    return {name: p, categories: [...new Set([...listed, ...values.map(num)])], at: (t) => t.params[p]};
  });
  axes.push(numberAxis(view.metric, trials.map(trialValue), false));
  axes[axes.length - 1].at = trialValue;
  return axes;
}

function numberAxis(name, values, log) {
  const f = log ? Math.log10 : (v) => v;
  let lo = Math.min(...values.map(f)), hi = Math.max(...values.map(f));
  if (lo === hi) { lo -= 0.5; hi += 0.5; }
  return {name, lo, hi, log, at: (t) => t.params[name]};
}

function parallelCoordinates(box, job, view) {
  const trials = view.trials.filter((t) => trialValue(t) !== null);
  box.replaceChildren(el("h2", {}, `parameters against ${view.metric}`));
  box.dataset.marks = String(trials.length);
  if (!trials.length) { box.append(el("div", {class: "muted"}, "no trial has a value yet")); return; }
  const axes = parallelAxes(job, view, trials);
  const width = Math.max(400, box.clientWidth - 28), height = 300;
  const top = 36, bottom = height - 24, left = 70, right = width - 70;
  const xOf = (i) => (axes.length === 1 ? (left + right) / 2 : left + (i * (right - left)) / (axes.length - 1));
  const yOf = (axis, value) => {
    if (axis.categories) {
      const k = axis.categories.indexOf(num(value));
      return bottom - ((k + 0.5) * (bottom - top)) / axis.categories.length;
    }
    const v = axis.log ? Math.log10(value) : value;
    return bottom - ((v - axis.lo) * (bottom - top)) / (axis.hi - axis.lo);
  };
  // Colour by objective: the best end of the range dark blue, the worst light.
  const objective = axes[axes.length - 1];
  const goodness = (v) => {
    const t = (v - objective.lo) / (objective.hi - objective.lo);
    return view.goal === "maximize" ? t : 1 - t;
  };
  const chart = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, class: "parallel"});
  for (const t of trials) {
    const points = axes.map((a, i) => `${xOf(i).toFixed(1)},${yOf(a, a.at(t)).toFixed(1)}`);
    const best = t.number === view.best_trial;
    const g = goodness(trialValue(t));
    chart.append(svg("polyline", {class: "trial" + (best ? " best" : ""), "data-trial": String(t.number),
      points: points.join(" "), fill: "none", "stroke-width": best ? 3 : 1.5,
      stroke: `hsl(222, ${40 + 40 * g}%, ${80 - 45 * g}%)`,
      onclick: () => { location.href = "/jobs/" + encodeURIComponent(t.job_name); }},
    svg("title", {}, `#${t.number} ${t.job_name}: ${view.metric} = ${num(trialValue(t))}; ` +
      Object.entries(t.params).map(([k, v]) => `${k} = ${num(v)}`).join(", "))));
  }
  axes.forEach((axis, i) => {
    const x = xOf(i);
    const ticks = axis.categories ? axis.categories.map((c) => [c, yOf(axis, c)])
      : [axis.lo, (axis.lo + axis.hi) / 2, axis.hi].map((v) => {
        const value = axis.log ? 10 ** v : v;
        return [num(value), yOf(axis, value)];
      });
    chart.append(svg("g", {class: "axis", "data-axis": axis.name},
      svg("line", {x1: x, x2: x, y1: top, y2: bottom, stroke: "#5d6678"}),
      svg("text", {x, y: top - 14, "text-anchor": "middle", class: "axis-name"}, axis.name + (axis.log ? " (log)" : "")),
      ...ticks.map(([label, y]) => svg("text", {x: x + 5, y: y + 4, class: "tick"}, label))));
  });
  box.append(chart);
}
