"use strict";
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

// A value as a legend shows it: short, never "--" for a number.
function legendValue(v) {
  return v === null || v === undefined || !Number.isFinite(v) ? "-" : number(v);
}
function lastValue(values) {
  for (let i = values.length - 1; i >= 0; i -= 1) if (values[i] !== null && values[i] !== undefined) return values[i];
  return null;
}
// The legend shows each series' latest value until the cursor is over the chart (then
// the value under it): uPlot passes no index while the cursor is away.
function latestOr(format) {
  return (u, v, si, idx) => format(idx === null || idx === undefined ? lastValue(u.data[si]) : v);
}
// Seconds since the job started as an axis shows them: 0s, 45s, 2m 30s, 1h 5m.
function clock(s) { return s === null || s === undefined ? "-" : seconds(s); }

function chart(box, title, points, opts) {
  const stepped = points.filter((p) => p[0] !== null);
  const xs = stepped.map((p) => p[0]);
  let ys = stepped.map((p) => (p[1] === null ? null : Number(p[1])));
  if (opts.log) ys = ys.map((v) => (v !== null && v > 0 ? v : null));
  const data = [xs, ys];
  const overTime = opts.x === "time";
  const xLabel = overTime ? "since start" : "step";
  const series = [{label: xLabel, value: latestOr(overTime ? clock : legendValue)},
    {label: title, stroke: "#9bb3e8", width: 1, value: latestOr(legendValue)}];
  if (opts.smooth > 0) {
    data.push(ema(ys, opts.smooth));
    series.push({label: "smoothed", stroke: "#2457c5", width: 2, value: latestOr(legendValue)});
  } else series[1].stroke = "#2457c5";
  const holder = el("div", {class: "chart card", "data-metric": title, "data-points": String(xs.length),
    "data-x": overTime ? "time" : "step"}, el("h3", {}, title));
  box.append(holder);
  const axes = [overTime ? {label: "time since the job started", values: (u, ticks) => ticks.map(clock)} : {}, {}];
  // eslint-disable-next-line no-undef
  new uPlot({width: Math.max(300, holder.clientWidth - 28), height: 220, series, axes,
    scales: {x: {time: false}, y: opts.log ? {distr: 3} : {}}, legend: {show: true}}, data, holder);
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
    for (const [metric, points] of Object.entries(data.system)) chart(system, metric, points, {smooth: 0, log: false, x: "time"});
    if (!Object.keys(data.metrics).length) user.append(el("div", {class: "muted"}, "no metric logged yet (phalanx.train.log_metric)"));
    if (!Object.keys(data.system).length) system.append(el("div", {class: "muted"}, "no system sample yet"));
  }
  pane.load = async () => {
    try { data = await api(`/jobs/${encodeURIComponent(name)}/metrics?points=2000&elapsed=true`); draw(); state.textContent = ""; }
    catch (e) { state.textContent = e.message; }
    clearTimeout(timer);
    if (!pane.hidden) timer = setTimeout(pane.load, 5000);
  };
  smooth.addEventListener("input", () => data && draw());
  log.addEventListener("change", () => data && draw());
  return pane;
}

// ---------------------------------------------------------------- compare
// One line per history of [step, value] points (labelled by `labels`), on steps in common.
const LINE_COLORS = ["#2457c5", "#c5247a", "#1e7f45", "#9a6700", "#6a3fc5", "#0f7f8a"];
function lineColor(i) { return LINE_COLORS[i] || `hsl(${(i * 137.5) % 360}, 60%, 42%)`; }
function linesChart(box, labels, histories, height) {
  const series = histories.map((h) => h.filter((p) => p[0] !== null));
  const steps = [...new Set(series.flatMap((h) => h.map((p) => p[0])))].sort((a, b) => a - b);
  const data = [steps, ...series.map((h) => {
    const at = new Map(h.map((p) => [p[0], p[1]]));
    return steps.map((s) => (at.has(s) ? at.get(s) : null));
  })];
  // eslint-disable-next-line no-undef
  new uPlot({width: Math.max(400, box.clientWidth - 28), height, scales: {x: {time: false}},
    series: [{label: "step", value: latestOr(legendValue)},
      ...labels.map((label, i) => ({label, stroke: lineColor(i), spanGaps: true, value: latestOr(legendValue)}))]},
  data, box);
}

function compareView() {
  const names = el("input", {id: "compare-jobs", placeholder: "job names, comma-separated", size: "60"});
  const metric = el("select", {id: "compare-metric"});
  const box = el("div", {class: "card", id: "compare-chart"});
  const params = new URLSearchParams(location.search);
  names.value = params.get("jobs") || "";
  let wanted = params.get("metric") || "";
  let histories = {}, errors = {};
  async function load() {
    const jobs = names.value.split(",").map((s) => s.trim()).filter(Boolean);
    histories = {}; errors = {};
    await Promise.all(jobs.map((j) => api(`/jobs/${encodeURIComponent(j)}/metrics?points=2000`)
      .then((d) => { histories[j] = d.metrics; }).catch((e) => { histories[j] = {}; errors[j] = e.message; })));
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
    box.append(el("h2", {}, metric.value));
    // A job without the metric is said so, not drawn as nothing.
    const lacking = jobs.filter((j) => !(histories[j][metric.value] || []).length);
    if (lacking.length) {
      box.append(el("div", {class: "missing warn", id: "compare-missing"}, lacking.map((j) =>
        errors[j] ? `${j}: ${errors[j]}` : `${j} has no metric "${metric.value}"`).join("; ")));
    }
    const drawn = jobs.filter((j) => !lacking.includes(j));
    if (drawn.length) linesChart(box, drawn, drawn.map((j) => histories[j][metric.value]), 360);
  }
  metric.addEventListener("change", draw);
  main.append(el("h1", {}, "Compare"), el("div", {class: "filters"}, names,
    el("button", {onclick: load}, "Load"), metric), box);
  load();
}
